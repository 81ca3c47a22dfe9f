"""The deep sections (``jaxdiag report --deep``): XProf's converters joined to our analyses.

- ``hlo_stats`` -> top ops get FLOPs, bytes, intensity, XProf's bound and the op's source line;
- ``roofline_model`` -> the device's peak and bandwidth when the trace's device stats have none;
- ``memory_profile`` (one host file at a time) -> each allocator's measured peak and capacity;
- ``kernel_stats`` -> GPU kernels of the top ops: registers, occupancy, tensor-core use.

A converter that fails or gives nothing leaves its part as it was and adds a
note; it never stops the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jaxdiag.xprof_tools.convert import (
    XprofError,
    private_links,
    table_properties,
    table_rows,
    tool_data,
)


def deepen(results: Mapping[str, Any], frames: Any, host: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """``results`` (analysis name -> result) with XProf's facts joined; and notes on what failed."""
    from jaxdiag.trace.discover import host_name

    out = dict(results)
    notes: list[str] = []
    xplanes = [str(f) for f in frames.files if str(f).endswith(".xplane.pb")]
    if host is not None:
        xplanes = [f for f in xplanes if host_name(Path(f)) == host]
    if not xplanes:
        return out, ["--deep: XProf reads .xplane.pb files; this run has none"]
    with private_links(xplanes) as linked:
        _join(out, frames, linked, notes)
    return out, notes


def _join(out: dict[str, Any], frames: Any, xplanes: list[str], notes: list[str]) -> None:
    from jaxdiag.analyses import memory as M
    from jaxdiag.analyses.top_ops import TopOps
    from jaxdiag.xprof_tools.top_ops_join import join_xprof
    from jaxdiag.trace.discover import host_name

    top = out.get("top_ops")
    if isinstance(top, TopOps):
        try:
            hlo = table_rows(tool_data(xplanes, "hlo_stats", private=True))
            roof = tool_data(xplanes, "roofline_model", private=True)
            props = table_properties(roof[0] if isinstance(roof, list) and roof else roof)
            top = join_xprof(top, hlo, props)
            top = dataclasses.replace(top, rows=tuple(_with_kernels(top.rows, frames, xplanes, notes)))
            out["top_ops"] = top
        except XprofError as exc:
            notes.append(f"--deep: top ops without XProf's FLOPs and bytes ({exc})")
    mem = out.get("memory")
    if isinstance(mem, M.MemoryResult):
        peaks = []
        for f in xplanes:
            try:
                peaks += M.peaks_from_memory_profile(host_name(Path(f)), tool_data([f], "memory_profile", private=True))
            except XprofError as exc:
                notes.append(f"--deep: no measured memory peak for {f} ({exc})")
        out["memory"] = M.join_memory_profile(mem, peaks)


def _with_kernels(rows: Any, frames: Any, xplanes: list[str], notes: list[str]) -> list[Any]:
    """Top-op rows with their costliest GPU kernel's facts (``kernel_stats``), matched by kernel name.

    XProf names kernels by their (demangled) name and the framework op, not the
    HLO op; the trace's events give each top op's kernel names.
    """
    from jaxdiag.trace import frames as F

    try:
        kernels = table_rows(tool_data(xplanes, "kernel_stats", private=True))
    except XprofError as exc:
        notes.append(f"--deep: no kernel stats ({exc})")
        return list(rows)
    by_kernel: dict[str, list[dict[str, Any]]] = {}
    for k in kernels:
        name = k.get("kernel_name")
        if isinstance(name, str) and name:
            by_kernel.setdefault(name, []).append(k)
    if not by_kernel:
        return list(rows)
    ev = frames.events
    device = ev.loc[ev[F.CATEGORY] == "device"]
    out = []
    for row in rows:
        mine = device.loc[(device[F.HLO_OP] == row.name) & (device[F.HLO_MODULE] == row.module)]
        ks = [k for n in mine[F.NAME].astype(str).unique() for k in by_kernel.get(n, [])]
        if not ks:
            out.append(row)
            continue
        k = max(ks, key=lambda k: float(k.get("total_duration_us") or 0.0))
        out.append(
            dataclasses.replace(
                row,
                kernel={
                    "name": str(k.get("kernel_name") or ""),
                    "registers_per_thread": k.get("registers_per_thread"),
                    "occupancy_pct": k.get("occupancy_pct"),
                    "uses_tensor_core": k.get("is_kernel_using_tensor_core"),
                    "tensor_core_eligible": k.get("is_op_tensor_core_eligible"),
                },
            )
        )
    return out

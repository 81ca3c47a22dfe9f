"""FLOPs, bytes, intensity and what bounds each top op, from XProf's ``hlo_stats`` (``jaxdiag report --deep``).

The trace's events carry no FLOPs or bytes: XProf computes them from the HLO the
trace holds. ``join_xprof`` adds them to ``analyses.top_ops``' rows, matched by HLO
op name and program. An op is *compute-bound* when its intensity (FLOPs per byte)
reaches the device's ridge point (peak FLOP/s over memory bandwidth), else
*memory-bound*; ``"unknown"`` when either is unknown. XProf's own verdict
(``bound_by``) is kept beside ours, since it also weighs on-chip memories we cannot see.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jaxdiag.analyses.mfu import positive as _positive
from jaxdiag.analyses.top_ops import TopOps

_SOURCE_TITLE = re.compile(r"title='([^'\n]*)")
_SOURCE_TEXT = re.compile(r">([^<]*)<")


def join_xprof(
    result: TopOps, hlo_rows: Iterable[Mapping[str, Any]], roofline: Mapping[str, Any] | None = None
) -> TopOps:
    """``result`` with FLOPs, bytes, intensity, bound and source line from XProf's ``hlo_stats`` rows.

    Rows are matched by HLO op name and the module's program (XProf names programs
    by id; the op name within the trace's module is what both share). An op XProf
    does not list keeps ``None``. ``roofline``: XProf's ``roofline_model``
    properties (``peak_flop_rate`` in GFLOP/s, ``peak_hbm_bw`` in GiB/s), used
    when the trace's device stats gave none.
    """
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for h in hlo_rows:
        name = h.get("hlo_op_name")
        if isinstance(name, str) and name:
            by_name.setdefault(name, []).append(h)
    peak, bw, source = result.peak_flops, result.memory_bandwidth_bps, result.roofline_source
    if roofline:
        xpeak = _positive(roofline.get("peak_flop_rate"))
        xbw = _positive(roofline.get("peak_hbm_bw"))
        if peak is None and xpeak is not None:
            peak, source = xpeak * 1e9, f"XProf roofline_model ({roofline.get('device_type', 'device')})"
        if bw is None and xbw is not None:
            bw, source = xbw * 2**30, f"XProf roofline_model ({roofline.get('device_type', 'device')})"
    ridge = peak / bw if peak and bw else None
    rows = []
    for row in result.rows:
        matches = _matching(by_name.get(row.name, []), row.programs)
        if not matches:
            rows.append(dataclasses.replace(row, bound=_bound(row.intensity, ridge)))
            continue
        flops = sum(_flops(h) for h in matches)
        nbytes = sum(_bytes(h) for h in matches)
        intensity = flops / nbytes if nbytes > 0 else None
        busy_s = sum(_positive(h.get("total_self_time")) or 0.0 for h in matches) * 1e-6
        first = max(matches, key=lambda h: _positive(h.get("total_self_time")) or 0.0)
        dtype = output_dtype(first.get("hlo_op_expression"))
        op_peak = result.peak_by_dtype.get(dtype, peak) if dtype else peak
        op_ridge = op_peak / bw if op_peak and bw else ridge
        rows.append(
            dataclasses.replace(
                row,
                flops=flops,
                bytes_accessed=nbytes if nbytes > 0 else None,
                intensity=intensity,
                bound=_bound(intensity, op_ridge),
                dtype=dtype,
                xprof_bound_by=str(first.get("bound_by") or ""),
                source=source_line(first.get("source_info")) or row.source,
                category=str(first.get("category") or ""),
                facts_from="trace + XProf hlo_stats",
                achieved_flops_per_s=flops / busy_s if busy_s > 0 and flops > 0 else None,
            )
        )
    return dataclasses.replace(
        result, rows=tuple(rows), peak_flops=peak, memory_bandwidth_bps=bw, roofline_source=source, deep=True
    )


def _matching(candidates: list[Mapping[str, Any]], programs: tuple[int, ...]) -> list[Mapping[str, Any]]:
    """The ``hlo_stats`` rows of this op's programs; by name alone only when the name is unambiguous."""
    if programs:
        ids = {str(p) for p in programs}
        return [h for h in candidates if str(h.get("program_id", "")) in ids]
    return candidates if len({str(h.get("program_id", "")) for h in candidates}) == 1 else []


def _flops(h: Mapping[str, Any]) -> float:
    """Total FLOPs of an ``hlo_stats`` row: its model FLOP rate (GFLOP/s) over its self time (us)."""
    rate, t = _positive(h.get("model_flop_rate")), _positive(h.get("total_self_time"))
    return rate * 1e9 * t * 1e-6 if rate and t else 0.0


def _bytes(h: Mapping[str, Any]) -> float:
    """Total bytes of an ``hlo_stats`` row: its measured memory bandwidth (GiB/s) over its self time."""
    bw, t = _positive(h.get("measured_memory_bw")), _positive(h.get("total_self_time"))
    return bw * 2**30 * t * 1e-6 if bw and t else 0.0


def _bound(intensity: float | None, ridge: float | None) -> str:
    if intensity is None or ridge is None:
        return "unknown"
    return "compute" if intensity >= ridge else "memory"


_HLO_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64"}
_OUTPUT_TYPE = re.compile(r"=\s*\(?\s*([a-z]+[0-9a-z]*)\[")


def output_dtype(expression: Any) -> str:
    """The dtype an HLO instruction's text says it produces (``float32`` for ``%x = f32[8]{0} ...``), or ``""``."""
    m = _OUTPUT_TYPE.search(expression) if isinstance(expression, str) else None
    if not m:
        return ""
    t = m[1]
    return "float8" if t.startswith("f8") else _HLO_DTYPES.get(t, "")


def source_line(info: Any) -> str:
    """``file.py:14`` from XProf's ``source_info`` cell (an HTML snippet), or ``""``."""
    if not isinstance(info, str) or not info:
        return ""
    m = _SOURCE_TEXT.search(info)
    text = (m[1] if m else info).strip()
    if not text:
        t = _SOURCE_TITLE.search(info)
        text = t[1].strip() if t else ""
    return text

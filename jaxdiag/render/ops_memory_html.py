"""Top ops, MFU's basis, memory and finding places as HTML (the terminal's are ``ops_memory``).

Formatting only: every number comes from the report's ``top_ops``, ``memory``
and ``throughput.mfu_basis`` sections and the findings' ``evidence["where"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxdiag.render.html import _e  # the HTML report's one escape
from jaxdiag.render.ops_memory import MEMORY_COLUMNS, big_number, byte_size, memory_row, number, percent, scaled

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.top_op_section import OpRow, TopOpsSection
    from jaxdiag.analyses.memory_section import MemorySection
    from jaxdiag.analyses.base import Finding
    from jaxdiag.reporting.model import Report


def _op_cells(r: "OpRow") -> list[Any]:
    """The cells both top-op tables open with: id, op, module, function, kind, count."""
    return [r.id, r.name, r.module, r.function, r.kind, number(r.count)]


def html_top_ops(report: "Report") -> str:
    """The top-ops table and MFU's basis as HTML (empty when the section is)."""
    parts: list[str] = []
    top: TopOpsSection = report.section("top_ops")
    rows = top.rows
    if rows:
        ridge = top.ridge_point
        parts.append(
            "<h2>Top ops by device time</h2><p class='meta'>"
            + (_e(f"ridge point {number(ridge)} FLOP/byte ({top.roofline_source})") if ridge else "")
            + ("" if top.deep else " · FLOPs, bytes and bound: jaxdiag report --deep")
            + "</p>"
        )
        parts.append(
            _table(
                (
                    "id",
                    "op",
                    "module",
                    "function",
                    "kind",
                    "count",
                    "ms/step",
                    "share",
                    "GFLOP",
                    "MB",
                    "FLOP/B",
                    "bound",
                    "XProf bound",
                    "source",
                ),
                (
                    [
                        *_op_cells(r),
                        number(r.per_step_ms),
                        percent(r.share),
                        scaled(r.flops, 1e9),
                        scaled(r.bytes_accessed, 1e6),
                        number(r.intensity),
                        r.bound,
                        r.xprof_bound_by or "—",
                        r.source or "—",
                    ]
                    for r in rows
                ),
                row_ids=[f"jd-{r.id}" for r in rows],
            )
        )
    between = top.between_rows
    if between:
        parts.append(
            "<h3>Ops of work between steps</h3><p class='meta'>Programs run in fewer than half of the steps; "
            "no step's time, so totals over the run, not per step.</p>"
        )
        parts.append(
            _table(
                ("id", "op", "module", "function", "kind", "count", "total ms", "share"),
                (
                    [
                        *_op_cells(r),
                        number(r.total_ms),
                        percent(r.share),
                    ]
                    for r in between
                ),
            )
        )
    basis = report.throughput.mfu_basis
    if basis.flops_source:  # reports since 1.3
        parts.append(
            "<h2>MFU: where the numbers come from</h2><ul class='meta'>"
            f"<li>FLOPs per step: {_e(big_number(basis.flops_per_step))} ({_e(basis.flops_source)})</li>"
            f"<li>peak: {_e(big_number(basis.peak_flops))}/s ({_e(basis.peak_source)})</li>"
            f"<li>dtype: {_e(basis.dtype or 'unknown')} ({_e(basis.dtype_source)})</li></ul>"
        )
    return "".join(parts)


def html_memory(report: "Report") -> str:
    """The memory tables as HTML (empty when the section is)."""
    parts: list[str] = []
    mem: MemorySection = report.section("memory")
    if mem.compiles or mem.peaks:
        parts.append(
            f"<h2>Memory per device</h2><p class='meta'>capacity {_e(byte_size(mem.capacity_bytes))} "
            f"({_e(mem.capacity_source)})</p>"
        )
        if mem.compiles:
            parts.append(_table(MEMORY_COLUMNS, (memory_row(c) for c in mem.compiles)))
        if mem.peaks:
            parts.append(
                _table(
                    ("host", "allocator", "measured peak", "capacity", "of capacity"),
                    (
                        [
                            p.host,
                            p.allocator,
                            byte_size(p.peak_bytes),
                            byte_size(p.capacity_bytes),
                            percent(p.share_of_capacity),
                        ]
                        for p in mem.peaks
                    ),
                )
            )
    return "".join(parts)


def place_html(report: "Report", finding: "Finding", number: int) -> str:
    """Where a finding happened, the top-op rows it concerns, and how to open it in XProf."""
    where = finding.evidence.get("where") if isinstance(finding.evidence, dict) else None
    if not isinstance(where, dict):
        return "—"
    bits = [f"host {where.get('host')}"]
    if where.get("step") is not None:
        bits.append(f"step {where['step']}")
    if where.get("start_ms") is not None:
        bits.append(f"{scaled(where['start_ms'], 1, '.1f')}–{scaled(where.get('end_ms'), 1, '.1f')} ms")
    text = _e(", ".join(bits))
    rows = finding.evidence.get("top_op_rows") or []
    if rows:
        text += "<br>top ops: " + _e(", ".join(str(r) for r in rows[:6]))
    run_dir = str(report.source.get("run_dir") or "")
    command = f"jaxdiag open {run_dir} --finding {number}"
    address = _live_address(run_dir, where)
    # Addresses as text, not links: the page loads and links nothing (see render.html).
    if address:
        text += f"<br>timeline in XProf: <code class='jd-address'>{_e(address)}</code>"
    return text + f"<br><code>{_e(command)}</code>"


def _live_address(run_dir: str, where: dict[str, Any]) -> str | None:
    """The trace-viewer address on the XProf server ``jaxdiag open`` left running for this run, if any."""
    if not run_dir or not where.get("host"):
        return None
    from jaxdiag.xprof_tools.server import known_server

    server = known_server(run_dir)
    if server is None:
        return None
    return server.timeline(str(where.get("run")), str(where["host"]), where.get("start_ms"), where.get("end_ms"))


def _table(header: Any, rows: Any, row_ids: list[str] | None = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        rid = f" id='{_e(row_ids[i])}'" if row_ids else ""
        body.append(f"<tr{rid}>" + "".join(f"<td>{_e(c if c is not None else '—')}</td>" for c in row) + "</tr>")
    return f"<table class='jd'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

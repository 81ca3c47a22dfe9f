"""Top ops, MFU's basis, memory and finding places, for the terminal, the HTML page and the figures.

Formatting only: every number comes from the report's ``top_ops``, ``memory``
and ``throughput.mfu_basis`` sections and the findings' ``evidence["where"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxdiag.render.html import _e  # the HTML report's one escape
from jaxdiag.render.terminal_text import esc  # the terminal's one escape

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go
    from rich.console import Console

    from jaxdiag.analyses.base import Finding
    from jaxdiag.reporting.model import Report

#: Rows shown in the terminal (the JSON and HTML have every kept row).
TERMINAL_ROWS = 10


# --- terminal ------------------------------------------------------------------------


def terminal_top_ops(report: "Report", console: "Console") -> None:
    """The ``top_ops`` section, and where MFU's numbers came from, on ``console``."""
    _print_top_ops(report, console)
    _print_mfu_basis(report, console)


def terminal_memory(report: "Report", console: "Console") -> None:
    """The ``memory`` section on ``console``."""
    _print_memory(report, console)


def _print_top_ops(report: "Report", console: "Console") -> None:
    from rich.table import Table

    top = getattr(report, "top_ops", None) or {}
    rows = top.get("rows") or []
    if not rows:
        return
    ridge = top.get("ridge_point")
    console.print(
        "[bold]Top ops[/bold] by device time"
        + (f"; ridge point {esc(_num(ridge))} FLOP/byte ({esc(top.get('roofline_source'))})" if ridge else "")
        + ("" if top.get("deep") else "; FLOPs, bytes and bound with --deep")
    )
    per_step = bool(top.get("steps"))  # without steps the figure is each op's total
    t = Table(show_edge=False)
    for col, right in (
        ("id", False),
        ("op", False),
        ("function", False),
        ("ms/step" if per_step else "ms", True),
        ("share", True),
        ("GFLOP", True),
        ("FLOP/B", True),
        ("bound", False),
        ("source", False),
    ):
        t.add_column(col, justify="right" if right else "left", overflow="fold")
    for r in rows[:TERMINAL_ROWS]:
        flops = r.get("flops")
        t.add_row(
            esc(r.get("id")),
            esc(r.get("name")),
            esc(r.get("function") or "—"),
            _num(r.get("per_step_ms") if per_step else r.get("total_ms")),
            _pct(r.get("share")),
            esc(_scaled(flops, 1e9)),
            esc(_num(r.get("intensity"))),
            esc(r.get("bound") or "unknown"),
            esc(r.get("source") or "—"),
        )
    console.print(t)
    between = top.get("between_rows") or []
    if between:
        console.print(
            "[bold]Ops of work between steps[/bold] (programs run in fewer than half of the steps; "
            "no step's time, so totals over the run, not per step)"
        )
        b = Table(show_edge=False)
        for col, right in (("id", False), ("op", False), ("function", False), ("count", True), ("total ms", True)):
            b.add_column(col, justify="right" if right else "left", overflow="fold")
        for r in between[:TERMINAL_ROWS]:
            b.add_row(
                esc(r.get("id")),
                esc(r.get("name")),
                esc(r.get("function") or "—"),
                _num(r.get("count")),
                _num(r.get("total_ms")),
            )
        console.print(b)
    console.print()


def _print_mfu_basis(report: "Report", console: "Console") -> None:
    basis = (report.throughput or {}).get("mfu_basis") or {}
    if not basis:
        return
    mfu = (report.throughput or {}).get("mfu")
    console.print(f"[bold]MFU[/bold] {_pct(mfu) if mfu is not None else 'unknown'}")
    console.print(f"  FLOPs per step: {_big(basis.get('flops_per_step'))} ({esc(basis.get('flops_source'))})")
    console.print(f"  peak: {_big(basis.get('peak_flops'))}/s ({esc(basis.get('peak_source'))})")
    console.print(f"  dtype: {esc(basis.get('dtype') or 'unknown')} ({esc(basis.get('dtype_source'))})")
    console.print()


def _print_memory(report: "Report", console: "Console") -> None:
    from rich.table import Table

    mem = getattr(report, "memory", None) or {}
    compiles, peaks = mem.get("compiles") or [], mem.get("peaks") or []
    if not compiles and not peaks:
        return
    cap = mem.get("capacity_bytes")
    console.print(f"[bold]Memory[/bold] per device; capacity {_bytes(cap)} ({esc(mem.get('capacity_source'))})")
    if compiles:
        t = Table(show_edge=False)
        for col in _MEMORY_COLUMNS:
            t.add_column(col, justify="left" if col == "function" else "right")
        for c in compiles:
            t.add_row(*map(esc, _memory_row(c)))
        console.print(t)
    for p in peaks:
        console.print(
            f"  measured peak {esc(p.get('host'))} {esc(p.get('allocator'))}: {_bytes(p.get('peak_bytes'))} "
            f"of {_bytes(p.get('capacity_bytes'))} (XProf memory_profile)"
        )
    console.print()


# --- HTML ----------------------------------------------------------------------------


def html_top_ops(report: "Report") -> str:
    """The top-ops table and MFU's basis as HTML (empty when the section is)."""
    parts: list[str] = []
    top = getattr(report, "top_ops", None) or {}
    rows = top.get("rows") or []
    if rows:
        ridge = top.get("ridge_point")
        parts.append(
            "<h2>Top ops by device time</h2><p class='meta'>"
            + (_e(f"ridge point {_num(ridge)} FLOP/byte ({top.get('roofline_source')})") if ridge else "")
            + ("" if top.get("deep") else " · FLOPs, bytes and bound: jaxdiag report --deep")
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
                        r.get("id"),
                        r.get("name"),
                        r.get("module"),
                        r.get("function"),
                        r.get("kind"),
                        _num(r.get("count")),
                        _num(r.get("per_step_ms")),
                        _pct(r.get("share")),
                        _scaled(r.get("flops"), 1e9),
                        _scaled(r.get("bytes_accessed"), 1e6),
                        _num(r.get("intensity")),
                        r.get("bound"),
                        r.get("xprof_bound_by") or "—",
                        r.get("source") or "—",
                    ]
                    for r in rows
                ),
                row_ids=[f"jd-{r.get('id')}" for r in rows],
            )
        )
    between = top.get("between_rows") or []
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
                        r.get("id"),
                        r.get("name"),
                        r.get("module"),
                        r.get("function"),
                        r.get("kind"),
                        _num(r.get("count")),
                        _num(r.get("total_ms")),
                        _pct(r.get("share")),
                    ]
                    for r in between
                ),
            )
        )
    basis = (report.throughput or {}).get("mfu_basis") or {}
    if basis:
        parts.append(
            "<h2>MFU: where the numbers come from</h2><ul class='meta'>"
            f"<li>FLOPs per step: {_e(_big(basis.get('flops_per_step')))} ({_e(basis.get('flops_source'))})</li>"
            f"<li>peak: {_e(_big(basis.get('peak_flops')))}/s ({_e(basis.get('peak_source'))})</li>"
            f"<li>dtype: {_e(basis.get('dtype') or 'unknown')} ({_e(basis.get('dtype_source'))})</li></ul>"
        )
    return "".join(parts)


def html_memory(report: "Report") -> str:
    """The memory tables as HTML (empty when the section is)."""
    parts: list[str] = []
    mem = getattr(report, "memory", None) or {}
    if mem.get("compiles") or mem.get("peaks"):
        parts.append(
            f"<h2>Memory per device</h2><p class='meta'>capacity {_e(_bytes(mem.get('capacity_bytes')))} "
            f"({_e(mem.get('capacity_source'))})</p>"
        )
        if mem.get("compiles"):
            parts.append(_table(_MEMORY_COLUMNS, (_memory_row(c) for c in mem["compiles"])))
        if mem.get("peaks"):
            parts.append(
                _table(
                    ("host", "allocator", "measured peak", "capacity", "of capacity"),
                    (
                        [
                            p.get("host"),
                            p.get("allocator"),
                            _bytes(p.get("peak_bytes")),
                            _bytes(p.get("capacity_bytes")),
                            _pct(p.get("share_of_capacity")),
                        ]
                        for p in mem["peaks"]
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
        bits.append(f"{_scaled(where['start_ms'], 1, '.1f')}–{_scaled(where.get('end_ms'), 1, '.1f')} ms")
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


# --- figure --------------------------------------------------------------------------


def roofline(report: "Report") -> "go.Figure":
    """Top ops on the device's roofline: arithmetic intensity against achieved FLOP/s."""
    import plotly.graph_objects as go

    from jaxdiag.render.figures import _finish, no_data

    top = getattr(report, "top_ops", None) or {}
    title = "Top ops on the roofline"
    points = [r for r in top.get("rows") or [] if r.get("achieved_flops_per_s") and r.get("intensity")]
    if not points:
        why = (
            "run jaxdiag report --deep for FLOPs and bytes per op"
            if not top.get("deep")
            else "XProf gave no FLOPs for the top ops"
        )
        return no_data(title, why)
    x = [float(r["intensity"]) for r in points]
    y = [float(r["achieved_flops_per_s"]) / 1e12 for r in points]
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=y,
            mode="markers+text",
            text=[r.get("id") for r in points],
            textposition="top center",
            customdata=[[r.get("name"), r.get("function"), r.get("bound")] for r in points],
            hovertemplate="%{customdata[0]} (%{customdata[1]}): %{x:.1f} FLOP/B, %{y:.2f} TFLOP/s, "
            "%{customdata[2]}-bound<extra></extra>",
            name="ops",
        )
    )
    peak, bw = top.get("peak_flops"), top.get("memory_bandwidth_bps")
    note = ""
    if peak and bw:
        lo, hi = min(x + [1.0]) / 2, max(x + [peak / bw]) * 2
        ridge = peak / bw
        fig.add_trace(
            go.Scatter(
                x=[lo, ridge, hi],
                y=[lo * bw / 1e12, peak / 1e12, peak / 1e12],
                mode="lines",
                name="roofline",
                line={"color": "#E45756"},
            )
        )
    else:
        note = "device peak or bandwidth unknown: no roofline drawn"
    fig.update_layout(
        xaxis_type="log", yaxis_type="log", xaxis_title="FLOP per byte", yaxis_title="achieved TFLOP/s (per device)"
    )
    return _finish(fig, title, note)


# --- helpers -------------------------------------------------------------------------


def _table(header: Any, rows: Any, row_ids: list[str] | None = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        rid = f" id='{_e(row_ids[i])}'" if row_ids else ""
        body.append(f"<tr{rid}>" + "".join(f"<td>{_e(c if c is not None else '—')}</td>" for c in row) + "</tr>")
    return f"<table class='jd'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_MEMORY_COLUMNS = ("function", "compile", "arguments", "outputs", "temporaries", "code", "total", "of capacity")


def _memory_row(c: Any) -> list[Any]:
    """One compile's memory row (the terminal prints each cell as text; HTML shows a missing one as a dash)."""
    return [
        c.get("function"),
        c.get("compile_index"),
        _bytes(c.get("argument_bytes")),
        _bytes(c.get("output_bytes")),
        _bytes(c.get("temp_bytes")),
        _bytes(c.get("generated_code_bytes")),
        _bytes(c.get("total_bytes")),
        _pct(c.get("share_of_capacity")),
    ]


def _num(value: Any) -> str:
    if value is None:
        return "—"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"


def _scaled(value: Any, scale: float, spec: str = ".3g") -> str:
    """``value / scale`` formatted by ``spec``; ``—`` for none, the value as given when it is no number."""
    if value is None:
        return "—"
    try:
        return format(float(value) / scale, spec)
    except (TypeError, ValueError):
        return str(value)


def _pct(value: Any) -> str:
    try:
        return f"{float(value):.1%}"
    except (TypeError, ValueError):
        return "—"


def _big(value: Any) -> str:
    """FLOPs with an SI prefix: ``1.07 PFLOP``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "unknown"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if v >= scale:
            return f"{v / scale:.3g} {prefix}FLOP"
    return f"{v:.3g} FLOP"


def _bytes(value: Any) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    if v >= 2**30:
        return f"{v / 2**30:.2f} GiB"
    if v >= 2**20:
        return f"{v / 2**20:.1f} MiB"
    return f"{v / 2**10:.1f} KiB" if v >= 2**10 else f"{v:.0f} B"

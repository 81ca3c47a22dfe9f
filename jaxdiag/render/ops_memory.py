"""Top ops, MFU's basis and memory for the terminal and the roofline figure, and their number formats.

Formatting only: every number comes from the report's ``top_ops``, ``memory``
and ``throughput.mfu_basis`` sections. The same sections as HTML, and the
findings' places, are ``ops_memory_html``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jaxdiag.render.terminal_text import esc  # the terminal's one escape

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go
    from rich.console import Console

    from jaxdiag.analyses.top_op_section import TopOpsSection
    from jaxdiag.analyses.memory_section import CompileFootprint, MemorySection
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

    top: TopOpsSection = report.section("top_ops")
    rows = top.rows
    if not rows:
        return
    ridge = top.ridge_point
    console.print(
        "[bold]Top ops[/bold] by device time"
        + (f"; ridge point {esc(number(ridge))} FLOP/byte ({esc(top.roofline_source)})" if ridge else "")
        + ("" if top.deep else "; FLOPs, bytes and bound with --deep")
    )
    per_step = bool(top.steps)  # without steps the figure is each op's total
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
        flops = r.flops
        t.add_row(
            esc(r.id),
            esc(r.name),
            esc(r.function or "—"),
            number(r.per_step_ms if per_step else r.total_ms),
            percent(r.share),
            esc(scaled(flops, 1e9)),
            esc(number(r.intensity)),
            esc(r.bound or "unknown"),
            esc(r.source or "—"),
        )
    console.print(t)
    between = top.between_rows
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
                esc(r.id),
                esc(r.name),
                esc(r.function or "—"),
                number(r.count),
                number(r.total_ms),
            )
        console.print(b)
    console.print()


def _print_mfu_basis(report: "Report", console: "Console") -> None:
    basis = report.throughput.mfu_basis
    if not basis.flops_source:  # a report before 1.3
        return
    mfu = report.throughput.mfu
    console.print(f"[bold]MFU[/bold] {percent(mfu) if mfu is not None else 'unknown'}")
    console.print(f"  FLOPs per step: {big_number(basis.flops_per_step)} ({esc(basis.flops_source)})")
    console.print(f"  peak: {big_number(basis.peak_flops)}/s ({esc(basis.peak_source)})")
    console.print(f"  dtype: {esc(basis.dtype or 'unknown')} ({esc(basis.dtype_source)})")
    console.print()


def _print_memory(report: "Report", console: "Console") -> None:
    from rich.table import Table

    mem: MemorySection = report.section("memory")
    compiles, peaks = mem.compiles, mem.peaks
    if not compiles and not peaks:
        return
    console.print(
        f"[bold]Memory[/bold] per device; capacity {byte_size(mem.capacity_bytes)} ({esc(mem.capacity_source)})"
    )
    if compiles:
        t = Table(show_edge=False)
        for col in MEMORY_COLUMNS:
            t.add_column(col, justify="left" if col == "function" else "right")
        for c in compiles:
            t.add_row(*map(esc, memory_row(c)))
        console.print(t)
    for p in peaks:
        console.print(
            f"  measured peak {esc(p.host)} {esc(p.allocator)}: {byte_size(p.peak_bytes)} "
            f"of {byte_size(p.capacity_bytes)} (XProf memory_profile)"
        )
    console.print()


# --- figure --------------------------------------------------------------------------


def roofline(report: "Report") -> "go.Figure":
    """Top ops on the device's roofline: arithmetic intensity against achieved FLOP/s."""
    import plotly.graph_objects as go

    from jaxdiag.render.figures import _finish, no_data

    top: TopOpsSection = report.section("top_ops")
    title = "Top ops on the roofline"
    points = [
        (r, float(r.intensity), float(r.achieved_flops_per_s))
        for r in top.rows
        if r.intensity and r.achieved_flops_per_s
    ]
    if not points:
        why = (
            "run jaxdiag report --deep for FLOPs and bytes per op"
            if not top.deep
            else "XProf gave no FLOPs for the top ops"
        )
        return no_data(title, why)
    x = [i for _, i, _ in points]
    y = [f / 1e12 for _, _, f in points]
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=y,
            mode="markers+text",
            text=[r.id for r, _, _ in points],
            textposition="top center",
            customdata=[[r.name, r.function, r.bound] for r, _, _ in points],
            hovertemplate="%{customdata[0]} (%{customdata[1]}): %{x:.1f} FLOP/B, %{y:.2f} TFLOP/s, "
            "%{customdata[2]}-bound<extra></extra>",
            name="ops",
        )
    )
    peak, bw = top.peak_flops, top.memory_bandwidth_bps
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


MEMORY_COLUMNS = ("function", "compile", "arguments", "outputs", "temporaries", "code", "total", "of capacity")


def memory_row(c: "CompileFootprint") -> list[Any]:
    """One compile's memory row (the terminal prints each cell as text; HTML shows a missing one as a dash)."""
    return [
        c.function,
        c.compile_index,
        byte_size(c.argument_bytes),
        byte_size(c.output_bytes),
        byte_size(c.temp_bytes),
        byte_size(c.generated_code_bytes),
        byte_size(c.total_bytes),
        percent(c.share_of_capacity),
    ]


def number(value: Any) -> str:
    if value is None:
        return "—"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"


def scaled(value: Any, scale: float, spec: str = ".3g") -> str:
    """``value / scale`` formatted by ``spec``; ``—`` for none, the value as given when it is no number."""
    if value is None:
        return "—"
    try:
        return format(float(value) / scale, spec)
    except (TypeError, ValueError):
        return str(value)


def percent(value: Any) -> str:
    try:
        return f"{float(value):.1%}"
    except (TypeError, ValueError):
        return "—"


def big_number(value: Any) -> str:
    """FLOPs with an SI prefix: ``1.07 PFLOP``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "unknown"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if v >= scale:
            return f"{v / scale:.3g} {prefix}FLOP"
    return f"{v:.3g} FLOP"


def byte_size(value: Any) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    if v >= 2**30:
        return f"{v / 2**30:.2f} GiB"
    if v >= 2**20:
        return f"{v / 2**20:.1f} MiB"
    return f"{v / 2**10:.1f} KiB" if v >= 2**10 else f"{v:.0f} B"

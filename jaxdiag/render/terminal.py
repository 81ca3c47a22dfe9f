"""Render a ``Report`` for the terminal with rich: findings first, then the figures.

Formatting only: every number comes from the ``Report``. Every value from the
report goes through ``esc`` before it meets markup, and the console is a
``safe_console`` (``render.terminal_text``).
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

from jaxdiag.trace.versions import versions_text
from jaxdiag.render.terminal_text import esc

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.straggler_section import StragglersSection
    from jaxdiag.analyses.between_step_section import BetweenStepsSection
    from jaxdiag.analyses.step_section import StepFigures
    from rich.console import Console

    from jaxdiag.reporting.model import Report

_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
#: Per-step rows shown before the table is summarised.
_MAX_STEP_ROWS = 40


def render(report: "Report", *, width: int | None = None, color: bool | None = None) -> str:
    """The whole report as text (with ANSI colour when ``color``)."""
    console, buf = text_console(width or 110, color)
    print_report(report, console)
    return buf.getvalue()


def text_console(width: int | None, color: bool | None) -> tuple["Console", io.StringIO]:
    """A rich console writing into a string (``width`` default 120; ANSI colour only when ``color``).

    A ``safe_console``: names from traces and files can neither act on the terminal nor break the markup.
    """
    from jaxdiag.render.terminal_text import safe_console

    buf = io.StringIO()
    console = safe_console(
        file=buf,
        width=width or 120,
        force_terminal=bool(color),
        color_system="auto" if color else None,
        highlight=False,
        soft_wrap=False,
    )
    return console, buf


def print_report(report: "Report", console: "Console") -> None:
    """Print ``report`` on ``console``: the header and findings, then each section (``render.registry``)."""
    from jaxdiag.render.registry import renderers

    _header(report, console)
    _notes(report, console)
    _findings(report, console)
    for _section, print_section in renderers("terminal"):
        print_section(report, console)


def _recompiles(report: "Report", console: "Console") -> None:
    from rich.table import Table

    recompiles = report.recompiles
    if recompiles:
        t = Table(title="Compiles on the timeline", title_justify="left", show_edge=False)
        for col, just in (("function", "left"), ("step", "right"), ("compile ms", "right"), ("cause", "left")):
            t.add_column(col, justify=just, overflow="fold")
        for r in recompiles:
            t.add_row(esc(r.function), _int(r.step), _ms(r.compile_ms), esc(r.cause or "—"))
        console.print(t)
        console.print()


def _header(report: "Report", console: "Console") -> None:
    src = report.source
    devices = src.get("devices") or []
    names = sorted({esc(d.get("device_name") or d.get("plane")) for d in devices})
    console.print(f"[bold]jaxdiag report[/bold]  {esc(src.get('run_dir', ''))}")
    console.print(
        f"hosts: {', '.join(esc(h) for h in src.get('hosts', [])) or '—'}   devices: {len(devices)}"
        + (f" ({', '.join(names)})" if names else "")
        + f"   steps from: {esc(_steps_from(src))}"
    )
    made_by = versions_text(src.get("versions") or {})
    if made_by:
        console.print(f"made by: {esc(made_by)}")
    for skipped in src.get("skipped") or []:
        console.print(f"[yellow]skipped {esc(skipped.get('file'))}: {esc(skipped.get('reason'))}[/yellow]")
    tp = report.throughput
    unit = tp.unit
    walls = [s.wall_ms for s in report.steps]
    parts = [f"{len(report.steps)} steps"]
    if walls:
        parts.append(f"mean step {sum(walls) / len(walls):.2f} ms")
    for key, label, fmt in (
        ("steps_per_s", "steps/s", "{:.2f}"),
        ("steady_steps_per_s", "steady steps/s", "{:.2f}"),
        ("tokens_per_s", f"{unit}/s", "{:,.0f}"),
        ("steady_tokens_per_s", f"steady {unit}/s", "{:,.0f}"),
        ("mfu", "MFU", "{:.1%}"),
    ):
        value = getattr(tp, key)
        if value is not None:
            parts.append(f"{label} {fmt.format(value)}")
    console.print("   ".join(parts))
    ahead = tp.host_ahead
    if tp.steady_from != "step windows" or (ahead and ahead.max):
        line = f"steady rates from: {esc(tp.steady_from)}"
        if ahead and ahead.max:
            line += f"   host ran ahead of the device: up to {ahead.max:.0f} steps (median {ahead.median:g})"
        console.print(line)
    console.print()


def _findings(report: "Report", console: "Console") -> None:
    from rich.table import Table

    shown = [f for f in report.findings if f.kind != "loader" or f.time_lost_ms > 0]
    if not shown:
        console.print("[green]No findings: nothing measurable was lost.[/green]\n")
    else:
        t = Table(title="Findings (by time lost)", title_justify="left", show_edge=False, show_lines=True)
        t.add_column("#", justify="right")
        t.add_column("severity")
        t.add_column("lost ms", justify="right")
        t.add_column("what happened", ratio=3, overflow="fold")
        t.add_column("what to change", ratio=2, overflow="fold")
        for i, f in enumerate(shown, 1):
            style = _SEVERITY_STYLE.get(f.severity.value, "")
            severity = f"[{style}]{esc(f.severity.value)}[/{style}]" if style else esc(f.severity.value)
            t.add_row(str(i), severity, _ms(f.time_lost_ms), esc(f.message), esc(f.suggestion))
        console.print(t)
        console.print()


def _notes(report: "Report", console: "Console") -> None:
    """What the capture lacks and what the loader guessed: before the findings, which they qualify."""
    for note in report.notes:
        console.print(f"[yellow]note:[/yellow] {esc(note)}")
    if report.notes:
        console.print()


def _steps(report: "Report", console: "Console") -> None:
    from rich.table import Table

    if not report.steps:
        return
    cols = (
        ("step", "step"),
        ("wall_ms", "wall"),
        ("device_busy_ms", "device busy"),
        ("host_wait_ms", "host wait"),  # compile waits included
        ("compile_wait_ms", "of it compile"),
        ("compile_ms", "host compile"),  # may overlap device work
        ("collective_ms", "collective"),
        ("exposed_collective_ms", "exposed coll."),
        ("tokens", report.throughput.unit),
    )
    t = Table(title="Per step (ms)", title_justify="left", show_edge=False)
    for _, label in cols:
        t.add_column(label, justify="right")
    rows: list[StepFigures | None] = list(report.steps)
    if len(rows) > _MAX_STEP_ROWS:
        rows = rows[: _MAX_STEP_ROWS // 2] + [None] + rows[-_MAX_STEP_ROWS // 2 :]
    for row in rows:
        if row is None:
            t.add_row(*(["…"] * len(cols)))
            continue
        t.add_row(*[_int(getattr(row, k)) if k in ("step", "tokens") else _ms(getattr(row, k)) for k, _ in cols])
    console.print(t)
    console.print()


def _between_steps(report: "Report", console: "Console") -> None:
    section: BetweenStepsSection = report.section("between_steps")
    rows = section.rows
    if not rows:
        return
    console.print(f"[bold]Work between steps[/bold] {_ms(section.total_ms)} ms, outside every step:")
    for r in rows[:10]:
        listed = ", ".join(f"`{esc(p.function)}` x{p.executions}" for p in r.programs)
        compiling = f", compiling {_ms(r.compile_ms)} ms" if r.compile_ms > 0 else ""
        console.print(
            f"  {r.where()}: {listed or 'no device program'}, {_ms(r.ms)} ms"
            f" (device busy {_ms(r.device_busy_ms)} ms{compiling})"
        )
    if len(rows) > 10:
        console.print(f"  ... and {len(rows) - 10} more")
    console.print()


def _host_waits(report: "Report", console: "Console") -> None:
    hw = report.host_waits
    inside = hw.in_execution
    if hw.by_cause:
        parts = ", ".join(f"{esc(c.cause)} {_ms(c.ms)} ms" for c in hw.by_cause)
        console.print(f"[bold]Host waits[/bold] {_ms(hw.total_ms)} ms: {parts}")
    if inside.total_ms:
        console.print(
            f"[bold]Device idle with work in flight or queued[/bold] {_ms(inside.total_ms)} ms: "
            f"{esc(inside.label)}, not host waits"
        )
    if hw.by_cause or inside.total_ms:
        console.print()


def _small_ops(report: "Report", console: "Console") -> None:
    from rich.table import Table

    so = report.small_ops
    if not so.count:
        return
    share = so.device_time_share
    console.print(
        f"[bold]Small ops[/bold] (< {esc(so.threshold_us)} µs): {_int(so.count)} ops, "
        + (f"{share:.1%} of device time" if share is not None and math.isfinite(share) else "")
    )
    top = so.top
    if top:
        t = Table(show_edge=False)
        for col in ("op", "module", "count", "total ms"):
            t.add_column(col, justify="right" if col in ("count", "total ms") else "left", overflow="fold")
        for r in top[:10]:
            t.add_row(esc(r.name), esc(r.module), _int(r.count), _ms(r.total_ms))
        console.print(t)
    console.print()


def _collectives(report: "Report", console: "Console") -> None:
    from rich.table import Table

    co = report.collectives
    kinds = co.by_kind
    if not kinds:
        return
    frac = co.overlap_fraction
    console.print(
        f"[bold]Collectives[/bold]: exposed {_ms(co.exposed_ms)} ms"
        + (f", {frac:.0%} overlapped with compute" if frac is not None and math.isfinite(frac) else "")
        + (
            f"; {_ms(co.waiting_for_hosts_ms)} ms per device more waiting for a late host"
            if co.waiting_for_hosts_ms
            else ""
        )
    )
    t = Table(show_edge=False)
    for col in ("kind", "count", "total ms", "exposed ms", "overlap"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for k in kinds:
        of = k.overlap_fraction
        t.add_row(
            esc(k.kind),
            _int(k.count),
            _ms(k.total_ms),
            _ms(k.exposed_ms),
            f"{of:.0%}" if of is not None and math.isfinite(of) else "—",
        )
    console.print(t)
    console.print()


def _stragglers(report: "Report", console: "Console") -> None:
    """With several hosts: how their clocks were aligned, and the host x step table."""
    from rich.table import Table

    from jaxdiag.analyses.straggler_section import WARMUP_NOTE

    section: StragglersSection = report.section("stragglers")
    rows = section.per_host_step
    if not rows:
        return
    al = section.alignment
    if al is not None and al.aligned:
        console.print(
            f"[bold]Hosts[/bold]: clocks aligned on {al.shared_collectives} shared collectives, "
            f"to within {_ms(al.residual_ms)} ms"
        )
    else:
        console.print(f"[bold]Hosts[/bold]: {esc((al.note if al else '') or 'clocks not aligned')}")
    if section.warmup_steps:
        console.print(f"  {WARMUP_NOTE.format(', '.join(map(str, section.warmup_steps)))}")
    set_by = {r.step: r.host for r in section.step_set_by}
    hosts = section.hosts or sorted({r.host for r in rows})
    by = {(r.host, r.step): r for r in rows}
    steps = sorted({r.step for r in rows})
    if len(steps) > _MAX_STEP_ROWS:
        steps = steps[: _MAX_STEP_ROWS // 2] + steps[-_MAX_STEP_ROWS // 2 :]
    t = Table(
        title="Per host and step: wall ms (late to collectives / waited in them)", title_justify="left", show_edge=False
    )
    t.add_column("step", justify="right")
    for h in hosts:
        t.add_column(esc(h), justify="right")
    t.add_column("step time set by")
    for step in steps:
        cells = []
        for h in hosts:
            r = by.get((h, step))
            if r is None:
                cells.append("—")
                continue
            extra = [f"late {_ms(r.late_ms)}" if r.late_ms else "", f"waited {_ms(r.waited_ms)}" if r.waited_ms else ""]
            cells.append(_ms(r.wall_ms) + "".join(f" ({e})" for e in extra if e))
        t.add_row(_int(step), *cells, esc(set_by.get(step, "—")))
    console.print(t)
    console.print()


def _sharding(report: "Report", console: "Console") -> None:
    """Per jitted function: mesh and the collectives inserted; then the timeline's, joined to them."""
    from jaxdiag.render.sharding_table import print_functions, print_timeline

    section = report.sharding
    if not section.functions and not section.timeline:
        return
    console.print("[bold]Sharding[/bold] (jaxdiag sharding shows every array's spec)")
    print_functions(section, console, detail=False)
    print_timeline(section, console)


def _ms(value: Any) -> str:
    if value is None:
        return "—"
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return esc(value)
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.2f}"


def _int(value: Any) -> str:
    if value is None:
        return "—"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError, OverflowError):
        return esc(value)


def _steps_from(source: dict[str, Any]) -> str:
    from jaxdiag.reporting.model import steps_from

    return steps_from(source)

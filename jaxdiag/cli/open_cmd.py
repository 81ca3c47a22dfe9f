"""``jaxdiag open TRACE_DIR [--step N | --finding K]``: XProf's timeline, at the step or finding.

Starts XProf's server on a free loopback port (or reuses the one already
serving this run) and prints the trace viewer's address for the host and time
range: a step's window, or where finding K (numbered as ``jaxdiag report``
numbers them) happened. ``--report FILE`` reads the findings from a saved JSON
report instead of diagnosing the trace again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.errors import ConfigError, JaxdiagError


@app.command("open")
def open_command(
    trace_dir: Path = typer.Argument(
        ..., help="Logdir given to jax.profiler, a plugins/profile/<run> folder, or an .xplane.pb file."
    ),
    run: Optional[str] = typer.Option(None, help="Run folder to open (default: the newest)."),
    host: Optional[str] = typer.Option(None, help="Host to show (default: the step's or finding's, else the first)."),
    step: Optional[int] = typer.Option(None, help="Show this step's time range."),
    finding: Optional[int] = typer.Option(
        None, help="Show where finding K of `jaxdiag report` happened (1 = the first)."
    ),
    report_file: Optional[Path] = typer.Option(None, "--report", help="Take the findings from this saved JSON report."),
    no_start: bool = typer.Option(False, "--no-start", help="Print the place only; do not start XProf."),
) -> None:
    """Open XProf's trace viewer on a capture, at a step or at a finding."""
    from jaxdiag.trace.discover import discover, host_name

    if step is not None and finding is not None:
        raise ConfigError("give --step or --finding, not both")
    found = discover(trace_dir, run=run)
    hosts = [host_name(f) for f in found.files]
    if host is not None and host not in hosts:
        raise ConfigError(f"--host {host!r} is not in run {found.run} (hosts: {', '.join(hosts)})")
    where: dict[str, Any] = {"run": found.run, "host": host or hosts[0], "step": None, "start_ms": None, "end_ms": None}
    title = f"run {found.run}"
    if finding is not None:
        f = _finding(trace_dir, run, host, finding, report_file)
        where.update({k: v for k, v in (f.evidence.get("where") or {}).items() if v is not None})
        if host is not None:
            where["host"] = host
        title = f"finding {finding}: {f.message}"
    elif step is not None:
        where.update(_step_place(found.run_dir, where["host"], step))
        title = f"step {step}"
    typer.echo(title)
    typer.echo(_place_line(where))
    if no_start:
        return
    from jaxdiag.xprof_tools.server import ensure_server, serving_folder

    server = ensure_server(serving_folder(found.run_dir, found.files))
    typer.echo(
        f"XProf ({'already running' if server.reused else 'started'}, pid {server.pid}): "
        f"{server.trace_viewer(where['run'], where['host'])}"
    )
    typer.echo(f"timeline: {server.timeline(where['run'], where['host'], where['start_ms'], where['end_ms'])}")


def shown_findings(report: Any) -> list[Any]:
    """The findings as ``jaxdiag report`` numbers them (loader notes that lost no time are not listed)."""
    return [f for f in report.findings if f.kind != "loader" or f.time_lost_ms > 0]


def _finding(trace_dir: Path, run: str | None, host: str | None, k: int, report_file: Path | None) -> Any:
    if report_file is not None:
        from jaxdiag.reporting.model import Report

        report = Report.open(report_file)
    else:
        from jaxdiag.reporting.build import report as build

        report = build(trace_dir, run=run, host=host)
    shown = shown_findings(report)
    if not 1 <= k <= len(shown):
        raise ConfigError(f"--finding {k}: the report has {len(shown)} finding(s), numbered from 1")
    return shown[k - 1]


def _step_place(run_dir: Path, host: str, step: int) -> dict[str, Any]:
    from jaxdiag.trace import frames as F
    from jaxdiag.trace.load import load

    frames = load(run_dir, host=host)
    st = frames.steps
    mine = st.loc[(st[F.HOST] == host) & (st[F.STEP] == step)] if len(st) else st
    if mine.empty:
        known = sorted({int(s) for s in st[F.STEP]}) if len(st) else []
        raise JaxdiagError(
            f"{run_dir}: host {host} has no step {step}"
            + (f" (steps {known[0]}..{known[-1]})" if known else " (the trace has no step markers)")
        )
    return {
        "step": step,
        "start_ms": round(int(mine[F.START_NS].min()) / 1e6, 3),
        "end_ms": round(int(mine["end_ns"].max()) / 1e6, 3),
    }


def _place_line(where: dict[str, Any]) -> str:
    parts = [f"run {where['run']}", f"host {where['host']}"]
    if where.get("device") is not None:
        parts.append(f"device {where['device']}")
    if where.get("step") is not None:
        parts.append(f"step {where['step']}")
    if where.get("start_ms") is not None:
        parts.append(f"{where['start_ms']:.3f}-{where['end_ms']:.3f} ms on the profiler clock")
    else:
        parts.append("the whole capture")
    return ", ".join(parts)

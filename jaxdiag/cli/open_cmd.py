"""``jaxdiag open TRACE_DIR [--step N | --finding K]``: XProf's timeline, at the step or finding.

Checks the run's host files, starts XProf's server for that run on a free
127.0.0.1 port and prints two addresses, both answered by the server: XProf's
own interface and the trace viewer for the host and time range (a step's
window, or where finding K, numbered as ``jaxdiag report`` numbers them,
happened). The server serves until the command ends (Ctrl-C, SIGTERM or
SIGHUP) and ends with it. ``--report FILE`` reads the findings from a saved
JSON report instead of diagnosing the trace again.

Exit status: 0 success (also when stopped by Ctrl-C or SIGTERM), 2 bad input (a
missing, empty, truncated or random file: one line naming the file and the
problem, and no server is started).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from types import FrameType
from typing import Any, Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.errors import ConfigError, JaxdiagError
from jaxdiag.render.terminal_text import plain


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
    """Open XProf's trace viewer on a capture, at a step or at a finding; the server ends with the command.

    Exit status: 0 success (also when stopped by Ctrl-C or SIGTERM), 2 bad input
    (one line naming the file and the problem; no server is started).
    """
    from jaxdiag.trace.discover import discover, host_name

    if step is not None and finding is not None:
        raise ConfigError("give --step or --finding, not both")
    trace_dir = trace_dir.expanduser().resolve()  # `open .` or a bare file name: the run is the folder's name
    found = discover(trace_dir, run=run)
    _check_files(found)
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
    typer.echo(plain(title))  # names from the trace or a saved report: shown, never acted on
    typer.echo(plain(_place_line(where)))
    if no_start:
        return
    if found.kind != "xplane":
        raise ConfigError(f"{found.run_dir}: XProf reads .xplane.pb captures; this run has only .trace.json.gz files")
    from jaxdiag.xprof_tools.server import serving_folder, start_server

    with start_server(serving_folder(found.run_dir, found.files)) as server:
        typer.echo(f"XProf (pid {server.pid}, serving run {found.run} until Ctrl-C): {server.home()}")
        typer.echo(f"timeline: {server.timeline(where['run'], where['host'], where['start_ms'], where['end_ms'])}")
        _serve_until_stopped(server.process)


class _Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP reached the command."""


def _serve_until_stopped(process: "subprocess.Popen[bytes] | None") -> None:
    """Wait until Ctrl-C, SIGTERM or SIGHUP (the caller then stops the server), or until the server ends.

    SIGINT gets a handler of its own too: a command started in the background by a shell
    without job control inherits SIGINT ignored, and Python then never raises
    ``KeyboardInterrupt``, so "until Ctrl-C" would be never.
    """

    def stopped(signum: int, frame: FrameType | None) -> None:
        raise _Stopped

    previous = {s: signal.signal(s, stopped) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        while process is not None and process.poll() is None:
            try:
                process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
        if process is not None:
            raise JaxdiagError(f"the XProf server stopped (exit {process.returncode}); see its xprof.log")
    except (KeyboardInterrupt, _Stopped):
        typer.echo("XProf stopped")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _check_files(found: Any) -> None:
    """Each host file is a serialized XSpace with at least one plane: no server is started for a bad file.

    Walks the file's top-level records (``trace.wire``): a file cut short, random
    bytes or an empty capture are named here rather than by XProf's log.
    """
    if found.kind != "xplane":
        return
    from jaxdiag.errors import TraceFormatError
    from jaxdiag.trace.wire import plane_records

    for f in found.files:
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise TraceFormatError(f"{f}: cannot read ({exc.strerror or exc})") from None
        planes = plane_records(data, str(f))
        if planes is not None and not planes:
            raise TraceFormatError(f"{f}: holds no planes; not a jax.profiler capture")


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

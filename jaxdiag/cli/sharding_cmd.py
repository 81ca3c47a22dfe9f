"""``jaxdiag sharding LOG_OR_TRACE_DIR``: per jitted function, its mesh, specs and the collectives inserted.

A compile log (``.jsonl`` or a folder of them) gives what each compile recorded;
a capture (logdir, run folder, ``.xplane.pb``) or a saved report JSON adds the
timeline: the time each collective took, joined to its function and array.
Neither path imports jax.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.cli.options import CONFIG_HELP, SET_HELP, check_width, settings_from
from jaxdiag.errors import CompileLogError, ConfigError, JaxdiagError, TraceFormatError
from jaxdiag.render.terminal_text import plain

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.sharding_section import ShardingSection

_NO_FACTS = (
    "no sharding facts in {where}: jaxdiag.jit records them for functions on more than one "
    "device (or with analysis=True); write its log with jaxdiag.configure(log_dir=...) next to the capture"
)


@app.command("sharding")
def sharding_command(
    path: Path = typer.Argument(
        ...,
        metavar="LOG_OR_TRACE_DIR",
        help="A compile log (.jsonl or folder), a capture (logdir, run folder, .xplane.pb) or a saved report JSON.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (schema jaxdiag.sharding/1) instead of tables."),
    function: Optional[str] = typer.Option(None, "--function", help="Only this function (name or module.qualname)."),
    compile_log: Optional[Path] = typer.Option(
        None, help="Compile log to join to a capture (default: the one beside it)."
    ),
    replicated_param_mb: Optional[float] = typer.Option(
        None, help="Report inputs replicated on every device from this size (MiB, default 64)."
    ),
    width: Optional[int] = typer.Option(None, help="Terminal width for the tables."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
    config: Optional[Path] = typer.Option(None, help=CONFIG_HELP),
) -> None:
    """Show what each jitted function moves between devices, and what its specs did not ask for.

    Exit status: 0 success, 2 bad input (one line naming the file and the problem).
    """
    width = check_width(width)
    if replicated_param_mb is not None and not (replicated_param_mb > 0 and replicated_param_mb < float("inf")):
        raise ConfigError(f"--replicated-param-mb must be positive, got {replicated_param_mb}")
    thresholds = settings_from(
        set_,
        config=config,
        replicated_param_bytes=None if replicated_param_mb is None else max(1, int(replicated_param_mb * 2**20)),
    )
    section, findings = _section(path, compile_log, thresholds)
    if function is not None:
        section, findings = _only(section, findings, function, path)
    from jaxdiag.render import sharding_table

    if json_out:
        typer.echo(json.dumps(sharding_table.to_json(section, findings), indent=2))
        return
    if not section.functions:
        typer.echo(f"jaxdiag: note: {_NO_FACTS.format(where=path)}", err=True)
    color = sys.stdout.isatty()
    typer.echo(sharding_table.render(section, findings, width=width, color=color), nl=False, color=color)


def _section(path: Path, compile_log: Path | None, thresholds: Any) -> tuple["ShardingSection", list[Any]]:
    """The sharding section and its findings, from whatever ``path`` holds."""
    from jaxdiag.checks.inputs import is_report_file

    if not path.exists():
        raise JaxdiagError(
            f"{path}: no such file or folder; give a compile log (.jsonl or its folder), "
            "a capture (logdir, run folder, .xplane.pb) or a saved report JSON"
        )
    if path.is_file() and path.suffix.lower() == ".jsonl":
        return _from_log(path, thresholds)
    if is_report_file(path):
        if compile_log is not None:
            raise ConfigError(f"{path} is a saved report; --compile-log only applies to a trace folder")
        from jaxdiag.checks.inputs import read_report

        report = read_report(path)
        return report.sharding, list(report.findings)
    try:
        from jaxdiag.trace.discover import discover

        discover(path)
    except TraceFormatError as trace_error:
        if compile_log is not None or not path.is_dir():
            raise
        try:
            return _from_log(path, thresholds)
        except CompileLogError:
            raise JaxdiagError(f"{path}: neither a capture nor a compile log ({trace_error})") from None
    from jaxdiag.reporting.build import report as build

    report = build(path, compile_log=compile_log, thresholds=thresholds)
    return report.sharding, list(report.findings)


def _from_log(path: Path, thresholds: Any) -> tuple["ShardingSection", list[Any]]:
    from jaxdiag.analyses.sharding import analyze_records
    from jaxdiag.recording.log_reader import read_compile_log

    log = read_compile_log(path)
    if log.skipped_lines:
        file, line, reason = log.skipped_lines[0]
        typer.echo(
            plain(  # the reason may quote the file: shown, never acted on
                f"jaxdiag: warning: skipped {len(log.skipped_lines)} unreadable line(s) in {path} "
                f"(first: {file}:{line}: {reason})",
            ),
            err=True,
        )
    result = analyze_records([r.to_dict() for r in log.records], thresholds)
    return result.section(), list(result.findings)


def _only(
    section: "ShardingSection", findings: list[Any], function: str, path: Path
) -> tuple["ShardingSection", list[Any]]:
    """The part of the section and findings about ``function`` (from the capture, if the section's was one)."""
    from jaxdiag.analyses.sharding_section import ShardingSection

    functions = tuple(f for f in section.functions if function in (f.function, f.qualname))
    if not functions:
        seen = sorted({f.function for f in section.functions})
        raise ConfigError(
            f"{path}: no sharding facts for function {function!r}; functions with facts: {', '.join(seen) or 'none'}"
        )
    names = {f.function for f in functions}
    timeline = tuple(r for r in section.timeline if r.function in names)
    kept = [f for f in findings if f.evidence.get("function") in names]
    return ShardingSection(functions, timeline, section.captured), kept

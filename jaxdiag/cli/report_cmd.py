"""``jaxdiag report TRACE_DIR``: diagnose a capture and print or write the report.

``TRACE_DIR`` may also be a report saved with ``--json`` (or ``Report.save``): it is
rendered again, as it was from its trace, without the trace.

Typer parses the arguments, as for every command; the program starts reading the
trace before typer loads (``jaxdiag.cli.app.main``), and this command takes that read over.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Iterator, Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.cli.options import (
    CONFIG_HELP,
    SET_HELP,
    check_steps_found,
    check_width,
    parse_steps,
    positive,
    settings_from,
)
from jaxdiag.errors import ConfigError, JaxdiagError


@app.command("report")
def report_command(
    trace_dir: Path = typer.Argument(
        ...,
        help="Logdir given to jax.profiler, a plugins/profile/<run> folder, an .xplane.pb file, "
        "or a saved report JSON to render again.",
    ),
    run: Optional[str] = typer.Option(None, help="Run folder to read (default: the newest)."),
    host: Optional[str] = typer.Option(None, help="Report on this host only."),
    steps: Optional[str] = typer.Option(None, help="Steps to include: '3:10' (end exclusive), '2,5,7' or '4'."),
    tokens_per_step: Optional[float] = typer.Option(None, help="Tokens (or samples) per step, for tokens/s."),
    flops_per_step: Optional[float] = typer.Option(None, help="Model flops per step, for MFU."),
    small_op_us: Optional[float] = typer.Option(
        None, help="Device ops shorter than this (µs) are 'small' (default 10)."
    ),
    compile_log: Optional[Path] = typer.Option(
        None, help="jaxdiag compile log (file or folder) to join; default: one in the run folder."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the JSON report (see docs/report-schema.md) instead of tables."
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Write the terminal or JSON report to this file instead of stdout."
    ),
    html: Optional[Path] = typer.Option(
        None,
        help="Write a self-contained HTML report to this file and say where (with --json or --output, those too).",
    ),
    width: Optional[int] = typer.Option(None, help="Terminal width for the tables."),
    deep: bool = typer.Option(
        False,
        "--deep",
        help="Also run XProf's converters: FLOPs, bytes and roofline bound per top op, measured memory peaks, "
        "GPU kernel facts (slower; see the README).",
    ),
    scheduler: Optional[str] = typer.Option(
        None,
        help="Read the host files on a Dask cluster: its scheduler, tcp://HOST:PORT (the workers must see TRACE_DIR).",
    ),
    set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
    config: Optional[Path] = typer.Option(None, help=CONFIG_HELP),
) -> None:
    """Break a capture down step by step, and say what to change, by time lost.

    Exit status: 0 success, 2 bad input (a missing, empty, damaged or wrong kind of
    file, or a bad option: one line naming the file and the problem).
    """
    width = check_width(width)
    from jaxdiag.checks.inputs import is_report_file, read_report

    saved = is_report_file(trace_dir)
    if saved:
        trace_options = {
            "run": run,
            "host": host,
            "steps": steps,
            "tokens_per_step": tokens_per_step,
            "flops_per_step": flops_per_step,
            "small_op_us": small_op_us,
            "compile_log": compile_log,
            "deep": deep or None,
            "scheduler": scheduler,
            "set": set_ or None,
            "config": config,
        }
        given = ["--" + k.replace("_", "-") for k, v in trace_options.items() if v is not None]
        if given:
            raise ConfigError(f"{trace_dir} is a saved report; {', '.join(given)} only apply to a trace folder")
        result = read_report(trace_dir)
    else:
        from jaxdiag.reporting.build import report

        settings = settings_from(set_, config=config, small_op_us=positive("--small-op-us", small_op_us))
        wanted = parse_steps(steps)
        result = report(
            trace_dir,
            run=run,
            host=host,
            steps=wanted,
            tokens_per_step=positive("--tokens-per-step", tokens_per_step),
            flops_per_step=positive("--flops-per-step", flops_per_step),
            compile_log=compile_log,
            settings=settings,
            deep=deep,
            scheduler=scheduler,
        )
        if wanted is not None and result.frames is not None:
            check_steps_found(steps, wanted, result.frames.steps["step"], trace_dir)
    with _saved_values_checked(trace_dir if saved else None):
        if html is not None:
            from jaxdiag.render.html import render as render_html

            _write(html, render_html(result))
            wrote = f"jaxdiag: wrote the HTML report to {html}\n"
            if not json_out and output is None:  # the page was asked for, not the tables too
                typer.echo(wrote, nl=False, color=False)
                return
            sys.stderr.write(wrote)
        if json_out:
            from jaxdiag.render.json_out import render as render_json

            text = render_json(result)
            color = False
        else:
            from jaxdiag.render.terminal import render as render_terminal

            color = output is None and sys.stdout.isatty()
            text = render_terminal(result, width=width, color=color)
    if output is not None:
        _write(output, text)
    elif json_out:
        _echo_json(text)
    else:
        typer.echo(text, nl=False, color=color)


def _echo_json(text: str) -> None:
    """Print the JSON report as ``typer.echo(text, nl=False)`` does, without its pass over the text.

    The report is ASCII without escape sequences (``json.dumps`` escapes the rest),
    which typer would write unchanged after searching megabytes of it for styles to strip.
    """
    if text.isascii() and "\x1b" not in text:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        typer.echo(text, nl=False)


@contextlib.contextmanager
def _saved_values_checked(saved: Path | None) -> Iterator[None]:
    """Turn a value of the wrong kind deep in a saved report (a string where a number goes) into one line.

    ``read_report`` checks the containers a renderer walks, not every number in them: a
    hand-edited report can still hold text where a figure goes, which only rendering meets.
    """
    try:
        yield
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        if saved is None:
            raise
        from jaxdiag.reporting.model import ReportFormatError

        raise ReportFormatError(
            f"{saved}: not a report this jaxdiag can render: a value of the wrong kind ({type(exc).__name__}: {exc})"
        ) from None


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise JaxdiagError(f"{path}: cannot write ({exc.strerror or exc})") from None

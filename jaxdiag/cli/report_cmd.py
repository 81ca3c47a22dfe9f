"""``jaxdiag report TRACE_DIR``: diagnose a capture and print or write the report.

``TRACE_DIR`` may also be a report saved with ``--json`` (or ``Report.save``): it is
rendered again, as it was from its trace, without the trace.

``run_plain`` runs the command without typer's parameter handling when its
arguments are plain, which is how scripts and CI call it: typer converts every
value through a pydantic adapter, and that costs more than reading a small trace.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union, get_args, get_origin

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
from jaxdiag.reporting.model import ReportFormatError


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
    html: Optional[Path] = typer.Option(None, help="Also write a self-contained HTML report to this file."),
    width: Optional[int] = typer.Option(None, help="Terminal width for the tables."),
    deep: bool = typer.Option(
        False,
        "--deep",
        help="Also run XProf's converters: FLOPs, bytes and roofline bound per top op, measured memory peaks, GPU kernel facts (slower; see the README).",
    ),
    scheduler: Optional[str] = typer.Option(
        None,
        help="Read the host files on a Dask cluster: its scheduler, tcp://HOST:PORT (the workers must see TRACE_DIR).",
    ),
    set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
    config: Optional[Path] = typer.Option(None, help=CONFIG_HELP),
) -> None:
    """Break a capture down step by step, and say what to change, by time lost."""
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
        if json_out:
            from jaxdiag.render.json_out import render as render_json

            text = render_json(result)
            color = False
        else:
            from jaxdiag.render.terminal import render as render_terminal

            color = output is None and _stdout_is_terminal()
            text = render_terminal(result, width=width, color=color)
    if output is not None:
        _write(output, text)
    else:
        typer.echo(text, nl=False, color=color)


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
        raise ReportFormatError(
            f"{saved}: not a report this jaxdiag can render: a value of the wrong kind ({type(exc).__name__}: {exc})"
        ) from None


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise JaxdiagError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


_NUMBER = {float: re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"), int: re.compile(r"\d+")}


def run_plain(args: Sequence[str]) -> int | None:
    """Run ``report`` on ``args`` (after the command name) directly; ``None`` to leave them to typer.

    Options are read from ``report_command``'s own signature, so the two cannot
    drift. Anything but plain use (help, an unknown, repeated or malformed option,
    a value typer might read differently) is left to typer, which prints its
    usual messages. The exit status is the one typer would give.
    """
    values = _plain_values(list(args))
    if values is None:
        return None
    try:
        report_command(**values)
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        return 1
    return 0


def _plain_values(args: list[str]) -> dict[str, Any] | None:
    """Keyword arguments of ``report_command`` for ``args``, or ``None`` when they are not plain."""
    positional: list[str] = []
    options: dict[str, tuple[str, type]] = {}
    values: dict[str, Any] = {}
    for param in inspect.signature(report_command, eval_str=True).parameters.values():
        info = param.default
        kind = _plain_type(param.annotation)
        custom = [getattr(info, a, None) for a in ("callback", "envvar", "parser", "click_type", "is_eager")]
        if kind is None or any(c not in (None, False) for c in custom):
            return None
        if isinstance(info, typer.models.ArgumentInfo):
            positional.append(param.name)
            continue
        values[param.name] = () if kind is list and info.default is None else info.default
        names = info.param_decls or (f"--{param.name.replace('_', '-')}",)
        if any("/" in n for n in names):
            return None
        options.update((n, (param.name, kind)) for n in names)
    given: set[str] = set()
    rest: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            rest += args[i:]
            break
        if not token.startswith("-") or token == "-":
            rest.append(token)
            continue
        name, eq, attached = token.partition("=")
        if name not in options or options[name][0] in given:
            return None
        param, kind = options[name]
        if kind is not list:  # a list option (``--set``) may be repeated
            given.add(param)
        if kind is bool:
            if eq:
                return None
            values[param] = True
            continue
        if not eq:
            if i >= len(args):
                return None
            attached, i = args[i], i + 1
        value = _plain_value(attached, str if kind is list else kind)
        if value is None:
            return None
        values[param] = [*values[param], value] if kind is list else value
    if len(rest) != len(positional) or any(not r for r in rest):
        return None
    values.update((p, Path(r)) for p, r in zip(positional, rest))
    return values


def _plain_type(annotation: Any) -> type | None:
    """``str``, ``int``, ``float``, ``bool``, ``Path`` or ``list`` (of ``str``) from an annotation, unwrapping ``Optional``."""
    if get_origin(annotation) is Union:
        inner = [a for a in get_args(annotation) if a is not type(None)]
        annotation = inner[0] if len(inner) == 1 else None
    if get_origin(annotation) is list:
        return list if get_args(annotation) == (str,) else None
    return annotation if annotation in (str, int, float, bool, Path) else None


def _plain_value(text: str, kind: type) -> Any:
    """``text`` as ``kind``; ``None`` where typer might read it otherwise (or reject it)."""
    if not text or text.startswith("-"):
        return None
    if kind in _NUMBER:
        return kind(text) if _NUMBER[kind].fullmatch(text) else None
    return Path(text) if kind is Path else text

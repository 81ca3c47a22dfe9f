"""``jaxdiag report`` without typer: its parameters, what it does, and the plain-arguments path.

``report_cmd`` declares the typer command from ``PARAMETERS`` and calls ``run``.
``plain_values`` reads plain arguments with the same table and ``run_values`` calls ``run``,
which is how scripts and CI call the command: importing typer and click, and
typer's pydantic conversion of every value, take longer than reading a small
trace. Nothing here imports typer, unless it prints the tables.
"""

from __future__ import annotations

import contextlib
import errno
import re
import sys
from pathlib import Path
from typing import Any, Iterator, NamedTuple

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


class Parameter(NamedTuple):
    """One parameter of ``jaxdiag report``, as typer is given it.

    Attributes:
      name: the keyword of ``run`` (and of the typer command).
      kind: ``Path``, ``str``, ``int``, ``float``, ``bool`` or ``list`` (of ``str``).
      default: ``...`` for a required argument.
      flags: the option's names as given to typer; ``()`` for an option named after
        ``name`` (``--small-op-us``); ``None`` for the positional argument.
      help: the help text.
    """

    name: str
    kind: type
    default: Any
    flags: tuple[str, ...] | None
    help: str


#: ``jaxdiag report``'s parameters, in the order of its signature and ``--help``.
PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "trace_dir",
        Path,
        ...,
        None,
        "Logdir given to jax.profiler, a plugins/profile/<run> folder, an .xplane.pb file, "
        "or a saved report JSON to render again.",
    ),
    Parameter("run", str, None, (), "Run folder to read (default: the newest)."),
    Parameter("host", str, None, (), "Report on this host only."),
    Parameter("steps", str, None, (), "Steps to include: '3:10' (end exclusive), '2,5,7' or '4'."),
    Parameter("tokens_per_step", float, None, (), "Tokens (or samples) per step, for tokens/s."),
    Parameter("flops_per_step", float, None, (), "Model flops per step, for MFU."),
    Parameter("small_op_us", float, None, (), "Device ops shorter than this (µs) are 'small' (default 10)."),
    Parameter(
        "compile_log",
        Path,
        None,
        (),
        "jaxdiag compile log (file or folder) to join; default: one in the run folder.",
    ),
    Parameter(
        "json_out", bool, False, ("--json",), "Print the JSON report (see docs/report-schema.md) instead of tables."
    ),
    Parameter(
        "output",
        Path,
        None,
        ("--output", "-o"),
        "Write the terminal or JSON report to this file instead of stdout.",
    ),
    Parameter(
        "html",
        Path,
        None,
        (),
        "Write a self-contained HTML report to this file and say where (with --json or --output, those too).",
    ),
    Parameter("width", int, None, (), "Terminal width for the tables."),
    Parameter(
        "deep",
        bool,
        False,
        ("--deep",),
        "Also run XProf's converters: FLOPs, bytes and roofline bound per top op, measured memory peaks, "
        "GPU kernel facts (slower; see the README).",
    ),
    Parameter(
        "scheduler",
        str,
        None,
        (),
        "Read the host files on a Dask cluster: its scheduler, tcp://HOST:PORT (the workers must see TRACE_DIR).",
    ),
    Parameter("set_", list, None, ("--set",), SET_HELP),
    Parameter("config", Path, None, (), CONFIG_HELP),
)


class Output(NamedTuple):
    """What ``run`` leaves to print on stdout (``text`` ``None``: it wrote a file), whether in color, and whether JSON."""

    text: str | None
    color: bool
    json: bool


def run(
    trace_dir: Path,
    run: str | None = None,
    host: str | None = None,
    steps: str | None = None,
    tokens_per_step: float | None = None,
    flops_per_step: float | None = None,
    small_op_us: float | None = None,
    compile_log: Path | None = None,
    json_out: bool = False,
    output: Path | None = None,
    html: Path | None = None,
    width: int | None = None,
    deep: bool = False,
    scheduler: str | None = None,
    set_: list[str] | None = None,
    config: Path | None = None,
) -> Output:
    """Report on ``trace_dir`` (or render the saved report it is), write what goes to files, return the rest."""
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
                return Output(wrote, False, False)
            sys.stderr.write(wrote)
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
        return Output(None, color, json_out)
    return Output(text, color, json_out)


def echo(out: Output) -> None:
    """Print ``out`` as ``typer.echo(text, nl=False, color=...)`` does.

    The JSON report is ASCII without escape sequences (``json.dumps`` escapes the
    rest), which typer would write unchanged: for it that is a write and a flush.
    Tables go through typer, which strips their styles where the output is no terminal.
    """
    if out.text is None:
        return
    if out.json and out.text.isascii() and "\x1b" not in out.text:
        sys.stdout.write(out.text)
        sys.stdout.flush()
        return
    import typer

    typer.echo(out.text, nl=False, color=out.color)


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


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


# --- plain arguments ---------------------------------------------------------------


def run_values(values: dict[str, Any]) -> int:
    """Run ``report`` on ``plain_values``'s keyword arguments; the exit status typer would give.

    A ``JaxdiagError`` is raised, as from the typer command.
    """
    try:
        echo(run(**values))
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        return 1
    return 0


def plain_values(args: list[str]) -> dict[str, Any] | None:
    """Keyword arguments of ``run`` for ``args``, or ``None`` when they are not plain."""
    positional: list[str] = []
    options: dict[str, tuple[str, type]] = {}
    values: dict[str, Any] = {}
    for param in PARAMETERS:
        if param.flags is None:
            positional.append(param.name)
            continue
        values[param.name] = () if param.kind is list and param.default is None else param.default
        names = param.flags or (f"--{param.name.replace('_', '-')}",)
        options.update((n, (param.name, param.kind)) for n in names)
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


#: Numbers as both ``float``/``int`` and typer read them alike: no sign, no ``_``, no ``inf`` or ``nan``.
#: Compiled on first use (``re``'s cache), by a command given a number.
_NUMBER = {float: r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", int: r"\d+"}


def _plain_value(text: str, kind: type) -> Any:
    """``text`` as ``kind``; ``None`` where typer might read it otherwise (or reject it)."""
    if not text or text.startswith("-"):
        return None
    if kind in _NUMBER:
        return kind(text) if re.fullmatch(_NUMBER[kind], text) else None
    return Path(text) if kind is Path else text

"""``jaxdiag run SCRIPT [ARGS...]``: run a Python script under ``jaxdiag.watch`` and summarise its compiles.

In the manner of ``python -m cProfile`` and ``pyinstrument script.py``: the script
runs in this process as ``__main__``, with ``sys.argv`` set to the script and its
arguments and the script's folder first on ``sys.path``. Options before the script
are jaxdiag's; everything after it is the script's, untouched. The script's
stdout, exit status and exceptions pass through unchanged (an uncaught exception
prints its traceback as Python would, exit status 1); the compile summary goes to
stderr once the script ends.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.errors import ConfigError

#: Exit status of a script stopped by Ctrl-C, as a shell reports it.
EXIT_INTERRUPTED = 130


@app.command(
    "run",
    context_settings={"allow_extra_args": True, "allow_interspersed_args": False, "ignore_unknown_options": True},
)
def run_command(
    ctx: typer.Context,
    script: str = typer.Argument(
        ..., metavar="SCRIPT", help="The Python script to run; the arguments after it are the script's."
    ),
    log_dir: Optional[Path] = typer.Option(
        None, "--log-dir", help="Write every compile record to a JSONL log in this folder."
    ),
    jax_internals: bool = typer.Option(
        True,
        "--jax-internals/--no-jax-internals",
        help="Record JAX's own jitted helpers (eager jnp ops) too; the summary folds them into one line.",
    ),
    monitor_dir: Optional[Path] = typer.Option(
        None,
        "--monitor",
        help="Watch the run with jaxdiag.monitor: step times to a JSONL stream in this folder, captures on anomalies.",
    ),
    summary: bool = typer.Option(True, "--summary/--no-summary", help="Print the compile summary at exit."),
    width: Optional[int] = typer.Option(None, help="Width of the summary table."),
) -> None:
    """Run a script, recording every compile (jax.jit, nnx.jit, eqx.filter_jit, pmap); summarise them at exit.

    Exit status: the script's own (1 when it raises, 130 on Ctrl-C), 2 bad input
    (no such script, or a binary file: one line).
    """
    path = Path(script)
    if not (path.is_file() or (path.is_dir() and (path / "__main__.py").is_file())):
        raise ConfigError(f"{script}: no such script (give a Python file, or a folder with __main__.py)")
    _check_is_python(path / "__main__.py" if path.is_dir() else path)
    from jaxdiag.recording import compile_log
    from jaxdiag.recording.watch import watch

    if log_dir is not None:
        compile_log.configure(log_dir=log_dir)
    status, error = 0, None
    with watch(jax_internals=jax_internals) as watched, _monitoring(monitor_dir):
        status, error = run_script(os.path.abspath(script), list(ctx.args))
    sys.stdout.flush()
    if summary:
        typer.echo(summarize(watched.records, width=width, color=sys.stderr.isatty()), err=True, nl=False)
    if error is not None:
        traceback.print_exception(*error)
    raise typer.Exit(status)


def _monitoring(folder: Path | None) -> Any:
    """``jaxdiag.monitor(folder)`` around the script, or nothing."""
    if folder is None:
        return contextlib.nullcontext()
    from jaxdiag.monitoring.monitor import monitor

    return monitor(folder)


def _check_is_python(path: Path) -> None:
    """A binary or undecodable file is bad input (one line, exit 2), not a script that raised.

    A zip archive runs as Python runs it (its ``__main__.py``); a text script with a
    syntax error is the script's own error, shown as Python shows it.
    """
    import importlib.util
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            return
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ConfigError(f"{path}: binary data (a NUL byte at offset {nul}); expected a Python script")
    try:
        importlib.util.decode_source(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise ConfigError(f"{path}: not a Python script: not text in its encoding ({exc})") from None


def run_script(script: str, args: list[str]) -> tuple[int, tuple | None]:
    """Run ``script`` as ``__main__`` with ``args``; the exit status and, if it raised, the exception.

    The exception comes as ``(type, value, traceback)`` with the frames of this
    runner cut off, so that printing it shows what Python itself would.
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return _exit_status(exc.code), None
    except BaseException as exc:  # noqa: BLE001 - the script's own; reported as Python would
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        status = EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 1
        return status, (type(exc), exc, tb or exc.__traceback__)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    return 0, None


def _exit_status(code: object) -> int:
    """What Python exits with for ``sys.exit(code)``: ``None`` is 0, a message is printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def summarize(records: list, *, width: int | None = None, color: bool = False) -> str:
    """The compile table of the run's records, JAX's own helpers folded into one line."""
    from jaxdiag.recording import compile_log
    from jaxdiag.recording.advice import advise
    from jaxdiag.recording.log_reader import CompileLog
    from jaxdiag.recording.watch import is_jax_internal
    from jaxdiag.render.compiles_table import render

    internal = [r for r in records if is_jax_internal(r)]
    user = [r for r in records if not is_jax_internal(r)]
    sink = compile_log.LOG.sink
    files = () if sink is None else (str(sink.path),)
    lines = []
    if user:
        lines.append(render(CompileLog(tuple(user), files), advise(user), width=width, color=color))
    else:
        lines.append("jaxdiag: no compiles of the script's own jitted functions\n")
    if internal:
        seconds = sum(r.compile_s for r in internal)
        counts = Counter(r.function for r in internal)
        most = ", ".join(f"{name} {n}x" for name, n in counts.most_common(3))
        lines.append(
            f"jaxdiag: and {len(internal)} compile(s) of JAX's own jitted helpers (eager jnp "
            f"ops, primitives run outside jit), {seconds:.2f} s; most: {most}\n"
        )
    if files:
        lines.append(f"jaxdiag: compile log: {files[0]}\n")
    return "".join(lines)

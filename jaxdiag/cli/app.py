"""The ``jaxdiag`` typer app: registers one module per command, maps errors to exit codes.

Exit status: 0 success, 1 a check failed (``check``), 2 bad input (any
``JaxdiagError``, printed as one line without a traceback).

``app`` is made on first use (``from jaxdiag.cli.app import app``), so that the
program can start reading a trace before typer loads (see ``main``).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import jaxdiag
from jaxdiag.errors import JaxdiagError

if TYPE_CHECKING:  # pragma: no cover
    import typer

EXIT_BAD_INPUT = 2


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _app()


def _app() -> "typer.Typer":
    """The one typer app, made on first use."""
    app = globals().get("app")
    if app is None:
        app = globals()["app"] = _make_app()
    return app


def _make_app() -> "typer.Typer":
    import typer

    app = typer.Typer(
        name="jaxdiag",
        help="Recompile and sharding diagnostics for JAX programs.\n\n"
        "Exit status: 0 success, 1 a check failed (check) or the script's own (run), "
        "2 bad input (one line naming the file and the problem). `jaxdiag COMMAND -h` for each command.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # Plain help (click's): typer's rich panels label every flag ``<bool>``.
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    def _version(value: bool) -> None:
        if value:
            typer.echo(f"jaxdiag {jaxdiag.__version__}")
            raise typer.Exit()

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        """Find recompiles, host waits, small ops and exposed communication in JAX programs."""

    return app


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from jaxdiag.cli import commands  # noqa: F401


def _plain_report(args: list[str]) -> dict[str, Any] | None:
    """``report_run.run``'s keyword arguments when ``args`` are ``report`` with plain arguments; else ``None``.

    ``jaxdiag report`` is the command scripts time: run plainly (``report_run``), it
    spares importing typer, click and the other commands, and typer's per-option
    pydantic set-up, which together cost more than reading a small trace.
    """
    if args[:1] != ["report"]:
        return None
    from jaxdiag.cli.report_run import plain_values

    return plain_values(args[1:])


def _run_plain(values: dict[str, Any], program: bool) -> int:
    """Run ``report`` on plain arguments; as the program itself, end it (see ``_end_program``)."""
    from jaxdiag.cli.report_run import run_values

    status = run_values(values)
    if not program:  # a caller in this process goes on
        return status
    _end_program(status)


def _end_program(status: int) -> NoReturn:
    """Exit without tearing the interpreter down, once exit handlers have run and output is flushed.

    Freeing pandas, numpy and a loaded trace object by object takes a tenth of a
    second after ``report`` on a 22 MB trace; the operating system frees it all at once.
    """
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            status = status or 1
    os._exit(status)


def fail(message: str) -> "typer.Exit":
    """Print ``jaxdiag: error: message`` on stderr and return the exit to raise."""
    import typer

    from jaxdiag.render.terminal_text import plain

    typer.echo(f"jaxdiag: error: {plain(message)}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    plain = _plain_report(args)
    program = argv is None and plain is not None
    if program:
        # Off for the whole program: the report pauses the collector anyway, and this also
        # spares the collections during the imports, the one after the report, and the worker's.
        gc.disable()
        _one_blas_thread()
        _prefetch(plain)
    try:
        if plain is not None:
            return _run_plain(plain, program=program)
        _register()
        _app()(args=argv, prog_name="jaxdiag", standalone_mode=True)
    except SystemExit as exc:  # typer/click exit with the command's status
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except JaxdiagError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    return 0


def _one_blas_thread() -> None:
    """Have numpy's OpenBLAS start no threads in the report program, unless the environment says how many.

    OpenBLAS starts a thread per core but one when numpy loads, and each spins for
    a while after it starts (and after every call): 40 to 60 ms of CPU during the
    report's imports, taken from the worker reading the trace beside them on two
    cores. The report does no linear algebra; its parallel work is the reading
    workers. OpenBLAS reads the variable when numpy loads, after this.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _error(message: str) -> None:
    """Print ``jaxdiag: error: message`` on stderr as ``typer.echo`` does; typer is imported only for a line it might change.

    A line of plain ASCII is written as is; typer re-encodes others for a misconfigured
    stream, and strips escape sequences where stderr is no terminal.
    """
    from jaxdiag.render.terminal_text import plain  # file and host names in the message: shown, never acted on

    line = f"jaxdiag: error: {plain(message)}\n"
    if line.isascii() and "\x1b" not in line and sys.stderr is not None:
        sys.stderr.write(line)
        sys.stderr.flush()
        return
    import typer

    typer.echo(line, nl=False, err=True)


def _prefetch(values: dict[str, Any]) -> None:
    """Start reading the trace of a plain ``jaxdiag report`` before the report's imports.

    The workers fork from a process that has imported little, and read while it
    imports pandas and the analyses; the command takes the read over (``trace.load``).
    Not for a read on a cluster, nor for a saved report; a problem with the trace
    is left for the command to raise.
    """
    if values["scheduler"] is not None:
        return
    from jaxdiag.checks.inputs import is_report_file

    try:
        if is_report_file(values["trace_dir"]):
            return
    except (OSError, ValueError):  # an unreadable path: the command says what is wrong with it
        return
    from jaxdiag.trace.load import prefetch

    prefetch(values["trace_dir"], run=values["run"], host=values["host"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

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


def _register(program_report: bool) -> None:
    """Add the commands to ``app`` (their modules add themselves on import).

    The ``jaxdiag report`` program adds only ``report``: typer builds each command it holds
    before parsing, and the program runs no other (help for it shows no list of commands).
    """
    if program_report:
        from jaxdiag.cli import report_cmd  # noqa: F401
    else:
        from jaxdiag.cli import commands  # noqa: F401


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

    from jaxdiag.render.terminal_text import one_line

    typer.echo(f"jaxdiag: error: {one_line(message)}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    if argv is not None or sys.argv[1:2] != ["report"]:
        return _run(argv, program_report=False)
    # Off for the whole program: the report pauses the collector anyway, and this also
    # spares the collections during the imports, the one after the report, and the worker's.
    gc.disable()
    _one_blas_thread()
    _prefetch(sys.argv[2:])
    try:
        status = _run(argv, program_report=True)
    finally:
        dropped = _drop_unclaimed_read()
    if not dropped:  # else the interpreter's exit lets the dropped read's workers stop before exit handlers run
        _end_program(status)
    return status


def _run(argv: list[str] | None, program_report: bool) -> int:
    """Run the command ``argv`` names (``None``: the program's arguments); its exit status."""
    try:
        _register(program_report)
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
    from jaxdiag.render.terminal_text import one_line  # file and host names in the message: shown, never acted on

    line = f"jaxdiag: error: {one_line(message)}\n"
    if line.isascii() and "\x1b" not in line and sys.stderr is not None:
        sys.stderr.write(line)
        sys.stderr.flush()
        return
    import typer

    typer.echo(line, nl=False, err=True)


#: Arguments of ``report`` after which the trace is not read ahead: help reads nothing, and these
#: read another run, one host, or on a cluster (the read ahead is of every host of the newest run, here).
_NOT_READ_AHEAD = ("-h", "--help", "--run", "--host", "--scheduler")


def _prefetch(args: list[str]) -> None:
    """Start reading the trace of ``jaxdiag report TRACE ...`` before typer and the report's imports load.

    The workers fork from a process that has imported little, and read while it
    imports typer, pandas and the analyses; the command takes the read over
    (``trace.load.start_load``) when it reads the same trace, run and host.
    This parses nothing: a first argument that is no option is the one typer
    takes for ``TRACE_DIR``; any other order is not read ahead. A read nobody
    takes over (typer refused the arguments, the command failed before reading)
    is stopped at exit. Not for a saved report; a problem with the trace is left
    for the command to raise.
    """
    if not args or args[0].startswith("-") or any(a.partition("=")[0] in _NOT_READ_AHEAD for a in args):
        return
    from jaxdiag.checks.inputs import is_report_file

    try:
        if is_report_file(args[0]):
            return
    except (OSError, ValueError):  # an unreadable path: the command says what is wrong with it
        return
    from jaxdiag.trace.load import prefetch

    prefetch(args[0])


def _drop_unclaimed_read() -> bool:
    """Drop a read ahead that the command did not take over, which stops its workers; whether there was one.

    Else the program's exit would wait for them to finish reading.
    """
    load = sys.modules.get("jaxdiag.trace.load")  # not imported: nothing was read ahead
    return load is not None and load.drop_prefetched()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

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
        help="Recompile and sharding diagnostics for JAX programs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
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


def _run_plain(args: list[str], program: bool) -> int | None:
    """Run ``report`` without typer when its arguments allow (``report_run.run_plain``); else ``None``.

    ``jaxdiag report`` is the command scripts time: this spares importing typer,
    click and the other commands, and typer's per-option pydantic set-up, which
    together cost more than reading a small trace. As the program itself
    (``program``), it runs without the cyclic garbage collector (``main`` turned it
    off) and ends without tearing the interpreter down (see ``_end_program``).
    """
    if args[:1] != ["report"]:
        return None
    from jaxdiag.cli.report_run import run_plain

    status = run_plain(args[1:])
    if status is None or not program:  # typer takes over, or a caller in this process goes on
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

    typer.echo(f"jaxdiag: error: {message}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    program = argv is None and args[:1] == ["report"]
    if program:
        # The report pauses the collector anyway; off from here, it also spares the
        # collections during the imports, the one after the report, and the worker's.
        gc.disable()
        _prefetch(args)
    try:
        status = _run_plain(args, program=program)
        if status is not None:
            return status
        if program:
            gc.enable()
        _register()
        _app()(args=argv, prog_name="jaxdiag", standalone_mode=True)
    except SystemExit as exc:  # typer/click exit with the command's status
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except JaxdiagError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    return 0


def _error(message: str) -> None:
    """Print ``jaxdiag: error: message`` on stderr as ``typer.echo`` does; typer is imported only for a line it might change.

    A line of plain ASCII is written as is; typer re-encodes others for a misconfigured
    stream, and strips escape sequences where stderr is no terminal.
    """
    line = f"jaxdiag: error: {message}\n"
    if line.isascii() and "\x1b" not in line and sys.stderr is not None:
        sys.stderr.write(line)
        sys.stderr.flush()
        return
    import typer

    typer.echo(line, nl=False, err=True)


def _prefetch(args: list[str]) -> None:
    """For ``jaxdiag report TRACE ...``, start reading TRACE before typer and the command load.

    Only the common form is recognised (the trace right after the command; ``--run``
    and ``--host`` given at most once): the command itself reads its arguments as
    always, and a read started for other arguments is simply not taken over.
    """
    if args[:1] != ["report"] or len(args) < 2 or args[1].startswith("-"):
        return
    if any(a == "--scheduler" or a.startswith("--scheduler=") for a in args):  # read on the cluster
        return
    chosen: dict[str, str] = {}
    for i, token in enumerate(args[2:], start=2):
        for option in ("--run", "--host"):
            if token == option and i + 1 < len(args):
                value = args[i + 1]
            elif token.startswith(option + "="):
                value = token[len(option) + 1 :]
            else:
                continue
            if option in chosen:
                return
            chosen[option] = value
    from jaxdiag.trace.load import prefetch

    prefetch(args[1], run=chosen.get("--run"), host=chosen.get("--host"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

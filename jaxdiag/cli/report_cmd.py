"""``jaxdiag report TRACE_DIR``: diagnose a capture and print or write the report.

``TRACE_DIR`` may also be a report saved with ``--json`` (or ``Report.save``): it is
rendered again, as it was from its trace, without the trace.

The command's parameters and body live in ``report_run``, which runs plain
arguments without typer (``jaxdiag.cli.app.main``); this module declares them to typer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from jaxdiag.cli import report_run
from jaxdiag.cli.app import app

_PARAMETERS = {p.name: p for p in report_run.PARAMETERS}


def _typer(name: str) -> Any:
    """``typer.Argument`` or ``typer.Option`` for ``report_run.PARAMETERS[name]``."""
    param = _PARAMETERS[name]
    if param.flags is None:
        return typer.Argument(param.default, help=param.help)
    return typer.Option(param.default, *param.flags, help=param.help)


@app.command("report")
def report_command(
    trace_dir: Path = _typer("trace_dir"),
    run: Optional[str] = _typer("run"),
    host: Optional[str] = _typer("host"),
    steps: Optional[str] = _typer("steps"),
    tokens_per_step: Optional[float] = _typer("tokens_per_step"),
    flops_per_step: Optional[float] = _typer("flops_per_step"),
    small_op_us: Optional[float] = _typer("small_op_us"),
    compile_log: Optional[Path] = _typer("compile_log"),
    json_out: bool = _typer("json_out"),
    output: Optional[Path] = _typer("output"),
    html: Optional[Path] = _typer("html"),
    width: Optional[int] = _typer("width"),
    deep: bool = _typer("deep"),
    scheduler: Optional[str] = _typer("scheduler"),
    set_: Optional[list[str]] = _typer("set_"),
    config: Optional[Path] = _typer("config"),
) -> None:
    """Break a capture down step by step, and say what to change, by time lost.

    Exit status: 0 success, 2 bad input (a missing, empty, damaged or wrong kind of
    file, or a bad option: one line naming the file and the problem).
    """
    report_run.echo(
        report_run.run(
            trace_dir,
            run=run,
            host=host,
            steps=steps,
            tokens_per_step=tokens_per_step,
            flops_per_step=flops_per_step,
            small_op_us=small_op_us,
            compile_log=compile_log,
            json_out=json_out,
            output=output,
            html=html,
            width=width,
            deep=deep,
            scheduler=scheduler,
            set_=set_,
            config=config,
        )
    )

"""``jaxdiag diff A B``: two captures (or saved reports) side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.cli.options import check_width
from jaxdiag.cli.baseline_cmd import SOURCE_HELP


@app.command("diff")
def diff_command(
    a: Path = typer.Argument(..., help=f"Before. {SOURCE_HELP}"),
    b: Path = typer.Argument(..., help="After: the same kinds of path as A."),
    json_out: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
    width: Optional[int] = typer.Option(None, help="Terminal width for the tables."),
) -> None:
    """Compare two captures: per-step figures, modules and ops that got slower or faster, new recompiles, host waits.

    Exit status: 0 success, 2 bad input (one line naming the file and the problem).
    """
    width = check_width(width)
    from jaxdiag.checks.diff import diff
    from jaxdiag.checks.inputs import open_report

    result = diff(open_report(a), open_report(b))
    if json_out:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    import sys

    from jaxdiag.checks.outputs import render_diff

    color = sys.stdout.isatty()
    typer.echo(render_diff(result, width=width, color=color), nl=False, color=color)

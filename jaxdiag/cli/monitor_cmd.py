"""``jaxdiag monitor LOGDIR``: the summary of a run watched by ``jaxdiag.monitor``; never imports jax."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.cli.options import check_width


@app.command("monitor")
def monitor_command(
    logdir: Path = typer.Argument(
        ..., metavar="LOGDIR", help="The folder given to jaxdiag.monitor (or run --monitor)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the summary as JSON (schema jaxdiag.monitor-summary/1)."
    ),
    html_out: Optional[Path] = typer.Option(
        None, "--html", help="Write one self-contained page: step time over the run, capture windows marked."
    ),
    width: Optional[int] = typer.Option(None, help="Terminal width for the tables."),
) -> None:
    """Goodput of a monitored run (steady steps against compiles, data wait, work between steps, idle), its capture windows, stragglers and hangs."""
    width = check_width(width)
    from jaxdiag.monitoring.goodput import summarize

    summary = summarize(logdir)
    if html_out is not None:
        from jaxdiag.errors import ConfigError
        from jaxdiag.render.monitor_summary import render_html

        try:
            html_out.write_text(render_html(summary), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{html_out}: cannot write the page ({exc.strerror or exc})") from None
    if json_out:
        typer.echo(json.dumps(summary, indent=1))
        return
    from jaxdiag.render.monitor_summary import render_terminal

    typer.echo(render_terminal(summary, width=width, color=sys.stdout.isatty()), nl=False)

"""``jaxdiag baseline SOURCE -o baseline.json``: save the figures a later ``jaxdiag check`` compares."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.cli.options import positive

SOURCE_HELP = "A trace (logdir, plugins/profile/<run> folder or .xplane.pb) or a saved report JSON."
TOKENS_HELP = "Tokens (or samples) per step, for tokens/s (trace folders only)."
COMPILE_LOG_HELP = "jaxdiag compile log (file or folder) to join (trace folders only)."


@app.command("baseline")
def baseline_command(
    source: Path = typer.Argument(..., help=SOURCE_HELP),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the baseline JSON."),
    tokens_per_step: Optional[float] = typer.Option(None, help=TOKENS_HELP),
    compile_log: Optional[Path] = typer.Option(None, help=COMPILE_LOG_HELP),
) -> None:
    """Save a capture's steady-state figures as the baseline for `jaxdiag check`.

    Exit status: 0 written, 2 bad input (one line naming the file and the problem).
    """
    from jaxdiag.checks.baseline import baseline_from_report
    from jaxdiag.checks.inputs import open_report

    report = open_report(
        source, tokens_per_step=positive("--tokens-per-step", tokens_per_step), compile_log=compile_log
    )
    baseline = baseline_from_report(report)
    baseline.save(output)
    from jaxdiag.checks import stats

    st = baseline.step_time_ms
    timing = (
        f"median step {st.median:.3f} ms (IQR {st.iqr:.3f})"
        if st.median is not None and st.iqr is not None
        else "no steady steps to time"
    )
    rate = stats.rate([1.0] * len(baseline.steady_period_ms), baseline.steady_period_ms)
    if rate is not None:
        timing += f", {rate.per_s:,.2f} steps/s"
    typer.echo(
        f"baseline: {baseline.steps} steps ({baseline.steady_steps} steady), {timing}, "
        f"{len(baseline.steady_recompiles)} recompile(s) after warm-up -> {output}"
    )

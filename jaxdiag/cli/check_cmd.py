"""``jaxdiag check SOURCE [--baseline FILE]``: fail CI when a capture regressed.

Exit status: 0 every check holds, 1 a check failed, 2 bad input.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from jaxdiag.cli.app import app
from jaxdiag.cli.baseline_cmd import COMPILE_LOG_HELP, SOURCE_HELP, TOKENS_HELP
from jaxdiag.cli.options import SET_HELP, check_width, positive
from jaxdiag.errors import ConfigError, JaxdiagError

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.checks.compare import CheckResult

EXIT_REGRESSION = 1
_SHARE = "a share such as '5%' or 0.05, or 'off'"


@app.command("check")
def check_command(
    source: Path = typer.Argument(..., help=SOURCE_HELP),
    baseline: Optional[Path] = typer.Option(
        None,
        "--baseline",
        "-b",
        help="Baseline from `jaxdiag baseline` (or a saved report); without it, absolute checks only.",
    ),
    markdown: bool = typer.Option(
        False, "--markdown", help="Print markdown, and append it to $GITHUB_STEP_SUMMARY when set."
    ),
    junit: Optional[Path] = typer.Option(
        None, "--junit", help="Also write JUnit XML, one test case per check, to this file."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    max_steady_recompiles: Optional[str] = typer.Option(
        None, help="Recompiles allowed after warm-up, or 'off' (default: 0)."
    ),
    max_internal_recompiles: Optional[str] = typer.Option(
        None, help="Compiles of JAX's own helpers allowed after warm-up (default: off, listed in a note)."
    ),
    step_time_regression: Optional[str] = typer.Option(
        None, help=f"Slowdown of the median steady step allowed: {_SHARE} (default: 5%)."
    ),
    mean_step_time_regression: Optional[str] = typer.Option(
        None, help=f"Slowdown of the mean steady step allowed, beyond noise: {_SHARE} (default: 5%)."
    ),
    tail_step_time_regression: Optional[str] = typer.Option(
        None, help=f"How far past the baseline's p90 a step may run before it counts as slow: {_SHARE} (default: 10%)."
    ),
    steps_per_s_drop: Optional[str] = typer.Option(
        None, help=f"Drop in steady steps/s allowed, beyond noise: {_SHARE} (default: 3%)."
    ),
    tokens_per_s_drop: Optional[str] = typer.Option(
        None, help=f"Drop in tokens/s (median step's and the run's) allowed: {_SHARE} (default: 3%)."
    ),
    host_wait_share: Optional[str] = typer.Option(
        None, help=f"Most of steady step time spent waiting on the host: {_SHARE} (default: off)."
    ),
    exposed_collective_share: Optional[str] = typer.Option(
        None, help=f"Most of steady step time in exposed collectives: {_SHARE} (default: off)."
    ),
    small_op_share: Optional[str] = typer.Option(
        None, help=f"Most of device time in small ops: {_SHARE} (default: off)."
    ),
    min_steady_steps: Optional[str] = typer.Option(
        None, help="Fewer steady steps than this skip the timing checks (default: 3)."
    ),
    config: Optional[Path] = typer.Option(
        None, help="pyproject.toml whose tool.jaxdiag.check table to read (default: the nearest one)."
    ),
    set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
    tokens_per_step: Optional[float] = typer.Option(None, help=TOKENS_HELP),
    compile_log: Optional[Path] = typer.Option(None, help=COMPILE_LOG_HELP),
    width: Optional[int] = typer.Option(None, help="Terminal width for the table."),
) -> None:
    """Check a capture against a baseline and thresholds (flags, or the tool.jaxdiag.check table of pyproject.toml).

    Exit status: 0 every check passed, 1 a check failed (a regression), 2 bad input
    (one line naming the file and the problem).
    """
    width = check_width(width)
    from jaxdiag.checks.baseline import load_baseline
    from jaxdiag.checks.compare import compare
    from jaxdiag.checks.inputs import is_report_file, open_report
    from jaxdiag.checks.thresholds import load_thresholds
    from jaxdiag.config import load_settings

    flags = {
        "max_steady_recompiles": max_steady_recompiles,
        "step_time_regression": step_time_regression,
        "tokens_per_s_drop": tokens_per_s_drop,
        "host_wait_share": host_wait_share,
        "exposed_collective_share": exposed_collective_share,
        "small_op_share": small_op_share,
        "min_steady_steps": min_steady_steps,
        "max_internal_recompiles": max_internal_recompiles,
        "mean_step_time_regression": mean_step_time_regression,
        "tail_step_time_regression": tail_step_time_regression,
        "steps_per_s_drop": steps_per_s_drop,
    }
    check_flags, analysis = _with_set(flags, set_)
    thresholds, table = load_thresholds(check_flags, pyproject=config)
    base = load_baseline(baseline) if baseline is not None else None
    settings = None
    if not is_report_file(source):  # a trace is analysed here, with the [tool.jaxdiag] and --set settings
        settings, _ = load_settings(analysis, pyproject=config)
    elif analysis:
        raise ConfigError(f"{source} is a saved report; --set {', '.join(analysis)} only apply to a trace folder")
    report = open_report(
        source,
        tokens_per_step=positive("--tokens-per-step", tokens_per_step),
        compile_log=compile_log,
        settings=settings,
    )
    result = compare(report, base, thresholds)
    if table is not None:
        result = dataclasses.replace(result, notes=(*result.notes, f"thresholds from {table} [tool.jaxdiag.check]"))
    _write_outputs(result, markdown=markdown, junit=junit, json_out=json_out, width=width)
    if not result.passed:
        raise typer.Exit(EXIT_REGRESSION)


def _with_set(
    flags: dict[str, Optional[str]], assignments: Optional[list[str]]
) -> tuple[dict[str, Optional[str]], dict[str, str]]:
    """``flags`` with ``--set check.NAME=VALUE`` folded in (a flag of its own wins), and the other settings."""
    from jaxdiag.config import parse_assignment

    out = dict(flags)
    analysis: dict[str, str] = {}
    for text in assignments or ():
        name, value = parse_assignment(text)
        short = name.removeprefix("check.")
        if name.startswith("check.") or short in _check_names():
            if out.get(short) is None:
                out[short] = value
        else:
            analysis[name] = value
    return out, analysis


def _check_names() -> set[str]:
    from jaxdiag.config import CheckThresholds

    return {f.name for f in dataclasses.fields(CheckThresholds)}


def _write_outputs(
    result: "CheckResult", *, markdown: bool, junit: Optional[Path], json_out: bool, width: Optional[int]
) -> None:
    from jaxdiag.checks import outputs

    if junit is not None:
        try:
            junit.write_text(outputs.render_junit(result))
        except OSError as exc:
            raise JaxdiagError(f"--junit {junit}: cannot write ({exc.strerror or exc})") from None
    if json_out:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2))
    elif markdown:
        text = outputs.render_markdown(result)
        outputs.write_step_summary(text)
        typer.echo(text)
    else:
        import sys

        color = sys.stdout.isatty()
        typer.echo(outputs.render_table(result, width=width, color=color), nl=False, color=color)

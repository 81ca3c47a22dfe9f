"""``jaxdiag baseline``: from a real trace folder or a saved report; clear errors."""

from __future__ import annotations

from pathlib import Path

from jaxdiag.checks.baseline import load_baseline
from jaxdiag.cli.app import main
from jaxdiag.reporting.build import report


def test_baseline_from_a_trace_and_from_its_saved_report(cpu_trace_dir, tmp_path: Path, capsys) -> None:
    out = tmp_path / "baseline.json"
    assert main(["baseline", str(cpu_trace_dir.logdir), "-o", str(out), "--tokens-per-step", "256"]) == 0
    line = capsys.readouterr().out
    b = load_baseline(out)
    assert line.startswith(f"baseline: {cpu_trace_dir.steps} steps ({cpu_trace_dir.steps - 1} steady)")
    assert f"{len(b.steady_recompiles)} recompile(s) after warm-up" in line
    assert b.steps == cpu_trace_dir.steps and b.tokens_per_s.n == b.steady_steps
    # The new batch shape recompiles train_step, and the eager ops building the batch with it.
    assert ("train_step", cpu_trace_dir.recompile_step) in [(r.function, r.step) for r in b.steady_recompiles]
    assert {r.step for r in b.steady_recompiles} == {cpu_trace_dir.recompile_step}

    saved = tmp_path / "report.json"
    report(cpu_trace_dir.logdir).save(saved)
    again = tmp_path / "again.json"
    assert main(["baseline", str(saved), "-o", str(again)]) == 0
    b2 = load_baseline(again)
    assert (b2.step_time_ms, b2.steady_recompiles) == (b.step_time_ms, b.steady_recompiles)


def test_errors(tmp_path: Path, capsys) -> None:
    assert main(["baseline", str(tmp_path / "missing"), "-o", str(tmp_path / "b.json")]) == 2
    assert capsys.readouterr().err.startswith("jaxdiag: error: ")
    bad = tmp_path / "report.json"
    bad.write_text("{truncated")
    assert main(["baseline", str(bad), "-o", str(tmp_path / "b.json")]) == 2
    assert "report.json: not JSON (Expecting property name" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()

"""``jaxdiag check``: exit codes, JUnit and markdown files, the pyproject table, one-line errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from report_builders import make_report

from jaxdiag.checks.baseline import baseline_from_report
from jaxdiag.cli.app import main
from jaxdiag.reporting.model import Report

RECOMPILE = {"function": "train_step", "step": 4, "compile_ms": 300.0, "cause": "args[1] shape axis 0: 32 -> 48"}


def saved(tmp_path: Path, name: str, walls, *, recompiles=(), wait: float = 0.5) -> Path:
    steps = [
        {
            "step": i,
            "wall_ms": w,
            "device_busy_ms": w - wait,
            "host_wait_ms": wait,
            "compile_ms": 300.0 if any(r["step"] == i for r in recompiles) else 0.0,
            "collective_ms": 0.0,
            "exposed_collective_ms": 0.0,
            "tokens": 512.0,
        }
        for i, w in enumerate(walls)
    ]
    first = [{"function": "train_step", "step": None, "compile_ms": 500.0, "cause": None}]
    path = tmp_path / f"{name}.json"
    make_report(steps=steps, recompiles=first + list(recompiles), findings=()).save(path)
    return path


@pytest.fixture()
def files(tmp_path: Path, monkeypatch) -> dict[str, Path]:
    monkeypatch.chdir(tmp_path)  # no pyproject.toml above: the defaults apply
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    base = saved(tmp_path, "base", [10.0, 10.1, 9.9, 10.0, 10.2, 9.8])
    baseline = tmp_path / "baseline.json"
    baseline_from_report(Report.open(base)).save(baseline)
    return {
        "baseline": baseline,
        "same": saved(tmp_path, "same", [10.1, 9.9, 10.0, 10.0, 10.1, 9.9]),
        "slow": saved(tmp_path, "slow", [12.0, 12.1, 11.9, 12.0, 12.2, 11.8]),
        "recompile": saved(tmp_path, "recompile", [10.0, 10.1, 9.9, 10.0, 310.0, 9.8], recompiles=[RECOMPILE]),
    }


@pytest.mark.parametrize(
    "name, code, failed",
    [
        ("same", 0, []),
        ("slow", 1, ["mean_step_time", "run_tokens_per_s", "step_time", "steps_per_s", "tokens_per_s"]),
        ("recompile", 1, ["steady_recompiles"]),
    ],
)
def test_exit_codes_and_junit(files, tmp_path: Path, capsys, name: str, code: int, failed: list[str]) -> None:
    junit = tmp_path / f"{name}.xml"
    assert (
        main(["check", str(files[name]), "--baseline", str(files["baseline"]), "--junit", str(junit), "--width", "200"])
        == code
    )
    out = capsys.readouterr().out
    cases = ET.parse(junit).getroot().iter("testcase")
    assert sorted(c.get("name") for c in cases if c.find("failure") is not None) == failed
    assert ("FAILED" in out) == bool(failed)
    if name == "recompile":
        assert "train_step at step 4 (300 ms): args[1] shape axis 0: 32 -> 48" in out


def test_without_a_baseline_absolute_checks_only(files, capsys) -> None:
    assert main(["check", str(files["slow"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [o["name"] for o in data["outcomes"]] == ["steady_recompiles"] and data["baseline"] is None
    assert main(["check", str(files["recompile"]), "--json"]) == 1


def test_flags_and_pyproject_table(files, tmp_path: Path, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.jaxdiag.check]\nstep_time_regression = "25%"\n'
        'mean_step_time_regression = "25%"\nsteps_per_s_drop = "25%"\n'
        'tail_step_time_regression = "off"\n'
        'tokens_per_s_drop = "off"\nhost_wait_share = "1%"\n'
    )
    args = ["check", str(files["slow"]), "--baseline", str(files["baseline"]), "--json"]
    assert main(args) == 1  # host waits take 4% > 1%; the 20% slowdown is within 25%
    data = json.loads(capsys.readouterr().out)
    outcomes = {o["name"]: o for o in data["outcomes"]}
    assert data["notes"] == [f"thresholds from {tmp_path / 'pyproject.toml'} [tool.jaxdiag.check]"]
    assert set(outcomes) == {"steady_recompiles", "step_time", "mean_step_time", "steps_per_s", "host_wait_share"}
    assert outcomes["step_time"]["passed"] and not outcomes["host_wait_share"]["passed"]
    assert outcomes["mean_step_time"]["passed"] and outcomes["steps_per_s"]["passed"]
    assert main([*args, "--host-wait-share", "off"]) == 0  # a flag wins over the table
    capsys.readouterr()
    other = tmp_path / "other.toml"
    other.write_text('[tool.jaxdiag.check]\nstep_time_regression = "10%"\n')
    assert main([*args, "--config", str(other)]) == 1


def test_markdown_goes_to_the_step_summary(files, tmp_path: Path, capsys, monkeypatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["check", str(files["recompile"]), "--baseline", str(files["baseline"]), "--markdown"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("### jaxdiag check") and "| `steady_recompiles` | :x: FAIL |" in out
    assert summary.read_text().strip() == out.strip()


@pytest.mark.parametrize(
    "args, message",
    [
        (["{same}", "--baseline", "{tmp}/nope.json"], "nope.json: cannot read (No such file or directory)"),
        (["{same}", "--baseline", "{bad_version}"], "baseline version 7.0 is not supported"),
        (["{same}", "--baseline", "{missing_keys}"], "baseline is missing step_time_ms"),
        (["{tmp}/no_trace_here"], "no_trace_here"),
        (["{same}", "--step-time-regression", "5"], "--step-time-regression: '5' is ambiguous"),
        (["{same}", "--tokens-per-step", "8"], "is a saved report; --tokens-per-step only apply to a trace folder"),
    ],
    ids=["missing baseline", "baseline version", "baseline keys", "missing trace", "bad flag", "option on report"],
)
def test_bad_input_is_one_line_and_exit_2(files, tmp_path: Path, capsys, args, message) -> None:
    good = json.loads(files["baseline"].read_text())
    (tmp_path / "bad_version.json").write_text(json.dumps({**good, "baseline_version": "7.0"}))
    (tmp_path / "missing_keys.json").write_text(json.dumps({k: v for k, v in good.items() if k != "step_time_ms"}))
    names = {
        "tmp": tmp_path,
        "same": files["same"],
        "bad_version": tmp_path / "bad_version.json",
        "missing_keys": tmp_path / "missing_keys.json",
    }
    assert main(["check", *(a.format(**names) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxdiag: error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_real_capture_with_a_planted_recompile(cpu_trace_dir, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(cpu_trace_dir.logdir), "--width", "200"]) == 1
    out = capsys.readouterr().out
    assert f"train_step at step {cpu_trace_dir.recompile_step}" in out and "FAILED: 1 of 1 checks" in out
    assert main(["check", str(cpu_trace_dir.logdir), "--max-steady-recompiles", "off"]) == 0


def test_analysis_settings_apply_to_a_trace_and_are_refused_for_a_saved_report(files, cpu_trace_dir, capsys) -> None:
    assert (
        main(
            [
                "check",
                str(cpu_trace_dir.logdir),
                "--set",
                "small_op_us=1000",
                "--set",
                "check.small_op_share=1%",
                "--json",
            ]
        )
        == 1
    )
    data = json.loads(capsys.readouterr().out)
    small = next(o for o in data["outcomes"] if o["name"] == "small_op_share")
    assert small["observed"] > 0.01  # with every op under 1 ms small, small ops take most of the device time
    assert main(["check", str(files["same"]), "--set", "small_op_us=5"]) == 2
    assert "is a saved report; --set small_op_us only apply to a trace folder" in capsys.readouterr().err

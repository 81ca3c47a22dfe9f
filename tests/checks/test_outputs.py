"""Check outputs: JUnit XML parsed back, markdown table, the GitHub step summary, the rich table and diff."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from report_builders import make_report

from jaxdiag.checks import outputs
from jaxdiag.checks.baseline import baseline_from_report
from jaxdiag.checks.compare import compare
from jaxdiag.checks.diff import diff
from jaxdiag.checks.thresholds import CheckThresholds
from jaxdiag.errors import JaxdiagError


def report(walls, recompiles=()):
    steps = [
        {
            "step": i,
            "wall_ms": w,
            "device_busy_ms": w,
            "host_wait_ms": 0.0,
            "compile_ms": 0.0,
            "collective_ms": 0.0,
            "exposed_collective_ms": 0.0,
            "tokens": None,
        }
        for i, w in enumerate(walls)
    ]
    return make_report(steps=steps, recompiles=list(recompiles), findings=())


@pytest.fixture(scope="module")
def result():
    """Four checks: one recompile failure (with a '|' and '<' in its cause), a slowdown, a skip, a pass."""
    base = baseline_from_report(report([10.0] * 5))
    recompiles = [
        {"function": "f", "step": 0, "compile_ms": 50.0, "cause": None},
        {"function": "f", "step": None, "compile_ms": 40.0, "cause": "static arg 'mode' <a|b>"},
    ]
    th = CheckThresholds(
        small_op_share=0.2, mean_step_time_regression=None, tail_step_time_regression=None, steps_per_s_drop=None
    )
    return compare(report([12.0] * 5, recompiles), base, th)


def test_junit_has_one_testcase_per_check(result, tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(outputs.render_junit(result))
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert (
        suite is not None and suite.get("tests") == "5" and suite.get("failures") == "2" and suite.get("skipped") == "2"
    )
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["steady_recompiles", "step_time", "tokens_per_s", "run_tokens_per_s", "small_op_share"]
    failure = cases["steady_recompiles"].find("failure")
    assert failure is not None and "static arg 'mode' <a|b>" in failure.get("message")
    assert "observed: 1" in failure.text and "limit: 0" in failure.text
    assert cases["step_time"].find("failure") is not None
    assert cases["tokens_per_s"].find("skipped") is not None
    assert cases["small_op_share"].find("failure") is None and cases["small_op_share"].find("skipped") is None


def test_markdown_table(result) -> None:
    md = outputs.render_markdown(result)
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == 5
    assert rows[0].startswith("| `steady_recompiles` | :x: FAIL | 1 | 0 | 0 |")
    assert "&lt;a\\|b&gt;" in rows[0]  # a '|' in a message cannot break the table, a '<' open no tag
    assert rows[2].startswith("| `tokens_per_s` | :warning: skip")
    assert "**FAILED: 2 of 5 checks (steady_recompiles, step_time), 2 skipped**" in md


def test_markdown_shows_hostile_names_as_text() -> None:
    """A function name in a recompile cause is markdown's to show, not to follow: no tag, link or emphasis."""
    hostile = "<img src=x onerror=alert(1)> [click](http://evil.example/) **loud** `code` \x1b[2J a|b"
    base = baseline_from_report(report([10.0] * 5))
    recompiles = [
        {"function": "f", "step": 0, "compile_ms": 50.0, "cause": None},
        {"function": "f", "step": None, "compile_ms": 40.0, "cause": hostile},
    ]
    result = compare(report([10.0] * 5, recompiles), base, CheckThresholds())
    md = outputs.render_markdown(result)
    row = next(line for line in md.splitlines() if line.startswith("| `steady_recompiles`"))
    assert "&lt;img src=x onerror=alert(1)&gt;" in row and "<img" not in md
    assert "\\[click\\](http://evil.example/)" in row and "\\*\\*loud\\*\\*" in row and "\\`code\\`" in row
    assert "\x1b" not in md and "\\x1b" in row and row.count(" | ") == 5  # the bar in the name split no cell


def test_step_summary_is_appended_when_set(result, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(outputs.ENV_STEP_SUMMARY, raising=False)
    assert outputs.write_step_summary("x") is None
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv(outputs.ENV_STEP_SUMMARY, str(summary))
    md = outputs.render_markdown(result)
    assert outputs.write_step_summary(md) == summary
    outputs.write_step_summary(md)
    text = summary.read_text()
    assert text.startswith("earlier step\n") and text.count("### jaxdiag check") == 2
    monkeypatch.setenv(outputs.ENV_STEP_SUMMARY, str(tmp_path / "no" / "such" / "file"))
    with pytest.raises(JaxdiagError, match="GITHUB_STEP_SUMMARY=.*cannot append"):
        outputs.write_step_summary(md)


def test_rich_table(result) -> None:
    text = outputs.render_table(result, width=160)
    for name in ("steady_recompiles", "step_time", "tokens_per_s", "small_op_share"):
        assert name in text
    assert "FAILED: 2 of 5 checks" in text and "\x1b[" not in text
    assert "\x1b[" in outputs.render_table(result, width=160, color=True)


def test_diff_tables() -> None:
    a = report([10.0] * 3, [{"function": "f", "step": 0, "compile_ms": 50.0, "cause": None}])
    b = report(
        [10.0, 15.0, 15.0],
        [
            {"function": "f", "step": 0, "compile_ms": 50.0, "cause": None},
            {"function": "f", "step": 2, "compile_ms": 40.0, "cause": "args[0] shape axis 0: 8 -> 9"},
        ],
    )
    text = outputs.render_diff(diff(a, b), width=160)
    assert "New recompiles in B\n  f at step 2 (40 ms): args[0] shape axis 0: 8 -> 9\n" in text
    assert "+50.0%" in text and "median steady step" in text

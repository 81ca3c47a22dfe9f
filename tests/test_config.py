"""Settings: one documented table, parsed values with units, pyproject and --set, and each reaching its analysis."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from frames_builders import compile_events, device_event, frames, host_event

from jaxdiag import config
from jaxdiag.analyses.base import AnalysisInputs, Severity
from jaxdiag.config import DEFAULT_SETTINGS, CheckThresholds, Settings, load_settings, settings_table
from jaxdiag.errors import ConfigError
from jaxdiag.reporting.build import build_report

DOCS = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def test_docs_table_is_the_settings_object() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert settings_table() in text, "docs/settings.md is stale: paste jaxdiag.config.settings_table() into it"
    documented = set(re.findall(r"^\| `([\w.]+)` \|", text, flags=re.M))
    fields = {f.name for f in dataclasses.fields(Settings) if f.name != "check"}
    fields |= {"check." + f.name for f in dataclasses.fields(CheckThresholds)}
    assert documented == fields
    for f in (*dataclasses.fields(Settings), *dataclasses.fields(CheckThresholds)):
        assert f.metadata.get("doc"), f"{f.name} has no meaning"


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("small_op_us", "5", 5.0),
        ("severity_critical_share", "20%", 0.2),
        ("replicated_param_bytes", "64MiB", 64 * 2**20),
        ("replicated_param_bytes", "1GB", 10**9),
        ("top_ops", 7, 7),
        ("check.step_time_regression", "off", None),
        ("check.tail_alpha", "5%", 0.05),
    ],
)
def test_values_are_read_with_their_units(name: str, text, expected) -> None:
    s = DEFAULT_SETTINGS.replace(**{name: text})
    got = getattr(s.check, name[6:]) if name.startswith("check.") else getattr(s, name)
    assert got == expected


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"small_op_us": "-1"}, "small_op_us: expected a non-negative number"),
        ({"small_op_us": 0}, "small_op_us: expected a positive number"),
        ({"replicated_param_bytes": "lots"}, "expected a size"),
        ({"severity_critical_share": 5}, "ambiguous"),
        ({"top_ops": 2.5}, "whole number"),
        ({"small_op_us": "off"}, "expected a number"),
        ({"nope": 1}, "unknown setting 'nope'"),
        ({"check.nope": 1}, "unknown check threshold 'nope'"),
        ({"severity_warning_share": 0.5}, "must not exceed severity_critical_share"),
    ],
)
def test_bad_values_name_the_setting(changes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DEFAULT_SETTINGS.replace(**changes)


def test_pyproject_tables_then_changes(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.jaxdiag]\nsmall_op_us = 4\nseverity_critical_share = "20%"\n\n'
        '[tool.jaxdiag.check]\nstep_time_regression = "10%"\n',
        encoding="utf-8",
    )
    deep = tmp_path / "a"
    deep.mkdir()
    s, used = load_settings({"small_op_us": "6", "check.min_steady_steps": "5"}, search_from=deep)
    assert used == tmp_path / "pyproject.toml"
    assert (s.small_op_us, s.severity_critical_share, s.check.step_time_regression, s.check.min_steady_steps) == (
        6.0,
        0.2,
        0.1,
        5,
    )
    (tmp_path / "pyproject.toml").write_text("[tool.jaxdiag]\nsmall_op = 4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"pyproject.toml \[tool.jaxdiag\]: unknown setting 'small_op'"):
        load_settings(search_from=deep)


def _slow_ops_frames():
    """Two 100 ms steps; each has 30 small 8 us ops and a 2 ms compile in step 1 (recompile of f)."""
    events = []
    for step in range(2):
        t0 = step * 100_000
        events += [device_event(t0 + 1000 + 20 * i, 8.0, f"fusion.{i}") for i in range(30)]
        events.append(device_event(t0 + 5000, 50_000.0, "dot.1"))
    events += compile_events(1000, 2000, "f") + compile_events(101_000, 9000, "f")
    events.append(host_event(0, 1, "PjitFunction(f)"))
    return frames(events, steps=[(0, 100_000), (100_000, 200_000)])


def test_settings_reach_the_analyses_through_build_report() -> None:
    fr = _slow_ops_frames()
    default = build_report(AnalysisInputs(frames=fr))
    assert default.small_ops.threshold_us == 10.0 and default.small_ops.count == 60
    tight = build_report(AnalysisInputs(frames=fr, thresholds=DEFAULT_SETTINGS.replace(small_op_us=5)))
    assert tight.small_ops.threshold_us == 5.0 and tight.small_ops.count == 0
    few = build_report(AnalysisInputs(frames=fr, thresholds=DEFAULT_SETTINGS.replace(top_ops=1)))
    assert len(few.device_time.top_ops) == 1 < len(default.device_time.top_ops)


def test_severity_cut_offs_are_settings() -> None:
    from jaxdiag.analyses.base import severity_for

    assert severity_for(5.0, 100.0, DEFAULT_SETTINGS) == Severity.WARNING
    strict = DEFAULT_SETTINGS.replace(severity_warning_share="6%", severity_critical_share="50%")
    assert severity_for(5.0, 100.0, strict) == Severity.INFO and severity_for(50.0, 100.0, strict) == Severity.CRITICAL
    assert severity_for(10.0, 100.0, DEFAULT_SETTINGS) == Severity.CRITICAL
    assert not hasattr(config, "current") and not hasattr(config, "using")  # settings travel as arguments only

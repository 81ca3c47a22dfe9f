"""Report round-trips through JSON; bad saved reports give one clear error."""

from __future__ import annotations

import json
import pytest

from jaxdiag.reporting.model import SCHEMA_VERSION, Report, ReportFormatError
from report_builders import make_report


def test_round_trip_through_json(tmp_path):
    report = make_report()
    path = tmp_path / "r.json"
    report.save(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["throughput"]["tokens_per_s"] is None  # NaN is written as null
    again = Report.open(path)
    assert again.findings == report.findings
    assert again.steps == report.steps
    assert again.recompiles == report.recompiles
    assert again.frames is None


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema_version="2.0"), "schema version 2.0 is not supported"),
        (lambda d: d.pop("schema_version"), "schema version missing"),
        (lambda d: d.pop("steps"), "missing steps"),
        (lambda d: d["findings"][0].pop("severity"), "malformed finding"),
    ],
)
def test_bad_reports_name_the_problem(tmp_path, mutate, message):
    data = json.loads(make_report().to_json())
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportFormatError, match=message) as info:
        Report.open(path)
    assert str(path) in str(info.value)


def test_not_json_and_missing_file(tmp_path):
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00\x01not json")
    with pytest.raises(ReportFormatError, match="binary data .*expected a saved report"):
        Report.open(garbage)
    with pytest.raises(ReportFormatError, match="cannot read .*expected a saved report"):
        Report.open(tmp_path / "absent.json")


def test_frames_for_notebooks():
    report = make_report()
    steps = report.steps_frame()
    assert list(steps.index) == [0]
    assert steps.loc[0, "wall_ms"] == 12.5
    findings = report.findings_frame()
    assert list(findings["kind"]) == ["recompile", "host_wait"]
    assert "2 findings" in repr(report)
    # Findings overlap (a compile's wait is also a host wait): the repr names the costliest, never a sum.
    top = max(report.findings, key=lambda f: f.time_lost_ms)
    assert f"the costliest {top.kind} ({top.time_lost_ms:.1f} ms lost)" in repr(report)
    assert f"{sum(f.time_lost_ms for f in report.findings):.1f} ms" not in repr(report)
    assert "<table" in report._repr_html_()

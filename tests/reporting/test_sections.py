"""The section registry: the schema document agrees with it, and one line adds a section end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import types
from pathlib import Path
from typing import Any

import pytest

import jaxdiag
from jaxdiag.analyses import ANALYSES
from jaxdiag.render import figures, registry, terminal
from jaxdiag.reporting import codec, sections
from jaxdiag.reporting.model import REPORT_FIELDS, SCHEMA_VERSION, Report, ReportFormatError
from jaxdiag.reporting.sections import SECTIONS, Section, resolve
from report_builders import make_report

SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"


def doc_rows() -> dict[str, tuple[str, str]]:
    """``key -> (type, meaning)`` from the schema document's table, in its order."""
    rows = {}
    for line in SCHEMA_DOC.read_text().splitlines():
        m = re.match(r"\|\s*`([a-z_]+)`\s*\|([^|]*)\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    return rows


def test_schema_document_lists_every_key_of_the_report_in_order():
    assert list(doc_rows()) == list(make_report().to_dict())


def test_schema_document_types_and_versions_match_the_registry():
    rows = doc_rows()
    for section in SECTIONS:
        kind = {list: "array", dict: "object"}[type(section.empty())]
        assert rows[section.name][0] == kind, section.name
    text = SCHEMA_DOC.read_text()
    assert f"schema {SCHEMA_VERSION}" in text.splitlines()[0]
    history = rows["schema_version"][1]
    assert history.startswith(f'`"{SCHEMA_VERSION}"`')
    for section in SECTIONS:
        if section.since != "1.0":
            assert re.search(rf"{re.escape(section.since)} added [^;)]*`{section.name}`", history), section.name
    version = lambda v: tuple(map(int, v.split(".")))  # noqa: E731
    fields = _fields_since([s for s in SECTIONS if s.type is not None])
    for key, since in fields:
        assert re.search(rf"{re.escape(since)} added [^;)]*`{re.escape(key)}`", history), key
    newest = [version(s.since) for s in SECTIONS] + [version(since) for _, since in fields]
    assert max(newest) == version(SCHEMA_VERSION)


def _fields_since(sections):
    """``(key, since)`` for every field of a typed section, or of the rows and objects it holds, that names
    the schema version adding it (``between_steps.rows[].compile_ms``)."""
    import dataclasses
    import typing

    def walk(t, key):
        if typing.get_origin(t) is tuple:  # an array: its rows' type
            t, key = typing.get_args(t)[0], f"{key}[]"
        if typing.get_origin(t) in (typing.Union, types.UnionType):  # ``X | None``
            t = next(a for a in typing.get_args(t) if a is not type(None))
        if not dataclasses.is_dataclass(t):
            return []
        hints = typing.get_type_hints(t)
        out = []
        for f in dataclasses.fields(t):
            if "since" in f.metadata:
                out.append((f"{key}.{f.name}", f.metadata["since"]))
            out += walk(hints[f.name], f"{key}.{f.name}")
        return out

    return [pair for section in sections for pair in walk(section.type, section.name)]


def test_every_analysis_fills_a_section_and_every_reference_resolves():
    assert sorted(s.analysis for s in SECTIONS if s.analysis) == sorted(
        {name: ANALYSES[name].__module__.rsplit(".", 1)[1] for name in ANALYSES}.values()
    )
    assert len({s.name for s in SECTIONS}) == len(SECTIONS)
    assert set(REPORT_FIELDS) <= {s.name for s in SECTIONS}  # a field without a line would not be saved
    for s in SECTIONS:
        assert (s.analysis is None) != (s.view is None), s.name
        if s.view is not None:
            assert callable(resolve(s.view)), s.view


def test_every_section_view_names_a_section_and_resolves():
    assert set(registry.VIEWS) <= {s.name for s in SECTIONS}
    for v in registry.VIEWS.values():
        for ref in (v.terminal, v.html):
            if ref is not None:
                assert callable(resolve(ref)), ref
        for name in v.figures:
            assert callable(getattr(figures, name)), name


def test_sections_without_a_field_read_as_attributes():
    report = make_report(sections={"op_durations": {"counts": [1]}})
    assert report.op_durations == {"counts": [1]} == report.section("op_durations")
    assert report.timeline == {} and report.section("steps") is report.steps
    with pytest.raises(AttributeError):
        report.no_such_section  # noqa: B018
    with pytest.raises(KeyError):
        report.section("no_such_section")


def test_a_newer_minor_version_keeps_sections_it_does_not_know():
    data = make_report().to_dict()
    data.update(schema_version="1.9", from_the_future={"x": [1, 2]})
    again = Report.from_dict(data)
    assert again.to_dict()["from_the_future"] == {"x": [1, 2]}
    assert again.schema_version == "1.9"


def count_ops(inputs: Any, built: dict[str, Any]) -> dict[str, Any]:
    """A view for the test below: events in the trace, and steps the sections before it found."""
    return {"events": len(inputs.frames.events), "steps": len(built["steps"])}


def print_count(report: Report, console: Any) -> None:
    console.print(f"counted {report.op_count['events']} events")


def test_a_line_each_adds_a_section_that_is_built_saved_read_and_rendered(cpu_trace_dir, tmp_path, monkeypatch):
    line = Section("op_count", "1.3", dict, view=f"{__name__}:count_ops")
    again = Section("small_ops_again", "1.3", dict, analysis="small_ops", kind="small_op_section:SmallOps")
    monkeypatch.setattr(sections, "SECTIONS", (*SECTIONS, line, again))
    monkeypatch.setattr(registry, "SECTIONS", sections.SECTIONS)
    monkeypatch.setitem(registry.VIEWS, "op_count", registry.SectionViews(terminal=f"{__name__}:print_count"))
    report = jaxdiag.report(cpu_trace_dir.logdir)
    assert report.op_count == {"events": len(report.frames.events), "steps": len(report.steps)}
    assert report.small_ops_again == report.small_ops
    assert list(report.to_dict())[-4:] == ["op_count", "small_ops_again", "findings", "notes"]
    path = tmp_path / "r.json"
    report.save(path)
    saved = Report.open(path)
    assert saved.op_count == report.op_count and saved == report
    assert f"counted {len(report.frames.events)} events" in terminal.render(saved)
    assert dataclasses.replace(saved).op_count == report.op_count


def test_a_report_of_the_previous_schema_opens(tmp_path):
    """A 1.2 report, as jaxdiag wrote it before reports kept events, opens and renders."""
    path = Path(__file__).parent / "data" / "report-1.2.json"
    report = Report.open(path)
    assert report.schema_version == "1.2"
    assert report.timeline == {} and report.op_durations == {}
    assert report.steps and report.findings and report.device_time.by_module
    text = terminal.render(report)
    assert "Findings (by time lost)" in text
    timeline = figures.step_timeline(report)
    assert any("before reports kept timeline" in a.text for a in timeline.layout.annotations)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(steps=5), "section steps is a number, not an array"),
        (lambda d: d.update(steps=[1, 2]), "section steps holds something other than objects"),
        (lambda d: d.update(host_waits=[{}]), "section host_waits is an array, not an object"),
        (lambda d: d["timeline"]["windows"][0].update(row=[0, 99]), "section timeline is malformed: window 0"),
        (lambda d: d["timeline"]["windows"][0].update(name=["x"]), "section timeline is malformed: window 0"),
        (lambda d: d["timeline"].update(windows="x"), "section timeline is malformed: windows must be an array"),
        (lambda d: d["op_durations"].update(counts=[1, 2]), "section op_durations is malformed: 4 edges for 2 bins"),
    ],
)
def test_a_tampered_section_is_one_error_at_open(tmp_path, mutate, message, capsys):
    data = make_report(
        sections={
            "timeline": {
                "max_rects": 3000,
                "windows": [
                    {
                        "step": 0,
                        "host": "h",
                        "duration_ns": 10,
                        "events": 1,
                        "resolution_ns": None,
                        "rows": [{"label": "python3", "plane": ""}],
                        "names": ["train"],
                        "row": [0],
                        "start_ns": [0],
                        "dur_ns": [10],
                        "name": [0],
                        "kind": [0],
                        "count": None,
                        "busy_ns": None,
                    }
                ],
            },
            "op_durations": {
                "threshold_us": 10.0,
                "bins_per_decade": 8,
                "edges_us": [1.0, 2.0, 3.0, 4.0],
                "counts": [1, 2, 3],
            },
        }
    ).to_dict()
    Report.from_dict(json.loads(json.dumps(data)))  # as built, it opens
    mutate(data)
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportFormatError, match=message):
        Report.open(path)
    from jaxdiag.cli.app import main

    assert main(["report", str(path), "--html", str(tmp_path / "out.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and not (tmp_path / "out.html").exists()


@pytest.mark.parametrize("version, dropped", [("1.0", ("device_time", "sharding")), ("1.1", ("sharding",))])
def test_reports_of_older_minor_versions_open_with_their_later_sections_empty(tmp_path, version, dropped):
    data = json.loads((Path(__file__).parent / "data" / "report-1.2.json").read_text())
    data["schema_version"] = version
    for key in dropped:
        del data[key]
    path = tmp_path / f"report-{version}.json"
    path.write_text(json.dumps(data))
    report = Report.open(path)
    empty = ({}, {"by_module": [], "top_ops": []}, {"functions": [], "timeline": [], "captured": False})
    assert all(codec.to_json(report.section(key)) in empty for key in dropped)
    assert "Findings (by time lost)" in terminal.render(report)
    assert list(figures.all_figures(report)) == registry.figure_names()

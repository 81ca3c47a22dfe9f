"""Typed report sections: their JSON, their reading back and their schema rows, all made from the type."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from pathlib import Path

import pytest

import jaxdiag

from jaxdiag.analyses.host_wait_section import CauseWait, HostWaits, StepCause, StepWaits
from jaxdiag.analyses.recompile_section import RecompileRow
from jaxdiag.reporting import codec
from jaxdiag.reporting.model import Report, ReportFormatError
from jaxdiag.reporting.sections import SECTIONS
from report_builders import make_report

DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"
TYPED = [s for s in SECTIONS if s.kind is not None]


def test_some_sections_are_typed_and_each_type_is_a_frozen_dataclass():
    assert [s.name for s in TYPED] and "host_waits" in [s.name for s in TYPED]
    for s in TYPED:
        kind = s.type if s.empty is dict else typing.get_args(s.type)[0]  # an array section: its rows' type
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, s.name


@pytest.mark.parametrize("section", TYPED, ids=lambda s: s.name)
def test_the_schema_row_of_a_typed_section_is_written_from_its_type(section):
    rows = [line for line in DOC.read_text().splitlines() if line.startswith(f"| `{section.name}` |")]
    assert rows == [codec.schema_row(section.name, section.type)]


def test_a_built_report_holds_typed_sections_and_reads_back_equal(cpu_trace_dir, tmp_path):
    cpu_report = jaxdiag.report(cpu_trace_dir.logdir)
    assert isinstance(cpu_report.host_waits, HostWaits) and cpu_report.host_waits.by_cause
    path = tmp_path / "r.json"
    cpu_report.save(path)
    again = Report.open(path)
    assert isinstance(again.host_waits, HostWaits) and again.host_waits == cpu_report.host_waits
    assert json.loads(path.read_text())["host_waits"] == codec.to_json(cpu_report.host_waits)


def test_json_keys_are_the_fields_in_order():
    hw = HostWaits(total_ms=1.5, by_step=(StepWaits(3, 1.5, (StepCause("load", 1.5),)),))
    assert list(codec.to_json(hw)) == ["in_execution", "total_ms", "by_cause", "by_step"]
    assert codec.to_json(hw)["by_step"] == [{"step": 3, "total_ms": 1.5, "by_cause": [{"cause": "load", "ms": 1.5}]}]
    assert codec.from_json(HostWaits, codec.to_json(hw), "host_waits") == hw


def test_an_older_report_reads_the_fields_it_lacks_as_their_defaults():
    report = make_report(host_waits={"total_ms": 2, "by_cause": [{"cause": "load_batch", "ms": 2}]})
    assert report.host_waits.by_cause == (CauseWait("load_batch", "", 2.0),)
    assert report.host_waits.in_execution.total_ms == 0.0 and report.host_waits.total_ms == 2.0


def test_a_key_a_newer_minor_version_added_is_dropped():
    report = make_report(host_waits={"total_ms": 1.0, "from_the_future": [1]})
    assert "from_the_future" not in report.to_dict()["host_waits"]


@pytest.mark.parametrize(
    "host_waits, where",
    [
        ({"by_cause": [{"cause": "x", "kind": 1.5}]}, "host_waits.by_cause[0].kind: a number, not a string"),
        ({"by_cause": [{"cause": 3, "ms": 1}]}, "host_waits.by_cause[0].cause: a number, not a string"),
        ({"by_step": [{"total_ms": 1}]}, "host_waits.by_step[0]: no step"),
        ({"by_step": [{"step": 1.5, "total_ms": 1}]}, "host_waits.by_step[0].step: a number, not a whole number"),
        ({"by_step": [{"step": True, "total_ms": 1}]}, "host_waits.by_step[0].step: a boolean, not a whole number"),
        ({"in_execution": []}, "host_waits.in_execution: an array, not an object"),
        ({"by_cause": {"a": 1}}, "host_waits.by_cause: an object, not an array"),
    ],
)
def test_a_value_that_does_not_fit_its_type_is_named(host_waits, where, tmp_path):
    data = make_report().to_dict()
    data["host_waits"] = host_waits
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportFormatError) as caught:
        Report.open(path)
    assert str(caught.value) == f"{path}: not a jaxdiag report: {where}"


def test_null_where_the_type_allows_none_or_a_float_nan():
    @dataclasses.dataclass(frozen=True)
    class Row:
        ms: float | None = None

    assert codec.from_json(Row, {"ms": None}, "r") == Row(None)
    assert math.isnan(codec.from_json(CauseWait, {"cause": "c", "ms": None}, "r").ms)  # NaN, written as null
    with pytest.raises(codec.Mismatch, match=r"r\.cause: null, not a string"):
        codec.from_json(CauseWait, {"cause": None}, "r")


def test_an_array_section_is_a_tuple_of_rows_and_keys_only_with_their_flag_are_left_out_without_it():
    unlogged = RecompileRow("f", 3, 2.0, 2.0, True, None)
    logged = RecompileRow("g", None, 1.0, 0.0, False, "first compile", True, "jit", None)
    rows = codec.to_json((unlogged, logged))
    assert rows[0] == {
        "function": "f",
        "step": 3,
        "compile_ms": 2.0,
        "device_wait_ms": 2.0,
        "recompile": True,
        "cause": None,
    }
    assert rows[1]["logged"] is True and rows[1]["origin"] == "jit" and rows[1]["call_site"] is None
    report = make_report(recompiles=rows)
    assert report.recompiles == (unlogged, logged) and report.to_dict()["recompiles"] == rows
    older = make_report(recompiles=[{"function": "f", "step": 3, "compile_ms": 2}])  # before 1.1: no `recompile`
    assert older.recompiles[0].recompile is None and older.recompiles[0].compile_ms == 2

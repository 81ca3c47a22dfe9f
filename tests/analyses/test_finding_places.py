"""Each finding says where it happened; small-op findings name their top-op rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxdiag.analyses.top_op_section import OpRow


@pytest.fixture(scope="module")
def cpu_report(cpu_trace_dir):
    from jaxdiag.reporting.build import report

    return report(cpu_trace_dir.run_dir)


def test_every_finding_has_a_place(cpu_report, cpu_trace_dir):
    placed = [f for f in cpu_report.findings if f.kind != "loader"]
    assert placed
    for f in placed:
        where = f.evidence["where"]
        assert where["run"] == Path(cpu_trace_dir.run_dir).name and where["host"] in cpu_report.source["hosts"]
        if where["step"] is not None:
            step = next(s for s in cpu_report.frames.steps.itertuples() if s.step == where["step"])
            assert where["start_ms"] == pytest.approx(step.start_ns / 1e6, abs=1e-3)
            assert where["end_ms"] == pytest.approx(step.end_ns / 1e6, abs=1e-3)


def test_recompile_is_placed_at_its_step(cpu_report, cpu_trace_dir):
    recompile = next(f for f in cpu_report.findings if f.kind == "recompile")
    assert recompile.evidence["where"]["step"] == cpu_trace_dir.recompile_step


def test_small_ops_link_to_top_op_rows(cpu_report, cpu_trace_dir):
    small = next(f for f in cpu_report.findings if f.kind == "small_ops")
    rows = {r.id: r for r in cpu_report.top_ops.rows}
    linked = small.evidence["top_op_rows"]
    assert linked and all(rows[i].module == cpu_trace_dir.soup_module for i in linked)
    where = small.evidence["where"]
    assert where["device"] is not None and where["step"] is not None


def test_collective_findings_link_collective_rows():
    from jaxdiag.analyses.finding_places import _linked_rows

    rows = [
        OpRow(f"op{i}", name, "m", "f", kind, 1, 1.0, 1.0, 0.5)
        for i, (name, kind) in enumerate(
            [("fusion.1", "compute"), ("all-reduce.3", "collective"), ("all-gather.1", "collective")], 1
        )
    ]
    assert _linked_rows("exposed_collective", {}, rows) == ["op2", "op3"]
    assert _linked_rows("implicit_resharding", {"op": "all-gather.1"}, rows) == ["op3"]
    assert _linked_rows("implicit_resharding", {"op": "fusion.1"}, rows) == []
    assert _linked_rows("recompile", {}, rows) == []

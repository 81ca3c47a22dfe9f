"""``report()``: a problem with the trace is reported before a problem with what lies beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxdiag.config import DEFAULT_SETTINGS
from jaxdiag.errors import CompileLogError, TraceFormatError
from jaxdiag.reporting.build import report


def test_a_bad_trace_is_reported_before_a_bad_compile_log(tmp_path: Path) -> None:
    (tmp_path / "h.xplane.pb").write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty file"):
        report(tmp_path, compile_log=tmp_path / "missing.jsonl")


def test_a_bad_compile_log_is_reported_once_the_trace_reads(cpu_trace_dir, tmp_path: Path) -> None:
    with pytest.raises(CompileLogError, match="missing.jsonl"):
        report(cpu_trace_dir.logdir, compile_log=tmp_path / "missing.jsonl")


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_left_as_it_was(enabled: bool, cpu_trace_dir) -> None:
    import gc

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        report(cpu_trace_dir.logdir)
        assert gc.isenabled() is enabled
        with pytest.raises(TraceFormatError):
            report(cpu_trace_dir.logdir / "nowhere")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_severity_is_one_rule_and_findings_are_ordered_by_time_lost(cpu_trace_dir) -> None:
    """A recompile, a loader stall and small ops are graded against the same step time (the steps' wall
    time outside compiles), so a finding that lost more time is never below, nor less severe than, one
    that lost less; a stall that costs a tenth of the steady steps is critical even beside recompiles."""
    from jaxdiag.analyses.base import Severity, severity_for

    from jaxdiag.analyses.base import steady_wall_ms

    built = report(cpu_trace_dir.logdir)
    assert sum(s.compile_ms for s in built.steps) > 0  # the capture recompiles
    # The steps' wall time outside compile waits (what a compile cost the device, not the host's compile time).
    step_time_ms = steady_wall_ms(built.steps, built.throughput.device_steady_rate())
    assert step_time_ms < sum(s.wall_ms for s in built.steps)
    timed = [f for f in built.findings if f.time_lost_ms > 0]
    assert len({f.kind for f in timed}) >= 3  # recompile, host_wait, small_ops at least
    for f in timed:
        assert f.severity == severity_for(f.time_lost_ms, step_time_ms, DEFAULT_SETTINGS), f.message
    lost = [f.time_lost_ms for f in timed]
    assert lost == sorted(lost, reverse=True)
    rank = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
    ranks = [rank[f.severity] for f in built.findings]
    assert ranks == sorted(ranks)  # no critical below a warning

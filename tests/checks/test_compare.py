"""compare: planted recompiles and slowdowns fail, noise does not; on hand-built and real CPU reports."""

from __future__ import annotations

import pytest
from report_builders import make_report

from jaxdiag.checks.baseline import baseline_from_report
from jaxdiag.checks.compare import compare
from jaxdiag.checks.inputs import open_report
from jaxdiag.checks.thresholds import CheckThresholds

#: Thresholds for real CPU captures: steps of about 1 ms on a shared 2-core machine scatter by
#: tens of percent between captures, while the planted sleep makes steps 10 to 60 times longer.
RELAXED = CheckThresholds(step_time_regression=1.0, tokens_per_s_drop=0.5)
LENIENT = CheckThresholds(step_time_regression=9.0, tokens_per_s_drop=0.9)


def steps(walls, *, compile_at=(), tokens=1000.0, wait=0.0) -> list[dict]:
    return [{"step": i, "wall_ms": w, "device_busy_ms": w / 2, "host_wait_ms": wait, "compile_ms": 500.0 if i in compile_at else 0.0,
             "collective_ms": 0.0, "exposed_collective_ms": 0.0, "tokens": tokens} for i, w in enumerate(walls)]


def report(walls, *, recompiles=(), **kw):
    return make_report(steps=steps(walls, **kw), recompiles=list(recompiles), findings=())


def outcome(result, name):
    return next(o for o in result.outcomes if o.name == name)


BASE = baseline_from_report(report([10.0, 10.2, 9.8, 10.1, 9.9, 10.0]))


def test_same_figures_pass_every_check() -> None:
    result = compare(report([10.1, 9.9, 10.0, 10.2, 9.8, 10.0]), BASE)
    assert result.passed and [o.name for o in result.outcomes] == ["steady_recompiles", "step_time", "tokens_per_s"]
    assert all(o.status == "pass" for o in result.outcomes)


def test_planted_slowdown_fails_step_time_and_tokens() -> None:
    result = compare(report([11.0, 11.2, 10.9, 11.1, 11.0, 11.0]), BASE)
    assert not result.passed
    st = outcome(result, "step_time")
    assert not st.passed and st.observed == 11.0 and st.expected == 10.0 and st.limit == pytest.approx(10.5)
    assert "+10.0%" in st.message and "IQR" in st.message and "n=6" in st.message
    assert not outcome(result, "tokens_per_s").passed


def test_one_noisy_step_never_fails() -> None:
    result = compare(report([10.0, 10.1, 250.0, 9.9, 10.0, 10.1]), BASE)
    assert result.passed, [o.message for o in result.failures]


def test_a_noisy_baseline_is_noted_not_allowed_for() -> None:
    noisy = baseline_from_report(report([10.0, 12.0, 8.0, 11.0, 9.0, 10.0]))  # MAD 1 ms: +-15%
    result = compare(report([11.0] * 6), noisy)
    assert not outcome(result, "step_time").passed and outcome(result, "step_time").limit == pytest.approx(10.5)
    assert any("baseline's steady steps scatter by ±15%" in n and "may flake" in n for n in result.notes)
    assert not compare(report([11.0] * 6), noisy, CheckThresholds(step_time_regression=0.2)).notes


def test_planted_recompile_fails_with_its_cause() -> None:
    recompiles = [{"function": "train_step", "step": 0, "compile_ms": 500.0, "cause": None},
                  {"function": "train_step", "step": 3, "compile_ms": 480.0, "cause": "args[1] shape axis 0: 32 -> 48"}]
    result = compare(report([510.0, 10.0, 10.0, 490.0, 10.0, 10.0], compile_at=(0, 3), recompiles=recompiles), BASE)
    rc = outcome(result, "steady_recompiles")
    assert not rc.passed and (rc.observed, rc.limit, rc.expected) == (1, 0, 0)
    assert "train_step at step 3 (480 ms): args[1] shape axis 0: 32 -> 48" in rc.message
    # The two compile steps are left out of the timing: the rest is as fast as the baseline.
    assert outcome(result, "step_time").passed
    assert compare(report([10.0] * 6, recompiles=recompiles), BASE, CheckThresholds(max_steady_recompiles=1)).passed


def test_without_a_baseline_only_absolute_checks_run() -> None:
    result = compare(report([10.0] * 6, wait=2.0), None, CheckThresholds(host_wait_share=0.1))
    assert [o.name for o in result.outcomes] == ["steady_recompiles", "host_wait_share"]
    hw = outcome(result, "host_wait_share")
    assert not hw.passed and hw.observed == pytest.approx(0.2) and hw.expected is None


def test_too_few_steady_steps_skip_timing() -> None:
    result = compare(report([500.0, 10.0, 500.0, 11.0], compile_at=(0, 2)), BASE)
    st = outcome(result, "step_time")
    assert st.skipped and st.passed and "this capture has 2 steady step(s), at least 3" in st.message
    assert result.passed and st.status == "skip"


def test_tokens_check_skips_without_token_counts() -> None:
    tk = outcome(compare(report([10.0] * 6, tokens=None), BASE), "tokens_per_s")
    assert tk.skipped and "no token counts" in tk.message


def test_checks_can_be_turned_off_and_hardware_changes_are_noted() -> None:
    off = CheckThresholds(max_steady_recompiles=None, step_time_regression=None, tokens_per_s_drop=None)
    assert compare(report([10.0] * 6), BASE, off).outcomes == ()
    other = make_report(steps=steps([10.0] * 6), recompiles=[], findings=(),
                        source={**make_report().source, "devices": [{"device_name": "NVIDIA H100"}]})
    base = baseline_from_report(make_report(steps=steps([10.0] * 6), recompiles=[], findings=(),
                                            source={**make_report().source, "devices": [{"device_name": "NVIDIA A100"}]}))
    assert any("NVIDIA A100" in n and "NVIDIA H100" in n for n in compare(other, base).notes)


# --- real CPU captures -------------------------------------------------------------------------


def test_a_capture_passes_against_its_own_saved_report(clean_capture) -> None:
    # The saved JSON and a fresh report of the trace must give the same figures.
    base = baseline_from_report(open_report(clean_capture.report_json))
    result = compare(open_report(clean_capture.logdir, tokens_per_step=clean_capture.tokens_per_step), base)
    assert result.passed, [o.message for o in result.outcomes]
    assert [o.observed for o in result.outcomes[1:]] == [o.expected for o in result.outcomes[1:]]


def test_clean_capture_passes_against_another_clean_one(clean_capture, clean_again_capture) -> None:
    base = baseline_from_report(open_report(clean_capture.report_json))
    result = compare(open_report(clean_again_capture.report_json), base, LENIENT)
    assert result.passed, [o.message for o in result.failures]
    assert outcome(result, "step_time").observed is not None


def test_real_slowdown_fails(clean_capture, slow_capture) -> None:
    base = baseline_from_report(open_report(clean_capture.report_json))
    result = compare(open_report(slow_capture.report_json), base, RELAXED)
    st = outcome(result, "step_time")
    assert not st.passed and st.observed > slow_capture.sleep_s * 1000 > st.limit
    assert not outcome(result, "tokens_per_s").passed
    assert outcome(result, "steady_recompiles").passed
    # The planted sleep is a host wait too: the absolute ceiling catches it without a baseline.
    assert not compare(open_report(slow_capture.report_json), None, CheckThresholds(host_wait_share=0.5)).passed


def test_real_recompile_fails_with_the_logged_cause(clean_capture, recompile_capture) -> None:
    base = baseline_from_report(open_report(clean_capture.report_json))
    result = compare(open_report(recompile_capture.report_json), base, RELAXED)
    rc = outcome(result, "steady_recompiles")
    assert not rc.passed and rc.observed == 1
    assert f"train_step at step {recompile_capture.recompile_step}" in rc.message and "x shape axis 0" in rc.message
    assert "32 -> 64" in rc.message

"""Baselines: steady-state figures from hand-built reports, save/load, and bad files with clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_builders import make_report

from jaxdiag.analyses.base import Finding, Severity
from jaxdiag.analyses.device_time_section import DeviceTimeSection
from jaxdiag.checks.baseline import (
    Baseline,
    Spread,
    baseline_from_report,
    load_baseline,
    module_table,
    steady_recompiles,
    steady_steps,
)
from jaxdiag.errors import BaselineError
from jaxdiag.reporting import codec


def step(
    i: int,
    wall: float,
    *,
    compile_ms: float = 0.0,
    wait: float = 0.0,
    exposed: float = 0.0,
    busy: float | None = None,
    tokens: float | None = 1000.0,
) -> dict:
    return {
        "step": i,
        "wall_ms": wall,
        "device_busy_ms": wall * 0.8 if busy is None else busy,
        "host_wait_ms": wait,
        "compile_ms": compile_ms,
        "collective_ms": exposed,
        "exposed_collective_ms": exposed,
        "tokens": tokens,
    }


def compile_(fn: str, step_no: int | None, ms: float = 100.0, cause: str | None = None) -> dict:
    return {"function": fn, "step": step_no, "compile_ms": ms, "cause": cause}


def test_spread() -> None:
    assert Spread.of([]) == Spread(None, None, None, 0)
    assert Spread.of([4.0]) == Spread(4.0, 0.0, 0.0, 1)
    s = Spread.of([1, 2, 3, 4, 100])
    assert (s.median, s.iqr, s.mad, s.n) == (3.0, 2.0, 1.0, 5)


def test_figures_come_from_steady_steps_only() -> None:
    steps = [
        step(0, 900.0, compile_ms=850.0),
        step(1, 10.0, wait=1.0),
        step(2, 11.0, wait=1.0),
        step(3, 12.0, wait=6.0),
        step(4, 500.0),
        step(5, 10.5, wait=1.0),
    ]
    report = make_report(
        steps=steps, recompiles=[compile_("train_step", 0), compile_("train_step", 4, cause="x")], findings=()
    )
    b = baseline_from_report(report)
    # Step 0 compiled (compile_ms); step 4 has a compile on the timeline though its row shows none.
    assert [s.step for s in steady_steps(report)] == [1, 2, 3, 5]
    assert (b.steps, b.steady_steps, b.compiles) == (6, 4, 2)
    assert b.step_time_ms == Spread(10.75, 0.875, 0.5, 4)  # quartiles 10.375 and 11.25
    # tokens/s is the median of per-step rates, here of steps 2 and 5 (10.5 and 11 ms).
    assert b.tokens_per_s.median == pytest.approx((1e6 / 10.5 + 1e6 / 11) / 2, rel=1e-6)
    # The step with the largest share (step 3, 6 of 12 ms) is left out: one step never decides.
    assert b.host_wait_share == pytest.approx(3.0 / 31.5)
    assert b.steady_recompiles[0].function == "train_step" and b.steady_recompiles[0].step == 4


@pytest.mark.parametrize(
    "recompiles, findings, expected",
    [
        # The same function compiling again in the capture is a recompile.
        ([compile_("f", 0), compile_("g", 0), compile_("f", 3)], (), [("f", 3)]),
        # The analysis knew `f` ran before the capture: its first compile here is a recompile.
        (
            [compile_("f", 2)],
            (Finding("recompile", Severity.WARNING, 100.0, "f recompiled", "", {"function": "f", "step": 2}),),
            [("f", 2)],
        ),
        # An explicit flag on the entry wins.
        ([{**compile_("f", 0), "recompile": False}, {**compile_("f", 1), "recompile": False}], (), []),
        # Warm-up compiles of several functions are not recompiles.
        ([compile_("f", 0), compile_("g", None)], (), []),
    ],
    ids=["repeat", "finding", "flag", "warm-up"],
)
def test_steady_recompiles(recompiles, findings, expected) -> None:
    report = make_report(recompiles=recompiles, findings=findings)
    assert [(r.function, r.step) for r in steady_recompiles(report)] == expected


def test_small_ops_per_steady_step() -> None:
    steps = [
        step(0, 10.0, busy=8.0),
        step(1, 10.0, busy=8.0, compile_ms=5.0),
        step(2, 10.0, busy=8.0),
        step(3, 10.0, busy=8.0),
    ]
    small = {
        "threshold_us": 10.0,
        "count": 130,
        "device_time_share": 0.5,
        "per_step": [
            {"step": 0, "count": 10, "time_ms": 2.0},
            {"step": 1, "count": 100, "time_ms": 4.0},
            {"step": 2, "count": 10, "time_ms": 2.0},
            {"step": 3, "count": 12, "time_ms": 4.0},
        ],
    }
    b = baseline_from_report(make_report(steps=steps, small_ops=small, recompiles=[], findings=()))
    assert b.small_op_count == 10.0
    assert b.small_op_share == pytest.approx(4.0 / 16.0)  # step 3 (the largest share) left out
    without_per_step = {k: v for k, v in small.items() if k != "per_step"}
    b = baseline_from_report(make_report(steps=steps, small_ops=without_per_step, recompiles=[], findings=()))
    assert (b.small_op_count, b.small_op_share) == (130 / 4, 0.5)


def test_module_table_uses_steady_steps_or_the_total() -> None:
    section = {
        "by_module": [
            {
                "module": "jit_step",
                "total_ms": 40.0,
                "per_step": [
                    {"step": 0, "ms": 25.0},
                    {"step": 1, "ms": 5.0},
                    {"step": 2, "ms": 6.0},
                    {"step": 3, "ms": 4.0},
                ],
            },
            {"module": "jit_eval", "total_ms": 8.0},
        ]
    }
    typed = codec.from_json(DeviceTimeSection, section, "device_time")
    assert module_table(typed, steady=[1, 2, 3], n_steps=4) == {"jit_step": 5.0, "jit_eval": 2.0}
    assert module_table(DeviceTimeSection(), steady=[1], n_steps=4) == {}


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    report = make_report(steps=[step(i, 10.0 + i) for i in range(5)], findings=())
    b = baseline_from_report(report)
    b.save(tmp_path / "b.json")
    assert load_baseline(tmp_path / "b.json") == b
    saved = json.loads((tmp_path / "b.json").read_text())
    assert saved["baseline_version"] == "1.1" and saved["steady_wall_ms"] == [10.0, 11.0, 12.0, 14.0]  # step 3 compiled


def test_a_baseline_of_format_1_0_still_reads(tmp_path: Path) -> None:
    d = baseline_from_report(make_report(steps=[step(i, 10.0) for i in range(3)], findings=())).to_dict()
    for key in ("steady_wall_ms", "steady_period_ms", "steady_tokens", "internal_recompiles", "throughput_unit"):
        del d[key]
    (tmp_path / "old.json").write_text(json.dumps({**d, "baseline_version": "1.0"}))
    old = load_baseline(tmp_path / "old.json")
    assert old.version == "1.0" and old.steady_wall_ms == () and old.step_time_ms.median == 10.0


def test_a_saved_report_serves_as_a_baseline(tmp_path: Path) -> None:
    report = make_report(steps=[step(i, 10.0 + i) for i in range(5)], findings=())
    report.save(tmp_path / "report.json")
    assert load_baseline(tmp_path / "report.json").step_time_ms == baseline_from_report(report).step_time_ms


def _good(tmp_path: Path) -> dict:
    return baseline_from_report(make_report(steps=[step(i, 10.0) for i in range(3)], findings=())).to_dict()


@pytest.mark.parametrize(
    "content, message",
    [
        (None, r"cannot read \(No such file or directory\); expected a jaxdiag baseline"),
        ("{not json", r"not JSON \(Expecting property name"),
        ('{"baseline_version": "1.0", "steps": [1, 2', "truncated JSON: the file ends after 42 bytes"),
        (b"\x1f\x8b\x08\x00", "gzip-compressed"),
        (b'{"steps": "\xff"}', "not UTF-8 text \\(byte 0xff at offset 11 of 14 bytes\\)"),
        ("", r"the file is empty \(0 bytes\)"),
        ("[1, 2]", "a baseline must be a JSON object"),
        ({"steps": 3}, "not a jaxdiag baseline"),
        ("version:2.0", "baseline version 2.0 is not supported"),
        ("drop:step_time_ms,compiles", "baseline is missing step_time_ms, compiles"),
        ("set:step_time_ms=12", "malformed figure"),
        ("set:steady_steps=2.5", "malformed figure"),
        ({"schema_version": "9.0", "steps": []}, "report schema version 9.0 is not supported"),
    ],
    ids=[
        "missing file",
        "not json",
        "truncated",
        "gzip",
        "not utf-8",
        "empty",
        "not an object",
        "no version",
        "wrong version",
        "missing keys",
        "bad spread",
        "bad count",
        "report of another schema",
    ],
)
def test_bad_baselines_raise_one_clear_error(tmp_path: Path, content, message: str) -> None:
    path = tmp_path / "baseline.json"
    if isinstance(content, str) and ":" in content and not content.startswith("{"):
        d = _good(tmp_path)
        action, _, arg = content.partition(":")
        if action == "version":
            d["baseline_version"] = arg
        elif action == "drop":
            for key in arg.split(","):
                del d[key]
        else:
            key, _, value = arg.partition("=")
            d[key] = json.loads(value)
        path.write_text(json.dumps(d))
    elif isinstance(content, (dict, list)):
        path.write_text(json.dumps(content))
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(BaselineError, match=message) as info:
        load_baseline(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unwritable_baseline_path(tmp_path: Path) -> None:
    b = Baseline.from_dict(_good(tmp_path))
    with pytest.raises(BaselineError, match="cannot write baseline"):
        b.save(tmp_path / "missing" / "b.json")

"""diff: steps side by side, what got slower or faster, new recompiles, host waits; JSON form."""

from __future__ import annotations

import json

from report_builders import make_report

from jaxdiag.checks.diff import diff
from jaxdiag.checks.inputs import open_report


def steps(walls, wait=1.0) -> list[dict]:
    return [
        {
            "step": i,
            "wall_ms": w,
            "device_busy_ms": w - wait,
            "host_wait_ms": wait,
            "compile_ms": 0.0,
            "collective_ms": 0.0,
            "exposed_collective_ms": 0.0,
            "tokens": None,
        }
        for i, w in enumerate(walls)
    ]


def report(walls, *, top=(), by_kind=(), waits=(), recompiles=(), wait=1.0):
    return make_report(
        steps=steps(walls, wait),
        recompiles=list(recompiles),
        findings=(),
        small_ops={"threshold_us": 10.0, "count": 0, "device_time_share": 0.0, "top": list(top)},
        collectives={"overlap_fraction": None, "exposed_ms": 0.0, "by_kind": list(by_kind)},
        host_waits={"total_ms": sum(w["ms"] for w in waits), "by_cause": list(waits)},
    )


def op(name: str, total_ms: float) -> dict:
    return {"name": name, "module": "jit_step", "count": 10, "total_ms": total_ms}


def test_slower_and_faster_ops_per_step() -> None:
    a = report(
        [10.0] * 4,
        top=[op("fusion.1", 4.0), op("sort.2", 8.0), op("copy.3", 1.0)],
        by_kind=[{"kind": "all-reduce", "count": 4, "total_ms": 2.0}],
    )
    # B has twice the steps: totals are compared per step.
    b = report(
        [10.0] * 8,
        top=[op("fusion.1", 16.0), op("sort.2", 8.0), op("copy.3", 2.02)],
        by_kind=[{"kind": "all-reduce", "count": 8, "total_ms": 4.0}],
    )
    d = diff(a, b)
    assert [(c.kind, c.name, c.a_ms, c.b_ms) for c in d.slower] == [("small_op", "fusion.* (jit_step)", 1.0, 2.0)]
    assert [(c.name, c.a_ms, c.b_ms) for c in d.faster] == [("sort.* (jit_step)", 2.0, 1.0)]
    # copy.3 (0.25 -> 0.2525 ms) and the all-reduce (0.5 -> 0.5 ms) did not change enough to list.
    assert any("per-module device time is not in these reports" in n for n in d.notes)


def test_ops_renumbered_by_xla_are_matched_across_runs() -> None:
    # The same program compiled twice: XLA numbered its fusion 4 in A and 5 in B.
    a = report([10.0] * 4, top=[op("fusion.4", 4.0), op("add.1.1", 2.0)])
    b = report([10.0] * 4, top=[op("fusion.5", 8.0), op("add.2.1", 2.0)])
    d = diff(a, b)
    assert [(c.name, c.a_ms, c.b_ms) for c in d.slower] == [("fusion.* (jit_step)", 1.0, 2.0)]
    assert d.faster == ()  # neither op vanished: add.1.1 and add.2.1 are one op


def test_steps_per_s_and_the_mean_are_in_the_summary() -> None:
    walls_b = [10.0, 10.0, 40.0] * 4
    d = diff(report([10.0] * 12), report(walls_b))
    summary = {f.name: f for f in d.summary}
    assert summary["median steady step"].change == 0.0
    assert summary["steady steps/s"].a == 100.0 and summary["steady steps/s"].b == 50.0
    assert summary["mean steady step"].b == 20.0 and summary["p90 steady step"].b == 40.0
    assert "steady steps/s" in {row["name"] for row in d.to_dict()["summary"]}


def test_new_and_gone_recompiles_and_host_waits() -> None:
    a = report(
        [10.0] * 4,
        recompiles=[
            {"function": "f", "step": 0, "compile_ms": 100.0, "cause": None},
            {"function": "f", "step": 2, "compile_ms": 90.0, "cause": "args[0] dtype float32 -> bfloat16"},
        ],
        waits=[{"cause": "load_batch", "ms": 4.0}, {"cause": "device_to_host_sync", "ms": 2.0}],
    )
    b = report(
        [10.0] * 4,
        recompiles=[
            {"function": "f", "step": 0, "compile_ms": 100.0, "cause": None},
            {"function": "f", "step": 3, "compile_ms": 95.0, "cause": "args[1] shape axis 0: 8 -> 9"},
        ],
        waits=[{"cause": "load_batch", "ms": 40.0}, {"cause": "device_to_host_sync", "ms": 2.0}],
    )
    d = diff(a, b)
    assert [(r.function, r.step, r.cause) for r in d.new_recompiles] == [("f", 3, "args[1] shape axis 0: 8 -> 9")]
    assert [(r.step, r.cause) for r in d.gone_recompiles] == [(2, "args[0] dtype float32 -> bfloat16")]
    assert [(c.name, c.a_ms, c.b_ms) for c in d.host_waits] == [("load_batch", 1.0, 10.0)]


def test_steps_are_paired_by_number_and_json_is_complete() -> None:
    d = diff(report([10.0, 11.0, 12.0]), report([20.0, 22.0]))
    assert [(p.step, p.a["wall_ms"], None if p.b is None else p.b["wall_ms"]) for p in d.steps] == [
        (0, 10.0, 20.0),
        (1, 11.0, 22.0),
        (2, 12.0, None),
    ]
    summary = {f.name: f for f in d.summary}
    assert summary["median steady step"].a == 11.0 and summary["median steady step"].b == 21.0
    assert round(summary["median steady step"].change, 4) == round(10 / 11, 4)
    data = json.loads(json.dumps(d.to_dict()))
    assert data["diff_version"] == "1.0" and data["steps"][2]["b"] is None
    assert {"summary", "slower", "faster", "host_waits", "new_recompiles", "gone_recompiles", "notes"} <= set(data)


def test_real_captures(clean_capture, slow_capture, recompile_capture) -> None:
    clean = open_report(clean_capture.report_json)
    slow = diff(clean, open_report(slow_capture.logdir))  # a trace folder and a saved report mix
    waits = {c.name: c for c in slow.host_waits}
    assert waits["load_batch"].a_ms == 0.0 and waits["load_batch"].b_ms > slow_capture.sleep_s * 1000 * 0.9
    step_time = {f.name: f for f in slow.summary}["median steady step"]
    assert step_time.b > step_time.a + slow_capture.sleep_s * 1000 * 0.9
    rec = diff(clean, open_report(recompile_capture.report_json))
    assert [(r.function, r.step) for r in rec.new_recompiles] == [("train_step", recompile_capture.recompile_step)]
    assert "32 -> 64" in (rec.new_recompiles[0].cause or "")
    assert diff(open_report(recompile_capture.report_json), clean).gone_recompiles

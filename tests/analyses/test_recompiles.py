"""Compile spans and recompiles on hand-built frames, with and without a compile log."""

from __future__ import annotations

import pytest

from jaxdiag.analyses import recompile_findings as recompiles_findings
from jaxdiag.analyses import recompiles
from jaxdiag.analyses.base import AnalysisInputs, Severity
from jaxdiag.analyses.compile_spans import compile_spans, function_name
from jaxdiag.recording.records import Change, CompileRecord, Explanation
from jaxdiag.reporting import codec
from tests.frames_builders import compile_events, device_event, frames, host_event

PROFILE_START = 1_700_000_000_000_000_000  # ns since the epoch


@pytest.mark.parametrize(
    "module, expected",
    [
        ("jit_train_step", "train_step"),
        ("jit(step)", "step"),
        ("pmap_f", "f"),
        ("jit__lambda_", "_lambda_"),
        ("gemm_fusion_dot.1", "gemm_fusion_dot.1"),
    ],
)
def test_function_name(module, expected):
    assert function_name(module) == expected


def test_spans_from_the_calling_thread():
    # Nested anchors merge; the span starts at PjitFunction(f), i.e. includes tracing.
    f = frames(compile_events(2000, 5000, "train_step", trace_us=1500), steps=[(0, 10_000)])
    (span,) = compile_spans(f)
    assert (span.function, span.module, span.step) == ("train_step", "jit_train_step", 0)
    assert (span.start_ns, span.end_ns, span.backend_ns) == (500_000, 7_000_000, 5_000_000)


def test_cpu_style_compile_named_from_pass_pipelines():
    # XLA:CPU: the caller has only backend_compile_and_load; the module name appears
    # on the compiler thread's pipelines, whose anchors must not count twice.
    pool = "tf_PjRtCompilerThreadPool/123"
    events = [
        host_event(0, 6000, "PjitFunction(step)"),
        host_event(1000, 4000, "backend_compile_and_load", category="runtime", line="python"),
        host_event(1100, 3000, "PjRtCpuClient::Compile", category="runtime", line=pool, line_kind="xla_cpu"),
        host_event(1200, 800, "simplification (jit_step)", category="runtime", line=pool, line_kind="xla_cpu"),
    ]
    events[0]["line"] = "python"
    (span,) = compile_spans(frames(events, steps=[(0, 10_000)]))
    assert (span.function, span.module, span.start_ns, span.end_ns) == ("step", "jit_step", 0, 5_000_000)


def test_a_program_the_persistent_cache_served_is_a_compile_from_the_call_to_its_launch():
    """With the persistent compilation cache, a call traces and lowers its program and loads it: no backend
    compile on the timeline. The compile runs from the call to the loaded program's launch; lowering inside a
    call that compiled is not a second compile."""
    served = [
        host_event(0, 30_000, "PjitFunction(step)"),
        host_event(500, 1_000, "PjitFunction(matmul)"),  # tracing the step
        host_event(8_000, 8_000, "lower_sharding_computation", category="runtime"),
        host_event(27_000, 400, "ExecuteReplicated.__call__", category="runtime"),
    ]
    (span,) = compile_spans(frames(served, steps=[(0, 40_000)]))
    assert (span.function, span.start_ns, span.end_ns, span.backend_ns) == ("step", 0, 27_000_000, 0)
    compiled = [
        host_event(0, 30_000, "PjitFunction(step)"),
        host_event(8_000, 8_000, "lower_sharding_computation", category="runtime"),
        host_event(16_500, 10_000, "backend_compile_and_load", category="runtime"),
    ]
    (span,) = compile_spans(frames(compiled, steps=[(0, 40_000)]))
    assert (span.start_ns, span.end_ns, span.backend_ns) == (0, 26_500_000, 10_000_000)
    # Lowering with no call around it (no PjitFunction span) is not taken for a compile.
    assert compile_spans(frames(served[2:], steps=[(0, 40_000)])) == ()


def test_compile_thread_work_without_a_caller_anchor():
    pool = "tf_pjrt_compile_thread_pool/7"
    events = [
        host_event(100, 300, "optimization (jit_f)", category="runtime", line=pool, line_kind="host"),
        host_event(
            1000, 200, "fusion (jit_f)", category="runtime", line=pool, line_kind="host"
        ),  # 0.6 ms later: same compile
    ]
    (span,) = compile_spans(frames(events, steps=[(0, 5000)]))
    assert (span.function, span.start_ns, span.end_ns) == ("f", 100_000, 1_200_000)


def test_compiles_the_trace_does_not_name_are_never_recompiles_of_each_other():
    """Two pieces of compile-thread work that nothing names (``<unknown>``), at steps 0 and 1: nothing
    says they are of one function, so neither is a recompile and no finding asks what changed."""
    pool = "tf_pjrt_compile_thread_pool/7"
    events = [
        host_event(100, 300, "LLVM codegen", category="runtime", line=pool, line_kind="host"),
        host_event(6000, 3000, "LLVM codegen", category="runtime", line=pool, line_kind="host"),
    ]
    r = recompiles.analyze(AnalysisInputs(frames(events, steps=[(0, 5000), (5000, 10_000)])))
    assert [(c.function, c.step, c.recompile) for c in r.compiles] == [("<unknown>", 0, False), ("<unknown>", 1, False)]
    assert not r.findings


def test_compile_of_an_inner_function_starts_at_its_own_call():
    # Tracing g calls f on concrete values, which compiles f: the span is f's, not g's.
    events = [host_event(0, 9000, "PjitFunction(g)")] + compile_events(3000, 2000, "f", trace_us=1000)
    (span,) = compile_spans(frames(events, steps=[(0, 10_000)]))
    assert (span.function, span.start_ns) == ("f", 2_000_000)


def test_recompiles_without_a_log():
    events = (
        compile_events(1000, 3000, "init")  # first compile of init: no earlier run
        + [device_event(5000, 100, module="jit_step")]  # step ran before its compile below
        + compile_events(12_000, 5000, "step")
        + compile_events(22_000, 4000, "step")
    )
    r = recompiles.analyze(AnalysisInputs(frames(events, steps=[(0, 10_000), (10_000, 20_000), (20_000, 30_000)])))
    assert [(c.function, c.step, c.recompile) for c in r.compiles] == [
        ("init", 0, False),
        ("step", 1, True),
        ("step", 2, True),
    ]
    assert codec.to_json(r.section())[1] == {
        "function": "step",
        "step": 1,
        "compile_ms": 5.0,
        "device_wait_ms": 5.0,  # the device had nothing else to run
        "recompile": True,
        "cause": None,
    }
    # One finding for the function, naming both steps.
    (finding,) = r.findings
    assert finding.evidence["steps"] == [1, 2] and finding.evidence["count"] == 2
    assert finding.message.startswith("`step` recompiled 2 times, at steps 1 and 2: 9.0 ms")
    assert finding.kind == "recompile" and "compile log" in finding.message
    assert finding.severity == Severity.CRITICAL  # 9 ms of a 30 ms run


def _record(function: str, index: int, t_ns: int, changes=()) -> dict:
    expl = (
        Explanation(
            summary="; ".join(f"{c.path} {c.what}: {c.old} -> {c.new}" for c in changes), changes=tuple(changes)
        )
        if changes
        else None
    )
    return CompileRecord(
        function=function,
        qualname=f"m.{function}",
        source=None,
        call_site=None,
        compile_index=index,
        time_unix=(PROFILE_START + t_ns) / 1e9,
        explanation=expl,
    ).to_dict()


SHAPE = Change(path="args[2]", what="shape", old="int32[8,129]", new="int32[8,193]", axis=1)
WEAK = Change(path="args[3]", what="weak_type", old="True", new="False")


def test_join_with_the_log_by_time():
    events = compile_events(12_000, 5000, "step") + compile_events(22_000, 4000, "step")
    log = [
        _record("step", 1, -50_000_000),  # warm-up, before the capture
        _record("step", 2, 12_000_000, [SHAPE]),
        _record("step", 3, 22_100_000, [WEAK]),
        _record("other", 1, 12_000_000),
    ]
    f = frames(events, steps=[(0, 20_000), (20_000, 30_000)], meta={"profile_start_time": PROFILE_START})
    r = recompiles.analyze(AnalysisInputs(f, compile_log=log))
    assert [(c.step, c.recompile, c.cause) for c in r.compiles] == [
        (0, True, "args[2] shape: int32[8,129] -> int32[8,193]"),
        (1, True, "args[3] weak_type: True -> False"),
    ]
    (finding,) = r.findings  # both recompiles of `step`, with each cause and its step
    assert "buckets" in finding.suggestion and "axis 1 of args[2]" in finding.suggestion
    assert "weakly typed" in finding.suggestion
    assert finding.message == (
        "`step` recompiled 2 times, at steps 0 and 1: 9.0 ms; causes: args[2] shape: int32[8,129] -> "
        "int32[8,193] (at step 0); args[3] weak_type: True -> False (at step 1)."
    )


COMMITTED = Change(path="args[0]['w']", what="committed", old="False", new="True", label="params['w']")
REMAINDER = Change(path="args[1]", what="shape", old="32", new="8", axis=1, label="batch")


def _mapped(function: str, index: int, t_ns: int, changes=()) -> dict:
    """A record of a ``jax.pmap``-ed function: the trace names its program ``jit__fun``, as JAX's pmap does."""
    rec = _record(function, index, t_ns, changes)
    return {**rec, "sharding": {"module": "jit__fun", "mesh": {"axis_names": ["batch"], "axis_sizes": [4]}}}


def test_a_pmapped_function_is_joined_by_its_programs_name_and_named_as_the_user_wrote_it():
    events = compile_events(12_000, 5000, "_fun") + compile_events(22_000, 4000, "_fun")
    log = [_mapped("spmd_update", 1, -50_000_000), _mapped("spmd_update", 2, 12_000_000, [COMMITTED])]
    log.append(_mapped("spmd_update", 3, 22_100_000, [REMAINDER]))
    f = frames(events, steps=[(0, 20_000), (20_000, 30_000)], meta={"profile_start_time": PROFILE_START})
    r = recompiles.analyze(AnalysisInputs(f, compile_log=log))
    assert [(c.function, c.logged, c.recompile) for c in r.compiles] == [("spmd_update", True, True)] * 2
    (finding,) = r.findings
    assert finding.message.startswith("`spmd_update` recompiled 2 times, at steps 0 and 1")
    # Each compile's own advice: the parameters put on the devices first, and the remainder batch's.
    assert "`jax.device_put(x, sharding)`" in finding.suggestion and "A remainder batch: axis 1" in finding.suggestion
    assert "bucket" not in finding.suggestion
    # Joined by order alone, a program name several mapped functions share would pair records of one with
    # compiles of another: the name is not used then.
    by_order = recompiles.analyze(
        AnalysisInputs(frames(events, steps=[(0, 20_000), (20_000, 30_000)]), compile_log=log)
    )
    assert [(c.function, c.logged) for c in by_order.compiles] == [("_fun", False)] * 2


def test_join_by_order_without_a_profile_start():
    events = compile_events(12_000, 5000, "step")
    log = [_record("step", 1, 0), _record("step", 2, 0, [SHAPE])]
    r = recompiles.analyze(AnalysisInputs(frames(events, steps=[(0, 20_000)]), compile_log=log))
    (c,) = r.compiles
    assert c.recompile and c.cause.startswith("args[2] shape")


def test_log_says_first_compile():
    # Without the log this would look like a recompile (the module ran before).
    events = [device_event(100, 50, module="jit_step")] + compile_events(12_000, 5000, "step")
    f = frames(events, steps=[(0, 20_000)], meta={"profile_start_time": PROFILE_START})
    r = recompiles.analyze(AnalysisInputs(f, compile_log=[_record("step", 1, 12_000_000)]))
    assert [c.recompile for c in r.compiles] == [False] and r.findings == ()


def test_one_finding_per_recompiling_function_naming_its_steps():
    events = []
    for t in (42_000, 92_000, 122_000):
        events += compile_events(t, 5000, "update")
    events += compile_events(52_000, 2000, "eval_step") + compile_events(72_000, 2000, "eval_step")
    f = frames(events, steps=[(i * 10_000, (i + 1) * 10_000) for i in range(15)])
    r = recompiles.analyze(AnalysisInputs(f))
    assert len(r.recompiles) == 3  # the first compile of update and of eval_step is not one
    by_fn = {x.evidence["function"]: x for x in r.findings}
    assert set(by_fn) == {"update", "eval_step"}
    assert by_fn["update"].message.startswith("`update` recompiled 2 times, at steps 9 and 12: 10.0 ms")
    assert by_fn["update"].time_lost_ms == pytest.approx(10.0)
    assert by_fn["eval_step"].message.startswith("`eval_step` recompiled once, at step 7: 2.0 ms")


def test_hosts_that_recompile_together_give_one_finding_costed_at_the_slowest():
    events = []
    for host, dur in (("h0", 4000), ("h1", 6000)):
        events += compile_events(1000, 1000, "step", host=host) + compile_events(12_000, dur, "step", host=host)
    f = frames(events, steps=[(0, 10_000), (10_000, 30_000)])
    r = recompiles.analyze(AnalysisInputs(f))
    (finding,) = r.findings
    assert finding.time_lost_ms == pytest.approx(6.0)
    assert finding.message.startswith("`step` recompiled once, at step 1 (on 2 hosts; the slowest's time): 6.0 ms")


def test_jax_internal_compiles_fold_under_the_user_line_that_called_them():
    events = compile_events(2_000, 5000, "step") + compile_events(10_000, 1000, "convert_element_type")
    events += compile_events(14_000, 1500, "broadcast_in_dim") + compile_events(24_000, 1000, "convert_element_type")
    internal = []
    for fn, index, t in (
        ("convert_element_type", 2, 10_000_000),
        ("broadcast_in_dim", 1, 14_000_000),
        ("convert_element_type", 3, 24_000_000),
    ):
        rec = _record(fn, index, t)
        rec.update(origin="jax-internal", call_site="train.py:63")
        internal.append(rec)
    log = [_record("step", 1, 2_000_000)] + internal
    f = frames(events, steps=[(0, 20_000), (20_000, 30_000)], meta={"profile_start_time": PROFILE_START})
    r = recompiles.analyze(AnalysisInputs(f, compile_log=log))
    # The user's own first compile is no finding; the helpers compiled from one line are one finding.
    (finding,) = r.findings
    assert finding.evidence["call_site"] == "train.py:63" and finding.evidence["count"] == 3
    assert finding.message.startswith(
        "Eager code at train.py:63 compiled JAX's `broadcast_in_dim` and `convert_element_type` 3 times, "
        "at steps 0 and 1: 3.5 ms (2 of them recompiles)"
    )
    assert "outside jit" in finding.suggestion
    assert [c.get("origin") for c in codec.to_json(r.section())] == [
        "jit",
        "jax-internal",
        "jax-internal",
        "jax-internal",
    ]


def test_a_first_compile_joined_to_the_log_says_so():
    events = compile_events(12_000, 5000, "step")
    f = frames(events, steps=[(0, 20_000)], meta={"profile_start_time": PROFILE_START})
    (c,) = recompiles.analyze(AnalysisInputs(f, compile_log=[_record("step", 1, 12_000_000)])).compiles
    assert c.cause == recompiles.FIRST_COMPILE and c.logged
    (unjoined,) = recompiles.analyze(AnalysisInputs(f)).compiles
    assert unjoined.cause is None and not unjoined.logged


def test_a_finding_names_a_few_causes_and_its_evidence_keeps_them_all():
    """An eager line that indexes six parameters compiles a helper for each new shape: the message names four
    causes and says how many more; the evidence lists every one."""
    events, log = [], []
    for i in range(7):
        events += compile_events(2_000 + i * 2_000, 500, "gather")
        rec = _record("gather", i + 1, (2_000 + i * 2_000) * 1000, [Change("args[0]", "shape", str(i), str(i + 1))])
        rec.update(origin="jax-internal", call_site="train.py:61")
        rec["explanation"]["summary"] = f"eager gather: args[0] shape changed {i} -> {i + 1}"
        log.append(rec)
    f = frames(events, steps=[(0, 20_000)], meta={"profile_start_time": PROFILE_START})
    (finding,) = recompiles.analyze(AnalysisInputs(f, compile_log=log)).findings
    assert finding.message.count("args[0] shape changed") == recompiles_findings.MAX_CAUSES
    assert "and 3 more (in the finding's evidence)" in finding.message
    assert len(set(finding.evidence["causes"])) == 7


def test_compile_outside_steps_and_step_filter():
    events = compile_events(30_000, 1000, "eval_step")
    r = recompiles.analyze(AnalysisInputs(frames(events, steps=[(0, 10_000)])))
    assert codec.to_json(r.section()) == [
        {
            "function": "eval_step",
            "step": None,
            "compile_ms": 1.0,
            "device_wait_ms": 1.0,
            "recompile": False,
            "cause": None,
        }
    ]
    assert recompiles.analyze(AnalysisInputs(frames(events, steps=[(0, 10_000)]), steps=[0])).compiles == ()


def test_a_compile_that_runs_past_its_steps_end_costs_the_steps_only_its_part_inside():
    """Step 1 compiles ``step`` again from 12 to 17 us; the step ends at 15 us and the next begins at
    20 us (work between them was cut out). The device waited the whole 5 us, but only 3 of them in
    a step: the rest is time around the steps, which ``between_steps`` counts."""
    events = compile_events(12_000, 5000, "step") + [device_event(5000, 100, module="jit_step")]
    r = recompiles.analyze(AnalysisInputs(frames(events, steps=[(0, 10_000), (10_000, 15_000), (20_000, 30_000)])))
    (compile,) = r.compiles
    assert compile.step == 1 and compile.device_wait_ms == 5.0 and compile.step_wait_ms == 3.0
    (finding,) = r.findings
    assert finding.time_lost_ms == 3.0


# --- end to end on real captures ---


def test_cpu_capture_recompile(cpu_frames):
    truth = cpu_frames.truth
    r = recompiles.analyze(AnalysisInputs(cpu_frames.frames))
    step_fn = [c for c in r.compiles if c.function == "train_step"]
    assert [(c.step, c.recompile) for c in step_fn] == [(truth.recompile_step, True)]
    assert step_fn[0].compile_ms > 1.0
    assert any(
        f.evidence["function"] == "train_step" and f.evidence["steps"] == [truth.recompile_step] for f in r.findings
    )
    assert {c.step for c in r.compiles} == {truth.recompile_step}  # the new batch shape's jnp.ones compiles too


def test_h100_transformer_recompiles(h100_transformer):
    r = recompiles.analyze(AnalysisInputs(h100_transformer.frames))
    # train_step (named `step` in the program) recompiled for a new sequence length at
    # step 5 and for a weakly typed scale at step 8, several seconds each.
    step_fn = [c for c in r.compiles if c.function == "step"]
    assert [(c.step, c.recompile) for c in step_fn] == [(5, True), (8, True)]
    for c in step_fn:
        truth_wall_ms = h100_transformer.truth["steps"][c.step]["wall_s"] * 1000
        assert 2000 < c.compile_ms < truth_wall_ms
    findings = {f.evidence["function"]: f for f in r.findings}
    assert findings["step"].severity == Severity.CRITICAL and findings["step"].evidence["steps"] == [5, 8]
    assert findings["step"].evidence["compile_ms"][0] > 0.9 * 10_000
    assert findings["step"].message.startswith("`step` recompiled 2 times, at steps 5 and 8:")
    # jnp.asarray of the new token shape compiles convert_element_type again, too.
    assert [(c.step, c.recompile) for c in r.compiles if c.function == "convert_element_type"] == [
        (0, False),
        (5, True),
    ]


def test_h100_transformer_joined_to_a_compile_log(h100_transformer):
    # A log as jaxdiag.jit would have written it: the warm-up compile, then the two
    # recompiles, stamped on the wall clock the profile's start time relates to.
    frames_ = h100_transformer.frames
    start = frames_.meta["profile_start_time"]
    spans = [c for c in recompiles.analyze(AnalysisInputs(frames_)).compiles if c.function == "step"]
    log = [_record("step", 1, -3_000_000_000)] + [
        _record("step", i + 2, c.start_ns + 1_000_000, [change])
        for i, (c, change) in enumerate(zip(spans, (SHAPE, WEAK)))
    ]
    for rec in log:
        rec["time_unix"] = rec["time_unix"] - PROFILE_START / 1e9 + start / 1e9
    r = recompiles.analyze(AnalysisInputs(frames_, compile_log=log))
    got = {c.step: c.cause for c in r.compiles if c.function == "step"}
    assert got == {5: "args[2] shape: int32[8,129] -> int32[8,193]", 8: "args[3] weak_type: True -> False"}


def test_h100_mlp_recompiles(h100_mlp):
    r = recompiles.analyze(AnalysisInputs(h100_mlp.frames))
    assert [(c.step, c.recompile) for c in r.compiles if c.function == "train_step"] == [(6, True), (9, True)]


def test_bucket_advice_names_the_parameter_as_the_user_wrote_it():
    events = compile_events(12_000, 5000, "step")
    named = Change(path="args[2]", what="shape", old="int32[8,129]", new="int32[8,193]", axis=1, label="tokens")
    log = [_record("step", 1, -50_000_000), _record("step", 2, 12_000_000, [named])]
    f = frames(events, steps=[(0, 20_000)], meta={"profile_start_time": PROFILE_START})
    (finding,) = recompiles.analyze(AnalysisInputs(f, compile_log=log)).findings
    assert "axis 1 of tokens: int32[8,129] -> int32[8,193]" in finding.suggestion

"""The host check and the compile-divergence analysis, on real ``jax.distributed`` CPU processes."""

from __future__ import annotations

import textwrap

from multihost import run_processes

GUARDED = textwrap.dedent(
    """
    import numpy as np
    from jax.experimental import multihost_utils
    import jaxdiag
    from jaxdiag.errors import HostDivergenceError

    rows = 24 if pid == n - 1 else 32

    @jax.jit
    def train_step(batch):
        return (batch * 2).sum()

    try:
        with jaxdiag.watch(check_hosts="raise"):
            for step in range(3):
                loss = train_step(np.ones((rows, 8), np.float32))
                print("STEP", step, flush=True)
                multihost_utils.process_allgather(loss)  # the collective a divergent process would hang in
    except HostDivergenceError as exc:
        print("DIVERGED", exc, flush=True)
        from jax._src import distributed
        distributed.global_state.client.wait_at_barrier("diverged", 120_000)  # every peer has read every entry
    # Every process stops here, so the coordinator (process 0) is not gone while a peer still polls it.
    jax.distributed.shutdown()
    """
)


def test_the_guard_raises_on_every_process_before_the_collective(tmp_path):
    outputs = run_processes(GUARDED, 4, tmp_path)
    for pid, out in enumerate(outputs):
        assert "DIVERGED" in out and "STEP" not in out, out  # before the first step's collective
        message = out.split("DIVERGED", 1)[1]
        assert "`train_step` (compile 1)" in message and "args[0] axis 0 = " in message
        if pid == 3:  # it compares with every peer: all three had 32 rows
            assert "process 3 and process(es) 0-2" in message and "= 24 in process 3 vs 32 in process 0" in message
        else:
            assert (
                f"process {pid} and process(es) 3 " in message
                and f"= 32 in process {pid} vs 24 in process 3" in message
            )


WARNED = textwrap.dedent(
    """
    import warnings
    import numpy as np
    import jaxdiag
    from jaxdiag.recording.host_check import HostCheck

    @jax.jit
    def train_step(batch):
        return (batch * 2).sum()

    @jax.jit
    def only_on_one(x):
        return x + 1

    check = HostCheck(timeout_s=2.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with jaxdiag.watch(check_hosts=check):
            train_step(np.ones((32 if pid == 0 else 16, 8), np.float32))
            if pid == 1:  # as logging on one process: the second compile does not wait for process 0 again
                only_on_one(np.ones(3))
                only_on_one(np.ones(4))
    for w in caught:
        print("WARNED", w.category.__name__, w.message, flush=True)
    print("MISMATCHES", len(check.mismatches), "SILENT", len(check.silent), flush=True)
    jax.distributed.shutdown()
    """
)


def test_the_guard_warns_and_says_when_a_peer_did_not_answer(tmp_path):
    out0, out1 = run_processes(WARNED, 2, tmp_path)
    assert "MISMATCHES 1 SILENT 0" in out0, out0
    assert "MISMATCHES 1 SILENT 1" in out1, out1
    assert "HostDivergenceWarning" in out0 and "args[0] axis 0 = 32 in process 0 vs 16 in process 1" in out0
    assert "process(es) 0 did not publish their `only_on_one` (compile 1) within 2 s" in out1


CAPTURED = textwrap.dedent(
    """
    import warnings
    import numpy as np
    import jaxdiag
    from jaxdiag.recording.host_check import HostCheck

    @jax.jit
    def train_step(batch):
        return (batch * 2).sum()

    check = HostCheck(timeout_s=1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with jaxdiag.capture(out, skip=0, take=4, check_hosts=check) as cap:  # records compiles, checks them
            for step in range(4):
                with cap.step():
                    rows = 24 if (pid == 1 and step == 2) else 32
                    float(train_step(np.ones((rows, 8), np.float32)))
    for w in caught:
        print("WARNED", w.message, flush=True)
    jax.distributed.shutdown()
    """
)


def test_the_report_names_the_process_step_and_argument_that_diverged(tmp_path):
    import jaxdiag

    out0, out1 = run_processes(CAPTURED, 2, tmp_path)
    # at run time (the capture's option), process 1 said its peer never compiled what it compiled at step 2
    assert "process(es) 0 did not publish their `train_step` (compile 2, step 2) within 1 s" in out1, out1
    assert "WARNED" not in out0
    report = jaxdiag.report(tmp_path)
    found = [f for f in report.findings if f.kind == "compile_divergence"]
    assert found, [f.message for f in report.findings]
    (count,) = [f for f in found if f.evidence["compile_index"] is None]
    assert count.evidence["processes"] == [1] and count.evidence["others"] == [0]
    assert count.evidence["step"] == 2 and "at step 2" in count.message
    assert "process(es) 1 compiled `train_step` twice while process(es) 0 compiled it once" in count.message
    assert "args[0] axis 0 = 24 in process 1 vs 32 in process 0" in count.message
    assert report.divergence.processes == (0, 1)
    assert report.to_dict()["divergence"]["divergences"]


def test_one_process_has_nothing_to_compare():
    from jaxdiag.analyses.base import AnalysisInputs
    from jaxdiag.analyses.divergence import analyze
    from jaxdiag.reporting import codec

    records = [
        {
            "function": "f",
            "qualname": "m.f",
            "compile_index": 1,
            "time_unix": 1.0,
            "process_index": 0,
            "args": [{"path": "args[0]", "shape": [2], "dtype": "float32"}],
        }
    ]
    result = analyze(AnalysisInputs(frames=None, compile_log=records))  # type: ignore[arg-type]
    assert codec.to_json(result.section()) == {} and not result.findings


def test_records_without_a_readable_process_or_compile_index_are_left_out():
    """A hand-edited or damaged sidecar: its records cannot be placed, so they are not compared."""
    from frames_builders import frames, host_event

    from jaxdiag.analyses.base import AnalysisInputs
    from jaxdiag.analyses.divergence import analyze
    from jaxdiag.analyses.divergence_section import DivergenceSection

    def record(process: object, compile_index: object = 1, shape: int = 2) -> dict:
        return {
            "function": "f",
            "qualname": "m.f",
            "compile_index": compile_index,
            "time_unix": 1.0,
            "process_index": process,
            "args": [{"path": "args[0]", "shape": [shape], "dtype": "float32"}],
        }

    damaged = [record([]), record("1", shape=3), record(True, shape=3), record(1.5), record(1, [2], shape=3)]
    inputs = AnalysisInputs(
        frames=frames([host_event(0, 1, "x", host="h-p0")]), compile_log=[record(0), record(1.0), *damaged]
    )
    result = analyze(inputs)
    assert result.section() == DivergenceSection((0, 1), ()) and not result.findings

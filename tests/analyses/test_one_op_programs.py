"""Programs of one op (an optimizer update run eagerly after a jitted gradient), on real CPU captures.

Truth comes from the trace through ``jax.profiler.ProfileData`` alone: an XLA:CPU op event carries
its program (``hlo_module``) and its execution (``run_id``), so a program whose every execution
holds one op is one of one op. The advice (move the update into the jitted step) is applied to the
same program to show the launches and the device's wait for them shrink.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.config import Thresholds
from jaxdiag.recording import compile_log

STEPS = 8
LAYERS = 6  # 12 leaves: 48 eager launches a step


def _train(logdir: Path, fused: bool) -> Path:
    """A small MLP trained with momentum SGD, leaf by leaf: eagerly after a jitted gradient, or in one jit."""

    def loss(params, x):
        for w, b in params:
            x = jnp.tanh(x @ w + b)
        return jnp.mean(x**2)

    def update(params, mom, grads):
        mom = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, mom, grads)  # eager ops
        return jax.tree_util.tree_map(lambda p, m: p - 0.01 * m, params, mom), mom  # eager ops

    gradient = jax.jit(jax.value_and_grad(loss))

    def eager_step(params, mom, x):
        value, grads = gradient(params, x)
        return (value, *update(params, mom, grads))

    @jax.jit
    def fused_step(params, mom, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return (value, *update(params, mom, grads))

    step = fused_step if fused else eager_step
    key = jax.random.key(0)
    params = [(jax.random.normal(jax.random.fold_in(key, i), (32, 32)) / 6, jnp.zeros(32)) for i in range(LAYERS)]
    mom = jax.tree_util.tree_map(jnp.zeros_like, params)
    x = jnp.ones((16, 32))
    # Records of what other tests compiled earlier in this process (an eager ``add`` of another shape)
    # would be carried into the sidecar as earlier compiles of the same function, with their own lines.
    compile_log.clear()
    with jaxdiag.watch():
        value, params, mom = step(params, mom, x)  # compiled before the capture
        # and run: else, on a loaded machine, its last eager ops still wait to run when the capture opens
        jax.block_until_ready((value, params, mom))
        with jaxdiag.capture(logdir, skip=0, take=STEPS, run="fused" if fused else "eager") as cap:
            for _ in range(STEPS):
                with cap.step():
                    value, params, mom = step(params, mom, x)
                    float(value)
    return cap.run_dir


def _ops_per_run(run_dir: Path) -> dict[str, Counter]:
    """Per program, ops per execution (ProfileData alone)."""
    from jax.profiler import ProfileData

    runs: dict[str, Counter] = defaultdict(Counter)
    for path in run_dir.glob("*.xplane.pb"):
        for plane in ProfileData.from_file(str(path)).planes:
            for line in plane.lines:
                for e in line.events:
                    stats = dict(e.stats)
                    if "hlo_module" in stats and "run_id" in stats:
                        runs[stats["hlo_module"]][stats["run_id"]] += 1
    return runs


def _one_op(run_dir: Path) -> dict[str, int]:
    return {m: len(r) for m, r in _ops_per_run(run_dir).items() if len(r) >= 2 and set(r.values()) == {1}}


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    run_dir = _train(tmp_path_factory.mktemp("eager"), fused=False)
    return run_dir, jaxdiag.report(run_dir, thresholds=Thresholds(min_finding_ms=0.001))


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    run_dir = _train(tmp_path_factory.mktemp("fused"), fused=True)
    return run_dir, jaxdiag.report(run_dir, thresholds=Thresholds(min_finding_ms=0.001))


def test_the_eager_update_is_found_as_programs_of_one_op(eager):
    from jaxdiag.analyses.one_op_programs import one_op_programs

    run_dir, _ = eager
    truth = _one_op(run_dir)
    # per leaf, multiply and add for the momentum, multiply and subtract for the step
    leaves = 2 * LAYERS
    assert truth == {"jit_multiply": 2 * leaves * STEPS, "jit_add": leaves * STEPS, "jit_subtract": leaves * STEPS}
    assert one_op_programs(jaxdiag.load(run_dir)) == truth
    assert "jit_loss" not in truth and max(_ops_per_run(run_dir)["jit_loss"].values()) > 1


def test_their_small_ops_get_the_advice_with_the_lines_that_ran_them(eager):
    _, report = eager
    small = {f.evidence["module"]: f for f in report.findings if f.kind == "small_ops"}
    assert small.keys() & {"jit_multiply", "jit_add", "jit_subtract"}, "each eager op is one op under 10 us"
    source = Path(__file__).read_text().splitlines()
    tree_maps = {n for n, text in enumerate(source, 1) if text.endswith("  # eager ops")}
    for module, f in small.items():
        assert f.evidence["one_op_program"] == (module in {"jit_multiply", "jit_add", "jit_subtract"})
        if not f.evidence["one_op_program"]:
            assert "Move the code" not in f.suggestion
            continue
        assert "was one op" in f.message and f.suggestion.startswith("Move the code that calls them into the jitted")
        assert "`vmap`" not in f.suggestion
        # the compile log of jaxdiag.watch() names the tree_map line of `update` that first ran it
        sites = f.suggestion.split("first run: ")[1].rstrip(".").split(", ")
        assert {(Path(s.split(":")[0]).name, int(s.split(":")[1])) for s in sites} <= {
            (Path(__file__).name, n) for n in tree_maps
        }


def _launching(one_op_share: float):
    """Hand-built frames: a step whose launches of ``multiply`` (a program of one op) and of ``train_step``
    (two ops) leave the device idle for 1 ms in all, ``one_op_share`` of it launching ``multiply``."""
    from jaxdiag.analyses.base import AnalysisInputs
    from jaxdiag.config import Thresholds
    from jaxdiag.reporting.build import build_report
    from jaxdiag.trace import frames as F
    from tests.frames_builders import device_event, frames, host_event

    mine = 1000 * one_op_share
    events = []
    for run, start in enumerate((0, mine / 2)):  # two launches of multiply, one op each
        events.append(host_event(start, mine / 2, "PjitFunction(multiply)"))
        events.append({**device_event(start + mine / 2, 1, module="jit_multiply"), F.RUN_ID: run})
    events.append(host_event(mine, 1000 - mine, "PjitFunction(train_step)"))
    for k in range(2):
        events.append({**device_event(1000 + k, 1, module="jit_train_step", name=f"fusion.{k}"), F.RUN_ID: 9})
    f = frames(events + [host_event(0, 1010, "train")], steps=[(0, 1010)])
    inputs = AnalysisInputs(f, thresholds=Thresholds(host_wait_min_us=50, min_finding_ms=0.01))
    return [x for x in build_report(inputs).findings if x.kind == "host_wait" and x.evidence["kind"] == "dispatch"]


def test_a_launching_wait_mostly_of_one_op_programs_gets_their_advice():
    (finding,) = _launching(0.8)
    # (the first multiply's op, 1 us, runs while the second launches)
    assert finding.evidence["by_function"] == {"multiply": 0.799, "train_step": 0.199}
    assert finding.evidence["one_op_share"] == pytest.approx(0.8, abs=0.002)
    assert "80% of it launched programs of one op each (multiply)." in finding.message
    assert finding.suggestion.startswith("Move the code that calls them into the jitted step")
    assert "`jaxdiag compiles` names the lines" in finding.suggestion  # no compile log here
    (finding,) = _launching(0.3)  # mostly train_step's: the usual advice
    assert "one_op_share" not in finding.evidence and "one op" not in finding.message
    assert finding.suggestion.startswith("The host takes longer to launch work")


def test_moving_the_update_into_the_jitted_step_removes_the_launches_and_the_wait(eager, fused):
    (eager_dir, eager_report), (fused_dir, fused_report) = eager, fused
    assert _one_op(fused_dir) == {}  # the advice applied: no program of one op is launched
    runs = lambda d: sum(len(r) for r in _ops_per_run(d).values())  # noqa: E731
    # one launch a step (and the one before the capture, whose run may end inside it) instead of 49
    assert runs(fused_dir) <= STEPS + 1 and runs(eager_dir) >= 49 * STEPS

    # what the findings put on the one-op programs is gone with them
    def lost(report):
        return sum(
            f.time_lost_ms * f.evidence.get("one_op_share", 1.0)
            for f in report.findings
            if f.evidence.get("one_op_program") or "one_op_share" in f.evidence
        )

    assert lost(eager_report) > 0 and lost(fused_report) == 0

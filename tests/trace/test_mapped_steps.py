"""Steps inferred from a ``jax.pmap`` program: every mapped function's program is ``jit__fun`` in the trace.

The pattern of older Flax examples: a pmapped training step and a pmapped evaluation step run at the
end of each epoch, no step annotations. The two programs share one name, so the steps inferred from
its executions hold the evaluation's too: the note says so, and the advice it gives (annotate the
steps), applied, gives exactly the training steps. Truth comes from the trace with jaxlib's
``ProfileData`` alone (``trace_truth``).
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdiag
from jaxdiag.trace.executions import MAPPED_PROGRAM_NAMES
from tests.analyses import trace_truth

EPOCHS, TRAIN, EVAL = 2, 6, 2


def _programs(run_dir: Path) -> Counter:
    """Executions (distinct run ids) per ``(module, program id)``, from the trace."""
    from jax.profiler import ProfileData

    (xplane,) = run_dir.glob("*.xplane.pb")
    runs: dict[tuple[str, int], set[int]] = {}
    for plane in ProfileData.from_file(str(xplane)).planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if "hlo_module" in stats and "run_id" in stats and "program_id" in stats:
                    key = (str(stats["hlo_module"]), int(stats["program_id"]))
                    runs.setdefault(key, set()).add(int(stats["run_id"]))
    return Counter({k: len(v) for k, v in runs.items()})


def _epochs(logdir: Path, *, annotated: bool) -> Path:
    @partial(jax.pmap, axis_name="batch")
    def train_step(p, x):
        g = jax.grad(lambda p: jnp.mean(jnp.tanh(x @ p) ** 2))(p)
        return p - 1e-2 * jax.lax.pmean(g, "batch")

    @partial(jax.pmap, axis_name="batch")
    def eval_step(p, x):
        return jax.lax.pmean(jnp.mean(x @ p), "batch")

    n = jax.device_count()
    p = jax.pmap(lambda a: a)(np.full((n, 32, 32), 1e-2, np.float32))  # committed from the start: one compile
    x = np.ones((n, 8, 32), np.float32)
    p = train_step(p, x)
    eval_step(p, x).block_until_ready()
    run = f"epochs_{annotated}"
    step = 0
    with jaxdiag.profile(logdir, run=run):
        for _ in range(EPOCHS):
            for _ in range(TRAIN):
                if annotated:  # the advice
                    with jax.profiler.StepTraceAnnotation("train", step_num=step):
                        p = train_step(p, x)
                else:
                    p = train_step(p, x)
                step += 1
            for _ in range(EVAL):
                loss = eval_step(p, x)
            float(loss[0])
    return logdir / "plugins" / "profile" / run


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    if jax.device_count() < 2:
        pytest.skip("needs several devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return tmp_path_factory.mktemp("mapped_steps")


def test_steps_from_a_shared_mapped_name_say_they_may_hold_another_function(mapped):
    run_dir = _epochs(mapped, annotated=False)
    programs = _programs(run_dir)
    mapped_runs = sorted(v for (module, _), v in programs.items() if module in MAPPED_PROGRAM_NAMES)
    assert mapped_runs == [EPOCHS * EVAL, EPOCHS * TRAIN]  # two programs under one name
    frames = jaxdiag.load(run_dir)
    assert len(frames.steps) == EPOCHS * (TRAIN + EVAL)  # the evaluation's executions among them
    (note,) = [n for n in frames.notes if n.startswith("no step annotations")]
    assert "these executions ran 2 programs" in note and "the trace does not tell which" in note


def test_annotated_steps_are_the_training_steps(mapped):
    run_dir = _epochs(mapped, annotated=True)
    (xplane,) = run_dir.glob("*.xplane.pb")
    marks = trace_truth.named_spans(xplane, "train")["train"]
    frames = jaxdiag.load(run_dir)
    assert len(frames.steps) == len(marks) == EPOCHS * TRAIN
    assert not [n for n in frames.notes if "these executions ran" in n]

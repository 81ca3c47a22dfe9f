"""Steps tile the run: the loading, conversions and compile that feed step N are booked to step N.

Each test runs a real JAX loop with data-loading stalls and a shape recompile
planted at known iterations, captures it with one of the three step sources
(``jaxdiag.capture``, ``@jaxdiag.step``, no annotations at all), and asserts the
step numbers the report gives them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jaxdiag
from jaxdiag.analyses import host_waits, recompiles
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.trace.frames import TraceFrames

ITERATIONS = 9
STALLS = (3, 6, 8)  # iterations whose loading sleeps; 8 is the last one captured
RECOMPILE_AT = 5  # the batch grows here: the step function compiles again
STALL_S = 0.12  # far above what a loaded 2-core machine adds to an ordinary iteration


def make_train(name: str = "train") -> Callable[[jax.Array, jax.Array], jax.Array]:
    """A new function each time, so JAX's caches hold no compile of it from another test."""

    def train(w, x):
        return w - 0.001 * (x.T @ jnp.tanh(x @ w)) / x.shape[0]

    train.__name__ = train.__qualname__ = name
    return train


def load_batch(i: int) -> jax.Array:
    with jax.profiler.TraceAnnotation("load_batch"):
        if i in STALLS:
            time.sleep(STALL_S)
        rows = 64 if i < RECOMPILE_AT else 96
        return jnp.asarray(np.full((rows, 128), 0.01, np.float32))


def run_loop(step: Callable[[int, jax.Array, jax.Array], jax.Array]) -> None:
    w = jnp.eye(128)
    for i in range(ITERATIONS):
        x = load_batch(i)
        w = step(i, w, x)
        float(w[0, 0])  # the loop reads a metric back every step


def stall_steps(frames: TraceFrames) -> list[int]:
    """The steps with the most device-idle time under ``load_batch``, as many as stalls were planted."""
    waits = host_waits.analyze(AnalysisInputs(frames))
    per_step = {s: c.get("load_batch", 0.0) for s, c in waits.by_step().items()}
    in_window = [i for i in STALLS if i in set(frames.steps["step"])]
    return sorted(sorted(per_step, key=lambda s: -per_step[s])[: len(in_window)])


def recompile_steps(frames: TraceFrames, function: str) -> list[int]:
    return [c.step for c in recompiles.analyze(AnalysisInputs(frames)).recompiles if c.function == function]


def assert_steps_tile(frames: TraceFrames) -> None:
    table = frames.steps.sort_values("start_ns")
    assert (table["start_ns"].to_numpy()[1:] == table["end_ns"].to_numpy()[:-1]).all()


def test_capture_books_the_loading_between_blocks_to_the_next_step(tmp_path: Path) -> None:
    jitted = jaxdiag.jit(make_train())
    with jaxdiag.capture(tmp_path, skip=1, take=ITERATIONS - 1) as cap:

        def step(i: int, w: jax.Array, x: jax.Array) -> jax.Array:
            with cap.step(samples=x.shape[0]):
                return jitted(w, x)

        run_loop(step)
    frames = jaxdiag.load(cap.run_dir)
    assert sorted(frames.steps["step"]) == list(range(1, ITERATIONS))
    assert_steps_tile(frames)
    assert stall_steps(frames) == [3, 6, 8]
    assert recompile_steps(frames, "train") == [RECOMPILE_AT]


def test_step_decorator_books_each_iterations_loading_to_its_own_step(tmp_path: Path) -> None:
    decorated = jaxdiag.step(
        make_train(), samples=lambda w, x: x.shape[0], logdir=tmp_path, profile_steps=(1, ITERATIONS)
    )
    run_loop(lambda i, w, x: decorated(w, x))
    frames = jaxdiag.load(decorated.run_dir)
    assert sorted(frames.steps["step"]) == list(range(1, ITERATIONS))
    assert_steps_tile(frames)
    assert stall_steps(frames) == [3, 6, 8]
    assert recompile_steps(frames, "train") == [RECOMPILE_AT]
    # The last step is not cut short: it holds its loading, its call and its device work.
    table = frames.steps.set_index("step")
    walls = (table["end_ns"] - table["start_ns"]) / 1e6
    assert walls[ITERATIONS - 1] >= STALL_S * 1e3


def test_steps_inferred_from_module_runs_book_the_recompile_to_the_run_it_precedes(tmp_path: Path) -> None:
    # A module name no other test uses: another test's work still running when the trace starts
    # must not count as a run of this loop's module.
    jitted = jax.jit(make_train("train_by_module_runs"))
    with jax.profiler.trace(str(tmp_path)):
        run_loop(lambda i, w, x: jitted(w, x))
    frames = jaxdiag.load(tmp_path)
    assert frames.step_source == "module" and set(frames.steps["step_name"]) == {"jit_train_by_module_runs"}
    assert sorted(frames.steps["step"]) == list(range(ITERATIONS))
    assert_steps_tile(frames)
    assert stall_steps(frames) == [3, 6, 8]
    assert recompile_steps(frames, "train_by_module_runs") == [RECOMPILE_AT]

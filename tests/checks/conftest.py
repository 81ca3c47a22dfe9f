"""Real CPU captures for the check tests: a clean loop, the same loop slowed down, and one that recompiles.

Each is a few steps of a small jitted training step under ``jax.profiler``, made
once per session; reports of them are built once too and saved as JSON, so tests
can pass either a trace folder or a saved report.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

STEPS = 8
#: Rows of the batch; the recompiling capture changes it at ``RECOMPILE_STEP``.
ROWS = 32
RECOMPILE_STEP = 5
#: Sleep planted in every step of the slowed-down capture (steps take about 1 ms without it).
SLOW_SLEEP_S = 0.03
TOKENS_PER_STEP = 1024


@dataclasses.dataclass(frozen=True)
class Capture:
    """One capture: its logdir, its report saved as JSON, and what was planted in it."""

    logdir: Path
    report_json: Path
    sleep_s: float = 0.0
    recompile_step: int | None = None
    tokens_per_step: int = TOKENS_PER_STEP


def _capture(
    logdir: Path,
    *,
    sleep_s: float = 0.0,
    recompile_step: int | None = None,
    steps: int = STEPS,
    step_sleep_s: float = 0.0,
    stall_every: int = 1,
) -> None:
    """Profile ``steps`` steps of a train step jitted with ``jaxdiag.jit``, its compile log beside the trace.

    ``sleep_s`` is a ``load_batch`` stall in every ``stall_every``-th step (the last of each
    group: steps 2, 5, 8, ... for 3); ``step_sleep_s`` a host pause in every step after the call.
    """
    import jax
    import jax.numpy as jnp

    import jaxdiag
    from jaxdiag.recording import compile_log

    @jaxdiag.jit
    def train_step(w, x):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
        return w - 0.1 * grad, loss

    compile_log.configure(log_dir=logdir)
    w = jnp.ones((64, 64)) * 0.01
    w, _ = train_step(w, jnp.ones((ROWS, 64)))  # warm-up compile, before the capture
    jax.profiler.start_trace(str(logdir))
    try:
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                rows = ROWS * 2 if recompile_step is not None and i >= recompile_step else ROWS
                if sleep_s and i % stall_every == stall_every - 1:
                    with jax.profiler.TraceAnnotation("load_batch"):
                        time.sleep(sleep_s)
                w, loss = train_step(w, jnp.ones((rows, 64)))
                if step_sleep_s:
                    time.sleep(step_sleep_s)
                float(loss)
    finally:
        jax.profiler.stop_trace()
        compile_log.configure(log_dir=None)


def _make(factory: pytest.TempPathFactory, name: str, **kwargs) -> Capture:
    from jaxdiag.reporting.build import report

    logdir = factory.mktemp(name)
    _capture(logdir, **kwargs)
    path = logdir / "report.json"
    report(logdir, tokens_per_step=TOKENS_PER_STEP).save(path)
    return Capture(logdir, path, **{k: v for k, v in kwargs.items() if k in ("sleep_s", "recompile_step")})


@pytest.fixture(scope="session")
def clean_capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    return _make(tmp_path_factory, "clean")


@pytest.fixture(scope="session")
def clean_again_capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    return _make(tmp_path_factory, "clean_again")


@pytest.fixture(scope="session")
def slow_capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    return _make(tmp_path_factory, "slow", sleep_s=SLOW_SLEEP_S)


@pytest.fixture(scope="session")
def recompile_capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    return _make(tmp_path_factory, "recompile", recompile_step=RECOMPILE_STEP)


#: A stall on every third step of about 7 ms: steps/s falls by more than half while the median step
#: barely moves. 60 ms (the synthetic test plants the 30 ms of the issue) stands clear of the pauses
#: a loaded shared machine adds to the clean capture's steps.
STALL_STEPS, STALL_S, STEP_S = 30, 0.06, 0.007


@pytest.fixture(scope="session")
def stall_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Capture, Capture]:
    """A capture of 30 steps of about 7 ms, and the same loop with a 60 ms stall on every third step."""
    clean = _make(tmp_path_factory, "steady7ms", steps=STALL_STEPS, step_sleep_s=STEP_S)
    stalled = _make(
        tmp_path_factory, "stall3rd", steps=STALL_STEPS, step_sleep_s=STEP_S, sleep_s=STALL_S, stall_every=3
    )
    return clean, stalled

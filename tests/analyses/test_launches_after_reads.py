"""Launch waits that only follow reads are the reads' cost, on a real program, and the advice applied.

The pattern of optax's gradient-accumulation example: a jitted step the device takes milliseconds
over, launched in well under one, and ``float(loss)`` every 10 steps. Each read empties the device's
queue, so the next launch runs with the device idle; at the other steps the host launches ahead.
Truth from the trace with jaxlib's ``ProfileData`` alone (``trace_truth``): the outermost
``PjitFunction(train_step)`` spans, and whether an execution of the step's program was in flight
when each began (its execution and every earlier one's, from first op to last).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxdiag
from jaxdiag.config import Thresholds
from tests.analyses import trace_truth

STEPS = 30
N = 512


def _loop(logdir: Path, read_every: int) -> Path:
    @jax.jit
    def train_step(w, x):
        for _ in range(4):  # tens of ms on two cores: the host, with little to do, stays ahead
            x = jnp.tanh(x @ w)
        return w - 1e-4 * x.mean(), (x**2).mean()

    batches = [np.random.default_rng(i).standard_normal((N, N), dtype=np.float32) for i in range(3)]
    w = jnp.full((N, N), 1e-3, dtype=jnp.float32)
    w, _ = jax.block_until_ready(train_step(w, jnp.ones((N, N), jnp.float32)))  # compiled and run before it
    run = f"read{read_every}"
    with jaxdiag.profile(logdir, run=run):
        for i in range(STEPS):
            w, loss = train_step(w, batches[i % 3])
            if i % read_every == 0:
                float(loss)
        float(loss)
    return logdir / "plugins" / "profile" / run


def _idle_launches(run_dir: Path) -> list[int]:
    """Indices of the step's launches that found every earlier one's execution finished: nothing queued or
    running for the device (ProfileData)."""
    (xplane,) = run_dir.glob("*.xplane.pb")
    ahead = trace_truth.read(xplane).host_ahead("jit_train_step")
    assert len(ahead) == STEPS
    return [i for i, queued in enumerate(ahead) if queued == 0]


def test_launch_waits_after_reads_are_named_the_reads_cost_and_go_with_them(tmp_path):
    planted = _loop(tmp_path, read_every=10)
    idle = _idle_launches(planted)
    assert {1, 11, 21} <= set(idle)  # after each read, the launch ran with nothing in flight
    report = jaxdiag.report(planted, thresholds=Thresholds(min_finding_ms=0.01))
    (launching,) = [f for f in report.findings if f.kind == "host_wait" and f.evidence["kind"] == "dispatch"]
    named = {int(s) for s in launching.evidence["per_step"]}
    # As the program intends, the waits are the launches after the reads (and the capture's first, with nothing
    # queued yet, unless it alone is most of the time: a one-off). A host descheduled under load can add others.
    if named <= {0, 1, 11, 21} and "one_off_step" not in launching.evidence:
        assert launching.evidence.get("after_reads"), launching.message
        assert "put more work" not in launching.suggestion and "what the reads cost" in launching.suggestion
    # Applied (one read, at the end): no launch but the first finds the device's queue empty.
    applied = _idle_launches(_loop(tmp_path, read_every=STEPS + 1))
    assert len(set(applied) - {0}) < len(set(idle) - {0})

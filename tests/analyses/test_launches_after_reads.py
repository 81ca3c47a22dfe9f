"""Launch waits that only follow reads, or the host's own work, are that cost, on real programs, and the
advice applied.

The pattern of optax's gradient-accumulation example: a jitted step the device takes milliseconds
over, launched in well under one, and ``float(loss)`` every 10 steps. Each read empties the device's
queue, so the next launch runs with the device idle; at the other steps the host launches ahead.
Truth from the trace with jaxlib's ``ProfileData`` alone (``trace_truth``): the outermost
``PjitFunction(train_step)`` spans, and whether an execution of the step's program was in flight
when each began (its execution and every earlier one's, from first op to last).
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxdiag
from jaxdiag.config import Thresholds
from tests.analyses import trace_truth

STEPS = 30
N = 512


def _loop(logdir: Path, read_every: int, pause_every: int = 0) -> Path:
    @jax.jit
    def train_step(w, x):
        for _ in range(4):  # tens of ms on two cores: the host, with little to do, stays ahead
            x = jnp.tanh(x @ w)
        return w - 1e-4 * x.mean(), (x**2).mean()

    batches = [np.random.default_rng(i).standard_normal((N, N), dtype=np.float32) for i in range(3)]
    w = jnp.full((N, N), 1e-3, dtype=jnp.float32)
    w, _ = jax.block_until_ready(train_step(w, jnp.ones((N, N), jnp.float32)))  # compiled and run before it
    run = f"read{read_every}_{pause_every}"
    with jaxdiag.profile(logdir, run=run):
        for i in range(STEPS):
            w, loss = train_step(w, batches[i % 3])
            if read_every and i % read_every == 0:  # 0: no read but the last
                float(loss)
            if pause_every and i % pause_every == pause_every - 1:
                time.sleep(0.4)  # the host's own work, as a checkpoint's save: longer than the queue ahead
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
    applied = _idle_launches(_loop(tmp_path, read_every=0))
    assert len(set(applied) - {0}) < len(set(idle) - {0})


def test_launch_waits_after_the_hosts_own_work_are_named_its_cost_and_go_with_it(tmp_path):
    """Every 10th step the host works 0.4 s (more than the device's queue holds), reading nothing: the device runs
    dry, and the next launch finds nothing queued. That launch wait is the work's cost, not launch overhead."""
    planted = _loop(tmp_path, read_every=0, pause_every=10)
    idle = _idle_launches(planted)
    assert {10, 20} <= set(idle)  # the launches after each pause, with nothing in flight (ProfileData)
    report = jaxdiag.report(planted, thresholds=Thresholds(min_finding_ms=0.01))
    (launching,) = [f for f in report.findings if f.kind == "host_wait" and f.evidence["kind"] == "dispatch"]
    named = {int(s) for s in launching.evidence["per_step"]}
    if named <= {0, 10, 20} and "one_off_step" not in launching.evidence:  # as planned (a loaded host can add some)
        assert launching.evidence.get("after_host_work"), launching.message
        assert "put more work" not in launching.suggestion and "part of what that work costs" in launching.suggestion
    # Applied (the work off the loop): no launch but the first finds the device's queue empty.
    applied = _idle_launches(_loop(tmp_path, read_every=0))
    assert len(set(applied) - {0}) < len(set(idle) - {0})

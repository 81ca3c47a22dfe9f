"""Eager code whose helpers compile only in the run's warm-up step is a one-off, even where the log calls one
of them a recompile.

The pattern of a learning-rate schedule evaluated eagerly each step (``float(schedule(i))``): JAX's helpers
(``multiply``, ``power``) compile at the loop's first step, where the training step compiles too, and never
again, as the shapes do not change. A helper JAX shares between lines had traces at other shapes from code
run before (model set-up), so the compile log calls its compile here "first compile seen". Truth comes from
the trace with jaxlib's ``ProfileData`` alone (``trace_truth``): XLA's compiles are the backend-compile spans,
steps the ``StepTraceAnnotation`` spans.
"""

from __future__ import annotations

from pathlib import Path

import jaxdiag
from tests.analyses import trace_truth

STEPS = 12


def _compiles_by_step(run_dir: Path) -> dict[int, int]:
    (xplane,) = run_dir.glob("*.xplane.pb")
    spans = trace_truth.named_spans(xplane, "train", "backend_compile", "backend_compile_and_load")
    steps = [(a, b, int(stats["step_num"])) for a, b, stats in spans["train"]]
    out: dict[int, int] = {}
    for a, _, _ in spans["backend_compile"] + spans["backend_compile_and_load"]:
        step = next((n for lo, hi, n in steps if lo <= a < hi), -1)
        out[step] = out.get(step, 0) + 1
    return out


_SCHEDULED_LOOP = """
import sys
import jax, jax.numpy as jnp, numpy as np
import jaxdiag

@jax.jit
def scheduled_step(w, x, lr):
    return w - lr * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)

logdir, run, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
w = jnp.full((32, 32), 1e-2) * jnp.power(jnp.ones((32, 32)), 2.0)  # the helpers, at another shape
x = jnp.ones((8, 32))
with jaxdiag.profile(logdir, run=run):
    for i in range(steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            if run == "eager":  # jnp on Python numbers, outside jit
                lr = float(jnp.multiply(0.05, jnp.power(0.9, float(i // 4))))
            else:  # the advice: the same numbers with NumPy
                lr = float(np.multiply(0.05, np.power(0.9, float(i // 4))))
            w = scheduled_step(w, x, lr)
    np.asarray(w)
"""


def _scheduled_loop(logdir: Path, *, eager_schedule: bool) -> Path:
    """The loop in a fresh process: whether JAX's helpers compile, and when, must not depend on what the tests
    before it computed."""
    import subprocess
    import sys

    run = "eager" if eager_schedule else "numpy"
    subprocess.run([sys.executable, "-c", _SCHEDULED_LOOP, str(logdir), run, str(STEPS)], check=True, timeout=300)
    return logdir / "plugins" / "profile" / run


def test_helpers_compiled_only_in_the_warm_up_step_are_paid_once(tmp_path):
    run_dir = _scheduled_loop(tmp_path, eager_schedule=True)
    compiles = _compiles_by_step(run_dir)
    assert set(compiles) == {0} and compiles[0] >= 3  # the step and the helpers, all at step 0, none after
    eager = [f for f in jaxdiag.report(run_dir).findings if f.evidence.get("origin") == "jax-internal"]
    assert eager  # one per call on the line (``multiply``, ``power``)
    assert any("first compile seen" in f.message for f in eager)  # a shared helper held traces from the set-up
    for finding in eager:
        assert finding.severity.value == "info" and finding.time_lost_ms == 0 and finding.evidence["one_off"]
        assert "all in the run's warm-up step, which also compiled `scheduled_step` for the first" in finding.message
        assert "Each of these compiled once" in finding.suggestion


def test_the_schedule_made_with_numpy_compiles_no_helper(tmp_path):
    run_dir = _scheduled_loop(tmp_path, eager_schedule=False)
    assert _compiles_by_step(run_dir) == {0: 1}  # the training step alone
    report = jaxdiag.report(run_dir)
    assert not [f for f in report.findings if f.evidence.get("origin") == "jax-internal"]

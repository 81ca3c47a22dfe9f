"""A recompile whose earlier compile came before recording began: the report says what is not known and
why, and its advice, applied, lets the compile log name the cause.

The pattern of a script that warms its step up before the capture window: the warm-up call gets NumPy
parameters, the loop the committed ones the step returns, so the loop's first call compiles again. A
capture's recording starts with its window and never saw the warm-up's compile. Truth comes from the
trace with jaxlib's ``ProfileData`` alone (``trace_truth``): XLA's compiles are the backend-compile spans.
"""

from __future__ import annotations

from pathlib import Path

import jaxdiag
from jaxdiag.analyses.recompile_advice import UNSEEN
from tests.analyses import trace_truth


def _backend_compiles(run_dir: Path) -> int:
    (xplane,) = run_dir.glob("*.xplane.pb")
    spans = trace_truth.named_spans(xplane, "backend_compile", "backend_compile_and_load")
    return sum(len(v) for v in spans.values())


_WARMED_LOOP = """
import contextlib, sys
import jax, jax.numpy as jnp, numpy as np
import jaxdiag

@jax.jit
def warmed_step(params, x):
    grads = jax.grad(lambda p: jnp.mean(jnp.tanh(x @ p["w"]) ** 2))(params)
    return {"w": params["w"] - 1e-3 * grads["w"]}

logdir, run = sys.argv[1], sys.argv[2]
x = jax.device_put(np.ones((16, 64), np.float32), jax.devices()[0])  # committed: so is what the step returns
params = {"w": np.full((64, 64), 1e-2, np.float32)}
# The advice: record from the first call (``jaxdiag.watch(True)`` at the top of a script).
with jaxdiag.watch() if run == "recorded" else contextlib.nullcontext():
    params = warmed_step(params, x)  # the warm-up, with NumPy parameters
    with jaxdiag.profile(logdir, run=run):
        for _ in range(6):
            params = warmed_step(params, x)
        np.asarray(params["w"])
"""


def _warmed_loop(logdir: Path, *, recorded_from_start: bool) -> Path:
    """The program in a fresh process: what recording saw before the window must not depend on the tests
    before it."""
    import subprocess
    import sys

    run = "recorded" if recorded_from_start else "late"
    subprocess.run([sys.executable, "-c", _WARMED_LOOP, str(logdir), run], check=True, timeout=300)
    return logdir / "plugins" / "profile" / run


def test_a_recompile_after_an_unrecorded_compile_says_the_cause_is_not_known(tmp_path):
    run_dir = _warmed_loop(tmp_path, recorded_from_start=False)
    assert _backend_compiles(run_dir) == 1  # the committed parameters, at the loop's first call
    (finding,) = [f for f in jaxdiag.report(run_dir).findings if f.kind == "recompile"]
    assert finding.evidence["function"] == "warmed_step"
    assert "cause: first compile seen: JAX already held 1 trace(s)" in finding.message
    assert "cause: first compile." not in finding.message
    assert finding.suggestion == UNSEEN


def test_recording_from_the_first_call_names_the_cause(tmp_path):
    run_dir = _warmed_loop(tmp_path, recorded_from_start=True)
    assert _backend_compiles(run_dir) == 1
    (finding,) = [f for f in jaxdiag.report(run_dir).findings if f.kind == "recompile"]
    assert "params['w'] changed from uncommitted" in finding.message
    assert "first compile seen" not in finding.message
    assert "`jax.device_put(x, sharding)`" in finding.suggestion

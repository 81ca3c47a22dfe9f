"""A run whose programs JAX's persistent compilation cache served: the compiles are on the timeline all the same.

JAX then traces and lowers each program and loads it from the cache, with no backend compile on the
timeline. The first step's wait is that, not launch overhead; the remainder batch's recompile is one too.
The program runs twice in fresh processes (the in-memory cache would serve the second run otherwise), the
first filling the cache; truth from the second's trace with jaxlib's ``ProfileData`` alone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jaxdiag
from tests.analyses import trace_truth

PROGRAM = """
import sys
import jax, jax.numpy as jnp, numpy as np, jaxdiag
jax.config.update("jax_compilation_cache_dir", sys.argv[2])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

@jax.jit
def step(w, x):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return w - 1e-3 * x.mean(), x.mean()

w = jnp.full((256, 256), 1e-2, dtype=jnp.float32)
rng = np.random.default_rng(0)
with jaxdiag.profile(sys.argv[1], run="cached"):
    for i in range(20):
        w, loss = step(w, rng.standard_normal((64 if i < 19 else 16, 256)).astype(np.float32))
    float(loss)
"""


def _run(logdir: Path, cache: Path) -> Path:
    subprocess.run([sys.executable, "-c", PROGRAM, str(logdir), str(cache)], check=True, timeout=300)
    return logdir / "plugins" / "profile" / "cached"


def test_compiles_the_persistent_cache_served_are_compiles_not_launch_overhead(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path / "first", cache)  # fills the cache
    run_dir = _run(tmp_path / "second", cache)
    (xplane,) = run_dir.glob("*.xplane.pb")
    spans = trace_truth.named_spans(
        xplane, "backend_compile", "backend_compile_and_load", "lower_sharding_computation", "PjitFunction(step)"
    )
    assert not spans["backend_compile"] and not spans["backend_compile_and_load"]  # nothing compiled: loaded
    assert len(spans["lower_sharding_computation"]) == 2  # the program, and its remainder-batch version
    report = jaxdiag.report(run_dir)
    compiles = [c for c in report.recompiles if c.function == "step"]
    assert len(compiles) == 2 and all("persistent compilation cache" in (c.cause or "") for c in compiles)
    first_call = spans["PjitFunction(step)"][0]
    assert compiles[0].step == 0 and compiles[0].compile_ms * 1e6 <= first_call[1] - first_call[0]
    # The first step's wait is the compile's: no launch finding claims it.
    for f in report.findings:
        if f.kind == "host_wait" and f.evidence["kind"] == "dispatch":
            assert f.evidence.get("one_off_step") != 0 and f.time_lost_ms < compiles[0].compile_ms, f.message
    (recompile,) = [f for f in report.findings if f.kind == "recompile"]  # joined to the log: its cause known
    assert recompile.evidence["count"] == 1 and "x shape axis 0 changed 64 -> 16" in recompile.message

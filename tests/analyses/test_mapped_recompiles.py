"""A ``jax.pmap`` training loop's recompiles in the report, each cause's advice applied to the program.

The pattern of JAX's SPMD MNIST example: NumPy parameters replicated for ``pmap``, a remainder
batch at the end of each epoch. The trace names every mapped program ``jit__fun`` (JAX 0.9 on; 0.8
``jit_call_wrapped``), not the user's function; the compile log names it, and its program. Truth
comes from the trace with jaxlib's ``ProfileData`` alone (``trace_truth``): XLA's compiles are the
host's backend-compile spans.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from tests.analyses import trace_truth

ROWS = 4  # per device in a full batch; the remainder batch has 1


def _backend_compiles(run_dir: Path) -> int:
    (xplane,) = run_dir.glob("*.xplane.pb")
    spans = trace_truth.named_spans(xplane, "backend_compile", "backend_compile_and_load")
    return sum(len(v) for v in spans.values())


def _mapped_epochs(logdir: Path, *, placed: bool, drop_remainder: bool) -> Path:
    """Two epochs of a pmapped update over 4 full batches and a remainder batch (unless dropped)."""
    n = jax.device_count()

    def spmd_update(params, batch):  # defined anew for each program: JAX's caches hold none of its compiles
        grads = jax.grad(lambda p: jnp.mean(jnp.tanh(batch @ p["w"]) ** 2))(params)
        return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * jax.lax.psum(g, "batch"), params, grads)

    update = jax.pmap(spmd_update, axis_name="batch")
    data = np.random.default_rng(0).standard_normal((n * (4 * ROWS + 1), 64)).astype(np.float32)
    batches = [data[i : i + n * ROWS] for i in range(0, len(data), n * ROWS)]
    if drop_remainder:
        batches = [b for b in batches if len(b) == n * ROWS]
    params = {"w": np.broadcast_to(np.full((64, 64), 1e-2, np.float32), (n, 64, 64))}  # as the example replicates
    if placed:  # the advice: on the devices, with the sharding the update returns them with
        params = jax.device_put(params, NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), P("batch")))
    run = f"mapped_{placed}_{drop_remainder}"
    with jaxdiag.profile(logdir, run=run):
        for _epoch in range(2):
            for batch in batches:
                params = update(params, batch.reshape(n, -1, 64))
        np.asarray(params["w"])
    return logdir / "plugins" / "profile" / run


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    if jax.device_count() < 2:
        pytest.skip("needs several devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    run_dir = _mapped_epochs(tmp_path_factory.mktemp("mapped"), placed=False, drop_remainder=False)
    return jaxdiag.report(run_dir), run_dir


def test_the_recompiles_are_named_after_the_mapped_function_with_their_causes(planted):
    report, run_dir = planted
    assert _backend_compiles(run_dir) == 3  # first; the committed parameters; the remainder batch
    (finding,) = [f for f in report.findings if f.kind == "recompile"]
    assert finding.evidence["function"] == "spmd_update" and finding.evidence["count"] == 2
    assert "cause unknown" not in finding.message
    assert "params['w'] changed from uncommitted" in finding.message
    assert f"batch shape axis 1 changed {ROWS} -> 1" in finding.message
    assert "`jax.device_put(x, sharding)`" in finding.suggestion
    assert f"A remainder batch: axis 1 shrank once, {ROWS} -> 1" in finding.suggestion
    assert "bucket" not in finding.suggestion


def test_each_cause_applied_removes_its_compile(planted, tmp_path):
    _, run_dir = planted
    placed = _mapped_epochs(tmp_path, placed=True, drop_remainder=False)
    assert _backend_compiles(placed) == 2  # the remainder batch's compile is left
    both = _mapped_epochs(tmp_path, placed=True, drop_remainder=True)
    assert _backend_compiles(both) == 1 < _backend_compiles(run_dir)
    # (This process's recorder saw the planted program's ``spmd_update``: the applied program's first compile
    # reads as a new function object. No compile is for a commitment or a shape.)
    again = [f for f in jaxdiag.report(both).findings if f.kind == "recompile"]
    assert {ch["what"] for f in again for ch in f.evidence["changes"]} <= {"function"}

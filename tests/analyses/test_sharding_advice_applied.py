"""Each resharding advice, applied to the program it was given for, removes the collective it targets.

Real sharded programs on 8 CPU devices (a 2x4 ``data`` x ``model`` mesh): a weight
split over the dimension its matmul contracts is all-gathered on every call. The
finding names the spec to use instead (never the spec the weight already has); the
program run again with that spec has no all-gather of the weight.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag.analyses.sharding import analyze_records
from jaxdiag.recording import compile_log
from tests import sharding_programs as programs


def mesh_2x4() -> jax.sharding.Mesh:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return programs.mesh(*programs.MESH_2X4)


def gathers(body: Callable, w_spec: P) -> list:
    """The implicit-resharding findings of one run of ``body(w, x)`` with ``w`` placed by ``w_spec``."""
    mesh = mesh_2x4()

    def step(params, x):  # a new function each run: its own compile
        return body(params["w"], x)

    w = jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, w_spec))
    x = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, P("data", None)))
    with compile_log.collecting() as got:
        jax.block_until_ready(jaxdiag.jit(step)({"w": w}, x))
    result = analyze_records([r.to_dict() for r in got.records])
    return [f for f in result.findings if f.kind == "implicit_resharding" and "params['w']" in f.evidence["arrays"]]


@pytest.mark.parametrize(
    ("body", "planted", "advised"),
    [
        (lambda w, x: jnp.tanh(x @ w).sum(axis=1), P("model", None), P(None, "model")),
        (lambda w, x: jnp.tanh(x @ w.T).sum(axis=1), P(None, "model"), P("model", None)),
    ],
    ids=["x @ w, rows split", "x @ w.T, columns split"],
)
def test_resharding_advice_applied_removes_the_gather(body: Callable, planted: P, advised: P) -> None:
    (found,) = gathers(body, planted)
    ev = found.evidence
    assert ev["kind"] == "all-gather" and ev["mesh_axes"] == ["model"] and "undoes the sharding" in found.message
    (suggested,) = ev["suggested_specs"].values()
    assert P(*suggested) == advised and P(*suggested) != planted
    assert f"params['w']: {planted} -> {advised}".replace("PartitionSpec", "P") in found.suggestion
    assert gathers(body, P(*suggested)) == []  # applied: no all-gather of w left

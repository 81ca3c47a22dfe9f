"""Which array a reduction serves, on real programs: a gradient's weight, never a value it is only compared with."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.recording import compile_log
from jaxdiag.sharding.facts import ShardingFacts
from tests import sharding_programs as programs


def collectives(fn, *args):
    with compile_log.collecting() as got:
        jax.block_until_ready(jaxdiag.jit(fn)(*args))
    (record,) = got.records
    return ShardingFacts.from_dict(record.sharding).collectives


def mesh_2x4():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return programs.mesh(*programs.MESH_2X4)


def test_forward_all_reduce_of_a_prediction_is_not_an_update_of_the_target() -> None:
    m = mesh_2x4()

    def step(w, x, y):  # row-parallel: x @ w sums over 'model'; the sum is compared with y
        loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.1 * g, loss

    colls = collectives(
        step,
        programs.put(jnp.ones((64, 32)), m, "model", None),
        programs.put(jnp.ones((16, 64)), m, None, "model"),
        programs.put(jnp.ones((16, 32)), m),
    )
    reduces = [c for c in colls if c.kind == "all-reduce" and c.mesh_axes == ("model",)]
    assert reduces, colls
    for c in reduces:
        assert not (c.array_role == "update" and "y" in c.arrays), c


def test_gradient_all_reduce_is_the_update_of_its_weight() -> None:
    m = mesh_2x4()

    def step(w, x):
        g = jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)
        return w - 0.1 * g

    colls = collectives(step, programs.put(jnp.ones((64, 32)), m), programs.put(jnp.ones((16, 64)), m, "data"))
    (c,) = [c for c in colls if c.kind == "all-reduce"]
    assert c.array_role == "update" and c.arrays == ("w",) and c.mesh_axes == ("data",)

"""``jaxdiag.watch`` on real library code: each planted recompile names the function and the argument.

Flax NNX, Equinox and optax as installed (the dev extra); ``pmap`` on the 8 host
devices ``tests/conftest.py`` forces.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

import jaxdiag
from jaxdiag.recording.advice import advise
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, CompileRecord


def compiles_of(watched: jaxdiag.watch, name: str) -> list[CompileRecord]:
    return [r for r in watched.records if r.function == name and r.origin != JAX_INTERNAL_ORIGIN]


def changes(record: CompileRecord) -> list[tuple[str, str, str | None, str | None]]:
    assert record.explanation is not None, record
    return [(c.path, c.what, c.old, c.new) for c in record.explanation.changes]


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(3, 8, rngs=rngs)
        self.out = nnx.Linear(8, 2, rngs=rngs)
        self.activation = "relu"  # a plain attribute: static in the module's graph

    def __call__(self, x: jax.Array) -> jax.Array:
        act = jax.nn.relu if self.activation == "relu" else jnp.tanh
        return self.out(act(self.hidden(x)))


def test_flax_nnx_train_step_with_an_optimizer():
    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, x, y):
        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    def batch(n):
        return jnp.ones((n, 3)), jnp.zeros((n, 2))

    with jaxdiag.watch() as w:
        for n in (4, 4, 6):  # the 6-row batch recompiles
            train_step(model, optimizer, *batch(n))
        model.activation = "tanh"  # a static field of the module: recompiles
        train_step(model, optimizer, *batch(6))
        train_step(model, optimizer, *batch(6))
    first, shape, field = compiles_of(w, "train_step")
    assert first.qualname.endswith("test_flax_nnx_train_step_with_an_optimizer.<locals>.train_step")
    assert first.source.startswith(__file__) and first.call_site.startswith(__file__)
    paths = {a.path: a for a in first.args}
    assert paths["args[0].hidden.kernel.value"].shape == (3, 8)
    assert paths["args[1].opt_state[0].mu['out']['bias'].value"].shape == (2,)
    assert paths["args[0].activation"].value == "'relu'"
    assert changes(shape) == [("args[2]", "shape", "4", "6"), ("args[3]", "shape", "4", "6")]
    assert changes(field) == [("args[0].activation", "static", "'relu'", "'tanh'")]
    assert field.explanation.summary.startswith("train_step: static model.activation changed 'relu' -> 'tanh'")


class Block(eqx.Module):
    weight: jax.Array
    activation: str = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.weight @ x
        return jnp.tanh(y) if self.activation == "tanh" else jax.nn.relu(y)


def test_equinox_filter_jit_model_call():
    @eqx.filter_jit
    def predict(block, x, repeats=1):
        for _ in range(repeats):
            x = block(x)
        return x

    block = Block(jnp.eye(3), "tanh")
    x = jnp.ones(3)
    with jaxdiag.watch() as w:
        predict(block, x)
        predict(block, x)
        predict(block, x.astype(jnp.bfloat16))  # dtype
        predict(Block(block.weight, "relu"), x)  # static field
        predict(Block(block.weight, "relu"), x, repeats=2)  # Python scalar: static under filter_jit
        predict(Block(block.weight, "relu"), x, repeats=3)
    first, dtype, field, appeared, value = compiles_of(w, "predict")
    assert first.qualname.endswith("test_equinox_filter_jit_model_call.<locals>.predict")
    assert first.source.startswith(__file__) and first.call_site.startswith(__file__)
    assert [(a.path, a.kind) for a in first.args] == [
        ("args[0].activation", "static"),
        ("args[0].weight", "array"),
        ("args[1]", "array"),
    ]
    assert changes(dtype) == [("args[1]", "dtype", "float32", "bfloat16")]
    assert changes(field) == [("args[0].activation", "static", "'tanh'", "'relu'")]
    assert changes(appeared) == [("kwargs['repeats']", "structure", None, "static 2")]
    assert changes(value) == [("kwargs['repeats']", "static", "2", "3")]


def test_optax_update_under_jit():
    tx = optax.adam(1e-2)

    @jax.jit
    def update(params, opt_state, grads):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params = {"w": jnp.ones((4, 2)), "b": jnp.zeros(2)}
    opt_state = tx.init(params)
    with jaxdiag.watch() as w:
        for dtype in (jnp.float32, jnp.float32, jnp.bfloat16):  # bf16 gradients recompile
            grads = jax.tree.map(lambda p: jnp.full_like(p, 0.1, dtype=dtype), params)
            new_params, _ = update(params, opt_state, grads)
    first, second = compiles_of(w, "update")
    assert "args[1][0].mu['w']" in {a.path for a in first.args}
    assert changes(second) == [
        ("args[2]['b']", "dtype", "float32", "bfloat16"),
        ("args[2]['w']", "dtype", "float32", "bfloat16"),
    ]
    assert new_params["w"].dtype == jnp.float32


def test_vmap_and_scan_inside_jit():
    def rollout(weights, xs):
        def body(carry, x):
            carry = jnp.tanh(carry @ weights + x)
            return carry, carry.sum()

        return jax.lax.scan(body, jnp.zeros(4), xs)[1]

    batched = jax.jit(jax.vmap(rollout, in_axes=(None, 0)))
    weights = jnp.eye(4)
    with jaxdiag.watch() as w:
        batched(weights, jnp.ones((2, 5, 4)))
        batched(weights, jnp.ones((2, 5, 4)))
        batched(weights, jnp.ones((3, 5, 4)))  # batch (vmap) axis
        out = batched(weights, jnp.ones((3, 7, 4)))  # scan length
    first, batch, length = compiles_of(w, "rollout")
    assert first.source.startswith(__file__)
    assert changes(batch) == [("args[1]", "shape", "2", "3")]
    assert changes(length) == [("args[1]", "shape", "5", "7")]
    assert [c.axis for c in batch.explanation.changes + length.explanation.changes] == [0, 1]
    assert out.shape == (3, 7)


def test_pmap_on_host_devices():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")

    def scaled(x, factor):
        return jax.lax.psum(x * factor, "i")

    p = jax.pmap(scaled, axis_name="i", static_broadcasted_argnums=1)
    with jaxdiag.watch() as w:
        p(jnp.ones((8, 2)), 2)
        p(jnp.ones((8, 2)), 2)
        p(jnp.ones((8, 3)), 2)  # per-device shape
        out = p(jnp.ones((8, 3)), 5)  # static broadcast argument
    first, shape, static = compiles_of(w, "scaled")
    assert first.qualname.endswith("test_pmap_on_host_devices.<locals>.scaled")
    assert first.call_site.startswith(__file__)
    assert [(a.path, a.kind) for a in first.args] == [("args[0]", "array"), ("args[1]", "static")]
    assert changes(shape) == [("args[0]", "shape", "2", "3")]
    assert changes(static) == [("args[1]", "static", "2", "5")]
    assert float(out[0, 0]) == 40.0


def test_pmap_of_numpy_parameters_compiles_again_for_its_own_outputs():
    """JAX's SPMD MNIST example replicates NumPy parameters for ``pmap``; the update returns them committed to
    the devices, and the second call compiles again. The record names the parameters' commitment (NumPy
    arrays have no sharding to compare); putting them on the devices first, as its advice says, leaves one
    compile."""
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    def new_update():  # a new function each time: JAX's caches hold none of its compiles
        def spmd_update(params, batch):
            grads = jax.grad(lambda p: jnp.mean((batch @ p["w"]) ** 2))(params)
            return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * jax.lax.psum(g, "batch"), params, grads)

        return spmd_update

    batch = np.ones((8, 4, 16), np.float32)
    start = {"w": np.broadcast_to(np.ones((16, 16), np.float32), (8, 16, 16))}

    def train(params):
        update = jax.pmap(new_update(), axis_name="batch")
        with jaxdiag.watch() as w:
            for _ in range(3):
                params = update(params, batch)
        return compiles_of(w, "spmd_update")

    first, again = train(start)
    assert first.args[0].committed is False and again.args[0].committed is True
    assert changes(again) == [("args[0]['w']", "committed", "False", "True")]
    assert "params['w'] changed from uncommitted" in again.explanation.summary
    (advice,) = advise([first, again])
    assert advice.kind == "committed" and "jax.device_put(x, sharding)" in advice.suggestion
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    assert len(train(jax.device_put(start, NamedSharding(mesh, P("batch"))))) == 1  # the advice applied


def test_a_new_closure_each_step_is_named_as_such():
    """Re-creating the jitted function each step recompiles; the record says so."""
    with jaxdiag.watch(jax_internals=False) as w:
        for scale in (1.0, 2.0):
            jax.jit(lambda x, s=scale: x * s)(jnp.ones(2))
    first, second = w.records
    assert [c.what for c in second.explanation.changes] == ["function"]
    assert first.function_id != second.function_id


def test_records_name_no_library_frame_as_the_call_site():
    import equinox
    import flax

    lib_dirs = tuple(m.__file__.rsplit("/", 1)[0] for m in (equinox, flax, jax))
    model = MLP(nnx.Rngs(1))
    with jaxdiag.watch() as w:
        nnx.jit(lambda m, x: m(x))(model, jnp.ones((1, 3)))
        eqx.filter_jit(lambda b, x: b(x))(Block(jnp.eye(3), "relu"), jnp.ones(3))
    sites = {r.call_site for r in w.records}
    assert sites and not any(s.startswith(lib_dirs) for s in sites)


@dataclasses.dataclass(frozen=True)
class Settings:  # a plain dataclass, not a pytree: one static leaf under filter_jit
    depth: int = dataclasses.field(default=1, metadata={"static": True})


def test_a_plain_dataclass_with_static_metadata_is_one_static_leaf():
    @eqx.filter_jit
    def run(x, settings):
        return x * settings.depth

    with jaxdiag.watch(jax_internals=False) as w:
        run(jnp.ones(2), Settings(1))
        run(jnp.ones(2), Settings(2))
    first, second = w.records
    assert [(a.path, a.kind) for a in first.args] == [("args[0]", "array"), ("args[1]", "static")]
    assert changes(second) == [("args[1]", "static", "Settings(depth=1)", "Settings(depth=2)")]

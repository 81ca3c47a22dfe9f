"""Each piece of advice, applied to the program it was given for, removes the recompile.

Every test plants a recompile in a real program, checks the advice jaxdiag gives
for it, then runs the program changed as the suggestion says and checks that the
function now compiles once (or once per bucket) and that the advice is gone.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag.jax_internals import transforms
from jaxdiag.recording.advice import Advice, advise
from jaxdiag.recording.records import CompileRecord


def watched(program: Callable[[], None], *, internals: bool = False) -> list[CompileRecord]:
    with jaxdiag.watch(jax_internals=internals) as w:
        program()
    return w.records


def advice_of(records: list[CompileRecord], kind: str) -> list[Advice]:
    return [a for a in advise(records) if a.kind == kind]


def compiles(records: list[CompileRecord], name: str) -> int:
    return sum(r.function == name for r in records)


def check(
    planted: Callable[[], None], fixed: Callable[[], None], kind: str, name: str, says: str, *, internals: bool = False
) -> Advice:
    before = watched(planted, internals=internals)
    (advice,) = advice_of(before, kind)
    assert says in advice.suggestion, advice
    after = watched(fixed, internals=internals)
    assert compiles(after, name) == 1, [r.explanation for r in after]
    assert advice_of(after, kind) == []
    return advice


def mesh_8() -> jax.sharding.Mesh:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


def test_sharding_advice_places_the_input_once() -> None:
    mesh = mesh_8()
    a = np.ones((8, 16), np.float32)

    def planted():
        f = jax.jit(lambda sharded: sharded * 2)
        f(jax.device_put(a, NamedSharding(mesh, P("x", None))))
        f(jax.device_put(a, NamedSharding(mesh, P(None, "x"))))

    def fixed():  # device_put once, with one sharding, and pass the placed array every call
        f = jax.jit(lambda sharded: sharded * 2)
        placed = jax.device_put(a, NamedSharding(mesh, P("x", None)))
        f(placed)
        f(placed)

    advice = check(planted, fixed, "sharding", "<lambda>", "jax.device_put(x, sharding) once")
    assert "in_shardings" not in advice.suggestion
    # Why in_shardings is not advised: for an input committed to another sharding it raises.
    g = jax.jit(lambda sharded: sharded * 2, in_shardings=NamedSharding(mesh, P("x", None)))
    with pytest.raises(ValueError, match="does not match the sharding"):
        g(jax.device_put(a, NamedSharding(mesh, P(None, "x"))))


def test_weak_type_advice_types_the_scalar() -> None:
    def planted():
        f = jax.jit(lambda x, lr: x * lr)
        f(jnp.ones(3), 0.5)
        f(jnp.ones(3), jnp.float32(0.5))

    def fixed():
        f = jax.jit(lambda x, lr: x * lr)
        f(jnp.ones(3), jnp.float32(0.5))
        f(jnp.ones(3), jnp.float32(0.25))

    check(planted, fixed, "weak_type", "<lambda>", "jnp.float32(x) every time")


def test_weak_array_advice_gives_the_array_its_dtype() -> None:
    """An array made from a Python scalar (``jnp.full(shape, 0.1)``) is weakly typed; the update returns a
    typed one, so the second call compiles again. The cause names a weakly typed array, not a Python
    scalar, and the advice (the report's too) gives the array its dtype where it is made."""
    from jaxdiag.analyses.recompile_advice import suggestion_for

    def planted():
        def weak_update(w):
            return w - 0.01 * w.sum()

        update = jax.jit(weak_update)
        w = jnp.full((4, 4), 0.1)
        update(update(w))

    def fixed():
        def weak_update(w):
            return w - 0.01 * w.sum()

        update = jax.jit(weak_update)
        w = jnp.full((4, 4), 0.1, dtype=jnp.float32)
        update(update(w))

    records = watched(planted)
    again = records[-1].explanation
    assert "w changed from weakly typed (an array made from a Python scalar" in again.summary
    assert "Python scalar to a typed array" not in again.summary
    assert suggestion_for([c.to_dict() for c in again.changes]).startswith("Give the array its dtype where it is made")
    advice = check(planted, fixed, "weak_type", "weak_update", "jnp.full(shape, value, dtype=jnp.float32)")
    assert "weakly typed array" in advice.message


def test_static_values_advice_makes_the_argument_traced() -> None:
    def planted():
        f = jax.jit(lambda x, n: x * n, static_argnums=1)
        for n in (2, 3, 4):
            f(jnp.ones(3), n)

    def fixed():
        f = jax.jit(lambda x, n: x * n)
        for n in (2, 3, 4):
            f(jnp.ones(3), n)

    check(planted, fixed, "static_values", "<lambda>", "make n a traced argument")


def test_single_static_change_advice() -> None:
    def planted():
        f = jax.jit(lambda x, mode: x * 2 if mode == "double" else x, static_argnums=1)
        f(jnp.ones(3), "double")
        f(jnp.ones(3), "same")

    def fixed():  # kept fixed
        f = jax.jit(lambda x, mode: x * 2 if mode == "double" else x, static_argnums=1)
        f(jnp.ones(3), "double")
        f(jnp.ones(4)[:3], "double")

    check(planted, fixed, "static", "<lambda>", "keep mode fixed")


def test_new_function_advice_jits_once() -> None:
    def planted():
        for i in range(2):
            jax.jit(lambda v, i=i: v + i)(jnp.ones(3))

    def fixed():
        f = jax.jit(lambda v, i: v + i)
        for i in range(2):
            f(jnp.ones(3), i)

    check(planted, fixed, "new_function", "<lambda>", "jit once and pass changing values as arguments")


def test_structure_advice_passes_a_placeholder() -> None:
    def planted():
        f = jax.jit(lambda p: sum(p.values()))
        f({"w": jnp.ones(2)})
        f({"w": jnp.ones(2), "b": jnp.ones(2)})

    def fixed():
        f = jax.jit(lambda p: sum(p.values()))
        f({"w": jnp.ones(2), "b": jnp.zeros(2)})  # the placeholder
        f({"w": jnp.ones(2), "b": jnp.ones(2)})

    check(planted, fixed, "structure", "<lambda>", "always pass p['b'] (a placeholder")


def test_container_advice_keeps_one_container_type() -> None:
    def planted():
        f = jax.jit(lambda pair: pair[0] + pair[1])
        f((jnp.ones(2), jnp.ones(2)))
        f([jnp.ones(2), jnp.ones(2)])

    def fixed():
        f = jax.jit(lambda pair: pair[0] + pair[1])
        f((jnp.ones(2), jnp.ones(2)))
        f(tuple([jnp.ones(2), jnp.ones(2)]))

    check(planted, fixed, "container", "<lambda>", "pass pair as one container type")


def test_dtype_advice_casts_once() -> None:
    def planted():
        f = jax.jit(lambda x: x + 1)
        f(jnp.ones(3, jnp.float32))
        f(jnp.ones(3, jnp.bfloat16))

    def fixed():
        f = jax.jit(lambda x: x + 1)
        f(jnp.ones(3, jnp.float32))
        f(jnp.ones(3, jnp.bfloat16).astype(jnp.float32))

    check(planted, fixed, "dtype", "<lambda>", "cast x to one dtype")


@pytest.mark.skipif(transforms.config_state() is None, reason="this JAX does not name its config states")
def test_config_advice_sets_it_once() -> None:
    x = jnp.ones((4, 4))

    def planted():
        f = jax.jit(lambda a: a @ a)
        f(x)
        with jax.default_matmul_precision("highest"):
            f(x)

    def fixed():
        f = jax.jit(lambda a: a @ a)
        with jax.default_matmul_precision("highest"):  # one setting for every call
            f(x)
            f(x)

    check(planted, fixed, "config", "<lambda>", "set jax_default_matmul_precision once")


def test_jit_options_advice_builds_one_jit_object() -> None:
    def planted():
        def update(params, grads):
            return params - grads

        jax.jit(update)(jnp.ones(3), jnp.ones(3))
        jax.jit(update, donate_argnums=0)(jnp.ones(3), jnp.ones(3))

    def fixed():
        def update(params, grads):
            return params - grads

        step = jax.jit(update, donate_argnums=0)
        step(jnp.ones(3), jnp.ones(3))
        step(jnp.ones(3), jnp.ones(3))

    check(planted, fixed, "jit_options", "update", "build one jax.jit of the function")


def test_single_size_change_advice_pads_to_the_largest() -> None:
    def planted():
        f = jax.jit(lambda batch: batch.sum())
        f(jnp.ones((32, 16)))
        f(jnp.ones((48, 16)))

    def fixed():
        f = jax.jit(lambda batch: batch.sum())
        f(jnp.pad(jnp.ones((32, 16)), ((0, 16), (0, 0))))  # padded to 48
        f(jnp.ones((48, 16)))

    check(planted, fixed, "shape", "<lambda>", "pad batch to one size (the largest seen: 48)")


def test_padding_buckets_applied_compile_once_per_bucket() -> None:
    sizes = (100, 120, 128, 250, 256)

    def planted():
        f = jax.jit(lambda tokens: tokens.sum())
        for n in sizes:
            f(jnp.ones((2, n)))

    before = watched(planted)
    (advice,) = advice_of(before, "padding")
    buckets = advice.evidence["buckets"]
    assert advice.evidence["recompiles_from_axis"] == len(sizes) - 1

    def fixed():
        f = jax.jit(lambda tokens: tokens.sum())
        for n in sizes:
            edge = next(b for b in buckets if b >= n)
            f(jnp.pad(jnp.ones((2, n)), ((0, 0), (0, edge - n))))

    after = watched(fixed)
    assert compiles(after, "<lambda>") == len(buckets) < len(sizes)


def test_eager_op_advice_moves_it_inside_the_jitted_step() -> None:
    def planted():
        step = jax.jit(lambda x: x.sum())
        for n in (33, 34):
            x = jnp.ones(n, jnp.float32)
            step(x - 7)  # eager subtract on a new shape each time

    def fixed():
        step = jax.jit(lambda x: (x - 7).sum())  # moved inside
        x = jnp.ones(33, jnp.float32)
        step(x)

    before = watched(planted, internals=True)
    (advice,) = advice_of(before, "eager_op")
    assert "move the subtract at " in advice.suggestion and "inside the jitted step" in advice.suggestion
    after = watched(fixed, internals=True)
    assert [r for r in after if r.function == "subtract"] == []
    assert advice_of(after, "eager_op") == []

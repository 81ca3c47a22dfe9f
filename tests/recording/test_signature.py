"""Argument signatures, function identity and call sites, from real arguments and tracers."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxdiag.recording import call_site, signature
from jaxdiag.recording.records import ArgSignature


class Point(NamedTuple):
    x: Any
    y: Any


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["tag"])
@dataclasses.dataclass
class Layer:
    w: Any
    tag: str


def by_path(sigs: tuple[ArgSignature, ...]) -> dict[str, ArgSignature]:
    return {s.path: s for s in sigs}


def test_paths_follow_keystr_for_args_and_kwargs():
    params = {"w": jnp.ones((2, 3)), "layers": [Layer(jnp.zeros(4), "a")]}
    sigs, tree = signature.signature_of((params, Point(1.0, 2)), {"scale": np.float32(2.0)})
    assert list(by_path(sigs)) == [
        "args[0]['layers'][0].w",
        "args[0]['w']",
        "args[1].x",
        "args[1].y",
        "kwargs['scale']",
    ]
    assert tree.startswith("PyTreeDef(((") and "'scale': *" in tree


def test_shape_dtype_and_weak_type_per_leaf():
    sigs, _ = signature.signature_of((jnp.ones((2, 3), jnp.bfloat16), 1.0, 2, True, np.int8(3)), {})
    got = [(s.shape, s.dtype, s.weak_type) for s in sigs]
    assert got == [
        ((2, 3), "bfloat16", False),
        ((), "float32", True),
        ((), "int32", True),
        ((), "bool", False),
        ((), "int8", False),
    ]


def test_static_args_by_position_name_and_negative_index():
    sigs, tree = signature.signature_of(
        (jnp.ones(2), "relu", 3), {"mode": ("a", 1)}, static_argnums=(-1, 1), static_argnames=("mode",)
    )
    got = [(s.path, s.kind, s.value) for s in sigs]
    assert got == [
        ("args[0]", "array", None),
        ("args[1]", "static", "'relu'"),
        ("args[2]", "static", "3"),
        ("kwargs['mode']", "static", "('a', 1)"),
    ]
    assert tree == "PyTreeDef(((*,), {}))"  # static arguments are not part of the tree


def test_static_repr_is_truncated_and_a_broken_repr_does_not_raise():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    long = signature.static_signature("args[0]", "x" * 500, max_repr=20)
    assert long.value == "'" + "x" * 16 + "..." and len(long.value) == 20
    assert signature.static_signature("args[1]", Broken(), 120).value == ("<Broken: repr failed: RuntimeError>")


def test_non_array_leaf_is_described_not_raised():
    sigs, _ = signature.signature_of(("text",), {})
    assert sigs == (ArgSignature(path="args[0]", kind="other", value="str"),)


def test_single_device_sharding_and_memory_kind():
    (sig,), _ = signature.signature_of((jnp.ones(3),), {})
    assert sig.sharding == f"SingleDeviceSharding(cpu:{jax.devices()[0].id})"
    assert sig.memory_kind == "device"


def test_committed_as_jax_keys_its_cache_on_it():
    """What JAX places at the call (NumPy, Python numbers, a jnp array on the default device) is uncommitted;
    an array put on a device is committed; a tracer says nothing. JAX compiles a call with a committed input
    apart from one without (``test_sharding_causes_vs_jax`` shows it on the real compiles)."""
    leaves = (np.ones(3), np.float32(1), 2.0, jnp.ones(3), jax.device_put(jnp.ones(3), jax.devices()[0]))
    sigs, _ = signature.signature_of(leaves, {})
    assert [s.committed for s in sigs] == [False, False, False, False, True]
    seen = {}

    def f(x):
        seen["sigs"] = signature.traced_signature((x,), {}, 120)
        return x

    jax.jit(f)(jnp.ones(3))
    assert [s.committed for s in seen["sigs"][0]] == [None]
    assert sigs[4].to_dict()["committed"] is True and ArgSignature.from_dict(sigs[0].to_dict()).committed is False


@pytest.mark.parametrize(
    "axis_type, text",
    [
        (AxisType.Auto, "P('x', None) on mesh(x=4, y=2)"),
        (AxisType.Explicit, "P('x', None) on mesh(x=4, y=2; Explicit, Explicit)"),
    ],
)
def test_named_sharding_text(axis_type, text):
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(axis_type,) * 2)
    x = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("x", None)))
    (sig,), _ = signature.signature_of((x,), {})
    assert sig.sharding == text


def test_signature_from_tracers_inside_a_trace():
    seen = {}

    def f(x, n, *, scale):
        seen["sigs"] = signature.traced_signature((x, n), {"scale": scale}, 120)
        return x * n * scale

    jax.jit(f, static_argnums=1)(jnp.ones((2, 2)), 3, scale=0.5)
    sigs, tree = seen["sigs"]
    got = [(s.path, s.kind, s.shape, s.weak_type, s.value, s.sharding) for s in sigs]
    assert got == [
        ("args[0]", "array", (2, 2), False, None, None),
        ("args[1]", "static", None, None, "3", None),
        ("kwargs['scale']", "array", (), True, None, None),
    ]
    assert tree == "PyTreeDef(((*,), {'scale': *}))"


def test_tracer_on_explicit_mesh_carries_its_sharding():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))  # newer JAX's default
    seen = {}

    def f(x):
        seen["sig"] = signature.leaf_signature("args[0]", x)
        return x

    jax.jit(f)(jax.device_put(jnp.ones(8), NamedSharding(mesh, P("x"))))
    assert seen["sig"].sharding == "P('x',) on mesh(x=8; Explicit)"
    assert seen["sig"].memory_kind is None  # a tracer has no buffer


def step(x, y=1):
    return x * y


class Model:
    def apply(self, x):
        return x

    def __call__(self, x):
        return x


def test_names_qualnames_and_sources():
    here = __file__
    line = step.__code__.co_firstlineno
    cases = {
        "function": (step, "step", f"{__name__}.step", f"{here}:{line}"),
        "partial": (functools.partial(step, y=2), "step", f"{__name__}.step", f"{here}:{line}"),
        "nested partial": (functools.partial(functools.partial(step), 1), "step", f"{__name__}.step", f"{here}:{line}"),
        "bound method": (
            Model().apply,
            "apply",
            f"{__name__}.Model.apply",
            f"{here}:{Model.apply.__code__.co_firstlineno}",
        ),
        "instance": (
            Model(),
            "<unnamed function>",
            f"{__name__}.Model",
            f"{here}:{Model.__call__.__code__.co_firstlineno}",
        ),
        "builtin": (len, "len", "builtins.len", None),
    }
    for what, (fun, name, qualname, source) in cases.items():
        assert (call_site.fun_name(fun), call_site.qualname(fun), call_site.source(fun)) == (name, qualname, source), (
            what
        )


def test_lambdas_from_one_line_share_a_qualname_and_source():
    funs = [lambda x: x + i for i in range(2)]
    assert call_site.qualname(funs[0]) == call_site.qualname(funs[1])
    assert call_site.source(funs[0]) == call_site.source(funs[1])


def test_call_site_skips_jax_functools_and_jaxdiag_frames():
    sites = []

    @functools.singledispatch  # its dispatching wrapper is a frame in functools.py
    def f(x):
        sites.append(call_site.call_site(skip=2))  # skip f itself: report who called it
        return x

    line = inspect.currentframe().f_lineno
    jax.jit(f)(1.0)
    f(2.0)
    assert sites == [f"{__file__}:{line + 1}", f"{__file__}:{line + 2}"]


def test_a_wrapper_library_frame_is_never_the_call_site_of_a_jit_function():
    """``jaxdiag.jit`` and ``watch`` share one rule: frames of wrapper libraries are skipped by module name."""
    import jaxdiag
    from jaxdiag.recording import compile_log

    shim: dict[str, Any] = {"__name__": "equinox._shim"}  # as a library's wrapper would run
    exec(compile("def call(f, x):\n    return f(x)\n", "<shim>", "exec"), shim)
    f = jaxdiag.jit(lambda x: x + 1)
    line = inspect.currentframe().f_lineno
    shim["call"](f, jnp.ones(2))
    (record,) = compile_log.records(f)
    assert record.call_site == f"{__file__}:{line + 1}"
    assert call_site.site_from(None) == (None, None)

"""``jaxdiag.jit`` records one ``CompileRecord`` per compile of a call, and nothing on cache hits."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import subprocess
import sys
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag import errors
from jaxdiag.errors import ConfigError, JaxdiagWarning
from jaxdiag.recording import call_site, compile_log, listener, wrapper
from jaxdiag.recording.records import CompileRecord
from jaxdiag.recording.target import Target


def records(function=None) -> list[CompileRecord]:
    return compile_log.records(function)


def mesh_8(axis_type: AxisType) -> jax.sharding.Mesh:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return jax.make_mesh((8,), ("x",), axis_types=(axis_type,))


def test_returns_the_real_jax_jit_object():
    def f(x):
        return x + 1

    assert type(jaxdiag.jit(f)) is type(jax.jit(f))
    assert type(jaxdiag.jit(f)).__name__ == "PjitFunction"


def test_records_each_compile_with_stages_from_monitoring_events():
    @jaxdiag.jit
    def step(x):
        return jnp.sin(x) * 2

    line = inspect.currentframe().f_lineno
    step(jnp.ones(3))
    step(jnp.ones(3))  # cache hit: no record
    step(jnp.ones(4))
    rs = records()
    assert [r.call_site for r in rs] == [f"{__file__}:{line + 1}", f"{__file__}:{line + 3}"]
    assert [r.compile_index for r in rs] == [1, 2]
    for r in rs:
        assert (r.function, r.traced, r.lowered, r.compiled, r.origin) == ("step", True, True, True, "jit")
        assert r.trace_s > 0 and r.lower_s > 0 and r.backend_compile_s > 0
        assert r.compile_s == pytest.approx(r.trace_s + r.lower_s + r.backend_compile_s)
        assert r.source == f"{__file__}:{step.__wrapped__.__code__.co_firstlineno}"
        assert r.qualname.endswith("test_records_each_compile_with_stages_from_monitoring_events.<locals>.step")
    assert [a.shape for a in rs[1].args] == [(4,)]
    assert rs[1].explanation is not None and "3" in rs[1].explanation.summary


def test_decorator_forms():
    @jaxdiag.jit
    def bare(x):
        return x

    @jaxdiag.jit(static_argnames="n")
    def options_only(x, n):
        return x * n

    @functools.partial(jaxdiag.jit, static_argnums=1, max_compiles=5)
    def partial_form(x, n):
        return x * n

    bare(1.0)
    options_only(1.0, n=2)
    partial_form(1.0, 3)
    assert [r.function for r in records()] == ["bare", "options_only", "partial_form"]
    statics = [a for r in records() for a in r.args if a.kind == "static"]
    assert [(a.path, a.value) for a in statics] == [("kwargs['n']", "2"), ("args[1]", "3")]


def test_invalid_options_are_config_errors():
    with pytest.raises(ConfigError, match="on_exceed"):
        jaxdiag.jit(lambda x: x, on_exceed="explode")
    with pytest.raises(ConfigError, match="max_compiles"):
        jaxdiag.jit(lambda x: x, max_compiles=-1)
    with pytest.raises(ConfigError, match="analysis"):
        jaxdiag.jit(lambda x: x, analysis="yes")


def test_same_function_jitted_again_shares_the_trace():
    def f(x):
        return x * 3

    for _ in range(3):
        jaxdiag.jit(f)(jnp.ones(2))  # jax.jit(f) built anew each time hits JAX's cache
    assert len(records()) == 1


def test_new_lambdas_in_a_loop_are_new_functions_of_one_qualname():
    for i in range(3):
        jaxdiag.jit(lambda x: x + i)(1.0)  # each lambda dies at once; its id() may be reused
    rs = records()
    assert [r.compile_index for r in rs] == [1, 2, 3]
    assert len({r.function_id for r in rs}) == 3
    assert len({(r.qualname, r.source) for r in rs}) == 1


def test_wrappers_do_not_keep_functions_alive():
    import gc
    import weakref

    gc.collect()  # functions of earlier tests that are already unreachable leave the cache now
    before = len(wrapper._cache)
    refs = []
    for i in range(3):
        fun = lambda x, i=i: x + i  # noqa: E731
        refs.append(weakref.ref(fun))
        jaxdiag.jit(fun)(1.0)
        del fun
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert len(wrapper._cache) == before


def test_sharding_change_without_retrace_is_recorded():
    mesh = mesh_8(AxisType.Auto)
    f = jaxdiag.jit(lambda x: x * 2)
    f(jax.device_put(jnp.ones(16), NamedSharding(mesh, P("x"))))
    f(jax.device_put(jnp.ones(16), NamedSharding(mesh, P())))  # lowers and compiles, no trace
    first, second = records()
    assert (first.traced, second.traced, second.lowered, second.compiled) == (True, False, True, True)
    assert second.trace_s is None and second.backend_compile_s > 0
    assert first.args[0].sharding == "P('x',) on mesh(x=8)"
    assert second.args[0].sharding == "P() on mesh(x=8)"


def test_sharding_change_on_explicit_mesh_retraces():
    mesh = mesh_8(AxisType.Explicit)
    f = jaxdiag.jit(lambda x: x * 2)
    f(jax.device_put(jnp.ones(8), NamedSharding(mesh, P("x"))))
    f(jax.device_put(jnp.ones(8), NamedSharding(mesh, P())))
    assert [r.traced for r in records()] == [True, True]
    assert [r.args[0].sharding for r in records()] == ["P('x',) on mesh(x=8; Explicit)", "P() on mesh(x=8; Explicit)"]


def test_nested_jit_is_part_of_the_outer_compile():
    inner = jaxdiag.jit(lambda x: x * 3)
    outer = jaxdiag.jit(lambda x: inner(x) + 1)
    outer(jnp.ones(2))
    assert len(records()) == 1  # inner only traced inside outer's trace: not a compile of its own
    inner(jnp.ones(2))
    assert len(records()) == 2


def test_grad_of_jitted_function_records_forward_and_backward_compiles():
    def loss(w, x):
        return jnp.sum(jnp.sin(w * x))

    f = jaxdiag.jit(loss)
    jax.grad(f)(jnp.ones(3), jnp.ones(3))
    forward, backward = records()
    assert (forward.transform, backward.transform) == ("grad-forward", "grad-backward")
    # JAX times no trace made inside another transformation's trace (grad's JVP here).
    assert [(r.lowered, r.compiled) for r in (forward, backward)] == [(True, True)] * 2
    # JAX 0.9 on times no trace made inside grad's; 0.8 traces the forward again for its compile.
    assert all(r.traced == (r.trace_s is not None) for r in (forward, backward)) and not backward.traced
    assert [(a.path, a.label, a.shape) for a in forward.args] == [("args[0]", "w", (3,)), ("args[1]", "x", (3,))]
    assert "backward pass" in backward.explanation.summary
    jax.grad(f)(jnp.ones(4), jnp.ones(4))
    again = records()[2:]
    assert [r.transform for r in again] == ["grad-forward", "grad-backward"]
    assert again[0].explanation.changes[0].what == "shape"
    assert again[0].explanation.compared_to == forward.compile_index
    assert again[1].explanation.compared_to == backward.compile_index


def test_aot_stages_are_not_recorded_but_a_later_call_is():
    f = jaxdiag.jit(lambda x: x + 1)
    f.trace(jnp.ones(5))
    f.lower(jnp.ones(6)).compile()
    f.eval_shape(jnp.ones(7))
    assert records() == []
    f(jnp.ones(5))  # traced by .trace(): lowers and compiles now
    (r,) = records()
    assert (r.traced, r.lowered, r.compiled) == (False, True, True)
    f(jnp.ones(6))  # compiled ahead of time: a cache hit
    assert len(records()) == 1


def test_error_in_user_function_leaves_no_record():
    @functools.partial(jaxdiag.jit, static_argnums=1)
    def f(x, fail):
        if fail:
            raise ValueError("planted")
        return x

    with pytest.raises(ValueError, match="planted"):
        f(1.0, True)
    f(1.0, False)
    assert [r.compile_index for r in records()] == [1]


def test_threads_compiling_at_once_lose_nothing():
    f = jaxdiag.jit(lambda x: x * 2)
    barrier = threading.Barrier(6)

    def work(n: int) -> None:
        barrier.wait()
        f(jnp.ones(n))

    threads = [threading.Thread(target=work, args=(n,), name=f"worker-{n}") for n in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rs = records()
    assert sorted(r.args[0].shape[0] for r in rs) == [1, 2, 3, 4, 5, 6]
    assert sorted(r.compile_index for r in rs) == [1, 2, 3, 4, 5, 6]
    assert {r.thread for r in rs} == {f"worker-{n}" for n in range(1, 7)}
    for r in rs:
        assert r.backend_compile_s > 0


def test_analysis_matches_the_compiled_executable():
    f = jaxdiag.jit(lambda x: x @ x.T, analysis=True)
    f(jnp.ones((8, 4)))
    (r,) = records()
    compiled = jax.jit(lambda x: x @ x.T).lower(jnp.ones((8, 4))).compile()
    assert r.cost["flops"] == compiled.cost_analysis()["flops"] > 0
    assert r.memory["argument_bytes"] == 8 * 4 * 4
    assert r.memory["output_bytes"] == 8 * 8 * 4
    assert set(r.memory) == {"argument_bytes", "output_bytes", "temp_bytes", "generated_code_bytes"}


def test_analysis_follows_configure_unless_the_function_says():
    compile_log.configure(analysis=True)
    jaxdiag.jit(lambda x: x + 1)(1.0)
    jaxdiag.jit(lambda x: x + 2, analysis=False)(1.0)
    with_cost, without = records()
    assert with_cost.cost is not None and without.cost is None and without.memory is None


def test_persistent_cache_hit_is_recorded(tmp_path):
    from jax.experimental.compilation_cache import compilation_cache as cc

    def fresh():
        def g(x):
            return jnp.cos(x) * 5 + 1

        return g

    old = {
        k: getattr(jax.config, k)
        for k in (
            "jax_compilation_cache_dir",
            "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes",
        )
    }
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        cc.reset_cache()
        jaxdiag.jit(fresh())(jnp.ones(3))  # miss: written to the cache
        jaxdiag.jit(fresh())(jnp.ones(3))  # a new function object: traced, then served from disk
    finally:
        for k, v in old.items():
            jax.config.update(k, v)
        cc.reset_cache()
    first, second = records()
    assert (first.persistent_cache_hit, second.persistent_cache_hit) == (False, True)
    assert second.traced and second.backend_compile_s is not None


@pytest.mark.compile_count_unchecked  # a planted failure stops the record
def test_listener_failure_warns_once_and_the_call_proceeds(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(call_site, "call_site_and_function", broken)
    monkeypatch.setattr(errors, "_warned", set())
    f = jaxdiag.jit(lambda x: x - 1)
    with pytest.warns(JaxdiagWarning, match="planted failure"):
        out = f(jnp.ones(2))
    np.testing.assert_array_equal(out, np.zeros(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(jnp.ones(3))  # fails again, silently this time
    assert records() == []


def test_name_matching_fallback_records_traced_compiles(monkeypatch):
    """Without the pjit internals, compiles that trace are still recorded, by name."""
    listener.install()  # as the first jaxdiag.jit does, so that a test run alone finds the internals too
    monkeypatch.setattr(listener, "_internals", dataclasses.replace(listener._internals, cache_miss=None))
    assert listener.mode() == "names"
    f = jaxdiag.jit(lambda x, n: x * n, static_argnums=1)
    f(jnp.ones(2), 3)
    f(jnp.ones(4), 3)
    rs = records()
    assert [r.compile_index for r in rs] == [1, 2]
    assert all(r.trace_s and r.lower_s and r.backend_compile_s for r in rs)
    assert [(a.path, a.kind, a.shape or a.value) for a in rs[1].args] == [
        ("args[0]", "array", (4,)),
        ("args[1]", "static", "3"),
    ]
    assert rs[1].args[0].sharding is None  # tracers outside a mesh say nothing about placement


def test_name_matching_fallback_still_raises_over_budget(monkeypatch):
    from jaxdiag.errors import CompileBudgetExceeded

    listener.install()  # as the first jaxdiag.jit does, so that a test run alone finds the internals too
    monkeypatch.setattr(listener, "_internals", dataclasses.replace(listener._internals, cache_miss=None))
    f = jaxdiag.jit(lambda x: x + 1, max_compiles=1, on_exceed="raise")
    f(jnp.ones(1))
    with pytest.raises(CompileBudgetExceeded, match="compiled 2 times"):
        f(jnp.ones(2))


def test_missing_internals_warn_once_and_recording_goes_on():
    """A JAX without the pjit internals: one warning at the first jit, records still made."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import dataclasses, warnings
        import jax.numpy as jnp
        import jaxdiag
        from jaxdiag.recording import listener
        real = listener._find_internals
        listener._find_internals = lambda: dataclasses.replace(real(), cache_miss=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f = jaxdiag.jit(lambda x: x + 1)
            g = jaxdiag.jit(lambda x: x - 1)
            f(jnp.ones(2)); f(jnp.ones(3)); g(jnp.ones(2))
        print(len(caught), caught[0].category.__name__, listener.mode())
        print(len(jaxdiag.compiles()))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "JAXDIAG_LOG_DIR": ""}
    )
    assert proc.stdout.split() == ["1", "JaxdiagWarning", "names", "3"], proc.stderr


@pytest.mark.compile_count_unchecked  # a planted failure stops the record
def test_internal_failure_never_fails_the_call_even_under_warnings_as_errors(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(call_site, "call_site_and_function", broken)
    monkeypatch.setattr(errors, "_warned", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jaxdiag.jit(lambda x: x * 5)(2.0) == 10.0


def test_internals_of_this_jax_are_found():
    listener.install()
    assert listener.mode() == "frames"
    assert listener._internals.cached_compilation is not None
    assert len(listener._internals.stoppers) == 5


def test_watch_flag_records_plain_jax_jit_functions():
    def plain(x):
        return x * 7

    target = Target(plain, origin="watch")
    listener.set_watch(lambda fun: target if fun is plain else None)
    try:
        jax.jit(plain)(jnp.ones(2))
    finally:
        listener.set_watch(None)
    jax.jit(plain)(jnp.ones(3))  # watch off again
    (r,) = records()
    assert (r.function, r.origin, r.args[0].shape) == ("plain", "watch", (2,))


def test_a_changed_static_field_of_a_module_is_named_as_under_watch():
    """``jaxdiag.jit`` reads arguments as ``watch`` does: a module's static field is a named leaf."""
    from flax import struct

    @struct.dataclass
    class Config:
        scale: jax.Array
        activation: str = struct.field(pytree_node=False)

    @jaxdiag.jit
    def apply(cfg, x):
        return jnp.tanh(x * cfg.scale) if cfg.activation == "tanh" else x * cfg.scale

    apply(Config(jnp.ones(3), "tanh"), jnp.ones(3))
    apply(Config(jnp.ones(3), "relu"), jnp.ones(3))
    first, second = records()
    assert [(a.path, a.kind, a.value) for a in first.args] == [
        ("args[0].activation", "static", "'tanh'"),
        ("args[0].scale", "array", None),
        ("args[1]", "array", None),
    ]
    assert second.explanation.summary.startswith("apply: static cfg.activation changed 'tanh' -> 'relu'")
    assert first.in_tree == second.in_tree


def test_grad_backward_inputs_are_not_named_after_the_functions_parameters():
    # The backward pass receives residuals and cotangents, not (w, xs): naming them after the
    # parameters would say w changed shape when only xs did.
    @jaxdiag.jit
    def step(w, xs):
        return jax.lax.scan(lambda c, x: (c + jnp.tanh(x @ w).sum(), None), 0.0, xs)[0]

    for n in (4, 6):
        jax.grad(step)(jnp.ones((3, 3)), jnp.ones((n, 2, 3)))
    backward = [r for r in records() if r.transform == "grad-backward"]
    assert len(backward) == 2 and backward[1].explanation.changes
    assert all(a.label is None for r in backward for a in r.args)
    assert "w shape" not in backward[1].explanation.summary


EXITING_PROGRAM = """
import functools
import jax, jax.numpy as jnp
import jaxdiag

@functools.partial(jaxdiag.jit, static_argnames=("mode",))
def evaluate(w, mode):
    return jnp.mean(w) if mode == "mean" else jnp.max(w)

@jaxdiag.jit
def normalize(batch):
    return {k: v - v.mean() for k, v in batch.items()}

for mode in ("mean", "max"):
    evaluate(jnp.ones(3), mode)
normalize({"a": jnp.ones(3)})
print("done")
"""


def test_a_program_exits_as_quietly_as_with_jax_jit(tmp_path):
    """Interpreter exit clears modules before the last weakref callbacks run: they stay silent."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAXDIAG_LOG_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", EXITING_PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout == "done\n"
    assert "Exception ignored" not in out.stderr and "Traceback" not in out.stderr, out.stderr

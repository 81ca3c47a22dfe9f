"""``jaxdiag.watch``: every compile in the process, as ``jaxdiag.jit`` records, whatever jitted it."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxdiag
from jaxdiag import errors
from jaxdiag.errors import ConfigError, JaxdiagWarning
from jaxdiag.recording import compile_log, listener, watch
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN


@pytest.fixture(autouse=True)
def watch_left_off():
    """Every test leaves the process-wide switch as it found it: off."""
    assert not watch.watching()
    yield
    if watch.watching():
        jaxdiag.watch(False)
        pytest.fail("the test left jaxdiag.watch on")


def own(records):
    """The records of functions defined here (not JAX's own helpers)."""
    return [r for r in records if r.origin != JAX_INTERNAL_ORIGIN]


def test_context_manager_records_plain_jax_jit_and_explains_each_recompile():
    @jax.jit
    def step(x, y):
        return jnp.sin(x) * y

    x = jnp.ones(3)
    step(x, x)  # before watching: not recorded
    with jaxdiag.watch() as w:
        line = inspect.currentframe().f_lineno
        step(x, x)  # cache hit
        step(jnp.ones(4), jnp.ones(4))
        step(jnp.ones(4), jnp.ones(4, jnp.int32))
        step(jnp.ones(4), jnp.ones(4, jnp.int32))
    step(jnp.ones(5), jnp.ones(5))  # after: not recorded
    rs = own(w.records)
    assert rs == own(compile_log.records())
    assert [r.function for r in rs] == ["step", "step"]
    assert [r.call_site for r in rs] == [f"{__file__}:{line + 2}", f"{__file__}:{line + 3}"]
    for r in rs:
        assert r.origin == "watch" and r.traced and r.lowered and r.compiled
        assert r.trace_s > 0 and r.lower_s > 0 and r.backend_compile_s > 0
        assert r.source == f"{__file__}:{step.__wrapped__.__code__.co_firstlineno}"
    # Compile indices count this function's recorded compiles; the first was made unwatched.
    assert [r.compile_index for r in rs] == [1, 2]
    assert rs[1].explanation.summary.startswith("step: y dtype changed float32 -> int32; called at ")
    assert rs[1].explanation.changes[0].path == "args[1]"  # positions stay in the machine fields


def test_switch_turns_recording_on_for_the_process_until_turned_off():
    f = jax.jit(lambda x: x * 3)
    jaxdiag.watch(True)
    try:
        assert watch.watching()
        f(jnp.ones(2))
        f(jnp.ones(3))
    finally:
        jaxdiag.watch(False)
    assert not watch.watching()
    f(jnp.ones(4))
    rs = own(compile_log.records())
    assert [(r.function, r.args[0].shape) for r in rs] == [("<lambda>", (2,)), ("<lambda>", (3,))]
    assert rs[1].explanation.changes[0].path == "args[0]"


def test_a_switch_used_as_context_manager_restores_the_earlier_state():
    f = jax.jit(lambda x: x - 3)
    with jaxdiag.watch():
        with jaxdiag.watch(False):
            assert not watch.watching()
            f(jnp.ones(2))
        assert watch.watching()
        f(jnp.ones(3))
    assert [r.args[0].shape for r in own(compile_log.records())] == [(3,)]


def test_static_arguments_and_kwargs_are_named():
    @jax.jit
    def scale(x, *, n, mode):
        return x * n if mode == "mul" else x + n

    scale = jax.jit(scale.__wrapped__, static_argnames="mode")
    with jaxdiag.watch():
        scale(jnp.ones(2), n=2.0, mode="mul")
        scale(jnp.ones(2), n=2.0, mode="add")
        scale(jnp.ones(2), n=jnp.float32(2.0), mode="add")
    first, second, third = own(compile_log.records())
    assert [(a.path, a.kind) for a in first.args] == [
        ("args[0]", "array"),
        ("kwargs['n']", "array"),
        ("kwargs['mode']", "static"),
    ]
    assert second.explanation.summary.startswith("scale: static mode changed 'mul' -> 'add'; called at ")
    assert "n changed from a Python scalar to a typed array" in third.explanation.summary


@struct.dataclass
class Config:
    scale: jax.Array
    activation: str = struct.field(pytree_node=False)


def test_static_fields_of_a_dataclass_pytree_are_named_once():
    @jax.jit
    def apply(cfg, x):
        return jnp.tanh(x * cfg.scale) if cfg.activation == "tanh" else x * cfg.scale

    with jaxdiag.watch():
        apply(Config(jnp.ones(3), "tanh"), jnp.ones(3))
        apply(Config(jnp.ones(3), "relu"), jnp.ones(3))
    first, second = own(compile_log.records())
    assert [(a.path, a.kind, a.value) for a in first.args] == [
        ("args[0].activation", "static", "'tanh'"),
        ("args[0].scale", "array", None),
        ("args[1]", "array", None),
    ]
    # The field is reported by name, and the tree text does not hold it a second time.
    assert second.explanation.summary.startswith("apply: static cfg.activation changed 'tanh' -> 'relu'")
    assert first.in_tree == second.in_tree


def test_a_jaxdiag_jit_function_inside_watch_is_recorded_once():
    @jaxdiag.jit
    def mine(x):
        return x + 1

    with jaxdiag.watch() as w:
        mine(jnp.ones(2))
        mine(jnp.ones(3))
    rs = own(w.records)
    assert [(r.function, r.origin, r.compile_index) for r in rs] == [("mine", "jit", 1), ("mine", "jit", 2)]


def test_a_jit_called_inside_another_trace_is_part_of_that_compile():
    inner = jax.jit(lambda x: x * 2)

    @jax.jit
    def outer(x):
        return inner(x) + inner(x + 1)

    with jaxdiag.watch():
        outer(jnp.ones(2))
        outer(jnp.ones(5))
    assert [(r.function, r.compile_index) for r in own(compile_log.records())] == [("outer", 1), ("outer", 2)]


def test_jax_internal_helpers_are_marked_and_can_be_left_out():
    with jaxdiag.watch() as w:
        jnp.arange(6.0).reshape(2, 3).sum(axis=0)  # eager ops: JAX's own jits
    internal = [r for r in w.records if watch.is_jax_internal(r)]
    assert internal and {r.origin for r in internal} == {JAX_INTERNAL_ORIGIN}
    assert all(r.qualname.startswith("jax.") for r in internal)
    # an eager op's call site has its column: two on one line are two call sites
    assert all(r.call_site.startswith(f"{__file__}:{inspect.currentframe().f_lineno - 5}:") for r in internal)
    with jaxdiag.watch(jax_internals=False) as w:
        jnp.arange(7.0).reshape(7, 1).sum(axis=1)
        jax.jit(lambda x: x / 2)(jnp.ones(7))
    assert [r.function for r in w.records] == ["<lambda>"]


def test_compiles_in_other_threads_are_recorded():
    f = jax.jit(lambda x: x**2)
    with jaxdiag.watch() as w:
        threads = [threading.Thread(target=f, args=(jnp.ones(n),), name=f"t{n}") for n in (2, 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted((r.thread, r.args[0].shape) for r in own(w.records)) == [("t2", (2,)), ("t3", (3,))]


def test_aot_compile_is_a_named_record_and_eval_shape_none():
    f = jax.jit(lambda x: x + 7)
    with jaxdiag.watch() as w:
        f.lower(jnp.ones(2)).compile()
        jax.eval_shape(f, jnp.ones(2))
    (r,) = own(w.records)
    assert (r.function, r.transform, r.qualname) == ("<lambda>", "aot", "<ahead-of-time>.<lambda>")
    assert [(a.path, a.shape, a.dtype) for a in r.args] == [("args[0]", (2,), "float32")]
    assert r.call_site.startswith(f"{__file__}:")


def test_records_go_to_the_jsonl_log(tmp_path):
    from jaxdiag.recording.log_reader import read_compile_log

    path = compile_log.configure(log_dir=tmp_path)
    f = jax.jit(lambda x: x.sum())
    with jaxdiag.watch(jax_internals=False):
        f(jnp.ones((2, 2)))
        f(jnp.ones((2, 3)))
    back = read_compile_log(path).records
    assert [(r.origin, r.compile_index) for r in back] == [("watch", 1), ("watch", 2)]
    assert back[1].explanation.summary.startswith("<lambda>: x shape axis 1 changed 2 -> 3; called at ")


def test_a_recording_failure_warns_once_and_never_fails_the_call(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(watch, "call_signature", broken)
    monkeypatch.setattr(errors, "_warned", set())
    f = jax.jit(lambda x: x - 1)
    with jaxdiag.watch(jax_internals=False):
        with pytest.warns(JaxdiagWarning, match="planted failure"):
            out = f(jnp.ones(2))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            f(jnp.ones(3))
    np.testing.assert_array_equal(out, np.zeros(2))
    assert compile_log.records() == []


@pytest.mark.parametrize("bad", [dict(enabled=1), dict(enabled="on"), dict(jax_internals=None)])
def test_bad_arguments_are_config_errors(bad):
    with pytest.raises(ConfigError, match="jaxdiag.watch"):
        jaxdiag.watch(**bad)


def test_without_the_pjit_internals_names_counts_and_durations_are_recorded(monkeypatch):
    listener.install()  # as watch() does, so that a test run alone finds the internals too
    monkeypatch.setattr(listener, "_internals", dataclasses.replace(listener._internals, cache_miss=None))
    assert listener.mode() == "names"

    def double(x):
        return x * 2

    f = jax.jit(double)
    with jaxdiag.watch() as w:
        line = inspect.currentframe().f_lineno
        f(jnp.ones(2))
        f(jnp.ones(2))
        f(jnp.ones(3))
    rs = [r for r in w.records if r.function == "double"]
    assert [r.compile_index for r in rs] == [1, 2]
    assert all(r.trace_s and r.lower_s and r.backend_compile_s and r.args == () for r in rs)
    assert [r.call_site for r in rs] == [f"{__file__}:{line + 1}", f"{__file__}:{line + 3}"]
    assert "the cause is unknown" in rs[1].explanation.summary


def test_missing_internals_give_one_warning_and_recording_goes_on():
    code = textwrap.dedent("""
        import dataclasses, warnings
        import jax, jax.numpy as jnp
        import jaxdiag
        from jaxdiag.recording import listener
        real = listener._find_internals
        listener._find_internals = lambda: dataclasses.replace(real(), cache_miss=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with jaxdiag.watch(jax_internals=False):
                f = jax.jit(lambda x: x + 1)
                f(jnp.ones(2)); f(jnp.ones(3))
                jaxdiag.jit(lambda x: x - 1)(jnp.ones(2))
        print(len(caught), caught[0].category.__name__, listener.mode())
        print(sorted(r.origin for r in jaxdiag.compiles().itertuples() if r.function == "<lambda>"))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "JAXDIAG_LOG_DIR": ""}
    )
    assert proc.stdout.splitlines() == ["1 JaxdiagWarning names", "['jit', 'watch', 'watch']"], proc.stderr

"""Compile budgets: ``expect_compiles`` and ``jaxdiag.jit(max_compiles=...)``."""

from __future__ import annotations

import inspect
import threading
import warnings

import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.errors import CompileBudgetExceeded, CompileBudgetWarning, ConfigError
from jaxdiag.recording import compile_log


@pytest.fixture
def step():
    @jaxdiag.jit
    def step(x):
        return x * 2

    step(jnp.ones(3))  # warm
    return step


def test_cache_hits_fit_a_zero_budget(step):
    with jaxdiag.expect_compiles(max=0) as guard:
        step(jnp.ones(3))
        step(jnp.ones(3))
    assert guard.records == []


def test_a_recompile_fails_naming_function_count_and_cause(step):
    with pytest.raises(CompileBudgetExceeded) as info:
        with jaxdiag.expect_compiles(max=0):
            step(jnp.ones(4))
            step(jnp.ones(5))
    message = str(info.value)
    assert message.startswith("expected at most 0 compile(s), got 2: step: 2 compiles (")
    assert "3 -> 4" in message and "4 -> 5" in message
    assert isinstance(info.value, AssertionError)  # pytest shows it as a failed check


def test_budget_allows_up_to_max_and_counts_other_functions(step):
    other = jaxdiag.jit(lambda x: x - 1)
    with jaxdiag.expect_compiles(max=2) as guard:
        step(jnp.ones(4))
        other(jnp.ones(1))
    assert [r.function for r in guard.records] == ["step", "<lambda>"]
    with pytest.raises(CompileBudgetExceeded, match=r"step: 1 compile \(.*\), <lambda>: 1 compile"):
        with jaxdiag.expect_compiles(max=1):
            step(jnp.ones(6))
            other(jnp.ones(2))


def test_function_filter_by_name_and_object(step):
    other = jaxdiag.jit(lambda x: x - 1)
    with jaxdiag.expect_compiles(max=0, function="step"):
        other(jnp.ones(7))
    with jaxdiag.expect_compiles(max=0, function=step):
        other(jnp.ones(8))
    with pytest.raises(CompileBudgetExceeded, match="compile\\(s\\) of 'step', got 1"):
        with jaxdiag.expect_compiles(max=0, function=step):
            step(jnp.ones(9))


def test_as_decorator_each_call_is_checked_afresh(step):
    @jaxdiag.expect_compiles(max=1)
    def run(n):
        step(jnp.ones(n))

    run(10)
    run(11)  # one compile per call: within budget each time
    with pytest.raises(CompileBudgetExceeded):
        jaxdiag.expect_compiles(max=0)(run)(12)


def test_the_block_exception_goes_through_unchanged(step):
    with pytest.raises(KeyError, match="planted"):
        with jaxdiag.expect_compiles(max=0):
            step(jnp.ones(20))
            raise KeyError("planted")


def test_compiles_in_other_threads_count(step):
    with pytest.raises(CompileBudgetExceeded, match="got 1"):
        with jaxdiag.expect_compiles(max=0):
            t = threading.Thread(target=lambda: step(jnp.ones(30)))
            t.start()
            t.join()


def test_nested_guards_each_see_their_own_block(step):
    with jaxdiag.expect_compiles(max=2) as outer:
        step(jnp.ones(40))
        with jaxdiag.expect_compiles(max=1) as inner:
            step(jnp.ones(41))
    assert (len(outer.records), len(inner.records)) == (2, 1)


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_invalid_max_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="max"):
        jaxdiag.expect_compiles(max=bad)


def test_max_compiles_warns_at_the_call_site_after_each_extra_compile():
    f = jaxdiag.jit(lambda x: x + 1, max_compiles=1)
    f(jnp.ones(1))
    line = inspect.currentframe().f_lineno
    with pytest.warns(CompileBudgetWarning) as caught:
        out = f(jnp.ones(2))
    assert out.tolist() == [2.0, 2.0]
    (w,) = caught
    assert (w.filename, w.lineno) == (__file__, line + 2)
    assert "compiled 2 times, more than max_compiles=1" in str(w.message)
    assert "1 -> 2" in str(w.message)
    assert [r.compile_index for r in compile_log.records()] == [1, 2]


def test_max_compiles_raise_stops_the_compile_before_it_happens():
    traces = []

    def f(x):
        traces.append(x.shape)
        return x + 1

    f = jaxdiag.jit(f, max_compiles=1, on_exceed="raise")
    f(jnp.ones(1))
    with pytest.raises(CompileBudgetExceeded, match=r"compiled 2 times.*1 -> 2"):
        f(jnp.ones(2))
    with pytest.raises(CompileBudgetExceeded):
        f(jnp.ones(2))  # nothing was cached: it is refused again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(jnp.ones(1)).tolist() == [2.0]  # the compiled shape still runs
    assert traces == [(1,)]  # the refused compiles never traced
    assert [r.compile_index for r in compile_log.records()] == [1]


def test_max_compiles_raise_on_a_sharding_only_recompile():
    import jax
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    f = jaxdiag.jit(lambda x: x * 2, max_compiles=1, on_exceed="raise")
    f(jax.device_put(jnp.ones(8), NamedSharding(mesh, P("x"))))
    with pytest.raises(CompileBudgetExceeded, match="sharding"):
        f(jax.device_put(jnp.ones(8), NamedSharding(mesh, P())))  # would lower again, no trace


# The warning, raised as an error, stops a compile JAX had begun (on JAX 0.8 before its backend
# compile): the record of that compile stays, with no backend compile to match it.
@pytest.mark.compile_count_unchecked
def test_max_compiles_warning_is_an_error_under_warnings_as_errors():
    f = jaxdiag.jit(lambda x: x + 1, max_compiles=1)
    f(jnp.ones(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileBudgetWarning)
        with pytest.raises(CompileBudgetWarning, match="max_compiles=1"):
            f(jnp.ones(2))

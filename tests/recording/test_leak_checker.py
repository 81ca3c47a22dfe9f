"""``jaxdiag.jit`` under ``jax.checking_leaks()`` raises what ``jax.jit`` raises, and its
functions stay as collectable as ``jax.jit``'s (the leak checker walks the referrers
of a leaked tracer's holders, the user's function among them)."""

from __future__ import annotations

import gc
import weakref

import jax
import pytest

import jaxdiag
from jaxdiag.recording import wrapper


def leak_through_a_closure(jit):
    with jax.checking_leaks():
        lst = []

        @jit
        def f(x):
            lst.append(x)
            return x

        f(3)


def leak_from_a_nested_jit(jit):
    with jax.checking_leaks():

        @jit
        def f(x):
            lst = []

            @jit
            def g(x):
                lst.append(x)
                return x

            return g(x)

        f(3)


def raised(scenario, jit) -> BaseException:
    with pytest.raises(BaseException) as info:
        scenario(jit)
    return info.value


@pytest.mark.parametrize("scenario", [leak_through_a_closure, leak_from_a_nested_jit])
def test_leaked_tracer_raises_what_jax_jit_raises(scenario):
    expected, got = raised(scenario, jax.jit), raised(scenario, jaxdiag.jit)
    assert type(got) is type(expected)
    assert str(expected).startswith("Leaked trace DynamicJaxprTrace")
    assert str(got).splitlines()[0] == str(expected).splitlines()[0]


def test_function_jitted_again_later_still_leaks_like_jax_jit():
    lst = []

    def f(x):
        lst.append(x)
        return x

    jaxdiag.jit(f)(1.0)  # leaks unchecked
    lst.clear()
    gc.collect()  # the shared wrapper is now older than a new jit object's attributes
    with jax.checking_leaks(), pytest.raises(Exception, match="^Leaked trace DynamicJaxprTrace"):
        jaxdiag.jit(f)(2)  # an int: a new trace


@pytest.mark.parametrize("jit", [jax.jit, jaxdiag.jit], ids=["jax.jit", "jaxdiag.jit"])
def test_jit_object_in_a_cycle_with_its_function_is_freed(jit):
    def make():
        @jit
        def f(x):
            return x * 2 if f is not None else x  # f here is the jit object: a cycle

        f(1.0)
        return weakref.ref(f), weakref.ref(f.__wrapped__)

    gc.collect()
    before = shared_wrappers()
    jitted, fun = make()
    gc.collect()
    assert (jitted(), fun()) == (None, None)
    assert shared_wrappers() == before


def shared_wrappers() -> int:
    return len(wrapper._cache) + len(getattr(wrapper, "_lent", ()))

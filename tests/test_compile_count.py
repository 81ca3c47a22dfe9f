"""The count behind ``every_compile_is_a_record``: what it counts, and that it sees a missed record."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag import errors
from jaxdiag.errors import JaxdiagWarning
from jaxdiag.recording import call_site
from tests import compile_count


def _counted() -> tuple[list[str], list[str]]:
    return list(compile_count.COUNT.compiles), list(compile_count.COUNT.records)


def test_each_compile_of_a_jaxdiag_function_is_counted_with_its_record():
    @jaxdiag.jit
    def loss(x):
        return jnp.sin(x).sum()

    jax.grad(loss)(jnp.ones(3))  # the forward with residuals, and the backward pass after the call returned
    jax.vmap(loss)(jnp.ones((2, 3)))
    loss(jnp.ones(5))
    compiles, records = _counted()
    assert compiles == ["jit(loss)"] * 4
    assert records == ["loss"] * 4


def test_plain_jax_jit_and_its_helpers_are_not_counted_outside_watch():
    def plain(x):
        return x * 3

    jax.jit(plain)(jnp.arange(7.0))
    jax.grad(lambda x: jax.jit(plain)(x).sum())(jnp.ones(6))
    assert _counted() == ([], [])


def test_under_watch_every_compile_is_counted_with_its_record():
    def plain(x):
        return x * 4

    with jaxdiag.watch():
        jax.jit(plain)(jnp.arange(9.0))
        jnp.ones(11) + 1  # JAX's own helpers compile too
    compiles, records = _counted()
    assert "jit(plain)" in compiles and "plain" in records
    assert len(compiles) == len(records) >= 2


def test_a_failed_compile_is_not_counted():
    f = jaxdiag.jit(lambda x: x + 1, compiler_options={"xla_no_such_option": True})
    with pytest.raises(RuntimeError, match="xla_no_such_option"):
        f(jnp.ones(2))
    assert _counted() == ([], [])


@pytest.mark.compile_count_unchecked  # planted: the record is lost, which the count must show
def test_a_compile_without_its_record_is_a_mismatch_naming_the_function(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(call_site, "call_site_and_function", broken)
    monkeypatch.setattr(errors, "_warned", set())

    @jaxdiag.jit
    def step(x):
        return x - 1

    with pytest.warns(JaxdiagWarning, match="planted failure"):
        step(jnp.ones(2))
    compiles, records = _counted()
    assert records == []
    problem = compile_count.mismatch(compiles, records)
    assert problem is not None and "jaxdiag recorded 0 compiles where JAX reported 1" in problem
    assert "compiled without a record: {'step': 1}" in problem

"""``jaxdiag.jit`` objects behave like ``jax.jit``'s under pickle, cloudpickle, copy, weakref and inspect."""

from __future__ import annotations

import copy
import inspect
import pickle
import weakref

import cloudpickle
import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.recording import compile_log


def scale(x, factor=2.0):
    """Multiply by ``factor``."""
    return x * factor


JITS = {"jax.jit": jax.jit, "jaxdiag.jit": jaxdiag.jit}


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as exc:  # compared between the two jits, not asserted on alone
        return type(exc).__name__, None


@pytest.mark.parametrize(
    "case", ["cloudpickle", "cloudpickle_lambda", "cloudpickle_closure", "pickle", "copy", "deepcopy"]
)
def test_round_trips_as_jax_jit_does(case):
    def run(jit):
        factor = 3.0
        fun = {"cloudpickle_lambda": lambda x: x + 1, "cloudpickle_closure": lambda x: x * factor}.get(case, scale)
        j = jit(fun)
        dump = {
            "pickle": lambda: pickle.loads(pickle.dumps(j)),
            "copy": lambda: copy.copy(j),
            "deepcopy": lambda: copy.deepcopy(j),
        }.get(case, lambda: cloudpickle.loads(cloudpickle.dumps(j)))
        return outcome(lambda: float(dump()(jnp.float32(2.0))))

    assert run(jaxdiag.jit) == run(jax.jit)


def test_unpickled_function_still_records_its_compiles():
    j = cloudpickle.loads(cloudpickle.dumps(jaxdiag.jit(lambda x: x - 1)))
    j(jnp.ones(3))
    j(jnp.ones(4))
    recs = compile_log.records()
    assert [r.compile_index for r in recs] == [1, 2]
    assert recs[1].explanation.changes[0].what == "shape"


def test_weakref_signature_and_names_match_jax_jit():
    for jit in JITS.values():
        j = jit(scale)
        assert weakref.ref(j)() is j
    ours, theirs = jaxdiag.jit(scale), jax.jit(scale)
    assert inspect.signature(ours) == inspect.signature(theirs)
    assert (ours.__name__, ours.__doc__, ours.__wrapped__) == (theirs.__name__, theirs.__doc__, scale)

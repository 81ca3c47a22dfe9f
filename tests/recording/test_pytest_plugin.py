"""The pytest plugin's ``jaxdiag_compiles`` fixture."""

from __future__ import annotations

import subprocess
import sys

# Imported here so that pytester's in-process runs find them already loaded: it drops
# modules first imported inside a run, and jaxlib cannot be initialised twice.
import jax  # noqa: F401

import jaxdiag.recording.wrapper  # noqa: F401

pytest_plugins = ["pytester"]

STEP = """
import jax.numpy as jnp
import pytest
import jaxdiag

@jaxdiag.jit
def step(x):
    return x * 2
"""


def test_fixture_counts_and_expects(pytester):
    pytester.makepyfile(
        STEP
        + """
from jaxdiag.errors import CompileBudgetExceeded

def test_counts(jaxdiag_compiles):
    step(jnp.ones(2))
    step(jnp.ones(2))
    step(jnp.ones(3))
    assert jaxdiag_compiles.count() == 2
    assert jaxdiag_compiles.count("step") == 2
    assert jaxdiag_compiles.count(step) == 2
    assert jaxdiag_compiles.count("other") == 0
    assert [r.compile_index for r in jaxdiag_compiles.records] == [1, 2]
    jaxdiag_compiles.expect(max=2)
    with pytest.raises(CompileBudgetExceeded, match="got 2: step: 2 compiles"):
        jaxdiag_compiles.expect(max=1)

def test_starts_empty(jaxdiag_compiles):
    step(jnp.ones(2))  # compiled by the test before: a cache hit
    assert jaxdiag_compiles.count() == 0
"""
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-p", "no:randomly")  # tests run in order
    result.assert_outcomes(passed=2)


def test_expect_failure_reads_as_a_failed_check(pytester):
    pytester.makepyfile(
        STEP
        + """
def test_too_many(jaxdiag_compiles):
    for n in (1, 2, 3):
        step(jnp.ones(n))
    jaxdiag_compiles.expect(max=1)
"""
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--tb=short")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CompileBudgetExceeded: expected at most 1 compile(s), got 3*"])


def test_plugin_is_registered_and_imports_no_jax():
    code = (
        "import sys, importlib.metadata as m\n"
        "eps = [e.value for e in m.entry_points(group='pytest11') if e.name == 'jaxdiag']\n"
        "import jaxdiag.recording.pytest_plugin\n"
        "print(eps, 'jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split("]")[0] == "['jaxdiag.recording.pytest_plugin'", out.stderr
    assert out.stdout.strip().endswith("False")

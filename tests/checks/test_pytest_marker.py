"""``@pytest.mark.jaxdiag(max_compiles=N)``: run real pytest sessions in-process on small jitted tests."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import jax
import jax.numpy as jnp
import pytest

import jaxdiag


@jax.jit
def double(x):
    return x * 2


@pytest.mark.jaxdiag(max_compiles=1)
def test_shape_change_compiles_twice():
    double(jnp.ones(3))
    double(jnp.ones(4))


@pytest.mark.jaxdiag(1)
def test_one_shape_compiles_once():
    for _ in range(3):
        double(jnp.ones(5))


@pytest.mark.jaxdiag(max_compiles=0)
def test_eager_jnp_is_not_counted():
    jnp.cumsum(jnp.arange(7.0)).block_until_ready()


@pytest.mark.jaxdiag(max_compiles=0, watch=False)
def test_watch_off_counts_jaxdiag_jit_only():
    double(jnp.ones(6))


@pytest.mark.jaxdiag(max_compiles=0)
def test_jaxdiag_jit_is_counted():
    jaxdiag.jit(lambda x: x + 1)(jnp.ones(2))


@pytest.mark.jaxdiag(max_compiles=5, function="double")
def test_function_filter():
    for n in range(8, 12):
        double(jnp.ones(n))
    jax.jit(lambda x: x - 1)(jnp.ones(2))


@pytest.mark.jaxdiag(max_compiles=5)
def test_own_guard_failure_is_reported_as_is():
    with jaxdiag.expect_compiles(max=0):
        jaxdiag.jit(lambda x: x * 3)(jnp.ones(2))


@pytest.mark.jaxdiag(max_compiles=-1)
def test_bad_marker():
    pass


@pytest.mark.jaxdiag(max_compiles=0)
def test_failing_test_keeps_its_own_error():
    double(jnp.ones(13))
    raise ValueError("the test's own failure")
"""


@pytest.fixture
def outcome(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked=TESTS)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-q", "-rA", "-W", "ignore::pytest.PytestAssertRewriteWarning"
    )
    return result


def _report(outcome, name: str) -> str:
    """The failure text of one test (or "" when it passed)."""
    text = "\n".join(outcome.outlines)
    start = text.find(f"_ {name} _")
    if start < 0:
        return ""
    # A section ends at the next test's header or at the summary banner (-rA).
    ends = [i for i in (text.find("\n_____", start + 1), text.find("\n=====", start + 1)) if i > 0]
    return text[start : min(ends) if ends else None]


def test_marker(outcome) -> None:
    outcome.assert_outcomes(passed=4, failed=5, errors=0)
    passed = {line.split("::")[1] for line in outcome.outlines if line.startswith("PASSED")}
    assert passed == {
        "test_one_shape_compiles_once",
        "test_eager_jnp_is_not_counted",
        "test_watch_off_counts_jaxdiag_jit_only",
        "test_function_filter",
    }

    shape = _report(outcome, "test_shape_change_compiles_twice")
    assert "@pytest.mark.jaxdiag(max_compiles=1): expected at most 1 compile(s), got 2" in shape
    assert "double: 2 compiles" in shape and "args[0] shape axis 0" in shape and "3 -> 4" in shape

    assert "expected at most 0 compile(s), got 1: <lambda>: 1 compile" in _report(
        outcome, "test_jaxdiag_jit_is_counted"
    )
    own = _report(outcome, "test_own_guard_failure_is_reported_as_is")
    assert "E           jaxdiag.errors.CompileBudgetExceeded: expected at most 0 compile(s)" in own
    assert "@pytest.mark.jaxdiag(max_compiles=...) must be a non-negative integer, got -1" in _report(
        outcome, "test_bad_marker"
    )
    failing = _report(outcome, "test_failing_test_keeps_its_own_error")
    assert "ValueError: the test's own failure" in failing and "CompileBudgetExceeded" not in failing


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--markers")
    assert any(
        line.startswith("@pytest.mark.jaxdiag(max_compiles=0, function=None, watch=True)") for line in result.outlines
    )


def test_plugin_import_does_not_import_jax() -> None:
    import subprocess
    import sys

    code = "import sys, jaxdiag.checks.pytest_marker; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"

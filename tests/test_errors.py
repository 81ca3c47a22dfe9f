import warnings

import pytest

from jaxdiag import errors
from jaxdiag.errors import JaxdiagWarning


def test_warn_once_says_each_key_once(monkeypatch):
    monkeypatch.setattr(errors, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            errors.warn_once("a", "first problem")
            errors.warn_once("b", "second problem")
    assert [(c.category, str(c.message)) for c in caught] == [
        (JaxdiagWarning, "first problem"),
        (JaxdiagWarning, "second problem"),
    ]


def test_warn_once_points_at_the_code_that_called_the_failing_step(monkeypatch):
    monkeypatch.setattr(errors, "_warned", set())

    def failing_step():
        errors.warn_once("here", "said here")

    with pytest.warns(JaxdiagWarning) as caught:
        failing_step()  # the warning's line
    assert (caught[0].filename, caught[0].lineno) == (__file__, failing_step.__code__.co_firstlineno + 4)


def test_warn_once_never_raises_under_warnings_as_errors(monkeypatch):
    monkeypatch.setattr(errors, "_warned", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        errors.warn_once("quiet", "never raised")
    assert "quiet" in errors._warned

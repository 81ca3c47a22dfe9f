"""Every monitor test must leave no profiler session running and no monitor listening."""

from __future__ import annotations

import pytest

from tests.capturing.conftest import stop_a_running_session


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    from jaxdiag.capturing import profile, step_hooks

    session_left = stop_a_running_session()  # public on every JAX; stopped, so that later tests still run
    capture_left = profile.active() is not None
    if capture_left:
        profile._active = None
    listening = list(step_hooks.LISTENERS)
    step_hooks.LISTENERS.clear()
    assert not (session_left or capture_left), "a profiler session was left running"
    assert not listening, f"a step listener was left registered: {listening}"

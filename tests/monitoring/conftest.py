"""Every monitor test must leave no profiler session running and no monitor listening."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    from jax._src import profiler

    from jaxdiag.capturing import profile, step_hooks

    leaked = profiler._profile_state.profile_session is not None or profile.active() is not None
    if leaked:
        if profiler._profile_state.profile_session is not None:
            profiler.stop_trace()
        profile._active = None
    listening = list(step_hooks.LISTENERS)
    step_hooks.LISTENERS.clear()
    assert not leaked, "a profiler session was left running"
    assert not listening, f"a step listener was left registered: {listening}"

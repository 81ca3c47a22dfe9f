"""Every capture test must leave no profiler session running."""

from __future__ import annotations

import pytest


def stop_a_running_session() -> bool:
    """Whether a ``jax.profiler`` session was running (it is stopped).

    Public on every JAX: ``stop_trace`` raises when no session runs (JAX's private
    session holder changes between releases: 0.12 removed ``_ProfileState.profile_session``).
    """
    import jax

    try:
        jax.profiler.stop_trace()
    except RuntimeError:
        return False
    return True


@pytest.fixture(autouse=True)
def no_profiler_session_leaks():
    yield
    from jaxdiag.capturing import profile

    session_left = stop_a_running_session()  # stopped, so that later tests still run
    capture_left = profile.active() is not None
    if capture_left:
        profile._active = None
    assert not (session_left or capture_left), "a profiler session was left running"

"""Fixtures for the recording tests: 8 CPU devices, a fresh compile log per test, and a count check.

``every_compile_is_a_record`` holds jaxdiag to its promise that, while
``jaxdiag.watch()`` records everything (JAX's own helpers included), each backend
compile JAX reports through ``jax.monitoring`` is one record: it counts both for
every test and fails the test on a difference. Tests that break recording on
purpose (a planted listener failure, JAX internals made to vanish) opt out with
``@pytest.mark.compile_count_unchecked``.
"""

from __future__ import annotations

import os
import sys
import threading

if "jax" not in sys.modules:  # only takes effect before jax is first imported
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import pytest  # noqa: E402

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class _Counts:
    """Backend compiles and records seen while everything was being recorded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.compiles = 0
        self.records = 0


_COUNTS = _Counts()
_registered = False


def _recording_everything() -> bool:
    from jaxdiag.recording import listener, watch

    return listener.mode() == "frames" and listener.get_watch() is watch._RECORDERS[True]


def _on_duration(event: str, duration: float, **kwargs: object) -> None:
    if event == COMPILE_EVENT and _COUNTS.active and _recording_everything():
        with _COUNTS.lock:
            _COUNTS.compiles += 1


class _CountingRecords(list):
    """A collector's record list that counts the records added while everything was recorded."""

    def append(self, record: object) -> None:
        super().append(record)
        if _COUNTS.active and _recording_everything():
            with _COUNTS.lock:
                _COUNTS.records += 1


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "compile_count_unchecked: the test breaks recording on purpose; its records need not match JAX's compile count",
    )


@pytest.fixture(autouse=True)
def fresh_compile_log():
    """Each test starts with an empty in-memory log and no file sink, and leaves none."""
    from jaxdiag.recording import compile_log

    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=False)
    yield
    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=False)


@pytest.fixture(autouse=True)
def every_compile_is_a_record(request: pytest.FixtureRequest):
    """Fail a test in which ``watch()`` saw a number of backend compiles other than its records."""
    global _registered
    from jax import monitoring

    from jaxdiag.recording import compile_log

    if not _registered:
        monitoring.register_event_duration_secs_listener(_on_duration)
        _registered = True
    collector = compile_log.Collector()
    collector.records = _CountingRecords()
    compile_log.LOG.add_collector(collector)
    with _COUNTS.lock:
        _COUNTS.active, _COUNTS.compiles, _COUNTS.records = True, 0, 0
    try:
        yield
    finally:
        compile_log.LOG.remove_collector(collector)
        with _COUNTS.lock:
            _COUNTS.active = False
            compiles, records = _COUNTS.compiles, _COUNTS.records
    if request.node.get_closest_marker("compile_count_unchecked") is None:
        assert records == compiles, (
            f"jaxdiag.watch() recorded {records} compiles where JAX reported {compiles} "
            f"backend compiles ({COMPILE_EVENT})"
        )

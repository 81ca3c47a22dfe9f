"""Fixtures for the recording tests: 8 CPU devices and a fresh compile log per test.

The count check (each compile jaxdiag records is one record) lives in ``tests/conftest.py``
and covers every test; tests that break recording on purpose opt out with
``@pytest.mark.compile_count_unchecked``.
"""

from __future__ import annotations

import os
import sys

if "jax" not in sys.modules:  # only takes effect before jax is first imported
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_compile_log():
    """Each test starts with an empty in-memory log and no file sink, and leaves none."""
    from jaxdiag.recording import compile_log

    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=False)
    yield
    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=False)

"""One hierarchy for every error jaxdiag raises on purpose.

Each message names the file or argument at fault and what to do about it; the
CLI turns any ``JaxdiagError`` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import warnings


class JaxdiagError(Exception):
    """Base class: a problem with the user's input, not a bug in jaxdiag."""


class TraceFormatError(JaxdiagError):
    """A trace folder or file is missing, empty, truncated or not an XSpace."""


class CompileLogError(JaxdiagError):
    """A compile log cannot be read or written."""


class ConfigError(JaxdiagError):
    """An option, environment variable or configuration value is invalid."""


class CompileBudgetExceeded(JaxdiagError, AssertionError):
    """More compiles happened than a guard allowed.

    Subclasses ``AssertionError`` so that test runners report it as a failed
    check rather than as an error in the test itself.
    """


class CaptureError(JaxdiagError):
    """A profiler capture cannot start or be written (unwritable logdir, nested capture)."""


class JaxdiagWarning(UserWarning):
    """Something jaxdiag could not do (write its log, read JAX internals); the program goes on."""


_warned: set[str] = set()


def warn_once(key: str, message: str, *, stacklevel: int = 2) -> None:
    """Warn with ``message`` (a ``JaxdiagWarning``) the first time ``key`` is seen in this process.

    The one warn-once rule for recording, capability probes and sharding facts, so
    that a problem repeated on every compile is said once. ``stacklevel`` counts
    from the caller, as in ``warnings.warn``. Never raises, even under ``-W error``:
    a problem of jaxdiag's must not fail the user's call.
    """
    if key in _warned:
        return
    _warned.add(key)
    try:
        warnings.warn(message, JaxdiagWarning, stacklevel=stacklevel + 1)
    except Exception:
        pass


class CompileBudgetWarning(JaxdiagWarning):
    """A function compiled more often than its ``max_compiles`` allows."""


class BaselineError(JaxdiagError):
    """A check baseline cannot be read or written (not JSON, wrong version, missing figures)."""


class HostDivergenceError(JaxdiagError):
    """Processes of one multi-controller run compiled a function with different signatures.

    Raised by the host check (``jaxdiag.watch(check_hosts="raise")``) before the
    program runs the collective that would hang.
    """


class HostDivergenceWarning(JaxdiagWarning):
    """Processes compiled a function differently, or a peer did not answer the host check in time."""

"""jaxdiag: recompile and sharding diagnostics for JAX.

The public API is small and loaded lazily, so that ``import jaxdiag`` (and every
CLI command that only reads traces or logs) does not import jax or pandas.

Recording compiles:
  jit               drop-in ``jax.jit`` that records and explains every compile
  watch             record every compile in the process, whatever wrapper (nnx.jit, pmap, ...)
  configure         where the compile log goes, and what it records
  compiles          the compile log as a pandas DataFrame
  expect_compiles   context manager failing when code compiles more than allowed

Capturing traces:
  profile           context manager: a ``jax.profiler`` capture with a jaxdiag sidecar
  capture           number and annotate steps, profile a window of them
  step              decorator on a train step: jit, annotate, capture, count tokens
  monitor           watch a long run: time steps, capture on anomalies, catch hangs and stragglers

Reading traces:
  load              a ``jax.profiler`` capture as columnar frames
  report            load a capture and run every analysis; returns a ``Report``
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jaxdiag.version import __version__

_LAZY = {
    "jit": "jaxdiag.recording.wrapper",
    "watch": "jaxdiag.recording.watch",
    "configure": "jaxdiag.recording.compile_log",
    "compiles": "jaxdiag.recording.compile_log",
    "expect_compiles": "jaxdiag.recording.budget",
    "profile": "jaxdiag.capturing.profile",
    "capture": "jaxdiag.capturing.window",
    "step": "jaxdiag.capturing.step",
    "monitor": "jaxdiag.monitoring.monitor",
    "load": "jaxdiag.trace.load",
    "report": "jaxdiag.reporting.build",
    "Report": "jaxdiag.reporting.model",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.capturing.profile import profile
    from jaxdiag.capturing.step import step
    from jaxdiag.capturing.window import capture
    from jaxdiag.monitoring.monitor import monitor
    from jaxdiag.recording.budget import expect_compiles
    from jaxdiag.recording.compile_log import compiles, configure
    from jaxdiag.recording.watch import watch
    from jaxdiag.recording.wrapper import jit
    from jaxdiag.reporting.build import report
    from jaxdiag.reporting.model import Report
    from jaxdiag.trace.load import load


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxdiag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

"""When a host's devices waited on the host: idle, with no execution in flight or queued.

One computation for every figure that says "the device waited while the host did X":
the per-step ``host_wait_ms`` (``step_breakdown``), the host-wait breakdown by cause
(``host_waits``, compiles included) and the time a compile cost the device
(``recompiles``). A stretch counts when no device op of the host runs (a gap in
the union of ``device_work.device_ops``) for at least ``thresholds.host_wait_min_us``
(shorter gaps are launch jitter) and nothing is in flight or queued
(``booking.in_flight``): a compile that runs while the device works through
executions the host queued ahead costs the device nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jaxdiag.analyses import intervals as iv
from jaxdiag.analyses.booking import in_flight
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.device_work import device_ops, intervals_of
from jaxdiag.analyses.shared import once

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.frames import TraceFrames


def device_busy(frames: "TraceFrames", host: str) -> np.ndarray:
    """When some device op of ``host`` ran, as a union (device rows of no program inside a compile,
    autotuning's, are no work); shared within a report."""

    def busy() -> np.ndarray:
        compiles = compile_windows(compile_spans(frames, host)).get(host, iv.EMPTY)
        return iv.union(intervals_of(device_ops(frames, host, {host: compiles})))

    return once(frames, ("device_busy", host), busy)


def device_idle(frames: "TraceFrames", host: str, start: int, end: int, min_ns: int) -> np.ndarray:
    """Stretches of ``[start, end)`` at least ``min_ns`` long where no device op of ``host`` runs
    (``device_busy``); shared within a report."""
    key = ("device_idle", host, start, end, min_ns)
    return once(frames, key, lambda: iv.gaps(device_busy(frames, host), start, end, min_ns))


def device_waiting(frames: "TraceFrames", host: str, start: int, end: int, min_ns: int) -> np.ndarray:
    """``device_idle`` less the time an execution was in flight or queued: the device waited on the host."""
    flight, _label = in_flight(frames, host)
    return iv.subtract(device_idle(frames, host, start, end, min_ns), flight)

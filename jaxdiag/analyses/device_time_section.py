"""The report's ``device_time`` section as a type: device time per module (per step) and the costliest ops.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.host_wait_section import StepMs
from jaxdiag.analyses.small_op_section import OpTotal


@dataclasses.dataclass(frozen=True)
class ModuleTime:
    """One module's device time, in all and per step."""

    module: str
    count: int = 0
    total_ms: float = 0.0
    per_step: tuple[StepMs, ...] = ()


@dataclasses.dataclass(frozen=True)
class DeviceTimeSection:
    """The report's ``device_time`` section (1.1).

    Device op time summed per module and per op, divided by the number of devices on the host (a
    bill of work, so overlapping ops add up; `steps[].device_busy_ms` is busy time). Used by
    `jaxdiag check` and `jaxdiag diff`.
    """

    by_module: tuple[ModuleTime, ...] = ()
    top_ops: tuple[OpTotal, ...] = ()

"""The report's ``host_waits`` section as a type: what renderers and checks read, and what its JSON is made from.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class CauseWait:
    cause: str = described(
        "an annotation name such as `load_batch`, `compile`, `device_to_host_sync`, `dispatch`, `python`, "
        "`unattributed`"
    )
    kind: str = described("`annotation`, `compile`, `device_to_host_sync`, `dispatch` or `unattributed`", "")
    ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class StepCause:
    cause: str
    ms: float


@dataclasses.dataclass(frozen=True)
class StepWaits:
    step: int
    total_ms: float
    by_cause: tuple[StepCause, ...] = described("largest first", ())


@dataclasses.dataclass(frozen=True)
class StepMs:
    step: int
    ms: float


@dataclasses.dataclass(frozen=True)
class InExecution:
    label: str = described(
        'what those gaps are on this platform, e.g. XLA:CPU\'s thread scheduling; `""` where the trace does not tell executions apart',
        "",
    )
    total_ms: float = 0.0
    by_step: tuple[StepMs, ...] = ()


@dataclasses.dataclass(frozen=True)
class HostWaits:
    """The report's ``host_waits`` section: device idle with nothing in flight or queued, by cause and step."""

    in_execution: InExecution = described(
        "device-idle time while an execution was in flight, which is not a host wait", InExecution(), since="1.4"
    )
    total_ms: float = described("host waits summed over the steps, compiles included", 0.0)
    by_cause: tuple[CauseWait, ...] = described("totals per cause, largest first", ())
    by_step: tuple[StepWaits, ...] = described("per step that waited", ())

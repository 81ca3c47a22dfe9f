"""The report's ``stragglers`` section as a type: per-host step times, clock alignment and late hosts.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described
from jaxdiag.analyses.host_wait_section import CauseWait


@dataclasses.dataclass(frozen=True)
class AlignmentFacts:
    """How the hosts' clocks were put on the reference host's."""

    reference: str = described("host", "")
    aligned: bool = False
    shared_collectives: int = described("collective runs every host had, aligned on their ends", 0)
    residual_ms: float | None = described("largest distance of an aligned end from the reference's", None)
    offsets_ms: dict[str, float] = described("per host", factory=dict)
    note: str = described("when the clocks could not be aligned", "")


@dataclasses.dataclass(frozen=True)
class HostStep:
    """One host in one step: its wall time, how late it came to collectives, how long it waited in them."""

    host: str
    step: int
    wall_ms: float = 0.0
    late_ms: float = described("how late it reached collectives the others waited in", 0.0)
    waited_ms: float = described("per device: time it waited in collectives for a later host", 0.0)


@dataclasses.dataclass(frozen=True)
class StepSetBy:
    step: int
    host: str


@dataclasses.dataclass(frozen=True)
class StragglerRow:
    """A host the others waited for."""

    host: str
    steps: tuple[int, ...] = ()
    late_ms: float = described("summed over its late collectives", 0.0)
    others_waited_device_ms: float = described("summed across the other hosts' devices", 0.0)
    waiting_devices: int = 0
    doing: tuple[CauseWait, ...] = described("its own host waits in those steps", ())


#: How renderers say which steps ``warmup_steps`` left out (``{}``: the steps, e.g. ``0, 1``).
WARMUP_NOTE = "Step(s) {}: every host compiled the same functions there, so lateness there is not called straggling"


@dataclasses.dataclass(frozen=True)
class StragglersSection:
    """The report's ``stragglers`` section (1.3).

    With several hosts (`{}` with one). Finding: `straggler`.
    """

    hosts: tuple[str, ...] = described(only_with="hosts", default=())
    alignment: AlignmentFacts | None = described(only_with="hosts", default=None)
    per_host_step: tuple[HostStep, ...] = described(only_with="hosts", default=())
    step_set_by: tuple[StepSetBy, ...] = described(
        "the host whose step was longest, the run's step time", only_with="hosts", default=()
    )
    stragglers: tuple[StragglerRow, ...] = described("lateness outside `warmup_steps`", only_with="hosts", default=())
    warmup_steps: tuple[int, ...] = described(
        "steps in which every host compiled the same functions: which host comes last there is compile and"
        " first-run jitter, so `per_host_step` shows their lateness but `stragglers` and the findings leave it out",
        only_with="hosts",
        default=(),
        since="1.5",
    )

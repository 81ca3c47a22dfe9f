"""The report's ``collectives`` section as a type: what renderers and checks read, and what its JSON is made from.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class CollectiveKind:
    """Collectives of one kind: count, per-device time, exposed time, overlap."""

    kind: str
    count: int = 0
    total_ms: float = 0.0
    exposed_ms: float = 0.0
    overlap_fraction: float | None = None


@dataclasses.dataclass(frozen=True)
class StepComm:
    """Collective and exposed time in one step, per device (mean)."""

    step: int
    total_ms: float = 0.0
    exposed_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class LateDevice:
    """A device that arrived last at collectives of its host, so the others waited for it.

    Attributes:
      host, device: where it is (``device`` as ``"plane#ordinal"``).
      runs: collective runs it arrived last at, inside the analysed steps.
      of_runs: collective runs inside the analysed steps with several participants.
      waited_ms: the other devices' wait for it, per device (mean over devices).
      max_late_ms: the longest any device waited for it in one run.
      transfer_ms: the transfer itself in those runs, summed (the shortest participant's duration).
      ops: the collective ops it was late to.
    """

    host: str
    device: str
    runs: int
    of_runs: int
    waited_ms: float
    max_late_ms: float
    transfer_ms: float
    ops: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Collectives:
    """The report's ``collectives`` section: communication and its overlap with compute, per device (mean)."""

    overlap_fraction: float | None = described(
        "collective time overlapped by compute on the same device, over all collective time", None
    )
    exposed_ms: float = 0.0
    total_ms: float = 0.0
    waiting_for_hosts_ms: float = described(
        "per device: time in collectives spent waiting for a late host; left out of the other figures, booked by "
        "the `straggler` finding",
        0.0,
        since="1.3",
    )
    waiting_for_devices_ms: float = described(
        "per device: time in collectives spent waiting for a later device of the same host, before the transfer "
        "itself, which the shortest participant's duration approximates; left out of the other figures, booked by "
        "the `collective_wait` finding",
        0.0,
        since="1.4",
    )
    late_devices: tuple[LateDevice, ...] = described(
        "the devices that arrived last, most waited for first; the `collective_wait` finding names the first as the "
        "one the others waited for only when it arrived last at two thirds of the runs or more and half or more of "
        "the wait was for it, `evidence.consistently_late` says which, and otherwise says the lateness is spread "
        "over the devices",
        (),
        since="1.4",
    )
    by_kind: tuple[CollectiveKind, ...] = ()
    per_step: tuple[StepComm, ...] = ()

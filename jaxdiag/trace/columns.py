"""``HostColumns``: the events of one host as parallel columns, as the readers build them.

Both readers (``xspace`` for ``.xplane.pb`` files, ``json_trace`` for Chrome JSON)
fill these columns, and ``load.events_frame`` turns them into the events table.
Number columns are ``array``s: as quick to append to as lists, and numpy reads
them (and pickle writes them) as one block of memory.
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Any


@dataclasses.dataclass(slots=True)
class HostColumns:
    """The events of one host as parallel columns, plus what the loader needs beside them.

    Events are stored per line: ``segments`` holds ``(plane, line, line_kind, count)``
    for consecutive runs of events, so the four per-line columns are not
    repeated per event.
    """

    host: str
    segments: list[tuple[str, str, str, int]] = dataclasses.field(default_factory=list)
    device: "array[int]" = dataclasses.field(default_factory=lambda: array("q"))
    name: list[str] = dataclasses.field(default_factory=list)
    start_ns: "array[float]" = dataclasses.field(default_factory=lambda: array("d"))
    dur_ns: "array[float]" = dataclasses.field(default_factory=lambda: array("d"))
    hlo_module: list[str] = dataclasses.field(default_factory=list)
    hlo_op: list[str] = dataclasses.field(default_factory=list)
    framework_op: list[str] = dataclasses.field(default_factory=list)
    program_id: "array[int]" = dataclasses.field(default_factory=lambda: array("q"))
    category: list[str] = dataclasses.field(default_factory=list)
    #: one dict per device, keys ``DEVICE_COLUMNS``
    devices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: ``(name, step_num, start_ns, end_ns)`` of host events with a ``step_num`` stat
    step_marks: list[tuple[str, int, float, float]] = dataclasses.field(default_factory=list)
    #: ``(device, step, start_ns, end_ns)`` from TPU "Steps" lines
    device_steps: list[tuple[int, int, float, float]] = dataclasses.field(default_factory=list)
    python_frames: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)

    def add(
        self,
        device: int,
        name: str,
        start: float,
        dur: float,
        module: str = "",
        op: str = "",
        framework: str = "",
        program: int = -1,
        category: str = "runtime",
    ) -> None:
        """Append one event (the plane/line come from the open segment)."""
        self.device.append(device)
        self.name.append(name)
        self.start_ns.append(start)
        self.dur_ns.append(dur)
        self.hlo_module.append(module)
        self.hlo_op.append(op)
        self.framework_op.append(framework)
        self.program_id.append(program)
        self.category.append(category)

    def add_host_events(self, names: list[str], starts: list[float], durs: list[float], category: str) -> None:
        """Append host events of one category in bulk (there can be a million)."""
        n = len(names)
        self.name += names
        self.start_ns.extend(starts)
        self.dur_ns.extend(durs)
        self.device.extend(_NONE * n)
        self.program_id.extend(_NONE * n)
        self.category += [category] * n
        for column in (self.hlo_module, self.hlo_op, self.framework_op):
            column += [""] * n

    def extend(self, other: "HostColumns") -> None:
        """Append ``other``'s events and facts after this one's (the pieces of one host, in plane order)."""
        for column in _LISTS:
            getattr(self, column).extend(getattr(other, column))
        self.meta.update(other.meta)
        self.python_frames += other.python_frames

    def close_segment(self, plane: str, line: str, kind: str, first: int) -> None:
        """Record that events ``first:`` (up to now) belong to ``plane``/``line``."""
        count = len(self.name) - first
        if count:
            self.segments.append((plane, line, kind, count))


_NONE = array("q", [-1])  # no device, no program
#: The list and array fields that ``HostColumns.extend`` concatenates.
_LISTS = (
    "segments",
    "device",
    "name",
    "start_ns",
    "dur_ns",
    "hlo_module",
    "hlo_op",
    "framework_op",
    "program_id",
    "category",
    "devices",
    "step_marks",
    "device_steps",
    "notes",
)

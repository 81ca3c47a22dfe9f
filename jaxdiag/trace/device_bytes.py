"""A device plane's events, read from the bytes before the XSpace reader sees them.

A GPU kernel carries ten stats or so (correlation id, kernel details, occupancy,
...) and the reader turns every one into a Python tuple; the device plane reads
only ``DEVICE_STATS`` of them. Here every event of every line is located and
walked at once (``line_bytes``), then the stats read (``stat_bytes``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdiag.trace import line_bytes, wire
from jaxdiag.trace.line_bytes import LineEvents, Unexpected
from jaxdiag.trace.stat_bytes import event_stats

#: The stats ``device_plane.read_device_plane`` reads of a device event.
DEVICE_STATS = frozenset(
    {"step_num", "group_id", "hlo_module", "hlo_op", "program_id", "display_name", "name", "tf_op"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceEvents:
    """A device line's events as the reader gives them; ``stats`` holds only ``DEVICE_STATS``."""

    names: list[str]
    starts: list[float]
    durs: list[float]
    stats: list[dict[str, Any]]


def prepare_device_plane(
    data: bytes | memoryview, layout: wire.PlaneLines
) -> tuple[dict[int, bytes], dict[int, DeviceEvents]]:
    """The lines of a device plane read here: each one's record without its events, and its events; by line index.

    A line this cannot read is in neither: the reader reads it.
    """
    if not line_bytes.available():
        return {}, {}
    view = memoryview(data)
    try:
        names, stat_names = line_bytes.plane_metadata(b"".join(view[a:b] for a, b, line in layout.chunks if line < 0))
    except Unexpected:
        return {}, {}
    todo = [(a, b, line) for a, b, line in layout.chunks if line >= 0]
    if not todo:
        return {}, {}
    padded, located = line_bytes.locate_lines(view, todo)
    events = _read_lines(padded, located, names, stat_names)
    return {line: located[line].without_events(view) for line in events}, events


def _read_lines(
    padded: Any, lines: dict[int, LineEvents], names: dict[int, str], stat_names: dict[int, str]
) -> dict[int, DeviceEvents]:
    """Lines' events, all lines decoded at once; a line left out is left to the reader."""

    def read(some: dict[int, LineEvents]) -> dict[int, DeviceEvents]:
        rounds: list[Any] = []
        got = line_bytes.decode_lines(padded, some, names, stats=rounds)
        stats = event_stats(padded, rounds, len(got.names), stat_names, DEVICE_STATS)
        event_names, starts, durs = got.names.tolist(), got.starts.tolist(), got.durs.tolist()
        return {
            line: DeviceEvents(event_names[lo:hi], starts[lo:hi], durs[lo:hi], stats[lo:hi])
            for line, lo, hi in got.spans
        }

    return line_bytes.read_in_bulk(lines, read)

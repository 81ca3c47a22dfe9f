"""The events of a serialized ``XLine``, located and decoded all at once (numpy, and upb for names).

The XSpace reader makes a Python object per event, and a per-event loop over
those objects is most of the time a report takes on a large capture. Here numpy
finds where every event record of a line lies (``locate``), then walks the
fields of all events (or of all their stats) together, one field of each per
round (``walk``). ``contract.ColumnReader`` builds on it; protobuf's C parser (upb)
reads the planes' metadata there, which names the events.

Values are decoded as jaxlib's ``ProfileEvent`` gives them: names from the
plane's metadata ``name``; start ``offset_ps / 1000 + line.timestamp_ns`` and
duration ``duration_ps / 1000`` in integer arithmetic. Anything not laid out as
expected raises ``Unexpected``: the caller then parses that line whole with upb.

Locating and walking a line's records are one decoder of one wire layout, which is why the module
runs past 400 lines.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterator, Sequence

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import wire
from jaxdiag.trace.schema import FIXED32, FIXED64, LENGTH_DELIMITED, VARINT, XEvent, XLine, XPlane

LINES = XPlane.LINES
EVENTS, _TIMESTAMP_NS = XLine.EVENTS, XLine.TIMESTAMP_NS
METADATA_ID, OFFSET_PS, DURATION_PS, STATS = XEvent.METADATA_ID, XEvent.OFFSET_PS, XEvent.DURATION_PS, XEvent.STATS
_CHUNK = 1 << 20
PAD = 16  # zero bytes after each line's copy in ``padded`` arrays: reads past a line's end see zeros


class Unexpected(Exception):
    """Bytes not laid out as this module expects: the line is left to the reader."""


@dataclasses.dataclass(frozen=True, slots=True)
class LineEvents:
    """Where a line's event records lie: offsets in the file's bytes; numpy arrays (one entry per event)
    of offsets in ``padded``, the array the line was copied into (see ``copy_lines``)."""

    base: int  # where ``padded``'s first byte would be in the file (offsets below + base: in the file)
    payload: int  # where the line's fields start
    first: int  # where its first event record starts
    end: int  # where its last one ends
    record_end: int  # where the line ends
    timestamp_ns: int
    starts: Any  # each record's start (its tag), in ``padded``
    content: Any  # each event's first byte, in ``padded``
    sizes: Any  # each event's length


def copy_lines(view: memoryview, lines: Sequence[tuple[int, int]]) -> tuple[Any, list[int]]:
    """The records ``view[a:b]`` copied into one uint8 array, each followed by ``PAD`` zeros, and each one's base."""
    import numpy as np

    zeros = np.zeros(PAD, np.uint8)
    padded = np.concatenate([part for a, b in lines for part in (np.frombuffer(view[a:b], np.uint8), zeros)])
    bases, offset = [], 0
    for a, b in lines:
        bases.append(a - offset)
        offset += b - a + PAD
    return padded, bases


def locate(view: memoryview, padded: Any, base: int, a: int, b: int) -> LineEvents:
    """The events of the line record ``view[a:b]``, which ``padded`` holds from ``a - base``.

    Raises:
      Unexpected: a line with no events, or not laid out as one run of event records.
    """

    try:
        _, start = wire._varint(view, a, "")
        length, start = wire._varint(view, start, "")
    except TraceFormatError:
        raise Unexpected from None
    first = _first_event(view, start, b)
    if start + length != b or first is None or len(padded) >= 1 << 30:  # positions below are int32
        raise Unexpected
    starts, content, sizes = _records(padded, first - base, b - base)
    end = int(content[-1]) + int(sizes[-1]) + base
    if end > b or not _no_events_after(view, end, b):
        raise Unexpected
    return LineEvents(base, start, first, end, b, _timestamp(view, start, first, end, b), starts, content, sizes)


def _records(padded: Any, first: int, stop: int) -> tuple[Any, Any, Any]:
    """Where each record of the run of event records from ``padded[first]`` starts, its content, and its length.

    Every event record starts with the byte ``0x22`` (field 4, length-delimited);
    so does the odd byte inside an event. Each such byte is read as a record's
    start: the record after a true one starts where the true one ends, which is
    almost always the next such byte. The run is walked from the first record,
    one step per record where the next such byte is not the next record, and
    what is found is the protobuf parse itself: each record, from the first,
    ends where the next begins, up to the first field that is no event.
    """
    import numpy as np

    found = _positions(padded, first, stop, EVENTS << 3 | LENGTH_DELIMITED)
    if not len(found) or found[0] != first:
        raise Unexpected
    sizes, width = _lengths(padded, found)
    ends = sizes.copy()  # where each would end
    ends += found
    ends += width
    ends += 1
    jumps = np.flatnonzero(ends[:-1] != found[1:])  # record i is not followed by found[i + 1]
    jumps = np.append(jumps, len(found) - 1)
    after = np.searchsorted(found, ends[jumps])  # the found byte where each jump lands, if one does
    lands = (after < len(found)) & (width[jumps] > 0)
    lands[lands] = found[after[lands]] == ends[jumps][lands]
    next_jump = np.searchsorted(jumps, after)  # the first jump at or after that byte
    # Walk the jumps of the run: from a record, every found byte up to the next jump is the next record.
    runs: list[int] = []
    at, k = 0, 0
    jump_list, after_list, lands_list, next_list = jumps.tolist(), after.tolist(), lands.tolist(), next_jump.tolist()
    while True:
        runs += (at, jump_list[k])
        if not lands_list[k]:
            break
        at, k = after_list[k], next_list[k]
    edges = np.zeros(len(found) + 1, dtype=np.int8)  # +1 where a run of records begins, -1 after it ends
    edges[runs[::2]] = 1
    edges[np.asarray(runs[1::2]) + 1] = -1
    chosen = np.cumsum(edges[:-1], dtype=np.int8).view(bool)
    starts, sizes, width = found[chosen], sizes[chosen], width[chosen]
    if not width.all():
        raise Unexpected
    content = starts + 1
    content += width
    return starts, content, sizes


def _positions(array: Any, start: int, stop: int, byte: int) -> Any:
    """Where ``array[start:stop]`` holds ``byte`` (int32), a megabyte at a time: no mask or int64 index as long
    as a long line (fresh memory costs more than the search)."""
    import numpy as np

    chunks = [(lo, min(lo + _CHUNK, stop)) for lo in range(start, stop, _CHUNK)]
    mask = np.empty(min(_CHUNK, max(stop - start, 0)), dtype=bool)
    counts = []
    for lo, hi in chunks:
        counts.append(int(np.count_nonzero(np.equal(array[lo:hi], byte, out=mask[: hi - lo]))))
    found = np.empty(sum(counts), dtype=np.int32)
    at = 0
    for (lo, hi), count in zip(chunks, counts):
        if count:
            np.add(np.flatnonzero(np.equal(array[lo:hi], byte, out=mask[: hi - lo])), lo, out=found[at : at + count])
            at += count
    return found


def _lengths(array: Any, at: Any) -> tuple[Any, Any]:
    """The varint after each byte ``at`` (int32), and its width (uint8; 0 when longer than four bytes)."""
    import numpy as np

    low = array[1:][at]
    value = low.astype(np.int32)
    value &= 0x7F
    width = np.ones(len(at), dtype=np.uint8)
    going = np.flatnonzero(low >= 0x80)
    for k in range(1, 4):
        if not len(going):
            break
        byte = array[k + 1 :][at[going]]
        value[going] |= (byte & 0x7F).astype(np.int32) << (7 * k)
        width[going] = k + 1
        going = going[byte >= 0x80]
    width[going] = 0  # a record that long is left to the reader
    return value, width


def _timestamp(view: memoryview, start: int, first: int, end: int, stop: int) -> int:
    """A line's ``timestamp_ns`` (int64) from its fields before and after its events; 0 when absent."""
    stamp = 0
    try:
        for lo, hi in ((start, first), (end, stop)):
            for field, header, at, _ in wire._fields(view, lo, hi):
                if field == _TIMESTAMP_NS:
                    if view[header] & 7 != VARINT:
                        raise Unexpected
                    stamp = wire._varint(view, at, "")[0]
    except TraceFormatError:
        raise Unexpected from None
    return stamp - (1 << 64) if stamp >= 1 << 63 else stamp


@dataclasses.dataclass(frozen=True, slots=True)
class Round:
    """One field of each message still going (arrays, one entry per such message)."""

    owners: Any  # the message's index
    field: Any
    wire_type: Any
    value: Any  # a varint's value; a length-delimited field's length
    start: Any  # where the field's value (or its data) starts, in ``padded``


def walk(padded: Any, content: Any, sizes: Any) -> Iterator[Round]:
    """The fields of every message ``padded[content:content + sizes]``, one field of each per round.

    A message's fields come in its order, round by round: a field written twice
    is met twice, the later one in a later round (protobuf keeps the later one).

    Raises:
      Unexpected: a group, or a field running past its message.
    """
    import numpy as np

    pos = content.astype(np.int64)
    end = pos + sizes
    going = np.flatnonzero(pos < end)
    while len(going):
        at = pos[going]
        tag, width = varints(padded, at)
        if not width.all():
            raise Unexpected
        at = at + width
        wire_type, field = tag & 7, tag >> 3
        value = np.zeros(len(going), dtype=np.int64)
        step = np.full(len(going), -1, dtype=np.int64)
        for kind in (VARINT, LENGTH_DELIMITED):
            mine = np.flatnonzero(wire_type == kind)
            if len(mine):
                got, got_width = varints(padded, at[mine])
                if not got_width.all():
                    raise Unexpected
                value[mine] = got
                at[mine] += got_width
                step[mine] = 0 if kind == VARINT else got
        step[wire_type == FIXED64] = 8
        step[wire_type == FIXED32] = 4
        if (step < 0).any():
            raise Unexpected
        yield Round(going, field, wire_type, value, at)
        pos[going] = at + step
        if (pos[going] > end[going]).any():
            raise Unexpected
        going = going[pos[going] < end[going]]


def varints(padded: Any, at: Any) -> tuple[Any, Any]:
    """The varints starting at each of ``at`` (as int64, two's complement), and their widths (0: malformed).

    One or two bytes are decoded for all at once; the rare longer ones byte by
    byte, over those still going.
    """
    import numpy as np

    low = padded[at]
    value = (low & 0x7F).astype(np.int64)
    two = np.flatnonzero(low >= 0x80)  # at least two bytes
    width = np.ones(len(at), dtype=np.int64)
    high = padded[at[two] + 1]
    value[two] |= (high & 0x7F).astype(np.int64) << 7
    width[two] = 2
    going = two[high >= 0x80]
    width[going] = 0
    for k in range(2, 10):
        if not len(going):
            break
        byte = padded[at[going] + k].astype(np.int64)
        part = byte & 0x7F if k < 9 else byte & 1  # the tenth byte holds the 64th bit
        value[going] |= part << (7 * k)  # wraps into the sign bit as int64 does
        ended = byte < 0x80
        width[going[ended]] = k + 1
        going = going[~ended]
    return value, width


def event_fields(padded: Any, content: Any, sizes: Any, stats: list[Any] | None = None) -> tuple[Any, Any, Any]:
    """Every event's metadata id, offset and duration (ps); ``stats`` (when given) gets each round's stat records.

    Raises:
      Unexpected: as ``walk``.
    """
    import numpy as np

    values = {field: np.zeros(len(sizes), dtype=np.int64) for field in (METADATA_ID, OFFSET_PS, DURATION_PS)}
    for got in walk(padded, content, sizes):
        varint = got.wire_type == VARINT
        for number, column in values.items():  # a field written twice: the later round counts, as in protobuf
            mine = varint & (got.field == number)
            column[got.owners[mine]] = got.value[mine]
        if stats is not None:
            mine = (got.wire_type == LENGTH_DELIMITED) & (got.field == STATS)
            stats.append((got.owners[mine], got.start[mine], got.value[mine]))
    return values[METADATA_ID], values[OFFSET_PS], values[DURATION_PS]


@dataclasses.dataclass(frozen=True, slots=True)
class Decoded:
    """The events of several lines, decoded at once: numpy arrays, one line's events after another's."""

    names: Any  # each event's name (object array)
    frames: Any  # whether the name is a Python-tracer frame's (``$...``)
    starts: Any  # ns, float64, as the reader gives them
    durs: Any
    spans: list[tuple[int, int, int]]  # (line index, first event, end) of each line


def decode_lines(
    padded: Any, lines: dict[int, LineEvents], names: dict[int, str], stats: list[Any] | None = None
) -> Decoded:
    """Name, start and duration of every event of ``lines`` (``stats``: as ``event_fields``).

    Raises:
      Unexpected: as ``walk``.
    """
    import numpy as np

    content = np.concatenate([e.content for e in lines.values()])
    sizes = np.concatenate([e.sizes for e in lines.values()])
    ids, offsets, durations = event_fields(padded, content, sizes, stats)
    counts = [len(e.sizes) for e in lines.values()]
    stamps = np.repeat(np.array([e.timestamp_ns for e in lines.values()], dtype=np.int64), counts)
    unique, inverse = np.unique(ids, return_inverse=True)
    unique_names = [names.get(i, "") for i in unique.tolist()]
    bounds = np.cumsum([0, *counts]).tolist()
    return Decoded(
        np.array(unique_names, dtype=object)[inverse],
        np.array([n.startswith("$") for n in unique_names], dtype=bool)[inverse],
        (divide_by_1000(offsets) + stamps).astype(np.float64),
        divide_by_1000(durations).astype(np.float64),
        list(zip(lines, bounds, bounds[1:])),
    )


def divide_by_1000(values: Any) -> Any:
    """``values / 1000`` truncated toward zero, as C++ divides integers."""
    import numpy as np

    return np.where(values >= 0, values // 1000, -(-values // 1000))


def header(field: int, length: int) -> bytes:
    """A length-delimited field's tag and length."""
    return bytes([field << 3 | LENGTH_DELIMITED]) + wire._encode_varint(length)


def _first_event(view: memoryview, start: int, end: int) -> int | None:
    """Where a line's first event record starts (the fields before it are few: id, name, timestamp)."""
    try:
        for field, head, _, _ in wire._fields(view, start, end):
            if field == EVENTS:
                return head
    except TraceFormatError:
        return None
    return None


def _no_events_after(view: memoryview, start: int, end: int) -> bool:
    """Whether the fields after a line's run of events (duration, display name) hold no other event."""
    try:
        return all(field != EVENTS for field, _, _, _ in wire._fields(view, start, end))
    except TraceFormatError:
        return False


def frame_ids(names: dict[int, str]) -> Any:
    """The sorted metadata ids of Python-tracer frames (an event is named by its metadata's ``name``)."""
    import numpy as np

    return np.array(sorted(key for key, name in names.items() if name.startswith("$")), dtype=np.int64)


def frame_mask(padded: Any, events: LineEvents, frames: Any) -> Any:
    """Which of a line's events are Python frames, by the metadata id each is written with first."""
    import numpy as np

    at = events.content
    first_field = padded[at] == METADATA_ID << 3
    if frames[-1] < 1 << 14:  # every frame's id is one or two bytes: look those two bytes up at once
        pairs = np.ndarray((len(padded) - 1,), dtype="<u2", buffer=padded, strides=(1,))  # bytes i, i + 1
        width = _frame_id_widths(frames.tobytes())[pairs[at + 1]]
        return first_field & (width > 0) & (width < events.sizes)
    ids, width = varints(padded, at + 1)
    is_frame = np.zeros(int(frames[-1]) + 1, dtype=bool)
    is_frame[frames] = True
    frame = first_field & (width > 0) & (1 + width <= events.sizes)
    frame &= (ids < len(is_frame)) & is_frame[np.minimum(ids, len(is_frame) - 1)]
    return frame


@functools.lru_cache(maxsize=8)
def _frame_id_widths(frame_bytes: bytes) -> Any:
    """For each two bytes (little-endian), the width of the frame id they begin with as a varint; 0 for no frame's.

    An id under 128 is one byte, whatever follows it; one under 16384 is two. Made once for the
    lines of a plane (``frame_bytes``: its sorted frame ids, as int64 bytes), not once a line.
    """
    import numpy as np

    frames = np.frombuffer(frame_bytes, dtype=np.int64)
    widths = np.zeros(1 << 16, dtype=np.uint8)
    short = frames[frames < 1 << 7]
    for low in short.tolist():
        widths[low : 1 << 16 : 1 << 8] = 1  # the byte ``low``, then any byte
    long = frames[frames >= 1 << 7]
    widths[(long & 0x7F | 0x80) | (long >> 7) << 8] = 2
    return widths

"""Read the host plane's long threads straight from the bytes, before the XSpace reader sees them.

A default ``jax.profiler`` capture records every Python call: on the H100
transformer capture, 925 thousand of the host plane's million events are such
frames (names starting with ``$``), all on the main thread, and nothing reads
them unless asked (``include_python``); the runtime's thread pools hold most of
the other events, of which only name, start and duration are read. Handing all
of them to the XSpace reader costs a Python object per event, most of a
report's reading time.

``prepare`` reads them here instead. protobuf's C parser (upb) splits a
thread's ``XLine.events`` into one byte string per event, which gives each
event's length, so numpy finds every event's record in the line; then

* on a thread the Python tracer followed, events whose ``metadata_id`` names a
  frame are cut out of the bytes and the rest is copied as it was, so every rule
  of the reader still applies to what is left (``PreparedSpace.dropped`` counts
  the frames);
* on a runtime thread of an accelerated host (``host_plane.is_runtime_thread``),
  every event's id, offset and duration are decoded field by field, all events
  at once, into the columns the reader would give (``PreparedSpace.runtime``),
  and the events are cut out of the bytes.

Values are the reader's own: its name is the metadata's ``name``; its start is
``offset_ps / 1000 + line.timestamp_ns`` and its duration ``duration_ps / 1000``
in integer arithmetic, as ``jaxlib``'s ``ProfileEvent`` computes them. Anything
not laid out as expected (a length written in more bytes than needed, a line
whose events are not one run of records, a field of unknown wire type, a name
that is not UTF-8) leaves that line as written, for the reader. Without upb (an
old protobuf, or its pure-Python implementation) nothing is prepared.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterable, Sequence

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import wire
from jaxdiag.trace.host_plane import HOST_PLANE, is_runtime_thread

#: Python-traced lines shorter than this are read as written: stripping them saves less than it costs.
MIN_LINE_BYTES = 1 << 16
_LINES, _EVENT_METADATA = 3, 4  # XPlane.lines, XPlane.event_metadata (a map: entries of key 1, value 2)
_EVENTS = 4  # XLine.events
_METADATA_ID, _OFFSET_PS, _DURATION_PS = 1, 2, 3  # XEvent fields
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_PAD = 16  # zero bytes after each line's copy


@dataclasses.dataclass(frozen=True, slots=True)
class RuntimeEvents:
    """A runtime thread's events as the reader gives them (Python frames left out and counted)."""

    names: list[str]
    starts: list[float]
    durs: list[float]
    frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedSpace:
    """An XSpace whose host plane's long threads were read here.

    Attributes:
      data: the serialized XSpace for the reader (the input itself when nothing was done).
      dropped: Python frames cut out, by the line's index in the host plane.
      runtime: runtime threads read here (their events cut out), by line index.
    """

    data: bytes
    dropped: dict[int, int] = dataclasses.field(default_factory=dict)
    runtime: dict[int, RuntimeEvents] = dataclasses.field(default_factory=dict)


def prepare(data: bytes, source: str = "", *, accelerated: bool) -> PreparedSpace:
    """``data`` with its host plane's Python frames and runtime threads read here (see the module docstring).

    ``accelerated``: whether the host has device planes (else its runtime threads run XLA:CPU ops, read by the reader).

    Raises:
      TraceFormatError: as ``wire.plane_records`` (empty, truncated, not an XSpace).
    """
    planes = wire.plane_records(data, source)
    host = next((p for p in planes or () if p.name == HOST_PLANE), None)
    layout = wire.plane_lines(data, host) if host is not None else None
    if host is None or layout is None:
        return PreparedSpace(data)
    lines = prepare_lines(data, host, layout, range(len(layout.names)), accelerated=accelerated)
    if not lines.cut:
        return PreparedSpace(data)
    parts: list[tuple[wire.PlaneRecord, wire.PlaneLines | None, list[int] | None]] = [
        (p, layout, list(range(len(layout.names)))) if p is host else (p, None, None) for p in planes or ()
    ]
    return PreparedSpace(wire.sub_space(data, parts, replace=lines.cut), lines.dropped, lines.runtime)


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedLines:
    """What ``prepare_lines`` did, by line index in the host plane: new line records (``cut``), frames dropped, runtime events."""

    cut: dict[int, bytes] = dataclasses.field(default_factory=dict)
    dropped: dict[int, int] = dataclasses.field(default_factory=dict)
    runtime: dict[int, RuntimeEvents] = dataclasses.field(default_factory=dict)


def prepare_lines(
    data: bytes | memoryview,
    host: wire.PlaneRecord,
    layout: wire.PlaneLines,
    lines: Iterable[int],
    *,
    accelerated: bool,
) -> PreparedLines:
    """``prepare`` for some lines of the host plane ``host`` of ``data``, whose ``layout`` is known."""
    if _messages() is None:
        return PreparedLines()
    wanted = set(lines)
    runtime_lines = {i for i in wanted if accelerated and is_runtime_thread(layout.names[i])}
    todo = [
        (a, b, line)
        for a, b, line in layout.chunks
        if line in wanted and (line in runtime_lines or b - a >= MIN_LINE_BYTES)
    ]
    if not todo:
        return PreparedLines()
    view = memoryview(data)
    metadata = _event_metadata(b"".join(view[a:b] for a, b, line in layout.chunks if line < 0))
    if metadata is None:
        return PreparedLines()
    names, frames = metadata
    todo = [t for t in todo if t[2] in runtime_lines or (len(frames) and _frames_early(view, t[0], t[1], frames))]
    if not todo:
        return PreparedLines()
    import numpy as np

    # The lines' bytes, each followed by zeros (reads past a line's end see zeros), in one array.
    zeros = np.zeros(_PAD, np.uint8)
    padded = np.concatenate([part for a, b, _ in todo for part in (np.frombuffer(view[a:b], np.uint8), zeros)])
    located: dict[int, _Events | None] = {}
    offset = 0
    for a, b, line in todo:
        located[line] = _locate(view, padded, a - offset, a, b)
        offset += b - a + _PAD
    out = PreparedLines()
    for line, events in located.items():
        if events is not None and line not in runtime_lines:
            stripped = _strip_frames(view, padded, events, frames)
            if stripped is not None:
                out.cut[line], out.dropped[line] = stripped
    out.runtime.update(
        _read_runtime(padded, {i: e for i, e in located.items() if i in runtime_lines and e is not None}, names)
    )
    for line in out.runtime:
        events = located[line]
        assert events is not None
        body = bytes(view[events.payload : events.first]) + bytes(view[events.end : events.record_end])
        out.cut[line] = _header(_LINES, len(body)) + body
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Events:
    """Where a line's event records lie: offsets in the file's bytes; numpy arrays (one entry per event)
    of offsets in the host plane's (``padded``)."""

    base: int  # where ``padded``'s first byte would be in the file (offsets below + base: in the file)
    payload: int  # where the line's fields start
    first: int  # where its first event record starts
    end: int  # where its last one ends
    record_end: int  # where the line ends
    timestamp_ns: int
    starts: Any  # each record's start (its tag), in the plane
    content: Any  # each event's first byte, in the plane
    sizes: Any  # each event's length


def _locate(view: memoryview, padded: Any, base: int, a: int, b: int) -> _Events | None:
    """The events of the line record ``view[a:b]``, which ``padded`` holds from ``a - base``; ``None`` if not laid out as expected."""
    import numpy as np

    try:
        _, start = wire._varint(view, a, "")
        length, start = wire._varint(view, start, "")
    except TraceFormatError:
        return None
    if start + length != b:
        return None
    try:
        line = _views()[0].FromString(view[start:b])
    except Exception:  # noqa: BLE001 - upb's DecodeError; the reader then judges the bytes itself
        return None
    events = line.events
    count = len(events)
    first = _first_event(view, start, b)
    if count == 0 or first is None:
        return None
    if len(padded) >= 1 << 31:  # positions below are int32
        return None
    sizes = np.fromiter(map(len, events), dtype=np.int32, count=count)
    if sizes.max() >= 1 << 21:
        return None
    long = sizes >= 1 << 7
    size_bytes = (sizes >= 1 << 14).view(np.int8) + long.view(np.int8) + np.int8(1)
    records = sizes + size_bytes
    records += 1
    ends = np.cumsum(records, dtype=np.int64)
    ends += first - base
    end = int(ends[-1]) + base
    if end > b or not _no_events_after(view, end, b):
        return None
    starts = (ends - records).astype(np.int32)
    if not (padded[starts] == _EVENTS << 3 | _LENGTH_DELIMITED).all():
        return None
    # Each record's length starts where it should (a length written in more bytes than needed shifts the rest).
    length_byte = sizes.astype(np.uint8)  # the low 8 bits: the first byte is the low 7, with 0x80 when more follow
    length_byte[long] |= 0x80
    starts += 1
    if not (padded[starts] == length_byte).all():
        return None
    content = starts + size_bytes
    starts -= 1
    return _Events(base, start, first, end, b, line.timestamp_ns, starts, content, sizes)


def _strip_frames(view: memoryview, padded: Any, events: _Events, frames: Any) -> tuple[bytes, int] | None:
    """A line's record without its Python frames, and how many; ``None`` to keep it as written."""
    import numpy as np

    at = events.content
    ids, width = _varints(padded, at + 1)
    is_frame = np.zeros(int(frames[-1]) + 1, dtype=bool)
    is_frame[frames] = True
    frame = (padded[at] == _METADATA_ID << 3) & (width > 0) & (1 + width <= events.sizes)
    frame &= (ids < len(is_frame)) & is_frame[np.minimum(ids, len(is_frame) - 1)]
    dropped = int(np.count_nonzero(frame))
    if dropped == 0:
        return None
    # Copy the kept events in runs: consecutive kept records are one slice.
    edges = np.flatnonzero(np.diff(np.concatenate([[False], ~frame, [False]]).view(np.int8)))
    bounds = (np.append(events.starts, events.end - events.base)[edges] + events.base).tolist()
    pieces = [view[events.payload : events.first]]
    pieces += [view[lo:hi] for lo, hi in zip(bounds[::2], bounds[1::2])]
    pieces.append(view[events.end : events.record_end])
    body = b"".join(pieces)
    return _header(_LINES, len(body)) + body, dropped


def _read_runtime(padded: Any, lines: dict[int, _Events], names: dict[int, str]) -> dict[int, RuntimeEvents]:
    """Runtime lines' events as columns, all lines decoded at once; a line left out is left to the reader."""
    import numpy as np

    if not lines:
        return {}
    content = np.concatenate([e.content for e in lines.values()])
    sizes = np.concatenate([e.sizes for e in lines.values()])
    fields = _event_fields(padded, content, sizes)
    if fields is None:  # one line has an event the walk cannot read: each line on its own, to find it
        if len(lines) == 1:
            return {}
        out: dict[int, RuntimeEvents] = {}
        for line, events in lines.items():
            out.update(_read_runtime(padded, {line: events}, names))
        return out
    ids, offsets, durations = fields
    counts = [len(e.sizes) for e in lines.values()]
    stamps = np.repeat(np.array([e.timestamp_ns for e in lines.values()], dtype=np.int64), counts)
    unique, inverse = np.unique(ids, return_inverse=True)
    unique_names = [names.get(i, "") for i in unique.tolist()]
    event_names = np.array(unique_names, dtype=object)[inverse]
    kept = np.array([not n.startswith("$") for n in unique_names], dtype=bool)[inverse]
    starts = (_divide_by_1000(offsets) + stamps).astype(np.float64)
    durs = _divide_by_1000(durations).astype(np.float64)
    out = {}
    bounds = np.cumsum([0, *counts]).tolist()
    for (line, _), lo, hi in zip(lines.items(), bounds, bounds[1:]):
        mine = kept[lo:hi]
        out[line] = RuntimeEvents(
            event_names[lo:hi][mine].tolist(),
            starts[lo:hi][mine].tolist(),
            durs[lo:hi][mine].tolist(),
            int(hi - lo - np.count_nonzero(mine)),
        )
    return out


def _event_fields(padded: Any, content: Any, sizes: Any) -> tuple[Any, Any, Any] | None:
    """Every event's metadata id, offset and duration (ps), walking their fields all at once.

    Each round reads one field of every event not yet at its end: a tag, then a
    varint, a length and that many bytes, or eight or four bytes. ``None`` for a
    field of another wire type or one running past its event.
    """
    import numpy as np

    count = len(sizes)
    values = {field: np.zeros(count, dtype=np.int64) for field in (_METADATA_ID, _OFFSET_PS, _DURATION_PS)}
    pos = content.copy()
    end = pos + sizes
    going = np.flatnonzero(pos < end)
    while len(going):
        at = pos[going]
        tag, width = _varints(padded, at)
        if not width.all():
            return None
        at = at + width
        wire_type, field = tag & 7, tag >> 3
        step = np.full(len(going), -1, dtype=np.int64)
        varint = np.flatnonzero(wire_type == _VARINT)
        if len(varint):
            value, value_width = _varints(padded, at[varint])
            if not value_width.all():
                return None
            step[varint] = value_width
            for number, column in values.items():  # a field written twice: the last one counts, as in protobuf
                mine = field[varint] == number
                column[going[varint[mine]]] = value[mine]
        delimited = np.flatnonzero(wire_type == _LENGTH_DELIMITED)
        if len(delimited):
            length, length_width = _varints(padded, at[delimited])
            if not length_width.all():
                return None
            step[delimited] = length_width + length
        step[wire_type == _FIXED64] = 8
        step[wire_type == _FIXED32] = 4
        if (step < 0).any():
            return None
        pos[going] = at + step
        if (pos[going] > end[going]).any():
            return None
        going = going[pos[going] < end[going]]
    return values[_METADATA_ID], values[_OFFSET_PS], values[_DURATION_PS]


def _divide_by_1000(values: Any) -> Any:
    """``values / 1000`` truncated toward zero, as C++ divides integers."""
    import numpy as np

    return np.where(values >= 0, values // 1000, -(-values // 1000))


def _frames_early(view: memoryview, a: int, b: int, frames: Any, events: int = 64) -> bool:
    """Whether a frame is among the first ``events`` events of the line record ``view[a:b]``: a thread the
    Python tracer followed has frames throughout, and threads without any are not worth a parse."""
    wanted = set(frames.tolist())
    try:
        _, start = wire._varint(view, a, "")
        _, start = wire._varint(view, start, "")
        for field, _, begin, _ in wire._fields(view, start, b):
            if field != _EVENTS:
                continue
            if view[begin] == _METADATA_ID << 3 and wire._varint(view, begin + 1, "")[0] in wanted:
                return True
            events -= 1
            if events == 0:
                return False
    except (TraceFormatError, IndexError):
        return False
    return False


def _first_event(view: memoryview, start: int, end: int) -> int | None:
    """Where a line's first event record starts (the fields before it are few: id, name, timestamp)."""
    try:
        for field, header, _, _ in wire._fields(view, start, end):
            if field == _EVENTS:
                return header
    except TraceFormatError:
        return None
    return None


def _no_events_after(view: memoryview, start: int, end: int) -> bool:
    """Whether the fields after a line's run of events (duration, display name) hold no other event."""
    try:
        return all(field != _EVENTS for field, _, _, _ in wire._fields(view, start, end))
    except TraceFormatError:
        return False


def _varints(padded: Any, at: Any) -> tuple[Any, Any]:
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


@functools.lru_cache(maxsize=4)  # the tasks of one file share its host plane's metadata
def _event_metadata(plane_fields: bytes) -> tuple[dict[int, str], Any] | None:
    """Event names by metadata id, and the sorted ids of Python-tracer frames (``None``: unreadable here)."""
    import numpy as np

    try:
        plane = _views()[1].FromString(plane_fields)
        names = {entry.key: entry.value.name.decode("utf-8") for entry in plane.event_metadata}
    except Exception:  # noqa: BLE001 - upb's DecodeError, a name that is not UTF-8: the reader judges
        return None
    # The reader names an event by its metadata's ``name`` (not ``display_name``), as here.
    frames = np.array(sorted(key for key, name in names.items() if name.startswith("$")), dtype=np.int64)
    return names, frames


def _header(field: int, length: int) -> bytes:
    return bytes([field << 3 | _LENGTH_DELIMITED]) + wire._encode_varint(length)


def _views() -> tuple[Any, Any]:
    views = _messages()
    assert views is not None, "prepare_lines checks for upb first"
    return views


@functools.cache
def _messages() -> tuple[Any, Any] | None:
    """Message classes for the two views of XPlane fields read here; ``None`` without upb.

    ``Line`` sees an XLine's timestamp and its events as byte strings; ``Plane``
    sees an XPlane's event metadata (id and name). Every other field is left unparsed.
    """
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from google.protobuf.internal import api_implementation

        if api_implementation.Type() != "upb":
            return None
        get_class = message_factory.GetMessageClass
    except (ImportError, AttributeError):
        return None
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="jaxdiag_xplane_views.proto", package="jaxdiag_views")

    def message(name: str, fields: Sequence[tuple[str, int, int, int, str]]) -> None:
        added = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.field[-1].type_name = type_name

    one, many = field.LABEL_OPTIONAL, field.LABEL_REPEATED
    message("Line", [("timestamp_ns", 3, field.TYPE_INT64, one, ""), ("events", _EVENTS, field.TYPE_BYTES, many, "")])
    message("EventMetadata", [("name", 2, field.TYPE_BYTES, one, "")])
    message(
        "MetadataEntry",
        [("key", 1, field.TYPE_INT64, one, ""), ("value", 2, field.TYPE_MESSAGE, one, ".jaxdiag_views.EventMetadata")],
    )
    message("Plane", [("event_metadata", _EVENT_METADATA, field.TYPE_MESSAGE, many, ".jaxdiag_views.MetadataEntry")])
    try:
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        return (
            get_class(pool.FindMessageTypeByName("jaxdiag_views.Line")),
            get_class(pool.FindMessageTypeByName("jaxdiag_views.Plane")),
        )
    except Exception:  # noqa: BLE001 - a protobuf that builds no classes this way: read as written
        return None

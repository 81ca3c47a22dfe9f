"""The top level of a serialized XSpace, walked without parsing it.

An XSpace is a sequence of records, and its planes are the records of field 1.
``reading`` walks them (and a host plane's lines) to cut a file into tasks, each a
few planes or threads that a worker reads from the file itself. Walking the records
costs microseconds (a capture has a few planes), so ``check_wire`` also turns the
common failures, a file cut short while copying and a file that is not a trace at
all, into a clear message before any parser sees them.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.schema import LENGTH_DELIMITED, XLine, XPlane, XSpace

_PLANES, _PLANE_NAME, _PLANE_LINES = XSpace.PLANES, XPlane.NAME, XPlane.LINES
_LINE_NAME, _LINE_EVENTS = XLine.NAME, XLine.EVENTS
_LENGTH_DELIMITED = LENGTH_DELIMITED
_TOP_FIELDS = (XSpace.PLANES, XSpace.ERRORS, XSpace.WARNINGS, XSpace.HOSTNAMES)
#: What the walks read: a file's bytes, mapped or not, or a view of them.
Data = bytes | memoryview


@dataclasses.dataclass(frozen=True, slots=True)
class PlaneRecord:
    """One plane of a serialized XSpace: its name and where its record (and its payload) lies."""

    name: str
    start: int
    end: int
    payload: int = 0

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class PlaneLines:
    """A plane's fields in order, as byte ranges: its lines one by one, the other fields merged.

    Attributes:
      names: each line's name as written (before ``line_names`` tells apart threads of one name).
      chunks: ``(start, end, line)`` ranges covering the payload; ``line`` is the line's index, or -1.
    """

    names: tuple[str, ...]
    chunks: tuple[tuple[int, int, int], ...]


def check_wire(data: Data, source: str) -> None:
    """Walk the top-level fields of a serialized XSpace without parsing the planes.

    Raises:
      TraceFormatError: empty, truncated, or not a serialized XSpace.
    """
    if not data:
        raise TraceFormatError(f"{source}: empty file (0 bytes); the capture was not written completely")
    for _ in _top_records(data, source):
        pass


def plane_records(data: Data, source: str) -> list[PlaneRecord] | None:
    """The planes of ``data`` in file order, or ``None`` where a plane's name cannot be read here.

    A plane the walk cannot name is left to the C++ parser (``None``), which reads
    or rejects the whole file with its own message.

    Raises:
      TraceFormatError: as ``check_wire``.
    """
    check_wire(data, source)
    planes = []
    for field, header, start, end in _top_records(data, source):
        if field != _PLANES:
            continue
        name = _plane_name(data, start, end)
        if name is None:
            return None
        planes.append(PlaneRecord(name, header, end, start))
    return planes


def plane_lines(data: Data, plane: PlaneRecord) -> PlaneLines | None:
    """The lines of ``plane``, to cut some out; ``None`` where a line's name is not written before its events."""
    names: list[str] = []
    chunks: list[tuple[int, int, int]] = []
    try:
        for field, header, start, end in _fields(data, plane.payload, plane.end):
            if field == _PLANE_LINES:
                name = _line_name(data, start, end)
                if name is None:
                    return None
                chunks.append((header, end, len(names)))
                names.append(name)
            elif chunks and chunks[-1][2] < 0:
                chunks[-1] = (chunks[-1][0], end, -1)
            else:
                chunks.append((header, end, -1))
    except (TraceFormatError, UnicodeDecodeError):
        return None
    return PlaneLines(tuple(names), tuple(chunks))


def _top_records(data: Data, source: str) -> Iterator[tuple[int, int, int, int]]:
    """``(field, record start, payload start, payload end)`` of each top-level record."""
    pos, size = 0, len(data)
    while pos < size:
        header = pos
        tag, pos = _varint(data, pos, source)
        if tag >> 3 not in _TOP_FIELDS or tag & 7 != _LENGTH_DELIMITED:
            raise TraceFormatError(
                f"{source}: not an XSpace (unexpected bytes at offset {pos}); is this a .xplane.pb file?"
            )
        length, pos = _varint(data, pos, source)
        if pos + length > size:
            raise TraceFormatError(
                f"{source}: truncated: a record at offset {pos} needs {length} bytes but the file ends {size - pos} bytes after it"
            )
        yield tag >> 3, header, pos, pos + length
        pos += length


def _fields(data: Data, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """``(field, record start, payload start, record end)`` of each field of a message payload."""
    while pos < end:
        header = pos
        tag, pos = _varint(data, pos, "")
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value_start = pos
            _, pos = _varint(data, pos, "")
            yield field, header, value_start, pos
            continue
        if wire == _LENGTH_DELIMITED:
            length, pos = _varint(data, pos, "")
        elif wire in (1, 5):
            length = 8 if wire == 1 else 4
        else:
            raise TraceFormatError("unknown wire type")
        if pos + length > end:
            raise TraceFormatError("field overruns its message")
        yield field, header, pos, pos + length
        pos += length


def _line_name(data: Data, pos: int, end: int) -> str | None:
    """An XLine's name, if written before its first event (writers put it second, after the id)."""
    for field, _, start, stop in _fields(data, pos, end):
        if field == _LINE_NAME:
            return bytes(data[start:stop]).decode("utf-8")
        if field == _LINE_EVENTS:
            return None
    return ""


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _plane_name(data: Data, pos: int, end: int) -> str | None:
    """The ``name`` field of the XPlane payload ``data[pos:end]``; ``""`` when absent, ``None`` if unreadable.

    Writers put the name second, after the id, so the walk stops there; it walks
    every field only for a plane with no name.
    """
    try:
        for field, _, start, stop in _fields(data, pos, end):
            if field == _PLANE_NAME:
                return bytes(data[start:stop]).decode("utf-8")
    except (TraceFormatError, UnicodeDecodeError):
        return None
    return ""


def _varint(data: Data, pos: int, source: str) -> tuple[int, int]:
    # Nearly every tag and length is one byte: a plane's thousands of metadata entries are walked
    # before each read of it, and the planner walks the host plane before the worker forks.
    if pos < len(data) and data[pos] < 0x80:
        return data[pos], pos + 1
    value = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise TraceFormatError(f"{source}: truncated or not an XSpace (bad field header at offset {pos})")

"""One reader contract: a serialized XSpace (one host file) as columns, plane by plane and line by line.

``TraceReader`` is the contract; two backends fill it:

* ``ProfileDataReader``: jaxlib's ``ProfileData`` (the reader XProf's tools use), the reference.
* ``ColumnReader``: every line decoded whole from the bytes by a small C decoder (``_xline.c``,
  built at install), the planes' metadata by protobuf's own parser (upb, ``schema``); a line the
  decoder does not expect is parsed whole by upb. Nothing is cut out for another parser.

Both give the same columns for any XSpace (``tests/trace/test_contract.py``: every capture of the
corpus and fixtures, and generated XSpaces checked against protobuf). Values are as
``ProfileData`` gives them: start ``timestamp_ns + offset_ps / 1000`` and duration
``duration_ps / 1000`` (ns, integer division toward zero, as floats); event stats as columns,
one per stat that some event of the line has, each holding every event's Python value (uint64
unsigned, a reference as the name it refers to) or ``None`` where the event has none; a stat
whose metadata is missing is left out. Execution facts are stats (``run_id``, ``program_id``, ``hlo_module``),
and module spans are the events of their lines (``XLA Modules``): a reader asks for them by name.

A reader is told which planes and lines to read (``select``: a worker reads some planes, or some
threads of the host plane, of a file it maps whole) and which stats of each line's events
(``stats``, by plane and line name). ``xspace`` reads every host file through ``reader()``:
``ColumnReader`` where protobuf's upb is installed and ``_xline`` was built, else ``ProfileDataReader``.
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Any, Callable, Collection, Protocol, Union

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import schema, wire
from jaxdiag.trace.schema import XPlane, XSpace

#: Which stats of a line's events to read: one set for every line, a function of the plane's and the
#: line's names, or ``None`` for every stat.
Stats = Union[frozenset[str], Callable[[str, str], frozenset[str]], None]
#: Which lines of a plane to read, given its index and name: ``True`` every one, ``False`` none (the
#: plane's name and stats only), some line indices, or ``None`` to leave the plane out.
Select = Callable[[int, str], Union[bool, Collection[int], None]]


@dataclasses.dataclass(frozen=True, slots=True)
class LineColumns:
    """One line's events as columns (Python-tracer frames, names starting ``$``, counted and left out when asked).

    ``starts`` and ``durs`` are ``array('d')``s (one block each, which numpy and ``HostColumns`` take whole);
    ``stats``: by stat name, one value per event (``None`` where the event has none), for each stat asked for
    that some event has: a consumer reads a column in one pass, and no event carries a dict of its own.
    """

    name: str
    names: list[str]
    starts: "array[float]"
    durs: "array[float]"
    stats: dict[str, list[Any]]
    frames: int = 0
    index: int = -1  # the line's place in its plane


@dataclasses.dataclass(frozen=True, slots=True)
class PlaneColumns:
    name: str
    stats: dict[str, Any]
    lines: list[LineColumns]
    index: int = -1  # the plane's place in the XSpace


class TraceReader(Protocol):
    """From one serialized XSpace to its planes' columns.

    ``stats``: the event stats to read (``Stats``); ``frames``: keep Python-tracer frames;
    ``select``: the planes and lines to read (``Select``; default: all).

    Raises:
      TraceFormatError: empty, truncated or not an XSpace.
    """

    def read(
        self, data: Any, source: str, *, stats: Stats = None, frames: bool = True, select: Select | None = None
    ) -> list[PlaneColumns]: ...


#: Names ``profile_data`` or ``column``: the backend to read with, whatever is installed (to compare them).
READER_VARIABLE = "JAXDIAG_READER"


def reader() -> TraceReader:
    """The backend the loader reads with: ``ColumnReader`` where protobuf's upb is installed and ``_xline``
    was built, unless ``JAXDIAG_READER`` names the other."""
    import os

    chosen = os.environ.get(READER_VARIABLE, "")
    fast = schema.has_upb() and line_decoder() is not None
    if chosen == "profile_data" or (chosen != "column" and not fast):
        return ProfileDataReader()
    return ColumnReader()


def _wanted(key: Any, stats: frozenset[str] | None) -> bool:
    return key is not None and (stats is None or key in stats)


def _stats_of(stats: Stats, plane: str, line: str) -> frozenset[str] | None:
    return stats(plane, line) if callable(stats) else stats


def _lines_of(select: Select | None, index: int, name: str) -> bool | Collection[int] | None:
    return True if select is None else select(index, name)


class ProfileDataReader:
    """The reference backend: jaxlib's ``ProfileData``, one Python object per event."""

    def read(
        self, data: Any, source: str, *, stats: Stats = None, frames: bool = True, select: Select | None = None
    ) -> list[PlaneColumns]:
        from jaxdiag.jax_internals import parse_xspace

        wire.check_wire(data, source)
        planes = []
        for index, plane in enumerate(parse_xspace(bytes(data), source)):
            chosen = _lines_of(select, index, plane.name)
            if chosen is None:
                continue
            lines = []
            for number, line in enumerate(plane.lines):
                if chosen is False or (chosen is not True and number not in chosen):
                    continue
                wanted = _stats_of(stats, plane.name, line.name)
                names: list[str] = []
                starts: list[float] = []
                durs: list[float] = []
                event_stats_: list[dict[str, Any]] = []
                skipped = 0
                for event in line.events:
                    name = event.name
                    if not frames and name[:1] == "$":
                        skipped += 1
                        continue
                    names.append(name)
                    starts.append(event.start_ns)
                    durs.append(event.duration_ns)
                    event_stats_.append({k: v for k, v in event.stats if _wanted(k, wanted)})
                lines.append(
                    LineColumns(
                        line.name,
                        names,
                        array("d", starts),
                        array("d", durs),
                        stat_columns(event_stats_),
                        skipped,
                        number,
                    )
                )
            plane_stats = {k: v for k, v in plane.stats if k is not None}
            planes.append(PlaneColumns(plane.name, plane_stats, lines, index))
        return planes


class ColumnReader:
    """The fast backend: each line's events decoded from the bytes into columns by ``_xline`` (C), the planes'
    metadata by upb; a line ``_xline`` does not expect is parsed whole by upb."""

    def read(
        self, data: Any, source: str, *, stats: Stats = None, frames: bool = True, select: Select | None = None
    ) -> list[PlaneColumns]:
        classes = schema.message_classes()
        decoder = line_decoder()
        if classes is None or decoder is None:  # a protobuf that builds no classes from the table: the reference
            return ProfileDataReader().read(data, source, stats=stats, frames=frames, select=select)
        view = memoryview(data)
        wire.check_wire(data, source)
        planes = []
        index = -1
        for field, _, start, end in wire._top_records(data, source):
            if field != XSpace.PLANES:
                continue
            index += 1
            chosen = _lines_of(select, index, wire._plane_name(view, start, end) or "")
            if chosen is None:
                continue
            try:
                planes.append(_plane(view, start, end, index, classes, decoder, stats, frames, chosen))
            except (TraceFormatError, ValueError) as exc:
                raise TraceFormatError(f"{source}: corrupt XSpace, the protobuf parser rejected it ({exc})") from None
        return planes


def line_decoder() -> Any:
    """The compiled line decoder (``_xline``), or ``None`` where it was not built (no C compiler at install)."""
    try:
        from jaxdiag.trace import _xline
    except ImportError:
        return None
    return _xline


def _plane(
    view: memoryview,
    start: int,
    end: int,
    index: int,
    classes: dict[str, Any],
    decoder: Any,
    stats: Stats,
    frames: bool,
    chosen: bool | Collection[int],
) -> PlaneColumns:
    """The plane record ``view[start:end]``: its metadata by upb, the ``chosen`` lines by the decoder."""
    lines, other = _split(view, start, end, decoder)
    try:
        meta = classes["XPlane"].FromString(b"".join(view[a:b] for a, b in other))
    except Exception as exc:  # noqa: BLE001 - upb's DecodeError
        raise TraceFormatError(f"unparsable plane metadata ({exc})") from None
    if chosen is not True:
        lines = [] if chosen is False else [line for line in lines if line[2] in chosen]
    stat_names = {key: value.name for key, value in meta.stat_metadata.items()}
    plane_stats = _message_stats(meta.stats, stat_names, None)
    event_names = {key: value.name for key, value in meta.event_metadata.items()}
    frame_bits = None if frames else _frame_bits(event_names)
    reading: dict[frozenset[str] | None, dict[int, str]] = {None: stat_names}
    columns = []
    for a, b, number in lines:
        payload = _payload(view, a, b)
        try:
            raw_name, stamp = decoder.head(payload)
            name = raw_name.decode("utf-8")
            wanted = _stats_of(stats, meta.name, name)
            if wanted not in reading:
                reading[wanted] = stat_names if wanted is None else {k: v for k, v in stat_names.items() if v in wanted}
            got = decoder.events(payload, stamp, event_names, stat_names, reading[wanted], frame_bits, frames)
        except (decoder.Unexpected, UnicodeDecodeError):  # upb parses the line whole, and names what is wrong
            line_class, stats_for = classes["XLine"], _stats_for(stats, meta.name)
            columns.append(
                _message_line(line_class, bytes(payload), event_names, stat_names, stats_for, frames, number)
            )
            continue
        names, start_bytes, dur_bytes, values, skipped = got
        starts, durs = array("d"), array("d")
        starts.frombytes(start_bytes)
        durs.frombytes(dur_bytes)
        columns.append(LineColumns(name, names, starts, durs, values, skipped, number))
    return PlaneColumns(meta.name, plane_stats, columns, index)


def _split(view: memoryview, start: int, end: int, decoder: Any) -> tuple[list[tuple[int, int, int]], list[list[int]]]:
    """Where the plane payload ``view[start:end]``'s fields lie: each line's ``(start, end, index)``, and the
    spans of every other field, neighbours merged (thousands of metadata entries, walked by the decoder; a
    payload it does not expect is walked here, which names what is wrong)."""
    try:
        spans, other = decoder.split(view[start:end], start, XPlane.LINES)
        return [(a, b, i) for i, (a, b) in enumerate(spans)], other
    except decoder.Unexpected:
        pass
    lines: list[tuple[int, int, int]] = []
    other = []
    for field, header, _, stop in wire._fields(view, start, end):
        if field == XPlane.LINES:
            lines.append((header, stop, len(lines)))
        elif other and other[-1][1] == header:
            other[-1][1] = stop
        else:
            other.append([header, stop])
    return lines, other


def _stats_for(stats: Stats, plane: str) -> Callable[[str], frozenset[str] | None]:
    return lambda line: _stats_of(stats, plane, line)


def _frame_bits(event_names: dict[int, str]) -> bytearray | None:
    """``bits[id]`` is 1 for the metadata ids of Python-tracer frames (names starting ``$``); ``None`` where an id
    is too large or negative for such a table (the decoder then looks at each event's name)."""
    ids = [key for key, name in event_names.items() if name[:1] == "$"]
    if ids and (min(ids) < 0 or max(ids) >= 1 << 24):
        return None
    bits = bytearray(max(ids) + 1 if ids else 0)
    for key in ids:
        bits[key] = 1
    return bits


def _payload(view: memoryview, a: int, b: int) -> memoryview:
    """A length-delimited record's payload (after its tag and length)."""
    _, at = wire._varint(view, a, "")
    _, at = wire._varint(view, at, "")
    return view[at:b]


def _message_line(
    line_class: Any,
    payload: bytes,
    event_names: dict[int, str],
    stat_names: dict[int, str],
    stats_for: Callable[[str], frozenset[str] | None],
    frames: bool,
    number: int,
) -> LineColumns:
    """A line parsed whole by upb, into the columns ``ColumnReader`` decodes otherwise (``stats_for``: the
    stats to read, given the line's name)."""
    try:
        line = line_class.FromString(payload)
    except Exception as exc:  # noqa: BLE001 - upb's DecodeError
        raise TraceFormatError(f"unparsable line ({exc})") from None
    stats = stats_for(line.name)
    names: list[str] = []
    starts: list[float] = []
    durs: list[float] = []
    values: list[dict[str, Any]] = []
    skipped = 0
    for event in line.events:
        name = event_names.get(event.metadata_id, "")
        if not frames and name[:1] == "$":
            skipped += 1
            continue
        names.append(name)
        starts.append(float(_div1000(event.offset_ps) + line.timestamp_ns))
        durs.append(float(_div1000(event.duration_ps)))
        values.append(_message_stats(event.stats, stat_names, stats))
    return LineColumns(line.name, names, array("d", starts), array("d", durs), stat_columns(values), skipped, number)


def _div1000(value: int) -> int:
    """``value / 1000`` truncated toward zero, as C++ divides integers."""
    return value // 1000 if value >= 0 else -(-value // 1000)


def _message_stats(stats: Any, stat_names: dict[int, str], wanted: frozenset[str] | None) -> dict[str, Any]:
    """XStat messages as ``ProfileData`` gives them: by name, a reference as its name, no value or metadata left out."""
    out: dict[str, Any] = {}
    for stat in stats:
        name = stat_names.get(stat.metadata_id)
        kind = stat.WhichOneof("value")
        if name is None or kind is None or not _wanted(name, wanted):
            continue
        value = getattr(stat, kind)
        if kind == "ref_value":
            value = stat_names.get(value, "")
        elif kind == "bytes_value":
            value = value.decode("utf-8")
        out[name] = value
    return out


def stat_column(stats: dict[str, list[Any]], key: str, count: int) -> list[Any]:
    """The column of stat ``key`` in a line's ``stats`` (``LineColumns.stats``): ``None`` for each of its
    ``count`` events where no event has it."""
    column = stats.get(key)
    return [None] * count if column is None else column


def stat_columns(per_event: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each event's stats (a dict per event, as a message or JSON gives them) as the contract's columns; a stat
    whose value is ``None`` counts as absent."""
    columns: dict[str, list[Any]] = {}
    for index, stats in enumerate(per_event):
        for key, value in stats.items():
            if value is None:
                continue
            column = columns.get(key)
            if column is None:
                column = columns[key] = [None] * len(per_event)
            column[index] = value
    return columns


__all__ = [
    "ColumnReader",
    "LineColumns",
    "PlaneColumns",
    "ProfileDataReader",
    "TraceReader",
    "stat_column",
    "stat_columns",
]

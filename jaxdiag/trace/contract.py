"""One reader contract: a serialized XSpace (one host file) as columns, plane by plane and line by line.

``TraceReader`` is the contract; two backends fill it:

* ``ProfileDataReader``: jaxlib's ``ProfileData`` (the reader XProf's tools use), the reference.
* ``ColumnReader``: every line decoded whole from the bytes with numpy (``line_bytes``,
  ``stat_bytes``), the planes' metadata with protobuf's own parser (upb, ``schema``); a line not
  laid out as one run of events is parsed whole by upb. Nothing is cut out for another parser.

Both give the same columns for any XSpace (``tests/trace/test_contract.py``: every capture of the
corpus and fixtures, and generated XSpaces checked against protobuf). Values are as
``ProfileData`` gives them: start ``timestamp_ns + offset_ps / 1000`` and duration
``duration_ps / 1000`` (ns, integer division toward zero, as floats); a stat as its Python
value (uint64 unsigned, a reference as the name it refers to); a stat whose metadata is
missing is left out. Execution facts are stats (``run_id``, ``program_id``, ``hlo_module``),
and module spans are the events of their lines (``XLA Modules``): a reader asks for them by name.

A reader is told which planes and lines to read (``select``: a worker reads some planes, or some
threads of the host plane, of a file it maps whole) and which stats of each line's events
(``stats``, by plane and line name). ``xspace`` reads every host file through ``reader()``:
``ColumnReader`` where protobuf's upb is installed, else ``ProfileDataReader``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Protocol, Union

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import line_bytes, schema, wire
from jaxdiag.trace.schema import XPlane, XSpace
from jaxdiag.trace.stat_bytes import NO_STATS, event_stats

#: Which stats of a line's events to read: one set for every line, a function of the plane's and the
#: line's names, or ``None`` for every stat.
Stats = Union[frozenset[str], Callable[[str, str], frozenset[str]], None]
#: Which lines of a plane to read, given its index and name: ``True`` every one, ``False`` none (the
#: plane's name and stats only), some line indices, or ``None`` to leave the plane out.
Select = Callable[[int, str], Union[bool, Collection[int], None]]


@dataclasses.dataclass(frozen=True, slots=True)
class LineColumns:
    """One line's events as columns (Python-tracer frames, names starting ``$``, counted and left out when asked)."""

    name: str
    names: list[str]
    starts: list[float]
    durs: list[float]
    stats: list[dict[str, Any]]  # each event's stats asked for (entries may be one shared empty dict)
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
    """The backend the loader reads with: ``ColumnReader`` where protobuf's upb is installed, unless
    ``JAXDIAG_READER`` names the other."""
    import os

    chosen = os.environ.get(READER_VARIABLE, "")
    if chosen == "profile_data" or (chosen != "column" and schema.message_classes() is None):
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
                lines.append(LineColumns(line.name, names, starts, durs, event_stats_, skipped, number))
            plane_stats = {k: v for k, v in plane.stats if k is not None}
            planes.append(PlaneColumns(plane.name, plane_stats, lines, index))
        return planes


class ColumnReader:
    """The fast backend: whole lines decoded from the bytes into columns (numpy), metadata by upb."""

    def read(
        self, data: Any, source: str, *, stats: Stats = None, frames: bool = True, select: Select | None = None
    ) -> list[PlaneColumns]:
        classes = schema.message_classes()
        if classes is None:
            raise TraceFormatError(f"{source}: reading from the bytes needs protobuf's upb implementation")
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
                planes.append(self._plane(view, start, end, index, classes, stats, frames, chosen))
            except (TraceFormatError, line_bytes.Unexpected, ValueError) as exc:
                raise TraceFormatError(f"{source}: corrupt XSpace, the protobuf parser rejected it ({exc})") from None
        return planes

    def _plane(
        self,
        view: memoryview,
        start: int,
        end: int,
        index: int,
        classes: dict[str, Any],
        stats: Stats,
        frames: bool,
        chosen: bool | Collection[int],
    ) -> PlaneColumns:
        lines: list[tuple[int, int, int]] = []
        other: list[list[int]] = []  # the spans of every other field, neighbours merged (thousands of entries)
        for field, header, _, stop in wire._fields(view, start, end):
            if field == XPlane.LINES:
                lines.append((header, stop, len(lines)))
            elif other and other[-1][1] == header:
                other[-1][1] = stop
            else:
                other.append([header, stop])
        try:
            meta = classes["XPlane"].FromString(b"".join(view[a:b] for a, b in other))
        except Exception as exc:  # noqa: BLE001 - upb's DecodeError
            raise TraceFormatError(f"unparsable plane metadata ({exc})") from None
        if chosen is not True:
            lines = [] if chosen is False else [line for line in lines if line[2] in chosen]
        stat_names = {key: value.name for key, value in meta.stat_metadata.items()}
        plane_stats = _message_stats(meta.stats, stat_names, None)
        if not lines:
            return PlaneColumns(meta.name, plane_stats, [], index)
        event_names = {key: value.name for key, value in meta.event_metadata.items()}
        padded, bases = line_bytes.copy_lines(view, [(a, b) for a, b, _ in lines])
        frame_ids = line_bytes.frame_ids(event_names)
        plane = _Plane(meta.name, view, padded, event_names, stat_names, classes, stats, frames, frame_ids)
        columns = plane.lines([(base, a, b, number) for (a, b, number), base in zip(lines, bases)])
        return PlaneColumns(meta.name, plane_stats, columns, index)


@dataclasses.dataclass(frozen=True, slots=True)
class _Plane:
    """What reading a plane's lines needs: its bytes (copied, padded), names by metadata id, what to read."""

    name: str
    view: memoryview
    padded: Any
    event_names: dict[int, str]
    stat_names: dict[int, str]
    classes: dict[str, Any]
    stats: Stats
    frames: bool
    frame_ids: Any

    def lines(self, records: list[tuple[int, int, int, int]]) -> list[LineColumns]:
        """The line records ``(base, a, b, number)``: ``view[a:b]``, the plane's ``number``-th, which ``padded``
        holds from ``a - base``. Lines that ask for the same stats are decoded together, in one pass."""
        import numpy as np

        done: dict[int, LineColumns] = {}
        groups: dict[frozenset[str], list[tuple[int, str, line_bytes.LineEvents, int, int, int]]] = {}
        for base, a, b, number in records:
            try:
                located = line_bytes.locate(self.view, self.padded, base, a, b)
            except line_bytes.Unexpected:  # no events, or not one run of them: upb parses the line whole
                done[number] = self._parsed(a, b, number)
                continue
            name = _line_name(self.view, located, b, self.classes)
            wanted = _stats_of(self.stats, self.name, name)
            skipped = 0
            if not self.frames and len(self.frame_ids):  # frames told by the id each is written with first, unwalked
                frame = line_bytes.frame_mask(self.padded, located, self.frame_ids)
                skipped = int(np.count_nonzero(frame))
                if skipped == len(frame):
                    done[number] = LineColumns(name, [], [], [], [], skipped, number)
                    continue
                kept = np.flatnonzero(~frame)
                located = dataclasses.replace(
                    located, starts=located.starts[kept], content=located.content[kept], sizes=located.sizes[kept]
                )
            key = frozenset(self.stat_names.values()) if wanted is None else wanted
            groups.setdefault(key, []).append((number, name, located, skipped, a, b))
        for wanted, group in groups.items():
            try:
                done.update(self._decoded(wanted, group))
            except line_bytes.Unexpected:  # each on its own: a line that cannot be decoded is parsed whole
                for one in group:
                    try:
                        done.update(self._decoded(wanted, [one]))
                    except line_bytes.Unexpected:
                        done[one[0]] = self._parsed(one[4], one[5], one[0])
        return [done[number] for _, _, _, number in records]

    def _decoded(
        self, wanted: frozenset[str], group: list[tuple[int, str, line_bytes.LineEvents, int, int, int]]
    ) -> dict[int, LineColumns]:
        """Lines' events decoded at once, with the ``wanted`` stats; frames left out unless kept.

        Raises:
          line_bytes.Unexpected: as ``line_bytes.decode_lines``.
        """
        import numpy as np

        padded = self.padded
        rounds: list[Any] | None = [] if wanted else None
        got = line_bytes.decode_lines(padded, {i: one[2] for i, one in enumerate(group)}, self.event_names, rounds)
        keep = np.ones(len(got.names), dtype=bool) if self.frames else ~got.frames
        rows = np.flatnonzero(keep)
        if rounds is None:
            values: list[dict[str, Any]] = [NO_STATS] * len(rows)
        else:
            if len(rows) < len(got.names):  # frames left out before their stats are read
                position = np.full(len(got.names), -1, dtype=np.int64)
                position[rows] = np.arange(len(rows))
                rounds = [(position[o][k], st[k], n[k]) for o, st, n in rounds for k in [position[o] >= 0]]
            values = event_stats(padded, rounds, len(rows), self.stat_names, wanted, bytes_as_str=True)
        before = np.concatenate([[0], np.cumsum(keep)])  # kept events before each event
        names, starts, durs = got.names[rows].tolist(), got.starts[rows].tolist(), got.durs[rows].tolist()
        out = {}
        for i, lo, hi in got.spans:
            number, name, _, skipped, _, _ = group[i]
            a, b = int(before[lo]), int(before[hi])
            out[number] = LineColumns(
                name, names[a:b], starts[a:b], durs[a:b], values[a:b], skipped + (hi - lo) - (b - a), number
            )
        return out

    def _parsed(self, a: int, b: int, number: int) -> LineColumns:
        """The line parsed whole by upb."""
        return _message_line(
            self.classes["XLine"],
            bytes(_payload(self.view, a, b)),
            self.event_names,
            self.stat_names,
            lambda line: _stats_of(self.stats, self.name, line),
            self.frames,
            number,
        )


def _line_name(view: memoryview, located: line_bytes.LineEvents, end: int, classes: dict[str, Any]) -> str:
    """A line's name, from its fields around its events."""
    head = bytes(view[located.payload : located.first]) + bytes(view[located.end : end])
    try:
        return str(classes["XLine"].FromString(head).name)
    except Exception as exc:  # noqa: BLE001 - upb's DecodeError
        raise TraceFormatError(f"unparsable line ({exc})") from None


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
    return LineColumns(line.name, names, starts, durs, values, skipped, number)


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


__all__ = ["ColumnReader", "LineColumns", "PlaneColumns", "ProfileDataReader", "TraceReader"]

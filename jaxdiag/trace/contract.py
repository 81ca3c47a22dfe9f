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

The loader does not read through this contract yet: ``xspace`` still parses with ``ProfileData``
after ``prepared`` has cut the lines it decoded in bulk out of the bytes. Moving ``xspace``,
``host_plane``, ``device_plane`` and ``reading`` onto ``ColumnReader`` removes ``prepared``,
``device_bytes``, most of ``host_bytes`` and ``wire.sub_space``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import line_bytes, schema, wire
from jaxdiag.trace.schema import XPlane, XSpace
from jaxdiag.trace.host_bytes import _frame_ids, _frame_mask
from jaxdiag.trace.stat_bytes import event_stats


@dataclasses.dataclass(frozen=True, slots=True)
class LineColumns:
    """One line's events as columns (Python-tracer frames, names starting ``$``, counted and left out when asked)."""

    name: str
    names: list[str]
    starts: list[float]
    durs: list[float]
    stats: list[dict[str, Any]]  # each event's stats asked for
    frames: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class PlaneColumns:
    name: str
    stats: dict[str, Any]
    lines: list[LineColumns]


class TraceReader(Protocol):
    """From one serialized XSpace to its planes' columns.

    ``stats``: the event stats to read (``None``: every one); ``frames``: keep Python-tracer frames.

    Raises:
      TraceFormatError: empty, truncated or not an XSpace.
    """

    def read(
        self, data: bytes, source: str, *, stats: frozenset[str] | None = None, frames: bool = True
    ) -> list[PlaneColumns]: ...


def _wanted(key: Any, stats: frozenset[str] | None) -> bool:
    return key is not None and (stats is None or key in stats)


class ProfileDataReader:
    """The reference backend: jaxlib's ``ProfileData``, one Python object per event."""

    def read(
        self, data: bytes, source: str, *, stats: frozenset[str] | None = None, frames: bool = True
    ) -> list[PlaneColumns]:
        from jaxdiag.jax_internals import parse_xspace

        wire.check_wire(data, source)
        planes = []
        for plane in parse_xspace(data, source):
            lines = []
            for line in plane.lines:
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
                    event_stats_.append({k: v for k, v in event.stats if _wanted(k, stats)})
                lines.append(LineColumns(line.name, names, starts, durs, event_stats_, skipped))
            plane_stats = {k: v for k, v in plane.stats if k is not None}
            planes.append(PlaneColumns(plane.name, plane_stats, lines))
        return planes


class ColumnReader:
    """The fast backend: whole lines decoded from the bytes into columns (numpy), metadata by upb."""

    def read(
        self, data: bytes, source: str, *, stats: frozenset[str] | None = None, frames: bool = True
    ) -> list[PlaneColumns]:
        classes = schema.message_classes()
        if classes is None:
            raise TraceFormatError(f"{source}: reading from the bytes needs protobuf's upb implementation")
        view = memoryview(data)
        wire.check_wire(data, source)
        planes = []
        for field, _, start, end in wire._top_records(data, source):
            if field != XSpace.PLANES:
                continue
            try:
                planes.append(self._plane(view, start, end, classes, stats, frames))
            except (TraceFormatError, line_bytes.Unexpected, ValueError) as exc:
                raise TraceFormatError(f"{source}: corrupt XSpace, a plane could not be read ({exc})") from None
        return planes

    def _plane(
        self, view: memoryview, start: int, end: int, classes: dict[str, Any], stats: Any, frames: bool
    ) -> PlaneColumns:
        lines: list[tuple[int, int]] = []
        other: list[memoryview] = []
        for field, header, _, stop in wire._fields(view, start, end):
            if field == XPlane.LINES:
                lines.append((header, stop))
            else:
                other.append(view[header:stop])
        try:
            meta = classes["XPlane"].FromString(b"".join(other))
        except Exception as exc:  # noqa: BLE001 - upb's DecodeError
            raise TraceFormatError(f"unparsable plane metadata ({exc})") from None
        event_names = {key: value.name for key, value in meta.event_metadata.items()}
        stat_names = {key: value.name for key, value in meta.stat_metadata.items()}
        plane_stats = _message_stats(meta.stats, stat_names, None)
        padded, bases = line_bytes.copy_lines(view, lines) if lines else (None, [])
        frame_ids = _frame_ids(event_names)
        columns = [
            self._line(view, padded, base, a, b, event_names, stat_names, classes, stats, frames, frame_ids)
            for (a, b), base in zip(lines, bases)
        ]
        return PlaneColumns(meta.name, plane_stats, columns)

    def _line(
        self,
        view: memoryview,
        padded: Any,
        base: int,
        a: int,
        b: int,
        event_names: dict[int, str],
        stat_names: dict[int, str],
        classes: dict[str, Any],
        stats: frozenset[str] | None,
        frames: bool,
        frame_ids: Any,
    ) -> LineColumns:
        import numpy as np

        try:
            located = line_bytes.locate(view, padded, base, a, b)
            skipped = 0
            if not frames and len(frame_ids):  # frames told by the id each is written with first, left unwalked
                frame = _frame_mask(padded, located, frame_ids)
                skipped = int(np.count_nonzero(frame))
                if skipped == len(frame):
                    return LineColumns(_line_name(view, located, b, classes), [], [], [], [], skipped)
                kept = np.flatnonzero(~frame)
                located = dataclasses.replace(
                    located, starts=located.starts[kept], content=located.content[kept], sizes=located.sizes[kept]
                )
            rounds: list[Any] = []
            got = line_bytes.decode_lines(padded, {0: located}, event_names, stats=rounds)
            rows = np.arange(len(got.names)) if frames else np.flatnonzero(~got.frames)
            if len(rows) < len(got.names):  # frames left out before their stats are read
                position = np.full(len(got.names), -1, dtype=np.int64)
                position[rows] = np.arange(len(rows))
                rounds = [(position[o][k], st[k], n[k]) for o, st, n in rounds for k in [position[o] >= 0]]
            wanted = stats if stats is not None else frozenset(stat_names.values())
            values = event_stats(padded, rounds, len(rows), stat_names, wanted, bytes_as_str=True)
        except line_bytes.Unexpected:  # no events, or not one run of them: upb parses the line whole
            return _message_line(classes["XLine"], bytes(_payload(view, a, b)), event_names, stat_names, stats, frames)
        name = _line_name(view, located, b, classes)
        if len(rows) == len(got.names):
            return LineColumns(name, got.names.tolist(), got.starts.tolist(), got.durs.tolist(), values, skipped)
        return LineColumns(
            name,
            got.names[rows].tolist(),
            got.starts[rows].tolist(),
            got.durs[rows].tolist(),
            values,
            skipped + len(got.names) - len(rows),
        )


def _line_name(view: memoryview, located: line_bytes.LineEvents, end: int, classes: dict[str, Any]) -> str:
    """A line's name, from its fields around its events."""
    head = bytes(view[located.payload : located.first]) + bytes(view[located.end : end])
    return str(classes["XLine"].FromString(head).name)


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
    stats: frozenset[str] | None,
    frames: bool,
) -> LineColumns:
    """A line parsed whole by upb, into the columns ``ColumnReader`` decodes otherwise."""
    try:
        line = line_class.FromString(payload)
    except Exception as exc:  # noqa: BLE001 - upb's DecodeError
        raise TraceFormatError(f"unparsable line ({exc})") from None
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
    return LineColumns(line.name, names, starts, durs, values, skipped)


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

"""The reader contract's two backends give the same columns, and the columns protobuf itself reads.

``ProfileDataReader`` (jaxlib) is the reference; ``ColumnReader`` decodes whole lines from the bytes
(``_xline``, compiled at install), and leaves what its decoder does not expect to upb.
Both are run on every XSpace of the corpus and the shared H100 captures, on a CPU capture made here,
and on generated XSpaces whose truth is computed from protobuf's own parse of the same bytes.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import schema, wire
from jaxdiag.trace.contract import ColumnReader, LineColumns, PlaneColumns, ProfileDataReader
from jaxdiag.trace.schema import XEvent, XLine, XPlane, XSpace, XStat
from tests.trace.test_corpus import CORPUS

BACKENDS = {"column": ColumnReader(), "profile_data": ProfileDataReader()}
NEEDED = frozenset({"hlo_module", "hlo_op", "program_id", "run_id", "step_num", "group_id", "name", "tf_op"})


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _same_columns(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> bool:
    return a.keys() == b.keys() and all(len(a[k]) == len(b[k]) and all(map(_same, a[k], b[k])) for k in a)


def _columns(per_event: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per-event stats as the contract's columns: a stat some event has, ``None`` for the events without it."""
    keys = dict.fromkeys(k for stats in per_event for k in stats)
    return {k: [stats.get(k) for stats in per_event] for k in keys}


def assert_same(got: list[PlaneColumns], want: list[PlaneColumns]) -> None:
    assert [p.name for p in got] == [p.name for p in want]
    for mine, theirs in zip(got, want):
        assert mine.stats.keys() == theirs.stats.keys(), mine.name
        assert all(_same(mine.stats[k], theirs.stats[k]) for k in mine.stats), mine.name
        assert [line.name for line in mine.lines] == [line.name for line in theirs.lines], mine.name
        for a, b in zip(mine.lines, theirs.lines):
            where = (mine.name, a.name)
            assert (a.names, a.starts, a.durs, a.frames) == (b.names, b.starts, b.durs, b.frames), where
            assert _same_columns(a.stats, b.stats), where


def _captures() -> list[Path]:
    from tests.conftest import SHARED_FIXTURES

    found = sorted(CORPUS.glob("*.xplane.pb")) if CORPUS is not None else []
    found += sorted(SHARED_FIXTURES.glob("*/plugins/profile/*/*.xplane.pb")) if SHARED_FIXTURES.is_dir() else []
    return found


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.name if "fixtures" not in str(p) else p.parts[-5])
@pytest.mark.parametrize("frames", [True, False])
def test_backends_read_every_capture_alike(path: Path, frames: bool, xline: object) -> None:
    data = path.read_bytes()
    outcomes = {}
    for name, backend in BACKENDS.items():
        try:
            outcomes[name] = backend.read(data, str(path), frames=frames, stats=None if frames else NEEDED)
        except TraceFormatError as exc:
            outcomes[name] = exc
    if any(isinstance(o, TraceFormatError) for o in outcomes.values()):  # not an XSpace: both say so
        assert all(isinstance(o, TraceFormatError) for o in outcomes.values()), outcomes
        return
    assert_same(outcomes["column"], outcomes["profile_data"])
    assert sum(len(line.names) for plane in outcomes["column"] for line in plane.lines) > 0


def test_backends_read_a_cpu_capture_alike(cpu_trace_dir, xline: object) -> None:
    for path in sorted(Path(cpu_trace_dir.run_dir).glob("*.xplane.pb")):
        data = path.read_bytes()
        for frames in (True, False):
            got, want = (b.read(data, str(path), frames=frames) for b in BACKENDS.values())
            assert_same(got, want)


def test_a_protobuf_that_builds_no_classes_is_read_by_the_reference(cpu_trace_dir, monkeypatch) -> None:
    """The backend is chosen by whether protobuf is upb (``schema.has_upb``), before the classes are built;
    where upb cannot build them from the table, ``ColumnReader`` reads as ``ProfileDataReader`` does."""
    path = sorted(Path(cpu_trace_dir.run_dir).glob("*.xplane.pb"))[0]
    data = path.read_bytes()
    want = ProfileDataReader().read(data, str(path), frames=False)
    monkeypatch.setattr(schema, "message_classes", lambda: None)
    assert_same(ColumnReader().read(data, str(path), frames=False), want)


# --- generated XSpaces ------------------------------------------------------------
_STAT_NAMES = ["hlo_op", "run_id", "program_id", "ref_target", "value", "value"]
#: Their metadata ids: small ones (the decoder finds them in a table), large ones (in a dict), and two ids of
#: one name (one column); the last id has no entry.
_STAT_IDS = [1, 2, 70_000, 3, 2**40, 6, 7]
_values = st.one_of(
    st.tuples(st.just("double_value"), st.floats(allow_nan=False, width=64)),
    st.tuples(st.just("uint64_value"), st.integers(0, 2**64 - 1)),  # half of them above 2^63
    st.tuples(st.just("int64_value"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("str_value"), st.text(max_size=8)),
    st.tuples(st.just("bytes_value"), st.text(max_size=8).map(str.encode)),
    st.tuples(st.just("ref_value"), st.sampled_from(_STAT_IDS)),
)
#: A stat: its metadata id and its value.
_stats = st.lists(st.tuples(st.sampled_from(_STAT_IDS), _values), max_size=4)
_events = st.lists(
    st.tuples(
        st.integers(1, 4),  # metadata id; 4 has no entry, 3 is a Python frame
        st.integers(-(10**9), 10**12),  # offset_ps, negative too
        st.integers(0, 10**9),
        _stats,
        st.one_of(st.none(), st.integers(0, 10**9)),  # a duration written a second time (the later counts)
        # written after the event: num_occurrences (clears offset_ps, its oneof), an unknown field, a known
        # field with another wire type (protobuf keeps it as unknown; the decoder leaves the line to upb)
        st.sampled_from([None, "occurrences", "unknown", "wrong_wire", "stat_wrong_wire"]),
    ),
    max_size=12,
)
# name, timestamp, events, and whether the timestamp is written after the events
_lines = st.lists(st.tuples(st.text(max_size=6), st.integers(0, 2**62), _events, st.booleans()), max_size=4)
_planes = st.lists(st.tuples(st.text(max_size=8), _lines, _stats), min_size=1, max_size=3)


def _record(field: int, payload: bytes) -> bytes:
    return wire._encode_varint(field << 3 | 2) + wire._encode_varint(len(payload)) + payload


def _varint_field(field: int, value: int) -> bytes:
    return wire._encode_varint(field << 3) + wire._encode_varint(value)


_EXTRA = {
    None: b"",
    "occurrences": _varint_field(XEvent.NUM_OCCURRENCES, 3),
    "unknown": _varint_field(15, 9) + _record(16, b"\x22\x01"),
    "wrong_wire": _record(XEvent.DURATION_PS, b"\x05"),
    "stat_wrong_wire": _record(XEvent.STATS, _varint_field(XStat.METADATA_ID, 1) + _record(XStat.UINT64, b"\x01")),
}


def _xspace(planes: list[Any]) -> bytes:
    """Serialized with protobuf, message by message, so that a field can be written twice."""
    classes = schema.message_classes()
    assert classes is not None
    space = b""
    for plane_name, lines, plane_stats in planes:
        plane = classes["XPlane"](name=plane_name)
        for key, name in enumerate(["op", "jit_step", "$frame.py:1 f"], start=1):
            plane.event_metadata[key].id = key
            plane.event_metadata[key].name = name
        for key, name in zip(_STAT_IDS, _STAT_NAMES):
            plane.stat_metadata[key].id = key
            plane.stat_metadata[key].name = name
        for key, (kind, value) in plane_stats:
            stat = plane.stats.add(metadata_id=key)
            setattr(stat, kind, value)
        body = b""
        for line_name, timestamp, events, stamp_after in lines:
            line = classes["XLine"](name=line_name, timestamp_ns=0 if stamp_after else timestamp, id=7)
            line = line.SerializeToString()
            for metadata_id, offset, duration, stats, again, extra in events:
                event = classes["XEvent"](metadata_id=metadata_id, offset_ps=offset, duration_ps=duration)
                for key, (kind, value) in stats:
                    setattr(event.stats.add(metadata_id=key), kind, value)
                written = event.SerializeToString()
                if again is not None:
                    written += classes["XEvent"](duration_ps=again).SerializeToString()
                line += _record(XLine.EVENTS, written + _EXTRA[extra])
            if stamp_after:
                line += _varint_field(XLine.TIMESTAMP_NS, timestamp)
            body += _record(XPlane.LINES, line)
        space += _record(XSpace.PLANES, plane.SerializeToString() + body)
    return space


def _div1000(value: int) -> int:
    return value // 1000 if value >= 0 else -(-value // 1000)  # toward zero, as C++ divides


def _truth(data: bytes, frames: bool) -> list[PlaneColumns]:
    """What protobuf's own parse of ``data`` says, in the contract's terms."""
    classes = schema.message_classes()
    assert classes is not None
    space = classes["XSpace"].FromString(data)
    out = []
    for plane in space.planes:
        events = {k: v.name for k, v in plane.event_metadata.items()}
        names = {k: v.name for k, v in plane.stat_metadata.items()}

        def stats_of(stats: Any) -> dict[str, Any]:
            got = {}
            for stat in stats:
                kind = stat.WhichOneof("value")
                if stat.metadata_id not in names or kind is None:
                    continue
                value = getattr(stat, kind)
                value = names.get(value, "") if kind == "ref_value" else value
                got[names[stat.metadata_id]] = value.decode() if isinstance(value, bytes) else value
            return got

        lines = []
        for line in plane.lines:
            kept = [e for e in line.events if frames or not events.get(e.metadata_id, "").startswith("$")]
            lines.append(
                LineColumns(
                    line.name,
                    [events.get(e.metadata_id, "") for e in kept],
                    array("d", [float(_div1000(e.offset_ps) + line.timestamp_ns) for e in kept]),
                    array("d", [float(_div1000(e.duration_ps)) for e in kept]),
                    _columns([stats_of(e.stats) for e in kept]),
                    len(line.events) - len(kept),
                )
            )
        out.append(PlaneColumns(plane.name, stats_of(plane.stats), lines))
    return out


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],  # xline: read only
)
@given(planes=_planes, frames=st.booleans())
def test_generated_xspaces_read_as_protobuf_reads_them(planes: list[Any], frames: bool, xline: object) -> None:
    data = _xspace(planes)
    truth = _truth(data, frames)
    for backend in BACKENDS.values():
        assert_same(backend.read(data, "generated", frames=frames), truth)


# --- Python-tracer frames, skipped whole -------------------------------------------------
#: Frame ids whose varints take one to four bytes, an op's, and one without an entry.
_FRAME_IDS, _OP_ID, _NO_ENTRY = [3, 300, 70_000, 2**22 + 5], 1, 9
#: A frame in the plain layout, long enough that the event before it can be read 16 bytes at a time.
_PLAIN = [("id", 3), ("offset", 2**40), ("duration", 2**30)]
_frame_fields = st.lists(
    st.one_of(
        st.tuples(st.just("id"), st.sampled_from([*_FRAME_IDS, _OP_ID, _NO_ENTRY])),
        st.tuples(st.sampled_from(["offset", "duration", "occurrences"]), st.integers(0, 2**64 - 1)),
        st.tuples(st.sampled_from(["unknown", "stats", "long_varint", "cut_varint"]), st.just(0)),
    ),
    max_size=5,
)


def _frame_event(fields: list[tuple[str, int]]) -> bytes:
    """An XEvent written field by field, as a tracer might (or a damaged file): the plain layout is an id then
    varints of fields 2, 3 and 5, which the decoder checks without walking them."""
    numbers = {"id": XEvent.METADATA_ID, "offset": XEvent.OFFSET_PS, "duration": XEvent.DURATION_PS}
    numbers["occurrences"] = XEvent.NUM_OCCURRENCES
    out = b""
    for kind, value in fields:
        if kind in numbers:
            out += _varint_field(numbers[kind], value)
        elif kind == "unknown":
            out += _varint_field(15, 2)
        elif kind == "stats":
            out += _record(XEvent.STATS, _varint_field(XStat.METADATA_ID, 1) + _varint_field(XStat.INT64, 4))
        elif kind == "long_varint":  # eleven bytes: past what a varint may take
            out += wire._encode_varint(XEvent.OFFSET_PS << 3) + b"\x80" * 10 + b"\x01"
        else:  # a varint cut by the event's end
            out += wire._encode_varint(XEvent.DURATION_PS << 3) + b"\x81"
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_frame_fields, max_size=8), frames=st.booleans())
@example(events=[[("id", 3), ("long_varint", 0)], _PLAIN], frames=False)
@example(events=[[("id", 300), ("offset", 5), ("cut_varint", 0)], _PLAIN], frames=False)
@example(events=[[("id", 3), ("offset", 5), ("id", _OP_ID)], _PLAIN], frames=False)
@example(events=[[("id", 2**22 + 5), ("occurrences", 2), ("duration", 2**40)], _PLAIN], frames=False)
@example(events=[[("cut_varint", 0), ("offset", 10_730_048_805), ("id", 70_000)]], frames=False)  # a tag past 2^29
def test_frames_are_skipped_as_protobuf_reads_them(events: list[Any], frames: bool, xline: object) -> None:
    classes = schema.message_classes()
    assert classes is not None
    plane = classes["XPlane"](name="/host:CPU")
    for key in [*_FRAME_IDS, _OP_ID]:
        plane.event_metadata[key].id = key
        plane.event_metadata[key].name = "op" if key == _OP_ID else f"$f.py:{key} f"
    plane.stat_metadata[1].id, plane.stat_metadata[1].name = 1, "value"
    line = classes["XLine"](name="python", timestamp_ns=10).SerializeToString()
    line += b"".join(_record(XLine.EVENTS, _frame_event(fields)) for fields in events)
    data = _record(XSpace.PLANES, plane.SerializeToString() + _record(XPlane.LINES, line))
    try:
        truth: Any = _truth(data, frames)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: a damaged event
        truth = TraceFormatError
    if truth is TraceFormatError:  # jaxlib's reader takes some events protobuf rejects; the decoder sides with protobuf
        with pytest.raises(TraceFormatError):
            BACKENDS["column"].read(data, "generated", frames=frames)
        return
    for backend in BACKENDS.values():
        assert_same(backend.read(data, "generated", frames=frames), truth)


def test_the_decoder_numbers_fields_as_the_schema_does(xline: Any) -> None:
    assert xline.FIELDS == {
        "XLine": (XLine.NAME, XLine.TIMESTAMP_NS, XLine.EVENTS),
        "XEvent": (XEvent.METADATA_ID, XEvent.OFFSET_PS, XEvent.DURATION_PS, XEvent.STATS, XEvent.NUM_OCCURRENCES),
        "XStat": (XStat.METADATA_ID, XStat.DOUBLE, XStat.UINT64, XStat.INT64, XStat.STR, XStat.BYTES, XStat.REF),
    }


def test_the_decoder_reads_a_line_and_leaves_what_it_does_not_expect(xline: Any) -> None:
    """The decoder itself, not upb behind it: a plain line is decoded; a known field with another wire type,
    a group, a truncated event, or a name or timestamp after an event raises ``Unexpected`` (``ColumnReader``
    then parses the line with upb)."""
    stat = _varint_field(XStat.METADATA_ID, 2) + _varint_field(XStat.UINT64, 2**64 - 1)
    event = _varint_field(XEvent.METADATA_ID, 1) + _varint_field(XEvent.OFFSET_PS, 2_500) + _record(XEvent.STATS, stat)
    line = _record(XLine.NAME, b"main") + _varint_field(XLine.TIMESTAMP_NS, 10) + _record(XLine.EVENTS, event)
    assert xline.head(line) == (b"main", 10)
    got = xline.events(line, 10, {1: "op"}, {2: "run_id"}, {2: "run_id"}, None, True)
    assert got == (["op"], array("d", [12.0]).tobytes(), array("d", [0.0]).tobytes(), {"run_id": [2**64 - 1]}, 0)
    # A column per stat: the later of a stat given twice, None for an event without it, to the last event.
    twice = _record(XEvent.STATS, _varint_field(XStat.METADATA_ID, 2) + _varint_field(XStat.INT64, 7))
    bare = _varint_field(XEvent.METADATA_ID, 1)
    three = line + _record(XLine.EVENTS, bare) + _record(XLine.EVENTS, event + twice) + _record(XLine.EVENTS, bare)
    names, _, _, columns, _ = xline.events(three, 10, {1: "op"}, {2: "run_id"}, {2: "run_id"}, None, True)
    assert len(names) == 4 and columns == {"run_id": [2**64 - 1, None, 7, None]}
    with pytest.raises(xline.Unexpected):  # a known field of another wire type before the events
        xline.head(_record(XLine.TIMESTAMP_NS, b"\x01") + line)
    for bad in (
        line + _record(XLine.TIMESTAMP_NS, b"\x01"),  # a known field, length-delimited
        line + bytes([XLine.EVENTS << 3 | 3]),  # a group
        line + _record(XLine.EVENTS, event)[:-1],  # cut short
        line + _varint_field(XLine.TIMESTAMP_NS, 20),  # a timestamp after the events, which would count
        line + _record(XLine.NAME, b"other"),  # a name after the events
    ):
        with pytest.raises(xline.Unexpected):
            xline.events(bad, 10, {1: "op"}, {2: "run_id"}, {2: "run_id"}, None, True)
    with pytest.raises(xline.Unexpected):
        xline.events(line + _record(XLine.EVENTS, _record(XEvent.OFFSET_PS, b"")), 10, {}, {}, {}, None, True)


def test_the_decoder_splits_a_plane_as_the_wire_walk_does(xline: Any) -> None:
    """A plane's line records one by one and its other fields merged, at the offsets the Python walk of
    ``wire`` gives; a payload it does not expect (a group, a field cut short) raises ``Unexpected``, and
    ``ColumnReader`` then walks it in Python, which names what is wrong."""
    line = _record(XLine.NAME, b"main") + _varint_field(XLine.TIMESTAMP_NS, 10)
    meta = _record(XPlane.NAME, b"/host:CPU") + _varint_field(XPlane.ID, 3)
    payload = meta + _record(XPlane.LINES, line) + meta + meta + _record(XPlane.LINES, b"") + meta
    data = b"\x00" * 7 + payload  # the plane at offset 7 of the file
    lines, other = [], []
    for field, header, _, stop in wire._fields(data, 7, len(data)):
        if field == XPlane.LINES:
            lines.append((header, stop))
        elif other and other[-1][1] == header:
            other[-1][1] = stop
        else:
            other.append([header, stop])
    assert xline.split(payload, 7, XPlane.LINES) == (lines, other)
    assert len(lines) == 2 and len(other) == 3
    for bad in (payload + bytes([XPlane.ID << 3 | 3]), payload + _record(XPlane.NAME, b"cut")[:-1]):
        with pytest.raises(xline.Unexpected):
            xline.split(bad, 0, XPlane.LINES)
        with pytest.raises(TraceFormatError):
            list(wire._fields(bad, 0, len(bad)))

"""``line_bytes.locate``: every event record of a line, found as protobuf's own parse finds them.

Event records start with the byte 0x22, and so do an event's stats and any
0x22 byte inside a value; the lines here are full of those, to show that the
records found are the ones a field-by-field parse walks.
"""

from __future__ import annotations

import random

import pytest

from jaxdiag.trace import line_bytes, wire
from jaxdiag.trace.line_bytes import EVENTS, LINES, Unexpected


def _varint_field(field: int, value: int) -> bytes:
    return wire._encode_varint(field << 3) + wire._encode_varint(value)


def _bytes_field(field: int, payload: bytes) -> bytes:
    return line_bytes.header(field, len(payload)) + payload


def _event(metadata_id: int, offset_ps: int, duration_ps: int, stats: list[bytes] = ()) -> bytes:  # type: ignore[assignment]
    body = _varint_field(1, metadata_id) + _varint_field(2, offset_ps) + _varint_field(3, duration_ps)
    return body + b"".join(_bytes_field(4, stat) for stat in stats)


def _stat(metadata_id: int, text: bytes) -> bytes:
    return _varint_field(1, metadata_id) + _bytes_field(5, text)


def _line(events: list[bytes], *, before: bytes = b"", after: bytes = b"", long_lengths: bool = False) -> bytes:
    """An XLine record (as a plane's field 3): id, name, timestamp, the events, then ``after``."""
    records = []
    for event in events:
        length = wire._encode_varint(len(event))
        if long_lengths and len(length) == 1:
            length = bytes([length[0] | 0x80, 0])  # the same number in two bytes
        records.append(bytes([EVENTS << 3 | 2]) + length + event)
    body = _varint_field(1, 7) + _bytes_field(2, b'python3 "main"') + _varint_field(3, 1_700_000_000_123)
    return _bytes_field(LINES, body + before + b"".join(records) + after)


def _located(record: bytes) -> line_bytes.LineEvents:
    view = memoryview(record)
    padded, (base,) = line_bytes.copy_lines(view, [(0, len(record))])
    return line_bytes.locate(view, padded, base, 0, len(record))


def _parsed(record: bytes) -> list[tuple[int, int, int]]:
    """``(record start, content start, length)`` of each event, field by field."""
    view = memoryview(record)
    _, start = wire._varint(view, 0, "")
    _, start = wire._varint(view, start, "")
    return [(head, at, end - at) for field, head, at, end in wire._fields(view, start, len(record)) if field == EVENTS]


def _found(events: line_bytes.LineEvents) -> list[tuple[int, int, int]]:
    base = events.base
    return list(zip((events.starts + base).tolist(), (events.content + base).tolist(), events.sizes.tolist()))


def test_records_are_found_past_every_0x22_inside_events() -> None:
    quote = 0x22
    events = [
        _event(quote, quote, quote),  # every value is the byte 0x22
        _event(5, quote << 7 | quote, quote << 14, [_stat(quote, b'"' * 40), _stat(2, b"")]),
        _event(6, 1, 2, [_stat(3, bytes([quote, 1, quote, 0xFF]))]),
        _event(quote, 0, 0),
    ]
    record = _line(events, after=_varint_field(9, 99) + _bytes_field(11, b'"display" "name"'))
    got = _located(record)
    assert _found(got) == _parsed(record) and len(got.sizes) == 4
    assert got.timestamp_ns == 1_700_000_000_123


def test_lengths_written_long_are_read() -> None:
    events = [_event(i, 1_000 * i, 34, [_stat(1, b'"x"')]) for i in range(1, 50)]
    record = _line(events, long_lengths=True)
    assert _found(_located(record)) == _parsed(record)


def test_random_lines_are_found_as_parsed() -> None:
    rng = random.Random(7)
    for _ in range(50):
        events = [
            _event(
                rng.choice([0x22, rng.randrange(1 << 20)]),
                rng.randrange(1 << 48),
                rng.randrange(1 << 30),
                [_stat(rng.randrange(300), rng.randbytes(rng.randrange(12))) for _ in range(rng.randrange(4))],
            )
            for _ in range(rng.randrange(1, 300))
        ]
        after = _bytes_field(11, rng.randbytes(rng.randrange(20)))
        record = _line(events, after=after, long_lengths=rng.random() < 0.2)
        assert _found(_located(record)) == _parsed(record)


def test_events_that_are_not_one_run_are_unexpected() -> None:
    events = [_event(1, 2, 3), _event(4, 5, 6)]
    split = _line(events[:1], after=_varint_field(9, 1) + bytes([EVENTS << 3 | 2, len(events[1])]) + events[1])
    with pytest.raises(Unexpected):
        _located(split)
    with pytest.raises(Unexpected):
        _located(_line([]))  # no events
    with pytest.raises(Unexpected):
        _located(_line(events, before=_bytes_field(3, b"x")))  # a timestamp that is no varint

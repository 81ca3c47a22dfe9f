"""Trim a serialized XSpace (``.xplane.pb``): fewer events per line, fewer planes.

Used to keep the public captures of the trace corpus small (see
``tests/corpus/PROVENANCE.md``). The file is rewritten field by field on the
protobuf wire, so every field this script does not cut (plane and line ids,
stats, metadata maps, timestamps) is written back byte for byte, and the result
is an XSpace that any reader (XProf, ``jax.profiler.ProfileData``, jaxdiag)
reads. An event's time is stored relative to its line, so keeping the first
events of a line keeps their times exact.

    python tools/trim_xspace.py IN.xplane.pb OUT.xplane.pb --events 2000 --drop-plane /host:metadata
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxdiag.trace.wire import _encode_varint, _fields, _plane_name, plane_records

_PLANE_LINES, _LINE_EVENTS = 3, 4  # XPlane.lines, XLine.events


def trim(data: bytes, *, events: int | None, drop_planes: frozenset[str] = frozenset()) -> bytes:
    """``data`` with at most ``events`` events on each line (``None``: all) and without the planes named."""
    planes = plane_records(data, "input")
    if planes is None:
        raise ValueError("a plane's name cannot be read")
    out = bytearray()
    pos = 0
    for plane in planes:
        out += data[pos : plane.start]  # top-level records between planes (hostnames, errors) stay
        pos = plane.end
        if _plane_name(data, plane.payload, plane.end) in drop_planes:
            continue
        body = bytearray()
        for field, header, start, end in _fields(data, plane.payload, plane.end):
            if field == _PLANE_LINES and events is not None:
                body += _record(_PLANE_LINES, _trim_line(data, start, end, events))
            else:
                body += data[header:end]
        out += _record(1, bytes(body))
    out += data[pos:]
    return bytes(out)


def _trim_line(data: bytes, start: int, end: int, events: int) -> bytes:
    kept = bytearray()
    seen = 0
    for field, header, _, stop in _fields(data, start, end):
        if field == _LINE_EVENTS:
            seen += 1
            if seen > events:
                continue
        kept += data[header:stop]
    return bytes(kept)


def _record(field: int, payload: bytes) -> bytes:
    return _encode_varint(field << 3 | 2) + _encode_varint(len(payload)) + payload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--events", type=int, default=None, help="keep the first N events of each line")
    parser.add_argument("--drop-plane", action="append", default=[], help="leave out the plane of this name")
    args = parser.parse_args(argv)
    data = args.source.read_bytes()
    trimmed = trim(data, events=args.events, drop_planes=frozenset(args.drop_plane))
    from jaxlib import _profile_data  # the result must parse

    _profile_data.ProfileData.from_serialized_xspace(trimmed)
    args.target.write_bytes(trimmed)
    print(f"{args.source} ({len(data):,} bytes) -> {args.target} ({len(trimmed):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Walking a serialized XSpace's planes and lines without parsing it, and reading some of them."""

from __future__ import annotations

import pytest
from jaxlib import _profile_data

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import wire
from jaxdiag.trace.contract import ColumnReader, ProfileDataReader
from xspace_builders import Kernel, XSpaceBuilder, gpu_xspace, host_plane

BACKENDS = (ColumnReader(), ProfileDataReader())


def test_plane_records_walk_valid_xspaces() -> None:
    data = gpu_xspace(devices=3, kernels=[Kernel(d, "fusion_1", 1_000, 500) for d in range(3)], python_frames=20)
    planes = wire.plane_records(data, "x")
    parsed = [p.name for p in _profile_data.ProfileData.from_serialized_xspace(data).planes]
    assert [p.name for p in planes] == parsed
    assert sum(p.size for p in planes) == len(data)
    odd = set(range(1, len(planes), 2))
    for backend in BACKENDS:  # the planes a worker is given, by index, and no other
        got = backend.read(data, "x", select=lambda i, name: True if i in odd else None)
        assert [(p.index, p.name) for p in got] == [(i, planes[i].name) for i in sorted(odd)]
    assert wire.plane_records(b"\x0a\x02\x12\xff", "x") is None  # a name whose length overruns its plane
    assert [p.name for p in wire.plane_records(b"\x0a\x02\x08\x01", "x")] == [""]  # an id and no name
    with pytest.raises(TraceFormatError, match="truncated"):
        wire.plane_records(data[:-3], "x")


def test_plane_lines_name_a_planes_threads() -> None:
    builder = XSpaceBuilder().plane("/device:GPU:0").line("Stream #14(Compute)", [("fusion_1", 1_000, 500)])
    data = host_plane(
        builder, steps=[(0, 0, 5_000)], python_frames=20, runtime=[("backend_compile", 100, 900)]
    ).serialize()
    records = wire.plane_records(data, "x")
    at = next(i for i, p in enumerate(records) if p.name == "/host:CPU")
    lines = wire.plane_lines(data, records[at])
    assert lines is not None and lines.names == ("python3", "tf_pjrt_compile_thread_pool/123")
    assert lines.chunks[0][0] == records[at].payload and lines.chunks[-1][1] == records[at].end
    for keep, want in (([1], ["tf_pjrt_compile_thread_pool/123"]), ([0, 1], list(lines.names)), ([], [])):
        for backend in BACKENDS:
            (plane,) = backend.read(data, "x", select=lambda i, name: keep if i == at else None)
            assert plane.name == "/host:CPU" and [line.name for line in plane.lines] == want
            assert [line.index for line in plane.lines] == keep
    # A line whose events come before its name is not walked here.
    line = b"\x22\x02\x08\x01" + b"\x12\x01a"
    body = b"\x12\x09/host:CPU" + b"\x1a" + bytes([len(line)]) + line
    odd = b"\x0a" + bytes([len(body)]) + body
    assert wire.plane_lines(odd, wire.plane_records(odd, "x")[0]) is None

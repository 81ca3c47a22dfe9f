"""``prepared``: events read from the bytes (``host_bytes``, ``device_bytes``) give what the XSpace reader gives.

Each case reads a real capture twice, once with ``prepare`` and once with it
turned off (every event through the reader), and asserts the frames are equal,
row for row; and that ``prepare`` did its work (frames cut out, runtime threads
and device lines decoded), so that a path quietly falling back to the reader cannot pass.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from jaxdiag.trace import host_bytes, line_bytes, wire, xspace
from jaxdiag.trace.host_bytes import prepare_lines
from jaxdiag.trace.prepared import PreparedSpace, prepare
from jaxdiag.trace.host_plane import HOST_PLANE, is_runtime_thread
from jaxdiag.trace.load import load
from tests.trace.test_corpus import CORPUS

pytestmark = pytest.mark.skipif(not line_bytes.available(), reason="protobuf without upb: nothing is prepared")


def _reader_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xspace, "prepare", lambda data, source, accelerated: PreparedSpace(data))
    monkeypatch.setattr("jaxdiag.trace.reading.prepare_lines", lambda *a, **k: host_bytes.PreparedLines())


def _same_as_reader(path: Path, monkeypatch: pytest.MonkeyPatch, parallel: bool) -> None:
    prepared = load(path, parallel=parallel)
    with monkeypatch.context() as patched:
        _reader_only(patched)
        plain = load(path, parallel=False)
    pd.testing.assert_frame_equal(prepared.events, plain.events)
    pd.testing.assert_frame_equal(prepared.devices, plain.devices)
    pd.testing.assert_frame_equal(prepared.steps, plain.steps)
    assert list(prepared.notes) == list(plain.notes)


def _xplane(path: Path) -> Path:
    return path if path.is_file() else sorted(path.rglob("*.xplane.pb"))[-1]


@pytest.mark.parametrize("name", ["h100_transformer", "h100_mlp"])
@pytest.mark.parametrize("parallel", [False, True])
def test_h100_captures_read_as_the_reader_reads_them(
    shared_fixtures: Path, name: str, parallel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = shared_fixtures / name
    data = _xplane(path).read_bytes()
    space = prepare(data, accelerated=True)
    python = [r for r in space.threads.values() if r.stats is not None]
    assert sum(r.frames for r in python) > 100_000  # the Python tracer's frames were cut out of the bytes
    assert sum(len(r.names) for r in python) > 1_000  # and the Python thread's other events decoded
    assert sum(len(r.names) for r in space.threads.values() if r.stats is None) > 10_000  # the compile threads too
    assert sum(len(d.names) for lines in space.device.values() for d in lines.values()) > 5_000  # the GPU's kernels
    assert len(space.data) < len(data) / 2
    _same_as_reader(path, monkeypatch, parallel)


@pytest.mark.skipif(CORPUS is None, reason="the trace corpus is not here (see tests/corpus/PROVENANCE.md)")
@pytest.mark.parametrize(
    "name",
    [
        "tpu_v6e_4chip.xplane.pb",
        "rocm_mi300x_8gpu_conv.xplane.pb",
        "rocm_mi300x_8gpu_conv_legacy.xplane.pb",
        "rocm_gfx950_te_fused_attn.xplane.pb",
    ],
)
def test_captures_by_others_read_as_the_reader_reads_them(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert CORPUS is not None
    path = CORPUS / name
    space = prepare(path.read_bytes(), accelerated=True)
    assert space.threads and space.device  # TPU and ROCm runtime threads and device lines are decoded too
    _same_as_reader(path, monkeypatch, parallel=False)
    _same_as_reader(path, monkeypatch, parallel=True)


def test_cpu_capture_frames_are_cut_out(cpu_trace_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only host: its pools run XLA:CPU ops (left to the reader); the Python thread's frames are cut out."""
    monkeypatch.setattr(host_bytes, "MIN_LINE_BYTES", 0)  # a small capture's threads are short
    data = _xplane(cpu_trace_dir.run_dir).read_bytes()
    space = prepare(data, accelerated=False)
    assert space.dropped and not space.threads
    _same_as_reader(cpu_trace_dir.run_dir, monkeypatch, parallel=False)


def _layout(data: bytes, name: str = HOST_PLANE) -> tuple[wire.PlaneRecord, wire.PlaneLines]:
    planes = wire.plane_records(data, "")
    assert planes is not None
    plane = next(p for p in planes if p.name == name)
    layout = wire.plane_lines(data, plane)
    assert layout is not None
    return plane, layout


def _changed_after_first_event(data: bytes, line: int, plane_name: str, change: str) -> bytes:
    """``data`` with ``line``'s first event changed (valid protobuf either way).

    ``change``: ``"long length"`` writes the event's length in one byte more than
    needed; ``"field between"`` puts an unknown field between its first and second
    events, so that its events are no longer one run of records.
    """
    plane, layout = _layout(data, plane_name)
    a, b = next((a, b) for a, b, at in layout.chunks if at == line)
    view = memoryview(data)
    _, start = wire._varint(view, a, "")
    _, start = wire._varint(view, start, "")
    first = line_bytes._first_event(view, start, b)
    assert first is not None
    size, after = wire._varint(view, first + 1, "")
    assert size < 1 << 7
    if change == "long length":
        payload = bytes(view[start : first + 1]) + bytes([size | 0x80, 0]) + bytes(view[after:b])
    else:
        unknown_field = bytes([15 << 3, 7])  # field 15, a varint: 7
        payload = bytes(view[start : after + size]) + unknown_field + bytes(view[after + size : b])
    record = line_bytes.header(3, len(payload)) + payload
    planes = wire.plane_records(data, "")
    assert planes is not None
    parts = [(p, layout, list(range(len(layout.names)))) if p == plane else (p, None, None) for p in planes]
    return wire.sub_space(data, parts, replace={line: record})


@pytest.mark.parametrize("change", ["long length", "field between"])
def test_lines_laid_out_unusually_read_as_the_reader_reads_them(
    shared_fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A length written long is read here; events that are not one run of records are left to the reader."""
    data = _xplane(shared_fixtures / "h100_mlp").read_bytes()
    _, layout = _layout(data)
    runtime_line = next(i for i, name in enumerate(layout.names) if is_runtime_thread(name))
    python_line = max(
        (at for _, _, at in layout.chunks if at >= 0 and not is_runtime_thread(layout.names[at])),
        key=lambda at: sum(b - a for a, b, line in layout.chunks if line == at),
    )
    changed = _changed_after_first_event(data, runtime_line, HOST_PLANE, change)
    changed = _changed_after_first_event(changed, python_line, HOST_PLANE, change)
    changed = _changed_after_first_event(changed, 0, "/device:GPU:0", change)
    _, layout = _layout(changed)
    got = prepare_lines(changed, layout, range(len(layout.names)), accelerated=True)
    (lines,) = prepare(changed, accelerated=True).device.values()
    read_here = change == "long length"
    assert (runtime_line in got.threads) is read_here and (python_line in got.threads) is read_here
    assert (0 in lines) is read_here  # the GPU's first line
    assert len(got.threads) > 2 and len(lines) > 1  # the other lines are read here either way
    path = tmp_path / "plugins" / "profile" / "run" / "host.xplane.pb"
    path.parent.mkdir(parents=True)
    path.write_bytes(changed)
    _same_as_reader(path, monkeypatch, parallel=False)
    _same_as_reader(path, monkeypatch, parallel=True)


def test_without_upb_nothing_is_prepared(shared_fixtures: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _xplane(shared_fixtures / "h100_mlp").read_bytes()
    monkeypatch.setattr(line_bytes, "_plane_view", lambda: None)
    space = prepare(data, accelerated=True)
    assert space.data is data and not space.dropped and not space.threads and not space.device


def test_varints_match_protobuf_encoding() -> None:
    import numpy as np

    numbers = [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**35 + 7, 2**62, 2**63 - 1, -1, -(2**40)]
    encoded = [wire._encode_varint(n & (2**64 - 1)) for n in numbers]
    at = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    padded = np.frombuffer(b"".join(encoded) + bytes(16), dtype=np.uint8)
    values, widths = line_bytes.varints(padded, at)
    assert values.tolist() == numbers
    assert widths.tolist() == [len(e) for e in encoded]


def test_divide_by_1000_truncates_toward_zero_as_cpp_does() -> None:
    import numpy as np

    got = line_bytes.divide_by_1000(np.array([1999, -1999, 0, 1000, -1000, 999], dtype=np.int64))
    assert got.tolist() == [1, -1, 0, 1, -1, 0]


def test_frames_are_told_alike_by_two_bytes_or_by_whole_varints(shared_fixtures: Path) -> None:
    """Frame ids under 16384 are looked up by two bytes; with a larger id among them every id is decoded
    whole: the same events are frames either way."""
    import numpy as np

    data = _xplane(shared_fixtures / "h100_mlp").read_bytes()
    _, layout = _layout(data)
    view = memoryview(data)
    names, _ = line_bytes.plane_metadata(b"".join(view[a:b] for a, b, line in layout.chunks if line < 0))
    frames = host_bytes._frame_ids(names)
    assert len(frames) and frames[-1] < 1 << 14
    longest = max(layout.chunks, key=lambda c: c[1] - c[0] if c[2] >= 0 else -1)
    array, located = line_bytes.locate_lines(view, [longest])
    events = located[longest[2]]
    by_two_bytes = host_bytes._frame_mask(array, events, frames)
    whole = host_bytes._frame_mask(array, events, np.append(frames, 1 << 20))  # an id no event has
    assert by_two_bytes.sum() > 10_000 and (by_two_bytes == whole).all()

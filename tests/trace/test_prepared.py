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
    assert sum(space.dropped.values()) > 100_000  # the Python tracer's frames were cut out of the bytes
    assert sum(len(r.names) for r in space.runtime.values()) > 10_000  # the compile threads were decoded
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
    assert space.runtime and space.device  # TPU and ROCm runtime threads and device lines are decoded too
    _same_as_reader(path, monkeypatch, parallel=False)
    _same_as_reader(path, monkeypatch, parallel=True)


def test_cpu_capture_frames_are_cut_out(cpu_trace_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only host: its pools run XLA:CPU ops (left to the reader); the Python thread's frames are cut out."""
    monkeypatch.setattr(host_bytes, "MIN_LINE_BYTES", 0)  # a small capture's threads are short
    data = _xplane(cpu_trace_dir.run_dir).read_bytes()
    space = prepare(data, accelerated=False)
    assert space.dropped and not space.runtime
    _same_as_reader(cpu_trace_dir.run_dir, monkeypatch, parallel=False)


def _layout(data: bytes, name: str = HOST_PLANE) -> tuple[wire.PlaneRecord, wire.PlaneLines]:
    planes = wire.plane_records(data, "")
    assert planes is not None
    plane = next(p for p in planes if p.name == name)
    layout = wire.plane_lines(data, plane)
    assert layout is not None
    return plane, layout


def _with_padded_first_length(data: bytes, line: int, plane_name: str = HOST_PLANE) -> bytes:
    """``data`` with the length of ``line``'s first event written in one byte more than needed (valid protobuf)."""
    plane, layout = _layout(data, plane_name)
    a, b = next((a, b) for a, b, at in layout.chunks if at == line)
    view = memoryview(data)
    _, start = wire._varint(view, a, "")
    _, start = wire._varint(view, start, "")
    first = line_bytes._first_event(view, start, b)
    assert first is not None
    size, after = wire._varint(view, first + 1, "")
    assert size < 1 << 7
    padded_size = bytes([size | 0x80, 0])  # the same number in two bytes
    payload = bytes(view[start:first]) + bytes(view[first : first + 1]) + padded_size + bytes(view[after:b])
    record = line_bytes.header(3, len(payload)) + payload
    planes = wire.plane_records(data, "")
    assert planes is not None
    parts = [(p, layout, list(range(len(layout.names)))) if p == plane else (p, None, None) for p in planes]
    return wire.sub_space(data, parts, replace={line: record})


def test_a_line_not_laid_out_as_expected_is_left_to_the_reader(
    shared_fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _xplane(shared_fixtures / "h100_mlp").read_bytes()
    _, layout = _layout(data)
    runtime_line = next(i for i, name in enumerate(layout.names) if is_runtime_thread(name))
    python_line = max(
        (at for _, _, at in layout.chunks if at >= 0 and not is_runtime_thread(layout.names[at])),
        key=lambda at: sum(b - a for a, b, line in layout.chunks if line == at),
    )
    changed = _with_padded_first_length(_with_padded_first_length(data, runtime_line), python_line)
    changed = _with_padded_first_length(changed, 0, "/device:GPU:0")
    _, layout = _layout(changed)
    got = prepare_lines(changed, layout, range(len(layout.names)), accelerated=True)
    assert runtime_line not in got.cut and python_line not in got.cut  # left as written
    assert got.runtime and not got.dropped  # the other threads are still decoded here
    device = prepare(changed, accelerated=True).device
    (lines,) = device.values()
    assert 0 not in lines and lines  # the GPU's first line is left to the reader, the others read here
    path = tmp_path / "plugins" / "profile" / "run" / "host.xplane.pb"
    path.parent.mkdir(parents=True)
    path.write_bytes(changed)
    _same_as_reader(path, monkeypatch, parallel=False)
    _same_as_reader(path, monkeypatch, parallel=True)


def test_without_upb_nothing_is_prepared(shared_fixtures: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _xplane(shared_fixtures / "h100_mlp").read_bytes()
    monkeypatch.setattr(line_bytes, "_messages", lambda: None)
    space = prepare(data, accelerated=True)
    assert space.data is data and not space.dropped and not space.runtime and not space.device


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

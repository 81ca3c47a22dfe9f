"""Corrupted and truncated traces: the reader raises ``TraceFormatError`` or loads; it never crashes."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.json_trace import read_json_trace
from jaxdiag.trace.load import load
from jaxdiag.trace.xspace import read_xspace
from xspace_builders import Kernel, gpu_xspace, tpu_xspace, write_run

from tests.trace.test_tpu_planes import tpu_slice

GPU = gpu_xspace(
    devices=2,
    kernels=[Kernel(d, f"fusion_{i}", i * 100, 50) for d in range(2) for i in range(5)],
    nccl=[Kernel(1, "ncclDevKernel_AllReduce", 40, 30, op="all-reduce-start")],
    steps=[(0, 0, 300), (1, 300, 600)],
    host_annotations=[("load_batch", 10, 90)],
    memcpy=[(0, 550, 10)],
    python_frames=5,
)
TPU = tpu_xspace(
    ops=[(0, "%fusion.1 = f32[2]{0} fusion(%p)", 10, 5)], modules=[(0, "jit_f", 1, 0, 50)], steps=[(0, 0, 0, 60)]
)
#: TPU Steps, Async XLA Ops and collective lines, with unsigned 64-bit program ids.
TPU_SLICE = tpu_slice(chips=2, step_ns=20_000, steps=1)
JSON = gzip.compress(
    json.dumps(
        {
            "traceEvents": [
                {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
                {"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 10, "name": "train", "args": {"step_num": "0"}},
                {
                    "ph": "X",
                    "pid": 1,
                    "tid": 2,
                    "ts": 1,
                    "dur": 1,
                    "name": "copy",
                    "args": {"hlo_op": "copy", "hlo_module": "m"},
                },
            ]
        }
    ).encode()
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read_or_reject(data: bytes) -> None:
    try:
        read_xspace(data, "h", source="h.xplane.pb")
    except TraceFormatError as exc:
        assert str(exc).startswith("h.xplane.pb: ") and "\n" not in str(exc)


@FUZZ
@given(base=st.sampled_from([GPU, TPU, TPU_SLICE]), cut=st.integers(min_value=0))
def test_truncated_xspace(base: bytes, cut: int) -> None:
    read_or_reject(base[: cut % len(base)])


@FUZZ
@given(
    base=st.sampled_from([GPU, TPU, TPU_SLICE]),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=8),
)
def test_flipped_bytes_in_xspace(base: bytes, edits: list[tuple[int, int]]) -> None:
    data = bytearray(base)
    for at, value in edits:
        data[at % len(data)] = value
    read_or_reject(bytes(data))


@FUZZ
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes_as_xspace(data: bytes) -> None:
    read_or_reject(data)


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0), flip=st.integers(min_value=0))
def test_truncated_or_flipped_json_gz(cut: int, flip: int) -> None:
    data = bytearray(JSON[: cut % len(JSON)] or JSON)
    data[flip % len(data)] ^= 0x55
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "vm.trace.json.gz"
        file.write_bytes(bytes(data))
        try:
            read_json_trace(file, "vm")
        except TraceFormatError as exc:
            assert str(exc).startswith(str(file)) and "\n" not in str(exc)


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=0))
def test_load_of_a_run_with_one_truncated_host(cut: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write_run(Path(tmp), {"good": GPU, "bad": GPU[: cut % len(GPU)]})
        frames = load(tmp)
        assert "good" in frames.hosts and len(frames.hosts) + len(frames.skipped) == 2

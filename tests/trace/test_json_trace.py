"""The ``.trace.json.gz`` fallback reader gives the same frames as the XSpace reader."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.json_trace import read_json_trace
from jaxdiag.trace.load import load

COMPARED = ["host", "line", "line_kind", "name", "start_ns", "dur_ns", "hlo_module", "hlo_op", "category", "step"]


def write_json_run(logdir: Path, doc, host: str = "vm") -> Path:
    run = logdir / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True, exist_ok=True)
    file = run / f"{host}.trace.json.gz"
    file.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return file


def test_real_cpu_json_matches_the_xplane(cpu_trace_dir, tmp_path: Path) -> None:
    json_file = next(cpu_trace_dir.run_dir.glob("*.trace.json.gz"))
    run = tmp_path / "plugins" / "profile" / cpu_trace_dir.run_dir.name
    run.mkdir(parents=True)
    shutil.copy(json_file, run)
    from_json = load(tmp_path)
    from_xplane = load(cpu_trace_dir.logdir)
    assert from_json.files == (str(run / json_file.name),)
    assert from_json.step_source == from_xplane.step_source == "annotation"
    assert from_json.steps.equals(from_xplane.steps)
    a = from_json.events[COMPARED].astype(str).sort_values(COMPARED).reset_index(drop=True)
    b = from_xplane.events[COMPARED].astype(str).sort_values(COMPARED).reset_index(drop=True)
    assert len(a) > 1000 and a.equals(b)


def gpu_chrome_trace() -> dict:
    kernel = {"hlo_module": "jit_step", "hlo_op": "fusion.1", "tf_op": "XlaModule:", "program_id": "3"}
    return {
        "displayTimeUnit": "ns",
        "traceEvents": [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "pid": 1, "tid": 14, "name": "thread_name", "args": {"name": "Stream #14(Compute)"}},
            {"ph": "M", "pid": 1, "tid": 22, "name": "thread_name", "args": {"name": "Stream #22(Compute)"}},
            {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "python3"}},
            {"ph": "X", "pid": 2, "tid": 7, "ts": 0.0, "dur": 100.0, "name": "train", "args": {"step_num": "0"}},
            {"ph": "X", "pid": 2, "tid": 7, "ts": 1.0, "dur": 2.0, "name": "$train.py:3 step"},
            {"ph": "X", "pid": 1, "tid": 14, "ts": 10.5, "dur": 5.25, "name": "fusion_1", "args": kernel},
            {
                "ph": "X",
                "pid": 1,
                "tid": 22,
                "ts": 20.0,
                "dur": 8.0,
                "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                "args": {"hlo_module": "jit_step", "hlo_op": "all-reduce-start"},
            },
            {"ph": "X", "pid": 1, "tid": 14, "name": "no timestamp"},
            {"ph": "i", "pid": 1, "tid": 14, "ts": 3, "name": "instant, not read"},
        ],
    }


def test_synthetic_gpu_json(tmp_path: Path) -> None:
    write_json_run(tmp_path, gpu_chrome_trace())
    frames = load(tmp_path)
    events = frames.events.set_index("name")
    assert events.loc["fusion_1", "start_ns"] == 10_500 and events.loc["fusion_1", "dur_ns"] == 5_250
    assert events.loc["fusion_1", "program_id"] == 3 and events.loc["fusion_1", "line_kind"] == "compute"
    nccl = events.loc["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert nccl["line_kind"] == "collective" and nccl["step"] == 0 and nccl["device"] == 0
    assert frames.steps["step"].tolist() == [0] and frames.meta["python_frames"] == 1
    assert frames.devices["platform"].tolist() == ["gpu"]
    assert any("1 malformed JSON trace events skipped" in n for n in frames.notes)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not gzip at all", "not a gzip file"),
        (gzip.compress(b'{"traceEvents": [')[:-6], "truncated or not a gzip file"),
        (gzip.compress(b"{nope"), "not a JSON trace"),
        (gzip.compress(b""), "empty trace"),
        (gzip.compress(b'{"events": []}'), "no 'traceEvents' list"),
        (gzip.compress(b'{"traceEvents": [{"ph": "M"}]}'), "no complete"),
    ],
    ids=["not-gzip", "truncated", "bad-json", "empty", "no-events", "no-complete-events"],
)
def test_bad_json_traces_raise_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    file = tmp_path / "vm.trace.json.gz"
    file.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message) as info:
        read_json_trace(file, "vm")
    assert str(info.value).startswith(str(file)) and "\n" not in str(info.value)

"""``load``: real CPU captures, synthetic multi-host runs, broken files, and the H100 traces."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdiag
from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.frames import CATEGORIES, DEVICE_COLUMNS, EVENT_COLUMNS, LINE_KINDS, STEP_COLUMNS, TraceFrames
from jaxdiag.trace.load import load
from xspace_builders import Kernel, gpu_xspace, write_run

STRING_COLUMNS = ("host", "plane", "line", "line_kind", "name", "hlo_module", "hlo_op", "framework_op", "category")
COMPILE = "backend_compile_and_load"


@pytest.fixture(scope="module")
def cpu_frames(cpu_trace_dir) -> TraceFrames:
    return load(cpu_trace_dir.logdir)


def test_frames_follow_the_contract(cpu_frames: TraceFrames) -> None:
    events = cpu_frames.events
    assert list(events.columns) == list(EVENT_COLUMNS)
    assert list(cpu_frames.devices.columns) == list(DEVICE_COLUMNS)
    assert list(cpu_frames.steps.columns) == list(STEP_COLUMNS)
    for column in STRING_COLUMNS:
        assert isinstance(events[column].dtype, pd.CategoricalDtype), column
    for column in ("device", "start_ns", "dur_ns", "program_id", "step"):
        assert events[column].dtype == "int64", column
    assert set(events["category"]) <= set(CATEGORIES) and set(events["line_kind"]) <= set(LINE_KINDS)
    assert (events["dur_ns"] >= 0).all()
    for _, line in events.groupby(["host", "plane", "line"], observed=True):
        assert line["start_ns"].is_monotonic_increasing


def test_real_cpu_capture_has_the_planted_steps_stall_and_recompile(cpu_frames: TraceFrames, cpu_trace_dir) -> None:
    truth = cpu_trace_dir
    events = cpu_frames.events
    assert cpu_frames.step_source == "annotation"
    assert cpu_frames.steps["step"].tolist() == list(range(truth.steps))
    assert set(cpu_frames.steps["step_name"]) == {"train"}
    stalls = events[events["name"] == "load_batch"]
    assert sorted(stalls["step"]) == list(truth.sleep_steps)
    assert (stalls["dur_ns"] >= truth.sleep_s * 1e9).all() and set(stalls["category"]) == {"annotation"}
    compiles = events[events["name"] == COMPILE]
    assert set(compiles["step"]) == {truth.recompile_step} and set(compiles["category"]) == {"runtime"}
    calls = events[(events["name"] == "PjitFunction(train_step)") & (events["category"] == "annotation")]
    assert calls["step"].tolist() == list(range(truth.steps))


def test_real_cpu_capture_has_the_small_op_soup(cpu_frames: TraceFrames, cpu_trace_dir) -> None:
    device = cpu_frames.events[cpu_frames.events["category"] == "device"]
    soup = device[device["hlo_module"] == cpu_trace_dir.soup_module]
    # Execution is asynchronous: the last soup may still be running when the capture stops.
    assert (
        (cpu_trace_dir.steps - 1) * cpu_trace_dir.soup_ops <= len(soup) <= cpu_trace_dir.steps * cpu_trace_dir.soup_ops
    )
    assert soup["dur_ns"].median() < 100_000
    assert set(cpu_frames.devices["platform"]) == {"cpu"}
    assert cpu_frames.meta["python_frames"] > 0 and not cpu_frames.meta["include_python"]
    assert any("Python-tracer frames" in n for n in cpu_frames.notes)


def test_include_python_keeps_the_python_frames(cpu_frames: TraceFrames, cpu_trace_dir) -> None:
    with_python = load(cpu_trace_dir.run_dir, include_python=True)
    python = with_python.events[with_python.events["category"] == "python"]
    assert len(python) == cpu_frames.meta["python_frames"] > 0
    assert len(with_python.events) == len(cpu_frames.events) + len(python)
    assert python["name"].str.startswith("$").all() and set(python["line_kind"]) == {"python"}


def test_top_level_load_is_the_same_function(cpu_trace_dir) -> None:
    assert jaxdiag.load is load
    frames = jaxdiag.load(next(cpu_trace_dir.run_dir.glob("*.xplane.pb")))
    assert frames.files == tuple(str(f) for f in cpu_trace_dir.run_dir.glob("*.xplane.pb"))
    assert frames.run_dir == str(cpu_trace_dir.run_dir)


def two_gpu_hosts() -> dict[str, bytes]:
    return {
        f"host{h}": gpu_xspace(
            devices=2,
            kernels=[Kernel(d, "fusion_1", 1_000 * s + 100 + h, 300) for d in range(2) for s in range(3)],
            nccl=[
                Kernel(d, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1_000 * s + 500, 200, op="all-reduce-start")
                for d in range(2)
                for s in range(3)
            ],
            steps=[(s, 1_000 * s, 1_000 * s + 1_000) for s in range(3)],
        )
        for h in range(2)
    }


def test_load_reads_with_the_collector_paused_and_restores_it(cpu_trace_dir, monkeypatch) -> None:
    """Reading allocates many short-lived objects, and each burst would make the collector walk every object
    of pandas and numpy again: ``load`` reads with it paused, and leaves it as it found it."""
    import gc

    from jaxdiag.trace.load import PendingLoad

    states: list[bool] = []
    read = PendingLoad.result

    def result(self, *args, **kwargs):
        states.append(gc.isenabled())
        return read(self, *args, **kwargs)

    monkeypatch.setattr(PendingLoad, "result", result)
    load(cpu_trace_dir.logdir, parallel=False)
    assert states == [False] and gc.isenabled()


def test_multi_host_run_keeps_hosts_apart(tmp_path: Path) -> None:
    write_run(tmp_path, two_gpu_hosts())
    frames = load(tmp_path)
    assert frames.hosts == ("host0", "host1") and frames.skipped == ()
    assert frames.steps.groupby("host").size().to_dict() == {"host0": 3, "host1": 3}
    assert len(frames.devices) == 4 and set(frames.devices["host"]) == {"host0", "host1"}
    collectives = frames.events[frames.events["line_kind"] == "collective"]
    assert len(collectives) == 12 and sorted(set(collectives["step"])) == [0, 1, 2]
    assert load(tmp_path, host="host1").hosts == ("host1",)


@pytest.mark.parametrize(
    ("corrupt", "reason"),
    [
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b"", "empty file"),
        (lambda b: b"PK\x03\x04 a zip, not a trace", "not an XSpace"),
    ],
    ids=["truncated", "empty", "garbage"],
)
def test_a_broken_host_is_skipped_when_another_reads(tmp_path: Path, corrupt, reason: str) -> None:
    files = two_gpu_hosts()
    files["host1"] = corrupt(files["host1"])
    run = write_run(tmp_path, files)
    frames = load(tmp_path)
    assert frames.hosts == ("host0",)
    assert len(frames.skipped) == 1 and frames.skipped[0][0] == str(run / "host1.xplane.pb")
    assert reason in frames.skipped[0][1] and any("skipped host1.xplane.pb" in n for n in frames.notes)


def test_all_hosts_broken_raises_one_line_naming_the_file(tmp_path: Path) -> None:
    run = write_run(tmp_path, {"gpu0": gpu_xspace()[:-7]})
    with pytest.raises(TraceFormatError, match="truncated") as info:
        load(tmp_path)
    assert str(info.value).startswith(str(run / "gpu0.xplane.pb")) and "\n" not in str(info.value)
    write_run(tmp_path, {"gpu1": b"garbage!"})
    with pytest.raises(TraceFormatError, match="no host file could be read .*gpu0.xplane.pb: truncated"):
        load(tmp_path)


def test_a_trace_without_step_annotations_loads_with_module_steps(tmp_path: Path) -> None:
    kernels = [Kernel(0, "fusion_1", 10_000 * s, 2_000) for s in range(4)]
    kernels += [Kernel(0, "fusion_2", 10_000 * s + 5_000, 100, module="jit_eval") for s in range(4)]
    write_run(tmp_path, {"h": gpu_xspace(kernels=kernels)})
    frames = load(tmp_path)
    assert frames.step_source == "module" and frames.steps["step"].tolist() == [0, 1, 2, 3]
    assert "StepTraceAnnotation" in frames.notes[-1]
    device = frames.events[frames.events["category"] == "device"]
    # Each run's step holds the gap before it; the last step runs on to the end of the device work in it.
    assert device["step"].tolist() == [0, 1, 1, 2, 2, 3, 3, 3]


def test_a_trace_with_only_host_planes_loads(tmp_path: Path) -> None:
    write_run(tmp_path, {"h": gpu_xspace(devices=0, steps=[(0, 0, 10)])})
    frames = load(tmp_path)
    assert frames.devices.empty and frames.steps["step"].tolist() == [0]


# --- the real H100 captures (skipped when /work/shared is absent) ------------------


@pytest.fixture(scope="module")
def transformer(shared_fixtures: Path) -> TraceFrames:
    return load(shared_fixtures / "h100_transformer")


def test_h100_transformer_steps_and_recompiles(transformer: TraceFrames, shared_fixtures: Path) -> None:
    truth = json.loads((shared_fixtures / "h100_transformer" / "truth.json").read_text())
    events = transformer.events
    assert transformer.step_source == "annotation"
    assert transformer.steps["step"].tolist() == [s["step"] for s in truth["steps"]] == list(range(12))
    train_compiles = events[events["name"].str.startswith("PjRtCApiClient::CompileAndLoad(jit_step)")]
    assert sorted(train_compiles["step"]) == [5, 8]
    walls = (transformer.steps["end_ns"] - transformer.steps["start_ns"]) / 1e9
    slow = [s["step"] for s in truth["steps"] if s["wall_s"] > 1.0]
    assert [int(s) for s in transformer.steps.loc[walls > 1.0, "step"]] == slow == [5, 8]


def test_h100_transformer_device_work(transformer: TraceFrames) -> None:
    events = transformer.events
    device = events[events["category"] == "device"]
    assert set(device["plane"]) == {"/device:GPU:0"}
    soup = device[device["hlo_module"] == "jit_tiny_soup"]
    calls = events[(events["name"] == "PjitFunction(tiny_soup)") & (events["category"] == "annotation")]
    assert calls["step"].tolist() == [0, 2, 4, 6, 8, 10]  # dispatched on even steps
    assert len(soup) == 6 * 300  # 300 unrolled iterations, one fused kernel each
    # The GPU runs behind the host: some kernels start after their step's annotation ends.
    assert (soup["step"] % 2 == 0).mean() > 0.8
    assert (soup["dur_ns"] < 10_000).mean() > 0.9
    step = device[device["hlo_module"] == "jit_step"]
    assert sorted(set(step["step"])) == list(range(12))
    assert (step["framework_op"].str.startswith("jit(step)") | (step["framework_op"] == "")).all()
    gpu = transformer.devices.iloc[0]
    assert gpu["device_name"] == "NVIDIA H100 80GB HBM3" and gpu["peak_flops"] == 989e12
    assert transformer.meta["jax_version"] == "0.11.2"


def test_h100_transformer_host_annotations(transformer: TraceFrames) -> None:
    events = transformer.events
    stalls = events[events["name"] == "load_batch"]
    assert stalls["step"].tolist() == list(range(12)) and (stalls["dur_ns"] >= 3_000_000).all()
    annotations = set(events.loc[events["category"] == "annotation", "name"])
    assert {"train", "load_batch", "PjitFunction(step)", "PjitFunction(tiny_soup)"} <= annotations
    assert not any(n.startswith("$") for n in events["name"].cat.categories)
    assert {"python3", "python3 (2)"} <= set(events["line"])  # two threads named python3
    for _, line in events.groupby(["plane", "line"], observed=True):
        assert line["start_ns"].is_monotonic_increasing
    assert transformer.meta["python_frames"] > 900_000


def test_h100_mlp_steps_and_recompiles(shared_fixtures: Path) -> None:
    frames = load(shared_fixtures / "h100_mlp" / "plugins" / "profile")
    events = frames.events
    assert frames.steps["step"].tolist() == list(range(12))
    compiles = events[events["name"].str.startswith("PjRtCApiClient::CompileAndLoad(jit_train_step)")]
    assert sorted(compiles["step"]) == [6, 9]
    stalls = events[events["name"] == "input_pipeline"].set_index("step")["dur_ns"]
    assert stalls.index.tolist() == list(range(12))
    assert all(stalls[s] >= 4_000_000 for s in (0, 3, 6, 9))  # the 4 ms sleeps


def _same_categorical(got: pd.Categorical, want: pd.Categorical) -> None:
    assert list(got.categories) == list(want.categories) and got.categories.dtype == want.categories.dtype
    assert got.codes.tolist() == want.codes.tolist() and got.codes.dtype == want.codes.dtype


@pytest.mark.parametrize("values", [[], [""], ["b", "", "a", "b", "$x", "é", "中"], ["\ud800 lone surrogate", "a"]])
def test_string_columns_are_the_categoricals_pandas_makes(values: list[str]) -> None:
    from jaxdiag.trace.load import _categorical

    got, want = _categorical([values]), pd.Categorical(values)
    assert list(got) == values
    _same_categorical(got, want)


_parts = st.lists(st.lists(st.sampled_from(["", "a", "b", "jit_g", "device", "\ud800"]), max_size=6), max_size=4)


@settings(max_examples=200, deadline=None)
@given(_parts, st.lists(st.booleans(), min_size=4, max_size=4))
def test_columns_read_here_or_coded_by_workers_give_the_plain_categorical(parts, coded) -> None:
    """A host's columns as one process reads them (lists), as workers send them (``Coded``), or both."""
    from jaxdiag.trace.columns import Coded
    from jaxdiag.trace.load import _categorical

    values = [v for part in parts for v in part]
    given = [Coded.of(part) if code else part for part, code in zip(parts, coded)]
    _same_categorical(_categorical(given or [[]]), pd.Categorical(values))

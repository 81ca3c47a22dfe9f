"""Step boundaries: annotations first, then TPU step lines, then the dominant module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxdiag.trace.frames import STEP_COLUMNS
from jaxdiag.trace.load import events_frame, load
from jaxdiag.config import DEFAULT_SETTINGS
from jaxdiag.trace.steps import assign_steps, find_steps
from jaxdiag.trace.xspace import read_xspace
from xspace_builders import Kernel, gpu_xspace, tpu_xspace, write_run

#: Where executions told apart by timing alone split by default (the ``step_gap_us`` setting).
EXECUTION_GAP_NS = int(DEFAULT_SETTINGS.step_gap_us * 1000)


def steps_of(table: pd.DataFrame) -> list[tuple[int, str, int, int]]:
    return list(zip(table["step"], table["step_name"], table["start_ns"], table["end_ns"]))


def test_one_step_per_host_and_step_num() -> None:
    marks = [
        ("h0", "train", 0, 0, 10),
        ("h0", "train", 1, 10, 25),
        ("h1", "train", 0, 3, 12),
        ("h0", "train", 1, 11, 30),
    ]  # step 1 seen twice (two threads): one span
    found = find_steps(pd.DataFrame(), marks)
    assert found.source == "annotation" and found.notes == ()
    assert list(found.table.columns) == list(STEP_COLUMNS)
    assert list(zip(found.table["host"], found.table["step"], found.table["start_ns"], found.table["end_ns"])) == [
        ("h0", 0, 0, 10),
        ("h0", 1, 10, 30),
        ("h1", 0, 3, 12),
    ]


@pytest.mark.parametrize(
    ("marks", "chosen"),
    [
        ([("h", "train", 0, 0, 10), ("h", "train", 1, 10, 20), ("h", "eval", 0, 20, 90)], "train"),
        ([("h", "train", 0, 0, 10), ("h", "eval", 0, 20, 90)], "eval"),  # tie on count: longest total
    ],
    ids=["most-events", "tie-longest"],
)
def test_several_step_names_pick_one_and_say_so(marks, chosen: str) -> None:
    found = find_steps(pd.DataFrame(), marks)
    assert set(found.table["step_name"]) == {chosen}
    assert len(found.notes) == 1 and f"used {chosen!r}" in found.notes[0]


def test_tpu_steps_line_when_no_annotation() -> None:
    data = tpu_xspace(devices=2, steps=[(0, 0, 0, 100), (1, 0, 5, 110), (0, 1, 100, 200), (1, 1, 110, 190)])
    cols = read_xspace(data, "t", source="x")
    device_steps = [("t", *s) for s in cols.device_steps]
    found = find_steps(events_frame([cols]), (), device_steps)
    assert found.source == "device_steps"
    # Step 1 begins where step 0 ended (on device 1): every moment belongs to one step.
    assert steps_of(found.table) == [(0, "Steps", 0, 110), (1, "Steps", 110, 200)]


def module_events(*kernels: Kernel) -> pd.DataFrame:
    return events_frame([read_xspace(gpu_xspace(devices=2, kernels=kernels), "h", source="x")])


def test_module_fallback_splits_executions_at_other_modules_and_gaps() -> None:
    big = "jit_train_step"
    events = module_events(
        Kernel(0, "fusion_1", 0, 100, big),
        Kernel(0, "fusion_2", 120, 100, big),
        Kernel(0, "fusion_9", 300, 10, "jit_other"),  # another module: a new execution follows
        Kernel(0, "fusion_1", 400, 100, big),
        Kernel(0, "fusion_2", 520, 100, big),
        Kernel(0, "fusion_1", 620 + EXECUTION_GAP_NS + 1, 100, big),  # long idle gap: new execution
        Kernel(1, "fusion_1", 0, 50, big),  # fewer events on device 1: device 0 sets the steps
    )
    found = find_steps(events)
    assert found.source == "module" and "executions of jit_train_step" in found.notes[0]
    assert "each of the 3 executions" in found.notes[0]
    last = 620 + EXECUTION_GAP_NS + 1
    # Each execution's step holds the gap before it, where its inputs and its compile were made;
    # jit_other, run in one step of three, is work between steps 0 and 1: step 1 begins where it ends.
    assert steps_of(found.table) == [(0, big, 0, 220), (1, big, 310, 620), (2, big, 620, last + 100)]


def test_the_step_gap_is_the_settings_given_to_the_reading() -> None:
    """Executions told apart by timing alone split where the device idled ``step_gap_us``: the settings
    reach step inference as an argument (``find_steps``, ``load(settings=...)``), never from around it."""
    gap = EXECUTION_GAP_NS
    events = module_events(
        *(Kernel(0, "fusion_1", i * (100 + gap // 2), 100, "jit_train_step") for i in range(4))  # half a gap apart
    )
    assert len(find_steps(events).table) == 1
    tight = DEFAULT_SETTINGS.replace(step_gap_us=DEFAULT_SETTINGS.step_gap_us / 4)
    assert len(find_steps(events, step_gap_us=tight.step_gap_us).table) == 4


def test_a_loaded_capture_keeps_the_settings_it_was_read_with(tmp_path) -> None:
    from jaxdiag.trace.load import load

    path = tmp_path / "h.xplane.pb"
    path.write_bytes(gpu_xspace(steps=()))
    tight = DEFAULT_SETTINGS.replace(step_gap_us=1)
    assert load(path, settings=tight).settings is tight
    assert load(path).settings is DEFAULT_SETTINGS


def test_dominant_module_is_the_one_with_most_device_time() -> None:
    # Programs alike in size (one distinct op each) and run as often: the busier is the step. (A
    # program's size also counts its distinct ops: a training step has many, a batch's gather one.)
    events = module_events(
        *(Kernel(0, "fusion_1", i * 10, 5, "jit_small") for i in range(20)),
        Kernel(0, "fusion_99", 1_000, 500, "jit_big"),
    )
    assert set(find_steps(events).table["step_name"]) == {"jit_big"}


def test_no_markers_and_no_device_module_means_no_steps() -> None:
    found = find_steps(events_frame([read_xspace(gpu_xspace(steps=()), "h", source="x")]))
    assert found.source == "none" and found.table.empty and "StepTraceAnnotation" in found.notes[0]


def test_assign_steps_uses_half_open_spans_per_host() -> None:
    events = pd.DataFrame({"host": ["a", "a", "a", "a", "b", "b"], "start_ns": [5, 10, 19, 40, 5, 15]})
    steps = pd.DataFrame(
        {
            "host": ["a", "a", "b"],
            "step": [3, 4, 0],
            "step_name": "train",
            "start_ns": [0, 10, 10],
            "end_ns": [10, 20, 20],
        }
    )
    assert assign_steps(events, steps).tolist() == [3, 4, 4, -1, -1, 0]
    assert assign_steps(events, steps.iloc[:0]).tolist() == [-1] * 6


def test_a_lone_host_gets_its_steps_as_several_hosts_do() -> None:
    events = pd.DataFrame({"host": ["a"] * 5, "start_ns": [-1, 0, 9, 10, 25]})
    steps = pd.DataFrame(
        {"host": ["a", "a"], "step": [7, 8], "step_name": "train", "start_ns": [10, 0], "end_ns": [20, 10]}
    )
    assert assign_steps(events, steps).tolist() == [-1, 8, 8, 7, -1]
    mixed = pd.concat([events, pd.DataFrame({"host": ["b"], "start_ns": [0]})], ignore_index=True)
    assert assign_steps(mixed, steps).tolist() == [-1, 8, 8, 7, -1, -1]


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [("h1", 2, "train", 30, 40), ("h0", 1, "train", 10, 20), ("h1", 0, "train", 30, 35), ("h0", 0, "x", 0, 10)],
        [("h", np.int64(3), "train", np.int64(5), 9)],
    ],
)
def test_steps_table_is_by_host_then_start_with_its_dtypes(rows) -> None:
    from jaxdiag.trace.steps import _table

    table = _table(rows)
    expected = pd.DataFrame(list(rows), columns=list(STEP_COLUMNS)).astype(
        {"step": "int64", "start_ns": "int64", "end_ns": "int64", "host": "object", "step_name": "object"}
    )
    expected = expected.sort_values(["host", "start_ns"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(table, expected)
    assert isinstance(table.index, pd.RangeIndex)


def test_events_come_by_line_then_start_whatever_order_the_reader_gave() -> None:
    kernels = [Kernel(0, "b", 300, 10), Kernel(0, "a", 100, 10), Kernel(0, "c", 200, 10)]
    cols = read_xspace(gpu_xspace(kernels=kernels), "h", source="x")
    events = events_frame([cols])
    for _, line in events.groupby(["plane", "line"], observed=True):
        assert np.all(np.diff(line["start_ns"].to_numpy()) >= 0)
    assert isinstance(events.index, pd.RangeIndex)


def test_real_cpu_trace_without_annotations_falls_back_to_module_runs(cpu_trace_dir) -> None:
    frames = load(cpu_trace_dir.logdir)
    found = find_steps(frames.events)  # as if the capture had no StepTraceAnnotation
    assert found.source == "module"
    assert set(found.table["step_name"]) <= {cpu_trace_dir.step_module, cpu_trace_dir.soup_module}
    # Each step of the loop calls the module once, and other modules run in between.
    assert len(found.table) == cpu_trace_dir.steps
    assert np.all(np.diff(found.table["start_ns"].to_numpy()) > 0)


def test_a_step_without_device_work_loads(tmp_path: Path) -> None:
    data = gpu_xspace(kernels=[Kernel(0, "fusion_1", 100, 10)], steps=[(0, 0, 1_000), (1, 1_000, 2_000)])
    write_run(tmp_path, {"h": data})
    frames = load(tmp_path)
    device = frames.events[frames.events["category"] == "device"]
    assert device["step"].tolist() == [0] and frames.steps["step"].tolist() == [0, 1]


def test_annotated_steps_tile_and_end_where_their_work_ends() -> None:
    from tests.frames_builders import device_event, frames, host_event

    events = frames(
        [
            host_event(1000, 500, "np.asarray(jax.Array)", category="runtime"),  # step 0 reads its loss back
            device_event(200, 1600),  # ... while the device still runs what step 0 queued behind it
            host_event(1600, 3300, "load_batch"),  # step 1's loading, before its mark
            host_event(4900, 50, "PjitFunction(train_step)"),
            device_event(5000, 3000),  # the last step's work outlives its mark
        ]
    ).events
    marks = [("h0", "train", 0, 0, 1_000_000), ("h0", "train", 1, 5_000_000, 6_000_000)]
    found = find_steps(events, marks)
    # Step 0 ends when the device finishes its work (after the read-back, before the next launch);
    # step 1 begins there, so its loading is its own, and runs to the end of its device work.
    assert steps_of(found.table) == [(0, "train", 0, 1_800_000), (1, "train", 1_800_000, 8_000_000)]


@pytest.mark.parametrize(
    "name",
    [
        "D2H",
        "D2H copy",
        "xD2H",
        "np.asarray(x)",
        "TransferLiteralFromDevice",
        "PjRtBuffer::ToLiteral",
        "device_get",
        "CommonPjRtBuffer::Await",
        "block_until_ready",
        "BlockUntilReady",
        "",
        "Execute",
        "$ train_step",
    ],
)
def test_reads_back_answers_as_the_pattern(name: str) -> None:
    from jaxdiag.trace.steps import READ_BACK, reads_back

    assert reads_back(name) == bool(READ_BACK.search(name))

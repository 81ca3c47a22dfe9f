"""Parsing one host's XSpace: line kinds, categories, stats, device facts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.device_plane import gpu_line_kind, is_collective
from jaxdiag.trace.xspace import HostColumns, check_wire, read_xspace
from xspace_builders import (
    GPU_COLLECTIVE_STREAM,
    GPU_COMPUTE_STREAM,
    H100_STATS,
    Ev,
    Kernel,
    XSpaceBuilder,
    gpu_xspace,
    host_plane,
    tpu_xspace,
)


def rows(cols: HostColumns) -> list[dict]:
    """Events as dicts, with their line and line kind expanded from the segments."""
    lines = [(plane, line, kind) for plane, line, kind, n in cols.segments for _ in range(n)]
    columns = {
        "device": cols.integers("device"),
        "name": cols.strings("name"),
        "start": cols.numbers("start_ns").tolist(),
        "dur": cols.numbers("dur_ns").tolist(),
        "module": cols.strings("hlo_module"),
        "op": cols.strings("hlo_op"),
        "framework": cols.strings("framework_op"),
        "program": cols.integers("program_id"),
        "run": cols.integers("run_id"),
        "category": cols.strings("category"),
    }
    return [
        {"plane": lines[i][0], "line": lines[i][1], "line_kind": lines[i][2], **{k: v[i] for k, v in columns.items()}}
        for i in range(len(cols))
    ]


def by_name(cols: HostColumns) -> dict[str, dict]:
    return {r["name"]: r for r in rows(cols)}


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("Stream #14(MemcpyOther,Compute,MemcpyD2D,Memset,MemcpyH2D)", "compute"),
        ("Stream #14(Compute)", "compute"),
        ("Stream #3(Kernel)", "compute"),
        ("Stream #3", "compute"),
        ("Stream #15(MemcpyH2D)", "memcpy"),
        ("Stream #19(MemcpyD2H,Memset)", "memcpy"),
        ("Stream #30(Nccl)", "collective"),
        ("CUPTI overhead", "other"),
        ("Launch Stats", "other"),
    ],
)
def test_gpu_line_kinds(line: str, kind: str) -> None:
    assert gpu_line_kind(line) == kind


@pytest.mark.parametrize(
    ("name", "op", "expected"),
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "", True),
        ("fusion_3", "all-gather-start.2", True),
        ("fusion_3", "reduce-scatter", True),
        ("fusion_3", "fusion.3", False),
        ("gemm_fusion_dot_17", "gemm_fusion_dot.17", False),
    ],
)
def test_is_collective(name: str, op: str, expected: bool) -> None:
    assert is_collective(name, op) is expected


def test_gpu_kernels_carry_module_op_framework_and_program() -> None:
    data = gpu_xspace(
        kernels=[
            Kernel(0, "gemm_fusion_dot_17", 100, 50, program_id=7, framework="jit(step)/jvp()/dot_general"),
            Kernel(0, "loop_add_fusion_2", 200, 5),
        ]
    )
    got = by_name(read_xspace(data, "h", source="h.xplane.pb"))
    gemm = got["gemm_fusion_dot_17"]
    assert (gemm["module"], gemm["op"], gemm["framework"], gemm["program"]) == (
        "jit_train_step",
        "gemm_fusion_dot.17",
        "jit(step)/jvp()/dot_general",
        7,
    )
    assert got["loop_add_fusion_2"]["framework"] == ""  # tf_op "XlaModule:" says nothing
    assert (gemm["category"], gemm["line_kind"], gemm["device"], gemm["start"], gemm["dur"]) == (
        "device",
        "compute",
        0,
        100,
        50,
    )


def test_a_stream_of_only_nccl_kernels_is_a_collective_line() -> None:
    data = gpu_xspace(
        devices=2,
        kernels=[Kernel(1, "fusion_1", 0, 10)],
        nccl=[Kernel(1, "ncclDevKernel_AllGather_RING_LL", 5, 20, op="all-gather-start")],
    )
    kinds = {(r["device"], r["line"]): r["line_kind"] for r in rows(read_xspace(data, "h", source="x"))}
    assert kinds == {(1, GPU_COMPUTE_STREAM): "compute", (1, GPU_COLLECTIVE_STREAM): "collective"}


def test_gpu_device_facts_and_peak_flops_by_name() -> None:
    cols = read_xspace(gpu_xspace(devices=2), "h", source="x")
    assert [d["device"] for d in cols.devices] == [0, 1]
    h100 = cols.devices[0]
    assert h100["clock_hz"] == 1.98e9 and h100["core_count"] == 132 and h100["peak_flops"] == 989e12
    assert h100["memory_bandwidth_bps"] == 3352320000000 and h100["vendor"] == "Nvidia"
    pcie = read_xspace(gpu_xspace(device_stats={"gpu_device_name": "NVIDIA H100 PCIe"}), "h", source="x")
    assert pcie.devices[0]["peak_flops"] == 756e12 and math.isnan(pcie.devices[0]["clock_hz"])
    unknown = read_xspace(gpu_xspace(device_stats={"gpu_device_name": "Mystery GPU"}), "h", source="x")
    assert math.isnan(unknown.devices[0]["peak_flops"])


def test_host_events_are_categorised_by_name_nesting_and_stats() -> None:
    builder = XSpaceBuilder().plane("/device:GPU:0", H100_STATS)
    builder.line(GPU_COMPUTE_STREAM, [Kernel(0, "fusion_1", 0, 10).event()])
    builder.plane("/host:CPU")
    builder.line(
        "python3",
        [
            Ev("train", 0, 1000, {"_r": 1, "step_num": 4}),
            Ev("load_batch", 10, 100),
            Ev("PjitFunction(step)", 200, 300),
            Ev("backend_compile_and_load", 210, 200),
            Ev("my_inner_span", 220, 10),  # inside jax's dispatch: runtime, whatever its name
            Ev("Wait for donation holds", 600, 5),
            Ev("PjRtCApiClient::SomeCall", 700, 5),
            Ev("cuLaunchKernel", 710, 5),
            Ev("tracked", 720, 5, {"_src": "pjrt.cc"}),
            Ev("$train.py:12 loss_fn", 800, 5),
        ],
    )
    builder.line("tf_pjrt_compile_thread_pool/-123", [Ev("algsimp", 0, 5), Ev("user_like_name", 10, 5)])
    cols = read_xspace(builder.serialize(), "h", source="x")
    got = by_name(cols)
    category = {n: r["category"] for n, r in got.items()}
    assert category == {
        "fusion_1": "device",
        "train": "annotation",
        "load_batch": "annotation",
        "PjitFunction(step)": "annotation",
        "backend_compile_and_load": "runtime",
        "my_inner_span": "runtime",
        "Wait for donation holds": "runtime",
        "PjRtCApiClient::SomeCall": "runtime",
        "cuLaunchKernel": "runtime",
        "tracked": "runtime",
        "algsimp": "runtime",
        "user_like_name": "runtime",
    }
    assert got["train"]["line_kind"] == "python" and got["algsimp"]["line_kind"] == "host"
    assert cols.step_marks == [("train", 4, 0.0, 1000.0)]
    assert cols.python_frames == 1


_NAMES = ["train", "load_batch", "PjitFunction(step)", "Wait for usage holds", "Foo::Bar", "cuMemcpy", "op"]
_HOST_STATS = st.sampled_from(
    [
        {},
        {"step_num": 3},
        {"group_id": 5},
        {"_src": "x.cc"},
        {"_p": 1, "step_num": 2},
        {"hlo_op": "f", "hlo_module": "m"},
    ]
)


def _stack_categories(events: list[Ev], cpu_only: bool) -> tuple[list[str], list[tuple]]:
    """A Python thread's categories and step marks by a stack of open spans, event by event (by start, the
    longer first): the rules of ``host_plane``'s docstring, written plainly."""
    from jaxdiag.trace.host_plane import _name_kind

    ordered = sorted(events, key=lambda e: (e.start_ns, -e.dur_ns))
    seen_without: set[str] = set()
    open_spans: list[tuple[int, bool]] = []
    categories, marks = [], []
    for e in ordered:
        has_op = "hlo_op" in e.stats and "hlo_module" in e.stats
        op = cpu_only and has_op and e.name not in seen_without
        if cpu_only and not op:
            seen_without.add(e.name)
        while open_spans and open_spans[-1][0] <= e.start_ns:
            open_spans.pop()
        opaque = bool(open_spans) and open_spans[-1][1]
        kind = _name_kind(e.name)
        step = e.stats.get("step_num", e.stats.get("group_id"))
        source = any(k in e.stats for k in ("_src", "_c", "_ct", "_p", "_pt"))
        if op:
            category = "device"
        elif opaque or kind == 1:
            category = "runtime"
        elif kind == 2 or step is not None or not source:
            category = "annotation"
            if step is not None and not kind:
                marks.append((e.name, step, float(e.start_ns), float(e.start_ns + e.dur_ns)))
        else:
            category = "runtime"
        categories.append(category)
        open_spans.append((e.start_ns + e.dur_ns, opaque or category != "annotation" or kind == 2))
    return categories, marks


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.builds(Ev, st.sampled_from(_NAMES), st.integers(0, 60), st.integers(0, 40), _HOST_STATS), max_size=25
    ),
    cpu_only=st.booleans(),
)
def test_python_thread_events_are_categorised_as_a_stack_of_open_spans_says(events: list[Ev], cpu_only: bool) -> None:
    """Nested, overlapping and equal spans, in any order: the categories worked out for all events at once are
    what a stack of open spans gives, event by event."""
    builder = XSpaceBuilder()
    if not cpu_only:
        builder.plane("/device:GPU:0", H100_STATS).line(GPU_COMPUTE_STREAM, [Kernel(0, "fusion_1", 0, 10).event()])
    builder.plane("/host:CPU").line("python3", events)
    cols = read_xspace(builder.serialize(), "h", source="x")
    got = [r for r in rows(cols) if r["line"] == "python3"]
    want, marks = _stack_categories(events, cpu_only)
    assert [r["category"] for r in got] == want
    assert cols.step_marks == marks


def test_threads_sharing_a_name_get_distinct_lines() -> None:
    builder = host_plane(XSpaceBuilder(), steps=[(0, 0, 100)])
    builder.line("python3", [Ev("D2H Copy From Staging Buffer", 5, 1)])
    lines = {(r["line"], r["name"]) for r in rows(read_xspace(builder.serialize(), "h", source="x"))}
    assert lines == {("python3", "train"), ("python3 (2)", "D2H Copy From Staging Buffer")}


def test_python_frames_are_kept_on_request() -> None:
    data = gpu_xspace(steps=[(0, 0, 10_000)], python_frames=40)
    dropped = read_xspace(data, "h", source="x")
    kept = read_xspace(data, "h", source="x", include_python=True)
    assert dropped.python_frames == kept.python_frames == 40
    assert len(kept) - len(dropped) == 40
    python = [r for r in rows(kept) if r["category"] == "python"]
    assert len(python) == 40 and all(r["name"].startswith("$") and r["line_kind"] == "python" for r in python)


def test_tpu_ops_get_short_names_and_their_module() -> None:
    data = tpu_xspace(
        ops=[
            (0, "%fusion.3 = bf16[8,128]{1,0} fusion(bf16[8,128]{1,0} %p0), kind=kLoop, calls=%f", 1_000, 200),
            (0, "%all-reduce.1 = f32[4]{0} all-reduce(f32[4]{0} %x)", 5_000, 100),
        ],
        modules=[(0, "jit_train_step", 42, 900, 1_000), (0, "jit_eval", 43, 4_900, 500)],
        steps=[(0, 7, 800, 6_000)],
    )
    cols = read_xspace(data, "t", source="t.xplane.pb")
    got = by_name(cols)
    assert (got["fusion.3"]["op"], got["fusion.3"]["module"], got["fusion.3"]["program"]) == (
        "fusion.3",
        "jit_train_step",
        42,
    )
    assert got["all-reduce.1"]["module"] == "jit_eval" and got["all-reduce.1"]["line_kind"] == "xla_ops"
    assert got["jit_train_step(42)"]["line_kind"] == "xla_modules"
    assert got["7"]["category"] == "annotation" and cols.device_steps == [(0, 7, 800.0, 6_000.0)]
    tpu = cols.devices[0]
    assert (tpu["platform"], tpu["device_name"], tpu["vendor"]) == ("tpu", "TPU v5 lite", "Google")
    assert tpu["peak_flops"] == pytest.approx(197e12) and tpu["memory_bandwidth_bps"] == pytest.approx(819e9)


def test_metadata_planes_become_meta_and_unknown_planes_a_note() -> None:
    builder = host_plane(XSpaceBuilder(), steps=[(0, 0, 10)])
    builder.plane("Task Environment", {"profile_start_time": 17, "profile_options": "\x08\x01"})
    builder.plane("/device:CUSTOM:Megascale Trace")
    cols = read_xspace(builder.serialize(), "h", source="x")
    assert cols.meta["jax_version"] == "0.11.2" and cols.meta["profile_start_time"] == 17
    assert "profile_options" not in cols.meta  # an embedded proto, not a fact to show
    assert cols.notes == ["h: planes not read: /device:CUSTOM:Megascale Trace"]


def test_real_cpu_trace_has_xla_cpu_ops_as_device_work(cpu_trace_dir) -> None:
    file = next(cpu_trace_dir.run_dir.glob("*.xplane.pb"))
    cols = read_xspace(file.read_bytes(), "vm", source=str(file))
    ops = [r for r in rows(cols) if r["category"] == "device"]
    assert {r["module"] for r in ops} >= {cpu_trace_dir.step_module, cpu_trace_dir.soup_module}
    assert {r["line_kind"] for r in ops} <= {"xla_cpu", "python"} and all(r["op"] for r in ops)
    assert [d["platform"] for d in cols.devices] == ["cpu"] * len(cols.devices) and cols.devices
    assert sorted({m[1] for m in cols.step_marks}) == list(range(cpu_trace_dir.steps))
    import jax

    # Newer JAX writes its version into the trace; older JAX, nothing.
    assert cols.meta.get("jax_version", jax.__version__) == jax.__version__


def test_xla_cpu_op_ids_follow_the_stat_conversions_whatever_the_values() -> None:
    """The reader converts an op's program, run and device stats inline (``host_plane._add_with_op_stats``): the
    result is ``execution_id(run_id_of(run), program_id_of(program))`` and ``int_or(device, 0)`` for every kind
    of value a trace may hold (signed, past 2^63, missing, a string, a double), on a pool thread and the main one."""
    from jaxdiag.trace.host_plane import execution_id, int_or, program_id_of, run_id_of

    values = [None, 0, 7, -5, (1 << 63) + 9, (1 << 64) - 1, "12", "x", 2.5]
    cases = [(p, r, d) for p in values for r in values for d in (None, 0, 3, "1", "y")]
    events = []
    for i, (program, run, device) in enumerate(cases):
        stats = {"hlo_op": f"op{i}", "hlo_module": "jit_step", "program_id": program, "run_id": run}
        if device is not None:
            stats["device_ordinal"] = device
        events.append(Ev(f"op{i}", 10 * i, 5, {k: v for k, v in stats.items() if v is not None}))
    builder = XSpaceBuilder().plane("/host:CPU")
    builder.line("tf_XLACpuThreadPool/1", events[::2])
    builder.line("python3", events[1::2])
    got = by_name(read_xspace(builder.serialize(), "h", source="x"))
    for i, (program, run, device) in enumerate(cases):
        row = got[f"op{i}"]
        # What the trace holds: the builder writes a Python number as such, anything else as a string.
        program, run = program_id_of(program), run_id_of(run)
        assert (row["category"], row["program"], row["run"], row["device"]) == (
            "device",
            program,
            execution_id(run, program),
            0 if device is None else int_or(device, 0),
        ), (i, cases[i])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty file"),
        (b"\x0a\x90\x4e" + b"\x00" * 20, "truncated"),
        (b"\x0a", "truncated or not an XSpace"),
        (b"hello world, not a trace", "not an XSpace"),
        (b"\x08\x01", "not an XSpace"),
    ],
)
def test_check_wire_rejects_empty_truncated_and_garbage(data: bytes, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        check_wire(data, "f.xplane.pb")


def test_check_wire_accepts_real_bytes_and_read_rejects_planeless_space() -> None:
    check_wire(gpu_xspace(), "ok")
    with pytest.raises(TraceFormatError, match="no profile planes"):
        read_xspace(b"\x22\x03abc", "h", source="f.xplane.pb")  # only a hostname


def test_nested_corruption_is_reported_not_crashed() -> None:
    data = bytearray(gpu_xspace(kernels=[Kernel(0, "fusion_1", 0, 10)]))
    data[-3] = 0xFF  # inside the last plane: top-level framing stays valid
    with pytest.raises(TraceFormatError, match="f.xplane.pb: corrupt XSpace"):
        read_xspace(bytes(data), "h", source="f.xplane.pb")

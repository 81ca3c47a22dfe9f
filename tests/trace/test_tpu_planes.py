"""TPU planes as XProf writes them: unsigned ids, every line kind, SparseCore, host offload, per-chip steps."""

from __future__ import annotations

import jaxdiag
from jaxdiag.analyses import collectives
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.analyses.device_work import device_ops
from jaxdiag.trace.chip_steps import chip_steps
from jaxdiag.trace.host_plane import program_id_of
from jaxdiag.trace.device_plane import is_host_offload, tpu_line_kind
from jaxdiag.trace.xspace import read_xspace
from xspace_builders import TPU_STATS, Ev, XSpaceBuilder, host_plane, write_run

from tests.trace.test_xspace import by_name, rows

#: Program ids past the int64 range, as in a real TPU v6e capture (``jit_f(12190760917235803885)``).
BIG_ID, OTHER_BIG_ID = 12190760917235803885, 9646411105960254074 | 1 << 63
OFFLOAD_START = (
    "%copy-start.2 = (f32[8,128]{1,0:T(8,128)}, f32[8,128]{1,0:T(8,128)S(5)}, u32[]{:S(2)}) "
    "copy-start(f32[8,128]{1,0:T(8,128)} %p)"
)
OFFLOAD_DONE = (
    "%copy-done.2 = f32[8,128]{1,0:T(8,128)S(5)} copy-done((f32[8,128]{1,0:T(8,128)}, "
    "f32[8,128]{1,0:T(8,128)S(5)}, u32[]{:S(2)}) %copy-start.2)"
)
DEVICE_COPY = "%copy.1 = f32[8,128]{1,0:T(8,128)} copy(f32[8,128]{1,0:T(8,128)} %p)"


def hlo(op: str, shape: str = "f32[1024]{0}") -> str:
    """An HLO instruction's text, as TPU op events are named."""
    return f"%{op} = {shape} {op.split('.')[0]}({shape} %param.1), channel_id=1, replica_groups={{}}"


def tpu_chip(builder: XSpaceBuilder, chip: int, lines: dict[str, list[Ev]]) -> XSpaceBuilder:
    builder.plane(f"/device:TPU:{chip}", TPU_STATS)
    for name, events in lines.items():
        builder.line(name, events)
    return builder


def test_unsigned_64_bit_program_ids_are_read_and_stay_distinct() -> None:
    builder = tpu_chip(
        XSpaceBuilder(),
        0,
        {
            "XLA Modules": [
                Ev(f"jit_f({BIG_ID})", 0, 1_000, {"run_id": 1}),
                Ev("jit_g", 2_000, 1_000, {"program_id": OTHER_BIG_ID}),
            ],
            "XLA Ops": [Ev(hlo("fusion.1"), 100, 500), Ev(hlo("fusion.2"), 2_100, 500)],
        },
    )
    cols = read_xspace(host_plane(builder).serialize(), "t", source="t.xplane.pb")
    got = by_name(cols)
    assert got["fusion.1"]["module"] == "jit_f" and got["fusion.2"]["module"] == "jit_g"
    programs = {got["fusion.1"]["program"], got["fusion.2"]["program"]}
    assert len(programs) == 2 and all(0 <= p < 1 << 63 for p in programs)
    assert got["fusion.1"]["program"] == program_id_of(BIG_ID) == BIG_ID & ((1 << 63) - 1)
    assert program_id_of(7) == 7 and program_id_of(None) == -1 and program_id_of("x") == -1


def test_every_tpu_line_gets_its_kind() -> None:
    assert [
        tpu_line_kind(n)
        for n in (
            "XLA Ops",
            "XLA Modules",
            "Steps",
            "Async XLA Ops",
            "XLA TraceMe",
            "Host Offload Ops row 0",
            "Sparse Core Ops",
            "Some New Line",
        )
    ] == ["xla_ops", "xla_modules", "steps", "async_ops", "markers", "async_ops", "sparsecore", "other"]


def test_host_offload_copies_are_memcpy_runs_of_the_ops_line_and_async_spans_are_not_ops(tmp_path) -> None:
    assert is_host_offload("copy-start.2", OFFLOAD_START) and not is_host_offload("copy.1", DEVICE_COPY)
    assert not is_host_offload("fusion.1", hlo("fusion.1", "f32[8]{0:S(5)}"))
    builder = tpu_chip(
        XSpaceBuilder(),
        0,
        {
            "XLA Modules": [Ev(f"jit_step({BIG_ID})", 0, 10_000)],
            "XLA Ops": [
                Ev(hlo("fusion.1"), 100, 900),
                Ev(OFFLOAD_START, 1_000, 10),
                Ev(DEVICE_COPY, 1_100, 100),
                Ev(OFFLOAD_DONE, 1_200, 4_000),
                Ev(hlo("fusion.2"), 5_300, 1_000),
            ],
            "Async XLA Ops": [Ev(OFFLOAD_START, 1_000, 4_200, {"hlo_op": "copy-done.2", "_a": 1})],
            "XLA TraceMe": [Ev("dependency-wait", 1_200, 0), Ev("barrier-cores", 6_400, 50)],
        },
    )
    data = host_plane(builder, steps=[(0, 0, 10_000)]).serialize()
    got = rows(read_xspace(data, "t", source="t.xplane.pb"))
    kinds = [(r["line"], r["line_kind"], r["name"]) for r in got if r["plane"] == "/device:TPU:0"]
    assert kinds[1:6] == [
        ("XLA Ops", "xla_ops", "fusion.1"),
        ("XLA Ops", "memcpy", "copy-start.2"),
        ("XLA Ops", "xla_ops", "copy.1"),
        ("XLA Ops", "memcpy", "copy-done.2"),
        ("XLA Ops", "xla_ops", "fusion.2"),
    ]
    assert ("Async XLA Ops", "async_ops", "copy-start.2") in kinds
    assert {k for line, k, _ in kinds if line == "XLA TraceMe"} == {"markers"}
    write_run(tmp_path, {"t": data})
    ops = device_ops(jaxdiag.load(tmp_path))
    assert sorted(ops["name"]) == ["copy-done.2", "copy-start.2", "copy.1", "fusion.1", "fusion.2"]
    assert dict(zip(ops["name"], ops["op_kind"]))["copy-done.2"] == "memcpy"
    assert set(ops["hlo_module"]) == {"jit_step"}


def test_sparsecore_planes_belong_to_their_tensor_core_and_add_no_device() -> None:
    builder = tpu_chip(XSpaceBuilder(), 1, {"XLA Ops": [Ev(hlo("fusion.1"), 0, 100)]})
    builder.plane("/device:TPU:1 SparseCore 0")
    builder.line("Sparse Core Modules", [Ev(f"jit_embed({BIG_ID})", 0, 1_000)])
    builder.line("Sparse Core Ops", [Ev(hlo("gather.3"), 10, 500)])
    builder.line("Sparse Core Steps", [Ev("0", 0, 1_000)])
    cols = read_xspace(host_plane(builder).serialize(), "t", source="t.xplane.pb")
    assert [d["plane"] for d in cols.devices] == ["/device:TPU:1"] and not cols.notes
    gather = by_name(cols)["gather.3"]
    assert (gather["plane"], gather["device"], gather["line_kind"], gather["module"]) == (
        "/device:TPU:1 SparseCore 0",
        1,
        "sparsecore",
        "jit_embed",
    )
    assert cols.device_steps == []  # a SparseCore's steps are not its core's


def tpu_slice(chips: int, step_ns: int, steps: int, slow_chip: int = -1) -> bytes:
    """``chips`` TPU cores running ``steps`` steps: a fusion then every collective kind, async pairs included.

    Chip ``slow_chip`` takes twice as long over its fusion each step.
    """
    builder = XSpaceBuilder()
    for chip in range(chips):
        ops, modules, marks = [], [], []
        for s in range(steps):
            t = s * step_ns
            fusion = 4_000 if chip == slow_chip else 2_000
            modules.append(Ev(f"jit_train_step({BIG_ID})", t, fusion + 5_000))
            marks.append(Ev(str(s), t, fusion + 5_000, {"step_num": s}))
            ops += [
                Ev(hlo("fusion.1"), t, fusion),
                Ev(hlo("all-reduce.1"), t + fusion, 1_000, {"all_reduce_unique_id": 7}),
                Ev(hlo("all-gather-start.2"), t + fusion + 1_000, 100),
                Ev(hlo("all-gather-done.2"), t + fusion + 1_100, 900),
                Ev(hlo("reduce-scatter.3"), t + fusion + 2_000, 1_000),
                Ev(hlo("collective-permute-start.4"), t + fusion + 3_000, 100),
                Ev(hlo("collective-permute-done.4"), t + fusion + 3_100, 900),
            ]
        async_ops = [Ev(hlo("all-gather-start.2"), s * step_ns + 3_000, 2_000) for s in range(steps)]
        tpu_chip(builder, chip, {"Steps": marks, "XLA Modules": modules, "XLA Ops": ops, "Async XLA Ops": async_ops})
    return host_plane(builder, steps=[(s, s * step_ns, (s + 1) * step_ns) for s in range(steps)]).serialize()


def test_collectives_on_tpu_xla_ops_reach_the_collective_analysis(tmp_path) -> None:
    write_run(tmp_path, {"t": tpu_slice(chips=4, step_ns=20_000, steps=3)})
    result = collectives.analyze(AnalysisInputs(jaxdiag.load(tmp_path)))
    by_kind = {k.kind: k for k in result.by_kind}
    assert set(by_kind) == {"all-reduce", "all-gather", "reduce-scatter", "collective-permute"}
    assert (by_kind["all-reduce"].count, by_kind["all-gather"].count) == (3 * 4, 3 * 4 * 2)  # async halves apart
    assert by_kind["all-reduce"].total_ms == 3 * 1_000 / 1e6  # per chip: three steps of 1 µs
    assert by_kind["all-gather"].total_ms == 3 * 1_000 / 1e6  # the ops line's halves, not the async span
    assert result.n_devices == 4 and result.exposed_ms == result.total_ms  # nothing computes meanwhile


def test_per_chip_step_times_come_from_each_chips_steps_line(tmp_path) -> None:
    write_run(tmp_path, {"t": tpu_slice(chips=2, step_ns=20_000, steps=3, slow_chip=1)})
    table = chip_steps(jaxdiag.load(tmp_path))
    assert set(table["source"]) == {"steps"} and len(table) == 2 * 3
    took = {(d, s): e - a for d, s, a, e in zip(table["device"], table["step"], table["start_ns"], table["end_ns"])}
    assert took == {(0, s): 7_000 for s in range(3)} | {(1, s): 9_000 for s in range(3)}


def test_per_chip_step_times_fall_back_to_ops_inside_each_step(tmp_path) -> None:
    builder = XSpaceBuilder()
    for chip, fusion in ((0, 1_000), (1, 3_000)):
        tpu_chip(
            builder,
            chip,
            {
                "XLA Ops": [Ev(hlo("fusion.1"), s * 10_000 + 100, fusion) for s in range(2)]
                + [Ev(hlo("fusion.2"), s * 10_000 + 200, 500) for s in range(2)]
            },
        )
    write_run(tmp_path, {"t": host_plane(builder, steps=[(0, 0, 10_000), (1, 10_000, 20_000)]).serialize()})
    table = chip_steps(jaxdiag.load(tmp_path))
    assert set(table["source"]) == {"ops"}
    got = {
        (d, s): (e - a, b)
        for d, s, a, e, b in zip(table["device"], table["step"], table["start_ns"], table["end_ns"], table["busy_ns"])
    }
    assert got == {(0, 0): (1_000, 1_000), (0, 1): (1_000, 1_000), (1, 0): (3_000, 3_000), (1, 1): (3_000, 3_000)}


def test_step_annotations_on_a_tpu_hosts_main_thread_give_the_steps(tmp_path) -> None:
    # libtpu names every host thread ``name/tid``, the Python main thread too ("main/3116817").
    builder = XSpaceBuilder()
    for chip in range(2):
        tpu_chip(
            builder,
            chip,
            {
                "XLA Modules": [Ev(f"jit_step({BIG_ID})", s * 10_000 + 500, 4_000) for s in range(3)],
                "XLA Ops": [Ev(hlo("fusion.1"), s * 10_000 + 600, 3_000) for s in range(3)],
            },
        )
    builder.plane("/host:metadata", {"jax_version": "0.11.2"})
    builder.plane("/host:CPU")
    builder.line(
        "main/3116817",
        [Ev("train", s * 10_000, 9_000, {"step_num": s}) for s in range(3)]
        + [Ev("PjitFunction(step)", s * 10_000 + 100, 300) for s in range(3)],
    )
    builder.line("tfrt-non-blocking-queue/3117409", [Ev("train", 100, 50, {"step_num": 9})])
    write_run(tmp_path, {"t": builder.serialize()})
    frames = jaxdiag.load(tmp_path)
    assert frames.step_source == "annotation" and frames.steps["step"].tolist() == [0, 1, 2]
    main = frames.events.loc[frames.events["line"] == "main/3116817"]
    assert set(main["category"]) == {"annotation"} and set(main["line_kind"]) == {"host"}


def test_per_chip_step_times_of_a_capture_without_device_work_are_an_empty_table(tmp_path) -> None:
    write_run(tmp_path, {"t": host_plane(XSpaceBuilder(), steps=[(0, 0, 1_000)]).serialize()})
    table = chip_steps(jaxdiag.load(tmp_path))
    assert table.empty and list(table.columns) == [
        "host",
        "plane",
        "device",
        "step",
        "start_ns",
        "end_ns",
        "busy_ns",
        "source",
    ]


def test_device_steps_are_numbered_by_step_num_then_name_then_group_id() -> None:
    steps = [
        Ev("7", 0, 100, {"group_id": 3}),
        Ev("Step", 200, 100, {"group_id": 4}),
        Ev("x", 400, 100, {"step_num": 9, "group_id": 5}),
        Ev("y", 600, 100),
    ]
    builder = tpu_chip(XSpaceBuilder(), 0, {"Steps": steps})
    cols = read_xspace(host_plane(builder).serialize(), "t", source="t.xplane.pb")
    assert [s[1] for s in cols.device_steps] == [7, 4, 9, 3]  # the last has nothing: its position

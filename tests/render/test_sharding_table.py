"""The sharding table: each distinct compile of a function, the steady one first, equivalent specs as one."""

from __future__ import annotations

import dataclasses

import pytest

from jaxdiag.analyses.sharding_section import ShardingSection, TimelineCollective
from jaxdiag.render.sharding_compiles import distinct_compiles, normal_spec
from jaxdiag.render.sharding_table import render
from jaxdiag.reporting import codec
from jaxdiag.reporting.model import ReportFormatError
from report_builders import make_report


def leaf(spec) -> dict:
    return {
        "path": "args[0]",
        "name": "x",
        "shape": [8, 16],
        "dtype": "float32",
        "spec": spec,
        "bytes_per_device": 128,
        "chosen_by": "user",
    }


def compile_(index: int, spec, *, runs: int = 0, function: str = "f", op: str = "all-reduce") -> dict:
    colls = [
        {
            "name": op,
            "kind": "all-reduce",
            "mesh_axes": ["model"],
            "bytes": 64,
            "count": 1,
            "origin": "reduction",
            "arrays": ["x"],
            "op_name": "jit(f)/reduce_sum",
            "timeline_count": runs,
            "timeline_ms": runs * 0.1,
        }
    ]
    return {
        "function": function,
        "qualname": f"m.{function}",
        "compiles": [index],
        "module": f"jit_{function}",
        "mesh": {"axis_names": ["model"], "axis_sizes": [4], "device_kinds": ["cpu"]},
        "hlo": True,
        "inputs": [leaf(spec)],
        "outputs": [],
        "collectives": colls,
        "comm_bytes_per_call": 64,
    }


def typed(functions: list[dict], timeline: list[dict] = ()) -> ShardingSection:
    """The section as a saved report holds it, read into its type."""
    return codec.from_json(ShardingSection, {"functions": functions, "timeline": list(timeline)}, "sharding")


def shown(functions: list[dict]) -> list[tuple]:
    return [
        (e.program.function, list(e.program.compiles), e.steady, e.steady_by)
        for e in distinct_compiles(typed(functions).functions)
    ]


def test_equivalent_specs_are_one_placement() -> None:
    assert normal_spec(("model", None)) == normal_spec(("model",)) == normal_spec((("model",), None)) == ("model",)
    assert normal_spec((None, "model")) == (None, "model") and normal_spec(((), None)) == ()
    assert normal_spec((("data", "model"), None)) == (("data", "model"),)


def test_compiles_with_equal_placements_merge_and_the_latest_leads_without_a_timeline() -> None:
    functions = [compile_(1, ["model", None]), compile_(2, [None, "model"]), compile_(3, ["model"])]
    assert shown(functions) == [("f", [1, 3], True, "latest compile"), ("f", [2], False, "latest compile")]


def test_the_compile_that_ran_most_on_the_timeline_is_steady() -> None:
    functions = [
        compile_(1, ["model"], runs=12, op="all-reduce.1"),
        compile_(2, [None, "model"], runs=3, op="all-reduce.2"),
        compile_(1, ["model"], function="g"),
    ]
    assert shown(functions) == [("f", [1], True, "timeline"), ("f", [2], False, "timeline"), ("g", [1], True, None)]
    text = render(typed(functions), [], width=200)
    assert text.index("f (jit_f, compile 1) steady: ran most on the timeline (12 collective runs)") < text.index(
        "f (jit_f, compile 2) another compile"
    )


@pytest.mark.parametrize(
    "functions, where",
    [
        ([None], "sharding.functions[0]: null, not an object"),
        ([{"function": "f", "compiles": "1"}], "sharding.functions[0].compiles: a string, not an array"),
        ([{"function": "f", "inputs": [{"path": "x", "spec": [3]}]}], "sharding.functions[0].inputs[0].spec[0]"),
    ],
)
def test_a_malformed_entry_is_refused_when_the_report_is_read(functions, where) -> None:
    with pytest.raises(ReportFormatError, match=where.replace("[", r"\[").replace("]", r"\]")):
        make_report(sharding={"functions": functions})


def test_compiles_that_share_an_op_name_cannot_be_told_apart_by_the_timeline() -> None:
    # Both programs have an `all-reduce.1` in module jit_f: the timeline's 12 runs belong to either.
    functions = [
        compile_(1, ["model"], runs=12, op="all-reduce.1"),
        compile_(2, [None, "model"], runs=12, op="all-reduce.1"),
    ]
    assert [(c, by) for _, c, _, by in shown(functions)] == [([2], "latest compile"), ([1], "latest compile")]


def test_tables_read_whole_at_80_and_200_columns() -> None:
    """Shapes, specs, collective names and who chose a layout are never cut; the JAX op goes below."""
    from jaxdiag.analyses.sharding import analyze_records
    from tests import sharding_programs as programs

    result = analyze_records(programs.bad_spec().records + programs.data_parallel().records)
    section = dataclasses.replace(
        result.section(),
        timeline=(
            TimelineCollective(
                "jit_bad_step",
                "all-gather",
                kind="all-gather",
                count=16,
                total_ms=1.5,
                function="bad_step",
                arrays=("params['w']",),
                mesh_axes=("model",),
                origin="resharding",
            ),
            TimelineCollective("jit_other", "all-reduce.7", kind="all-reduce", count=2, total_ms=0.5),
        ),
    )
    (gather_op,) = {
        c.op_name
        for f in section.functions
        if f.function == "bad_step"
        for c in f.collectives
        if c.kind == "all-gather"
    }
    assert gather_op
    (bad,) = [f for f in section.functions if f.function == "bad_step"]
    # On JAX 0.12 XLA names the gather by the argument it moves; the table says so.
    below = f"argument {gather_op}" if gather_op in {x.name for x in bad.inputs} else gather_op
    for width in (80, 200):
        out = render(section, result.findings, width=width)
        lines = out.splitlines()
        assert max(len(line.rstrip()) for line in lines) <= width
        for whole in ("float32[512,512]", "float32[2048,512]", "P('model', None)", "P('data', None)", "compiler"):
            assert any(whole in line for line in lines), (width, whole)
        # The JAX op goes below the table as the record has it: `jit(bad_step)/dot_general`, or on
        # JAX 0.12 "argument params['w']", the argument the gather moves.
        assert any(line.strip() == f"all-gather: {below}" for line in lines), below
        assert "jit_other/all-reduce.7" in out  # a module that is not the function's own is named
        header = " ".join(line for line in lines if "collective" in line and "┃" in line)
        assert ("JAX op" in header) == (width == 200)

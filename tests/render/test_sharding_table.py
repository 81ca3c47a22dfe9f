"""The sharding table: each distinct compile of a function, the steady one first, equivalent specs as one."""

from __future__ import annotations

from jaxdiag.render.sharding_table import distinct_compiles, normal_spec, render


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


def test_equivalent_specs_are_one_placement() -> None:
    assert normal_spec(["model", None]) == normal_spec(["model"]) == normal_spec([["model"], None]) == ["model"]
    assert normal_spec([None, "model"]) == [None, "model"] and normal_spec([[], None]) == []
    assert normal_spec([["data", "model"], None]) == [["data", "model"]]


def test_compiles_with_equal_placements_merge_and_the_latest_leads_without_a_timeline() -> None:
    functions = [compile_(1, ["model", None]), compile_(2, [None, "model"]), compile_(3, ["model"])]
    out = distinct_compiles(functions)
    assert [(e["compiles"], e["steady"], e["steady_by"]) for e in out] == [
        ([1, 3], True, "latest compile"),
        ([2], False, "latest compile"),
    ]


def test_the_compile_that_ran_most_on_the_timeline_is_steady() -> None:
    functions = [
        compile_(1, ["model"], runs=12, op="all-reduce.1"),
        compile_(2, [None, "model"], runs=3, op="all-reduce.2"),
        compile_(1, ["model"], function="g"),
    ]
    out = distinct_compiles(functions)
    assert [(e["function"], e["compiles"], e["steady"], e["steady_by"]) for e in out] == [
        ("f", [1], True, "timeline"),
        ("f", [2], False, "timeline"),
        ("g", [1], True, None),
    ]
    text = render({"functions": functions}, [], width=200)
    assert text.index("f (jit_f, compile 1) steady: ran most on the timeline (12 collective runs)") < text.index(
        "f (jit_f, compile 2) another compile"
    )


def test_malformed_entries_are_left_out() -> None:
    assert distinct_compiles([None, 3, "x", {"function": "f", "compiles": "1"}]) == [
        {"function": "f", "compiles": [], "steady": True, "steady_by": None}
    ]
    assert distinct_compiles("nope") == []


def test_compiles_that_share_an_op_name_cannot_be_told_apart_by_the_timeline() -> None:
    # Both programs have an `all-reduce.1` in module jit_f: the timeline's 12 runs belong to either.
    functions = [
        compile_(1, ["model"], runs=12, op="all-reduce.1"),
        compile_(2, [None, "model"], runs=12, op="all-reduce.1"),
    ]
    out = distinct_compiles(functions)
    assert [(e["compiles"], e["steady_by"]) for e in out] == [([2], "latest compile"), ([1], "latest compile")]

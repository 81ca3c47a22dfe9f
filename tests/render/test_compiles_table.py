"""The compiles table and its JSON: per-function counts, causes and advice."""

from __future__ import annotations

import dataclasses
import json

from jaxdiag.recording.advice import advise, with_explanations
from jaxdiag.recording.log_reader import CompileLog
from jaxdiag.recording.records import ArgSignature, CompileRecord
from jaxdiag.render.compiles_table import SCHEMA_VERSION, function_rows, render, to_json

A = ArgSignature


def rec(
    index: int,
    *args: ArgSignature,
    name: str = "train_step",
    seconds: float = 1.0,
    qualname: str | None = None,
    source: str = "mod.py:1",
) -> CompileRecord:
    return CompileRecord(
        name,
        qualname or f"mod.{name}",
        source,
        "mod.py:9",
        index,
        float(index),
        args=args,
        backend_compile_s=seconds,
        function_id=1,
    )


def tok(n: int) -> ArgSignature:
    return A("args[0]", shape=(8, n), dtype="int32", weak_type=False)


def scale(weak: bool) -> ArgSignature:
    return A("kwargs['scale']", shape=(), dtype="float32", weak_type=weak)


def sample_log() -> CompileLog:
    train = [
        rec(1, tok(129), scale(True)),
        rec(2, tok(193), scale(True)),
        rec(3, tok(257), scale(True)),
        rec(4, tok(257), scale(False)),
    ]
    evals = [rec(1, A("args[1]", kind="static", value="[bold]red"), name="eval_step", seconds=0.25)]
    records = with_explanations(sorted(train + evals, key=lambda r: r.time_unix))
    return CompileLog(records, ("compiles.jsonl",), (("compiles.jsonl", 9, "partial last line"),))


def test_function_rows_count_causes() -> None:
    rows = function_rows(sample_log().records)
    assert [r.function for r in rows] == ["train_step", "eval_step"]  # most compile time first
    train = rows[0]
    assert (train.compiles, train.recompiles, train.compile_s) == (4, 3, 4.0)
    assert [(c.what, c.path, c.axis, c.count) for c in train.causes] == [
        ("shape", "args[0]", 1, 2),
        ("weak_type", "kwargs['scale']", None, 1),
    ]
    assert train.causes[0].label == "args[0] shape axis 1"


def test_leaves_that_changed_commitment_are_one_cause_and_one_piece_of_advice() -> None:
    """A model's parameters, NumPy at the first call and committed after: one cause, one piece of advice
    naming every leaf and the sharding the later calls passed."""
    params = [A(f"args[0][{i}]", shape=(4, 8), dtype="float32", label=f"params[{i}]") for i in range(3)]
    placed = "P() on mesh(data=8)"
    records = with_explanations(
        [
            rec(1, *(dataclasses.replace(p, committed=False) for p in params)),
            rec(2, *(dataclasses.replace(p, sharding=placed, committed=True) for p in params)),
        ]
    )
    (row,) = function_rows(records)
    assert [(c.what, c.path, c.count) for c in row.causes] == [("committed", "", 1)]
    assert row.causes[0].label == "inputs uncommitted (NumPy) <-> committed to devices"
    (advice,) = advise(records)
    assert advice.message == (
        "train_step: params[0], params[1], params[2] arrived both uncommitted (a NumPy array, or placed by JAX) "
        "and committed to devices; 1 recompile(s)"
    )
    assert f"with the sharding the later calls pass ({placed})" in advice.suggestion


def test_text_table_shows_counts_causes_and_advice() -> None:
    log = sample_log()
    text = render(log, advise(log.records), width=200)
    assert "5 compile(s) of 2 function(s), 4.25 s compiling" in text
    row = next(ln for ln in text.splitlines() if ln.lstrip().startswith("train_step"))
    assert "4" in row and "4.00" in row and "2x args[0] shape axis 1" in row
    assert "1x kwargs['scale'] Python scalar <-> typed array" in text
    assert "jnp.float32(x) every time" in text and "pad args[0] axis 1 up to buckets" in text
    # User text with rich markup syntax is printed, not interpreted.
    assert "\x1b" not in text


def test_markup_in_user_text_is_escaped() -> None:
    log = CompileLog(
        tuple(
            with_explanations(
                [
                    rec(1, A("args[1]", kind="static", value="[bold]a")),
                    rec(2, A("args[1]", kind="static", value="[red]b")),
                    rec(3, A("args[1]", kind="static", value="c")),
                ]
            )
        ),
        ("x.jsonl",),
    )
    text = render(log, advise(log.records), width=250)
    assert "[bold]a" in text and "[red]b" in text


def test_same_short_name_in_two_modules_shows_qualnames() -> None:
    log = CompileLog(
        (rec(1, tok(1), qualname="a.step", name="step"), rec(1, tok(1), qualname="b.step", name="step")), ("x.jsonl",)
    )
    text = render(log, [], width=120)
    assert "a.step" in text and "b.step" in text
    lambdas = CompileLog(
        (
            rec(1, tok(1), qualname="m.<lambda>", name="<lambda>", source="m.py:3"),
            rec(1, tok(2), qualname="m.<lambda>", name="<lambda>", source="m.py:4"),
        ),
        ("x.jsonl",),
    )
    assert [r.compiles for r in function_rows(lambdas.records)] == [1, 1]
    text = render(lambdas, [], width=120)
    assert "m.<lambda> (m.py:3)" in text and "m.<lambda> (m.py:4)" in text


def test_json_fields() -> None:
    log = sample_log()
    d = to_json(log, advise(log.records))
    json.dumps(d)  # plain data only
    assert d["schema_version"] == SCHEMA_VERSION
    assert d["skipped_lines"] == [{"file": "compiles.jsonl", "line": 9, "reason": "partial last line"}]
    assert d["totals"] == {"compiles": 5, "recompiles": 3, "functions": 2, "compile_s": 4.25}
    train = d["functions"][0]
    assert (train["function"], train["qualname"], train["compiles"]) == ("train_step", "mod.train_step", 4)
    assert train["causes"][0] == {
        "what": "shape",
        "path": "args[0]",
        "axis": 1,
        "label": "args[0] shape axis 1",
        "count": 2,
    }
    first, second = train["records"][:2]
    assert first["explanation"] is None
    assert second["explanation"]["changes"][0] == {
        "path": "args[0]",
        "what": "shape",
        "old": "129",
        "new": "193",
        "axis": 1,
    }
    kinds = {a["kind"] for a in d["advice"]}
    assert kinds == {"padding", "weak_type"}
    assert all(
        set(a) == {"function", "source", "kind", "message", "suggestion", "compiles", "compile_s", "evidence"}
        for a in d["advice"]
    )
    assert d["advice"][0]["source"] == "mod.py:1"

"""advise(): padding buckets, and one piece of advice per recompile cause."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.config import DEFAULT_THRESHOLDS
from jaxdiag.recording import advice_rules
from jaxdiag.recording.advice import (
    Advice,
    advise,
    padding_buckets,
    power_of_two_plan,
    with_explanations,
)
from jaxdiag.recording.records import ArgSignature, CompileRecord

A = ArgSignature


def rec(index: int, *args: ArgSignature, name: str = "train_step", seconds: float = 1.0, **kw) -> CompileRecord:
    kw.setdefault("function_id", 7)
    return CompileRecord(
        name, f"mod.{name}", None, None, index, float(index), args=args, backend_compile_s=seconds, **kw
    )


def run(*arg_lists: tuple[ArgSignature, ...], **kw) -> list[CompileRecord]:
    return [rec(i, *args, **kw) for i, args in enumerate(arg_lists, start=1)]


def only(advice: list[Advice], kind: str) -> Advice:
    found = [a for a in advice if a.kind == kind]
    assert len(found) == 1, advice
    return found[0]


def tok(length: int) -> tuple[ArgSignature, ...]:
    return (
        A("args[0]", shape=(8, length), dtype="int32", weak_type=False),
        A("args[1]", shape=(8, length), dtype="bool", weak_type=False),
    )


def test_padding_buckets_for_a_varying_axis() -> None:
    records = run(*(tok(n) for n in (100, 120, 128, 250, 256)))
    a = only(advise(records, DEFAULT_THRESHOLDS.replace(padding_buckets=2)), "padding")
    ev = a.evidence
    assert (ev["path"], ev["axis"]) == ("args[0]", 1)
    assert ev["also"] == [["args[1]", 1]]  # the mask shares the axis: one piece of advice
    assert ev["buckets"] == [128, 256] and ev["bucket_compiles"] == 2 and ev["actual_compiles"] == 5
    expected = ((128 - 100) / 128 + (128 - 120) / 128 + (256 - 250) / 256) / 5
    assert ev["padding_overhead"] == pytest.approx(expected, abs=1e-6)
    assert ev["pow2_buckets"] == [128, 256]
    assert a.compiles == 5 and a.compile_s == pytest.approx(5.0)
    assert "2 sizes instead of 5 (up to 3 fewer compiles)" in a.suggestion and "powers of two" in a.suggestion
    assert ev["recompiles_from_axis"] == 4 and "4 recompile(s) came from a size change" in a.message
    assert [p["buckets"] for p in ev["plans"]] == [[256], [128, 256]]


def test_padding_never_proposes_as_many_buckets_as_sizes() -> None:
    a = only(advise(run(tok(10), tok(20), tok(30))), "padding")  # default limit 4 > 3 sizes
    assert a.evidence["bucket_compiles"] == 2 and a.evidence["buckets"] == [10, 30]


def test_padding_respects_the_bucket_threshold() -> None:
    records = run(*(tok(n) for n in range(10, 200, 10)))
    for limit in (1, 2, 3):
        a = only(advise(records, DEFAULT_THRESHOLDS.replace(padding_buckets=limit)), "padding")
        assert len(a.evidence["buckets"]) == limit and a.evidence["buckets"][-1] == 190


def test_two_sizes_give_no_padding_advice() -> None:
    assert [a for a in advise(run(tok(128), tok(256))) if a.kind == "padding"] == []


def test_weak_type_flip() -> None:
    weak = A("kwargs['scale']", shape=(), dtype="float32", weak_type=True)
    strong = dataclasses.replace(weak, weak_type=False)
    a = only(advise(run((weak,), (strong,))), "weak_type")
    assert a.compiles == 1 and a.evidence["compile_indices"] == [2]
    assert "kwargs['scale']" in a.message
    assert "pass a consistently typed array, e.g. jnp.float32(x) every time" == a.suggestion


def test_static_argument_with_many_values() -> None:
    records = run(*((A("args[1]", kind="static", value=str(v)),) for v in (1, 2, 3, 4)))
    a = only(advise(records), "static_values")
    assert a.evidence == {"path": "args[1]", "values": ["1", "2", "3", "4"], "distinct": 4}
    assert "args[1] took 4 values" in a.message


def test_sharding_change_names_the_argument() -> None:
    x = A("args[0]", shape=(8, 8), dtype="float32", sharding="P('x')")
    a = only(advise(run((x,), (dataclasses.replace(x, sharding="P(None, 'x')"),))), "sharding")
    assert a.evidence["path"] == "args[0]" and "args[0] arrived with different shardings" in a.message
    assert "device_put" in a.suggestion


def test_new_function_objects() -> None:
    x = (A("args[0]", shape=(4,), dtype="float32"),)
    records = [rec(i, *x, function_id=100 + i) for i in (1, 2, 3)]
    a = only(advise(records), "new_function")
    assert a.compiles == 2 and "hoist jax.jit out of the loop" in a.suggestion


def test_structure_change_names_the_path() -> None:
    w = A("args[0]['w']", shape=(4,), dtype="float32")
    b = A("args[0]['b']", shape=(4,), dtype="float32")
    a = only(advise(run((w,), (w, b))), "structure")
    assert "args[0]['b'] appeared" in a.message and "args[0]['b']" in a.suggestion


def test_same_signature() -> None:
    x = (A("args[0]", shape=(4,), dtype="float32"),)
    a = only(advise(run(x, x)), "same_signature")
    assert a.compiles == 1 and "clear_caches" in a.suggestion


def test_costliest_first_and_one_compile_needs_no_advice() -> None:
    cheap = run(*(tok(n) for n in (1, 2, 3)), name="cheap", seconds=0.1)
    costly = run(*(tok(n) for n in (1, 2, 3)), name="costly", seconds=5.0)
    single = run(tok(9), name="single")
    assert [a.function for a in advise(cheap + single + costly)] == ["mod.costly", "mod.cheap"]


def test_stored_explanations_are_used_and_missing_ones_filled() -> None:
    records = run(tok(1), tok(2))
    filled = with_explanations(records)
    assert filled[0].explanation is None
    assert filled[1].explanation.changes[0].what == "shape"
    assert with_explanations(filled) == filled
    # Another process's records are not diffed against this one's.
    other = dataclasses.replace(records[1], pid=2, compile_index=1)
    assert with_explanations([records[0], other])[1].explanation is None


# --- the bucket optimiser ----------------------------------------------------------

sizes_strategy = st.dictionaries(st.integers(0, 5000), st.integers(1, 5), min_size=1, max_size=9)


def _overhead(sizes: dict[int, int], edges: tuple[int, ...]) -> float:
    total = sum(sizes.values())
    pad = 0.0
    for s, w in sizes.items():
        edge = min(e for e in edges if e >= s)
        pad += w * ((edge - s) / edge if edge else 0.0)
    return pad / total


@settings(max_examples=150, deadline=None)
@given(sizes=sizes_strategy, k=st.integers(1, 5))
def test_buckets_cover_every_size_and_are_optimal(sizes: dict[int, int], k: int) -> None:
    plan = padding_buckets(sizes, k)
    assert 1 <= plan.compiles <= min(k, len(sizes))
    assert set(plan.edges) <= set(sizes) and max(plan.edges) == max(sizes)
    assert all(any(e >= s for e in plan.edges) for s in sizes)
    assert 0.0 <= plan.overhead < 1.0
    assert plan.overhead == pytest.approx(_overhead(sizes, plan.edges), abs=1e-9)
    # Brute force over every choice of edges: the plan is never worse.
    rest = sorted(sizes)[:-1]
    best = min(
        _overhead(sizes, (*combo, max(sizes)))
        for n in range(min(k, len(sizes)))
        for combo in itertools.combinations(rest, n)
    )
    assert plan.overhead <= best + 1e-9


@settings(max_examples=100, deadline=None)
@given(sizes=sizes_strategy)
def test_power_of_two_plan_covers_every_size(sizes: dict[int, int]) -> None:
    plan = power_of_two_plan(sizes)
    assert all(any(e >= s for e in plan.edges) for s in sizes)
    assert all(e == 0 or e & (e - 1) == 0 for e in plan.edges)
    assert 0.0 <= plan.overhead < 0.5 + 1e-12  # next power of two never more than doubles


def test_weights_pull_edges_toward_frequent_sizes() -> None:
    assert padding_buckets({10: 1, 11: 1, 100: 1}, 2).edges == (11, 100)
    assert padding_buckets({10: 1, 90: 50, 100: 1}, 2).edges == (90, 100)


def test_bucket_counts_leave_out_compiles_other_changes_caused() -> None:
    sizes = [tok(n) for n in (100, 120, 128)]
    other = tuple(dataclasses.replace(a, dtype="int16") if a.path == "args[0]" else a for a in tok(128))
    recs = run(*sizes, other)  # the fourth compile: a dtype change at a size seen before
    a = only(advise(recs), "padding")
    assert a.evidence["recompiles_from_axis"] == 2 and a.evidence["distinct_sizes"] == 3
    assert "2 recompile(s) came from a size change" in a.message


def test_sharding_advice_never_names_in_shardings() -> None:
    for rule in advice_rules.RULES.values():
        assert "in_shardings" not in rule[2]

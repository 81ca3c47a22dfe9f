"""Waits as columns: their totals are what a loop over the waits adds up, to the last bit and in its order."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.analyses.waits import Wait, WaitTable

_waits = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(-1, 5),
        st.integers(0, 10**12),
        st.integers(0, 10**9),  # how long
        st.sampled_from(["load_batch", "compile", "unattributed", "xxx"]),
        st.sampled_from(["annotation", "compile", "dispatch"]),
        st.sampled_from(["", "step", "eval"]),
    ).map(lambda t: Wait(t[0], t[1], t[2], t[2] + t[3], *t[4:])),
    max_size=40,
)


def _table(waits: list[Wait]) -> WaitTable:
    if not waits:
        return WaitTable.empty()
    columns = list(zip(*map(dataclasses.astuple, waits)))
    return WaitTable(*(np.array(c, dtype=object if isinstance(c[0], str) else np.int64) for c in columns))


def _loop(waits: list[Wait], *columns: str, where=lambda w: True) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for w in waits:
        if where(w):
            key = tuple(getattr(w, c) for c in columns)
            out[key] = out.get(key, 0.0) + (w.end_ns - w.start_ns) / 1e6
    return out


@settings(max_examples=200, deadline=None)
@given(waits=_waits)
def test_totals_and_steps_are_a_loops_in_its_order(waits: list[Wait]) -> None:
    table = _table(waits)
    assert list(table) == waits and len(table) == len(waits)
    for columns in [("cause", "kind"), ("step", "cause"), ("cause", "kind", "step"), ("step",)]:
        got = table.totals(*columns)
        assert list(got.items()) == list(_loop(waits, *columns).items())  # the same keys, order and floats
    assert table.totals("host", where=table.kind == "dispatch") == _loop(
        waits, "host", where=lambda w: w.kind == "dispatch"
    )
    steps: dict[tuple, set] = {}
    for w in waits:
        steps.setdefault((w.cause, w.kind), set()).add(w.step)
    assert table.distinct_steps("cause", "kind") == {k: len(v) for k, v in steps.items()}


def test_tables_join_take_and_compare_by_their_rows() -> None:
    one = WaitTable.of("h", np.array([3, 4]), np.array([[10, 20], [30, 45]]), "load_batch", "annotation", "")
    two = WaitTable.of("h", np.array([4]), np.array([[25, 28]]), "dispatch", "dispatch", "step")
    joined = WaitTable.joined([one, two])
    by_start = joined.take(np.argsort(joined.start_ns, kind="stable"))
    assert [w.start_ns for w in by_start] == [10, 25, 30]
    assert list(by_start)[1] == Wait("h", 4, 25, 28, "dispatch", "dispatch", "step")
    assert joined == WaitTable.joined([one, two]) and joined != by_start
    assert len(WaitTable.empty()) == 0 and WaitTable.joined([]) == WaitTable.empty()
    assert WaitTable.empty().totals("cause") == {} and WaitTable.empty().distinct_steps("cause") == {}

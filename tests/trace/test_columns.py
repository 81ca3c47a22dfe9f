"""``HostColumns.extend``: the pieces of one host's planes, put together."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.trace.columns import HostColumns


def test_extend_appends_every_list_and_merges_the_facts() -> None:
    from jaxdiag.trace.columns import NUMBER_COLUMNS, STRING_COLUMNS

    a, b = HostColumns("h"), HostColumns("h")
    a.add_events(["fusion.1"], [10.0], [5.0], "device", devices=[0], modules=["jit_f"], ops=["fusion.1"], programs=[3])
    a.close_segment("/device:GPU:0", "Stream #14", "compute", 0)
    a.meta["jax_version"], a.python_frames = "0.1", 4
    b.add_events(["load_batch"], [20.0], [7.0], "annotation")
    b.close_segment("/host:CPU", "python3", "python", 0)
    b.step_marks.append(("train", 0, 0.0, 30.0))
    b.notes.append("a note")
    b.meta["pid"], b.python_frames = 1, 6
    lists = [f.name for f in dataclasses.fields(HostColumns) if f.name not in ("host", "meta", "python_frames")]
    lists.remove("parts")
    lists.remove("count")
    before = {name: len(getattr(a, name)) + len(getattr(b, name)) for name in lists}
    a.extend(b)
    assert {name: len(getattr(a, name)) for name in lists} == before  # every list took b's entries
    assert len(a) == 2 and all(len(a.numbers(c)) == 2 for c in NUMBER_COLUMNS)
    assert all(len(a.strings(c)) == 2 for c in STRING_COLUMNS)
    assert a.strings("name") == ["fusion.1", "load_batch"] and a.numbers("start_ns").tolist() == [10.0, 20.0]
    assert a.integers("device") == [0, -1] and a.integers("program_id") == [3, -1]
    assert a.strings("hlo_module") == ["jit_f", ""] and a.strings("category") == ["device", "annotation"]
    assert [s[1] for s in a.segments] == ["Stream #14", "python3"] and a.step_marks == b.step_marks
    assert a.meta == {"jax_version": "0.1", "pid": 1} and a.python_frames == 10 and a.notes == ["a note"]


def test_columns_hold_the_lists_they_were_handed_and_fill_the_rest() -> None:
    """A reader's lists and arrays become parts as they are; a column not given is one run of its none."""
    from array import array

    from jaxdiag.trace.columns import Fill

    names, starts = ["a", "b", "c"], array("d", [1.0, 2.0, 3.0])
    cols = HostColumns("h")
    cols.add_events(names, starts, starts, "runtime", programs=[4, 5, 6])
    assert cols.parts["name"][0] is names and cols.parts["start_ns"][0] is starts
    assert cols.parts["category"] == [Fill("runtime", 3)] and cols.parts["hlo_module"] == [Fill("", 3)]
    assert cols.strings("category") == ["runtime"] * 3 and cols.integers("run_id") == [-1] * 3
    cols.replace("run_id", [7, 8, 9])
    assert cols.integers("run_id") == [7, 8, 9]
    with pytest.raises(ValueError):
        cols.replace("run_id", [1])


def test_coded_columns_hold_the_strings_they_were_given() -> None:
    from jaxdiag.trace.columns import Coded

    coded = Coded.of(["fusion", "copy", "fusion", ""])
    assert coded.codes.tolist() == [0, 1, 0, 2] and coded.values == ["fusion", "copy", ""]
    assert coded.strings() == ["fusion", "copy", "fusion", ""] and len(coded) == 4
    assert Coded.of(["x"] * 3).codes.tolist() == [0, 0, 0] and Coded.of([]).strings() == []
    joined = Coded.joined([coded, ["copy", "add"], Coded.of([])])
    assert joined.strings() == ["fusion", "copy", "fusion", "", "copy", "add"]
    assert joined.values == ["fusion", "copy", "", "add"]


def test_extend_joins_packed_and_unpacked_pieces_in_order() -> None:
    from jaxdiag.trace.columns import STRING_COLUMNS, Coded

    def piece(names: list[str], category: str) -> HostColumns:
        cols = HostColumns("h")
        cols.add_events(names, [float(i) for i in range(len(names))], [1.0] * len(names), category)
        cols.close_segment("/host:CPU", category, "host", 0)
        return cols

    a, b, c = piece(["x", "y"], "runtime"), piece(["y", "z"], "annotation").pack(), piece(["w"], "runtime")
    a.extend(b, c)
    assert any(isinstance(part, Coded) for column in STRING_COLUMNS for part in a.parts[column])
    assert a.strings("name") == ["x", "y", "y", "z", "w"]
    assert a.strings("category") == ["runtime", "runtime", "annotation", "annotation", "runtime"]
    assert a.numbers("start_ns").tolist() == [0.0, 1.0, 0.0, 1.0, 0.0] and [s[3] for s in a.segments] == [2, 2, 1]
    assert a.integers("device") == [-1] * 5 and a.integers("program_id") == [-1] * 5
    assert a.coded("name").strings() == a.strings("name")


def test_pack_keeps_device_and_program_numbers_in_small_integers() -> None:
    import numpy as np

    cols = HostColumns("h")
    cols.add_events(["fusion"], [0.0], [1.0], "device", devices=[3], modules=["jit_f"], ops=["fusion"], programs=[-1])
    cols.add_events(["copy"], [1.0], [1.0], "device", devices=[5], modules=["jit_f"], ops=["copy"], programs=[1 << 40])
    cols.pack()
    assert cols.parts["device"][0].dtype == np.int8 and cols.parts["program_id"][0].dtype == np.int64
    assert cols.integers("device") == [3, 5] and cols.integers("program_id") == [-1, 1 << 40]


def test_pieces_packed_together_share_their_values_and_join_as_apart() -> None:
    from jaxdiag.trace.columns import Coded

    def piece(names: list[str]) -> HostColumns:
        cols = HostColumns("h")
        cols.add_events(names, [0.0] * len(names), [1.0] * len(names), "runtime")
        return cols

    together = [piece(["a", "b"]), piece(["b", "c", "c"]), piece([])]
    apart = [piece(["a", "b"]), piece(["b", "c", "c"]), piece([])]
    HostColumns.pack_together(together)
    for cols in apart:
        cols.pack()
    assert together[0].coded("name").values is together[1].coded("name").values == ["a", "b", "c"]
    assert [p.strings("name") for p in together] == [["a", "b"], ["b", "c", "c"], []]
    named = [p.coded("name") for p in together]
    assert Coded.joined(named).strings() == Coded.joined([p.coded("name") for p in apart]).strings()
    assert Coded.joined([named[1], apart[0].coded("name"), named[0]]).strings() == [
        "b",
        "c",
        "c",
        "a",
        "b",
        "a",
        "b",
    ]


_values = st.one_of(
    st.sampled_from(["fusion", "copy", "", "all-reduce.1"]),
    st.text(max_size=3),
    st.integers(-2, 2),
    st.none(),
)


@settings(max_examples=200, deadline=None)
@given(columns=st.lists(st.lists(_values, max_size=40), max_size=4), copies=st.booleans())
def test_columns_are_numbered_together_as_a_dict_numbers_them(columns: list[list], copies: bool) -> None:
    """``Coded.sharing`` numbers values in order of first appearance over the columns in turn, equal values alike
    (equal strings that are other objects, ``1`` and ``True``), in C where the decoder was built and without it."""
    import numpy as np

    from jaxdiag.trace import contract
    from jaxdiag.trace.columns import Coded

    if copies:  # equal strings as other objects, as a reader that does not share them makes them
        columns = [[("".join(v) if isinstance(v, str) else v) for v in column] for column in columns]
    position: dict = {}
    expected = [[position.setdefault(v, len(position)) for v in column] for column in columns]
    in_c = Coded.sharing(columns)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contract, "line_decoder", lambda: None)
        in_python = Coded.sharing(columns)
    for got in (in_c, in_python):
        assert [c.codes.tolist() for c in got] == expected
        assert all(c.values == list(position) for c in got)
        assert all(c.codes.dtype == np.uint8 for c in got)


def test_many_distinct_values_are_numbered_in_order() -> None:
    """Past the decoder's first table of addresses (4,096 slots): every value still numbered once, in order."""
    from jaxdiag.trace.columns import Coded

    words = [f"op.{i}" for i in range(70_000)]
    coded = Coded.of(words + ["".join(list(w)) for w in reversed(words)])  # equal, other objects
    assert coded.values == words and coded.codes.dtype.name == "int32"
    assert coded.codes[:70_000].tolist() == list(range(70_000)) == coded.codes[70_000:][::-1].tolist()

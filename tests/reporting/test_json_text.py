"""The report's JSON writer gives the very text ``json.dumps`` and the one-line number arrays gave."""

from __future__ import annotations

import enum
import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.reporting import json_text
from jaxdiag.reporting.model import clean

#: An indented array of numbers. It starts with a line break, which JSON strings never hold.
_NUMBER_ARRAY = re.compile(r"\[\n\s*-?\d[-+.\deE]*(?:,\n\s*-?\d[-+.\deE]*)*\n\s*\]")


def reference(value) -> str:
    """The text the report's JSON is held to: ``json.dumps``'s, indented by two, each array of numbers on one line."""
    text = json.dumps(value, indent=2, allow_nan=False)
    return _NUMBER_ARRAY.sub(lambda m: re.sub(r"\s+", "", m.group(0)).replace(",", ", "), text)


class Level(enum.IntEnum):
    LOW = 1


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)), max_size=5),
        st.dictionaries(st.text(max_size=6), inner, max_size=5),
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_the_text_is_json_dumps_with_number_arrays_on_one_line(value) -> None:
    assert json_text.dumps(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, -3, 1e-07, 1e16], "b": [], "c": {}, "d": [[1], [2, 3]], "e": [True, 1], "f": [None, 1]},
        {"levels": [Level.LOW, 2], "tuple": (1, "x"), "nested": {"x": [{"y": [0.1]}]}},
        ["\u00e9\u4e2d\ud83d\ude00", "line\nbreak", "[\n1\n]"],
    ],
)
def test_edge_cases(value) -> None:
    assert json_text.dumps(value) == reference(value)


@pytest.mark.parametrize("value", [{1: "x"}, {"s": {1, 2}}, [object()], [math.nan], {"x": math.inf}])
def test_what_clean_has_not_made_plain_is_refused_and_clean_makes_it_plain(value) -> None:
    with pytest.raises(json_text.Unsupported):
        json_text.dumps(value)
    assert json.loads(json_text.dumps(clean(value))) == json.loads(json.dumps(clean(value)))


def test_clean_makes_numpy_sets_dataclasses_and_objects_plain() -> None:
    import dataclasses

    import numpy as np

    @dataclasses.dataclass
    class Row:
        ms: float

    value = {"a": np.arange(3), "b": np.float32(1.5), "c": {2, 1}, "d": Row(math.nan), "e": object, 3: (1, 2)}
    plain = clean(value)
    assert plain["a"] == [0, 1, 2] and plain["b"] == 1.5 and sorted(plain["c"]) == [1, 2] and plain["d"] == {"ms": None}
    assert plain["e"] == str(object) and plain["3"] == [1, 2]
    assert json_text.dumps(plain) == reference(plain)


def test_a_real_report(cpu_trace_dir) -> None:
    import jaxdiag

    report = jaxdiag.report(cpu_trace_dir.logdir)
    assert report.to_json() == reference(clean(report.to_dict()))

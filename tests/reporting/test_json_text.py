"""The report's JSON writer gives the very text ``json.dumps`` and the one-line number arrays gave."""

from __future__ import annotations

import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdiag.reporting import json_text
from jaxdiag.reporting.model import _NUMBER_ARRAY, _json_default, _one_line, clean


def reference(value) -> str:
    """How ``Report.to_json`` wrote a report before ``json_text``."""
    return _NUMBER_ARRAY.sub(_one_line, json.dumps(value, indent=2, default=_json_default, allow_nan=False))


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
def test_what_it_does_not_write_is_left_to_json(value) -> None:
    with pytest.raises(json_text.Unsupported):
        json_text.dumps(value)


def test_a_real_report(cpu_trace_dir) -> None:
    import jaxdiag

    report = jaxdiag.report(cpu_trace_dir.logdir)
    assert report.to_json() == reference(clean(report.to_dict()))

"""Answers about categorical columns: the same as asking each row, shared only inside a report's scope."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from jaxdiag.analyses.categories import category_codes, classify_names, isin, name_matches, strings_at
from jaxdiag.analyses.device_work import collective_kind, host_events
from jaxdiag.analyses.shared import scope
from jaxdiag.trace import frames as F


def _column(values: list[str | None]) -> pd.Series:
    return pd.Series(pd.Categorical(values, categories=sorted({v for v in values if v is not None} | {"unused"})))


def test_classify_names_answers_as_each_row_would_missing_rows_as_the_empty_name() -> None:
    names = _column(["all-reduce.3", None, "fusion.1", "all-reduce.3", "ncclDevKernel_AllGather", "send.2"])
    expected = [collective_kind(str(n) if n is not None else "") for n in names.astype(object).where(names.notna(), "")]
    assert classify_names(names, collective_kind).tolist() == expected
    rows = np.array([4, 1, 0])
    assert classify_names(names, collective_kind, rows=rows).tolist() == [expected[i] for i in rows]
    with scope(object()):  # shared answers give the same, for every row or a few
        first = classify_names(names, collective_kind, key=collective_kind)
        assert first.tolist() == expected
        assert classify_names(names, collective_kind, key=collective_kind, rows=rows).tolist() == first[rows].tolist()


def test_categories_a_classifier_never_met_are_never_asked_about() -> None:
    names = _column(["a", "b", "a"])
    asked: list[str] = []

    def test(name: str) -> bool:
        asked.append(name)
        return name == "b"

    with scope(object()):
        assert classify_names(names, test, key=test, dtype=bool, rows=np.array([0, 2])).tolist() == [False, False]
        assert classify_names(names, test, key=test, dtype=bool).tolist() == [False, True, False]
    assert sorted(asked) == ["", "a", "b"]  # "" for missing rows; "unused" never


def test_codes_are_intp_and_shared_for_a_column_within_a_scope_only() -> None:
    names = _column(["x", "y", None])
    codes = category_codes(names)
    assert codes.dtype == np.intp and codes.tolist() == [1, 2, -1]
    assert category_codes(names) is not codes
    with scope(object()):
        assert category_codes(names) is category_codes(names)
        other = _column(["y", "x"])
        assert category_codes(other).tolist() == [2, 1]


def test_helpers_read_a_real_capture_as_pandas_does(h100_transformer) -> None:
    frames = h100_transformer.frames
    ev = frames.events
    rows = np.flatnonzero((ev[F.CATEGORY] == "device").to_numpy())[:500]
    with scope(frames):
        assert (
            isin(ev[F.CATEGORY], ("device", "annotation")).tolist()
            == ev[F.CATEGORY].isin(["device", "annotation"]).tolist()
        )
        assert strings_at(ev[F.NAME], rows).tolist() == ev[F.NAME].astype(object).to_numpy()[rows].tolist()
        pattern = re.compile("Memcpy")
        wanted = [pattern.search(str(n)) is not None for n in ev[F.NAME].astype(object)]
        assert name_matches(ev[F.NAME], pattern).tolist() == wanted
        assert name_matches(ev[F.NAME], pattern, rows=rows).tolist() == [wanted[i] for i in rows]
        host = frames.hosts[0]
        mine = host_events(frames, host)
        expected = ev.loc[~ev[F.CATEGORY].isin(["device", "python"]) & (ev[F.HOST] == host)]
        pd.testing.assert_frame_equal(mine.drop(columns="end_ns"), expected)

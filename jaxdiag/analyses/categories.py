"""Answers about a categorical column's values, each distinct value looked at once.

Traces repeat a few thousand names a million times, and every analysis asks of
them (is it a copy, a collective, a read-back, a compile?). These helpers answer
through a column's categories and its codes, and share within a report (see
``analyses.shared``) what several analyses ask of the same column: its codes as
``intp``, its categories as text, which categories its rows use, and each
classifier's answers.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

import numpy as np

from jaxdiag.analyses.shared import in_scope

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def classify_names(
    names: "pd.Series",
    fn: Callable[[str], Any],
    key: Hashable = None,
    dtype: Any = object,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Apply ``fn`` to each distinct name once; traces repeat a few thousand names a million times.

    A categorical column is classified through its categories, only those its rows
    use. With a ``key`` naming ``fn`` (a pure function), a report's analyses share
    the answers (see ``analyses.shared``): every selection of the events table
    keeps its categories, so each name is classified once per report. The answers
    come as an array of ``dtype`` (``bool`` for a test), for every row or for the
    positions ``rows``.
    """
    import pandas as pd

    if isinstance(names.dtype, pd.CategoricalDtype):
        categories = names.dtype.categories
        if key is None:
            table = _CategoryTable(categories, fn)
        else:
            table = in_scope(("classified", key, id(categories)), lambda: _CategoryTable(categories, fn))
            if table.categories is not categories:  # another table now has that id
                table = _CategoryTable(categories, fn)
        codes = category_codes(names)
        return table.at(codes, dtype) if rows is None else table.at(codes[rows], dtype, shared=False)
    if rows is not None:
        names = names.iloc[rows]
    codes, uniques = pd.factorize(names, sort=False)
    values = np.array([fn(str(u)) for u in uniques.tolist()] + [fn("")], dtype=object)
    return values.astype(dtype)[codes]  # code -1 (missing) maps to the trailing fn("")


def category_codes(column: "pd.Series") -> np.ndarray:
    """A categorical column's codes as ``intp``, shared within a report.

    pandas keeps codes as narrow integers (``int8``, ``int16``), and numpy converts
    such an index on every selection by it: one conversion makes each later
    selection about three times faster.
    """
    values = column.array  # the same Categorical for every selection of the column that kept all its rows
    held = in_scope(("intp_codes", id(values)), lambda: (values, np.asarray(values.codes, dtype=np.intp)))
    return held[1] if held[0] is values else np.asarray(values.codes, dtype=np.intp)


def _category_names(categories: "pd.Index") -> list[Any]:
    """``categories`` as a list of ``str``, made once per report for every classifier of that column."""
    held = in_scope(("category_names", id(categories)), lambda: (categories, [str(n) for n in categories.tolist()]))
    return held[1] if held[0] is categories else [str(n) for n in categories.tolist()]


class _CategoryTable:
    """``fn`` of a categorical column's categories, computed for each category when first needed."""

    def __init__(self, categories: "pd.Index", fn: Callable[[str], Any]) -> None:
        self.categories, self._fn = categories, fn
        self._names: list[Any] | None = None
        n = len(categories)
        self._values = np.empty(n + 1, dtype=object)
        self._values[n] = fn("")  # code -1 (missing)
        self._done = np.zeros(n + 1, dtype=bool)
        self._done[n] = True

    def at(self, codes: np.ndarray, dtype: Any = object, shared: bool = True) -> np.ndarray:
        """The values of rows with these codes, as an array of ``dtype`` (``shared``: a whole column's codes)."""
        todo = np.flatnonzero(_codes_used(codes, len(self._done), shared) & ~self._done)
        if len(todo):
            if self._names is None:
                self._names = _category_names(self.categories)
            names, fn = self._names, self._fn
            found = [fn(names[i]) for i in todo.tolist()]
            self._values[todo] = np.fromiter(found, dtype=object, count=len(found))
            self._done[todo] = True
        return self._values.astype(dtype)[codes]


def _codes_used(codes: np.ndarray, n: int, shared: bool) -> np.ndarray:
    """Which of ``n`` codes occur in ``codes`` (-1 as the last); with ``shared``, kept within a report for
    these codes (several classifiers read the same column)."""

    def mark() -> tuple[np.ndarray, np.ndarray]:
        used = np.zeros(n, dtype=bool)
        used[codes] = True
        return codes, used

    if not shared:
        return mark()[1]
    held = in_scope(("codes_used", id(codes), n), mark)
    return held[1] if held[0] is codes else mark()[1]


def row_groups(column: "pd.Series") -> list[tuple[Any, np.ndarray]]:
    """``(value, positions)`` of each value of ``column``, in order of first appearance, missing values left out.

    What ``groupby(column, sort=False, observed=True)`` iterates over, as row
    positions: selecting a few arrays by them costs less than a sub-frame per group.
    """
    import pandas as pd

    codes, uniques = pd.factorize(column, sort=False)
    return [(uniques[i], rows) for i, rows in enumerate(positions_by_code(codes, len(uniques)))]


def positions_by_code(codes: np.ndarray, n: int) -> list[np.ndarray]:
    """For each code below ``n``, the positions that hold it, in order (a missing value, -1, is in none)."""
    order = np.argsort(codes, kind="stable")
    ends = np.cumsum(np.bincount(codes[codes >= 0], minlength=n))
    first = int((codes < 0).sum())
    ends += first
    starts = np.concatenate([[first], ends[:-1]]).astype(np.int64)
    return [order[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def column_codes(column: "pd.Series") -> tuple[np.ndarray, list[Any]]:
    """A column as codes (-1: missing) and the values they number: a categorical's own (shared, as
    ``category_codes``), else its distinct values in order of first appearance."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        return category_codes(column), column.cat.categories.tolist()
    codes, values = pd.factorize(column.to_numpy(object), sort=False)
    return codes, values.tolist()


def strings_at(column: "pd.Series", rows: np.ndarray) -> np.ndarray:
    """The values of a string column at positions ``rows``, as an object array.

    For a few rows of many: a categorical column gives them through its codes,
    without turning every row into an object first.
    """
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = category_codes(column)[rows]
        if (codes >= 0).all():
            return np.asarray(column.cat.categories, dtype=object)[codes]
    return column.to_numpy(object)[rows]


def name_matches(
    names: "pd.Series", pattern: re.Pattern[str], *, at_start: bool = False, rows: np.ndarray | None = None
) -> np.ndarray:
    """Which names ``pattern`` finds (``search``; ``match`` with ``at_start``), as a bool array (at ``rows``)."""
    test = pattern.match if at_start else pattern.search
    key = (name_matches, pattern, at_start)
    return classify_names(names, lambda n: test(n) is not None, key=key, dtype=bool, rows=rows)


def isin(column: "pd.Series", values: Iterable[Any]) -> np.ndarray:
    """``column.isin(values)`` as a bool array; for a categorical column, tested on its few categories."""
    import pandas as pd

    values = list(values)
    if isinstance(column.dtype, pd.CategoricalDtype):
        hit = np.append(column.cat.categories.isin(values), False)  # code -1 (missing) is in no list of strings
        if not any(v != v for v in values):  # NaN among the values: leave it to pandas
            return hit[category_codes(column)]
    return column.isin(values).to_numpy()

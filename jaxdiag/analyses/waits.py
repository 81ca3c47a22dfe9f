"""Attributed stretches of device-idle time as columns: what ``host_waits`` finds, and what it and its
findings add up.

A capture's waits number in the thousands (a stretch per cause per step): as columns, their totals
per cause, per step and per host are a few passes over arrays rather than loops over objects. Totals
are added in row order, as a loop would add them, so they are the same to the last bit. ``Wait`` is
one row as an object, for code that looks at one at a time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

import numpy as np

_TEXT = ("host", "cause", "kind", "detail")
#: ``Wait``'s fields, in order: the columns of a ``WaitTable``.
_FIELDS = ("host", "step", "start_ns", "end_ns", "cause", "kind", "detail")


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    """One attributed stretch of device-idle time."""

    host: str
    step: int
    start_ns: int
    end_ns: int
    cause: str
    kind: str  # "compile", "device_to_host_sync", "annotation", "dispatch", "unattributed"
    detail: str = ""  # for dispatch: the function being launched, when known


@dataclasses.dataclass(frozen=True, eq=False)
class WaitTable:
    """Waits as columns, one row each: ``Wait``'s fields, the texts as object arrays, the rest int64."""

    host: np.ndarray
    step: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    cause: np.ndarray
    kind: np.ndarray
    detail: np.ndarray

    @classmethod
    def empty(cls) -> "WaitTable":
        return cls(*(np.zeros(0, dtype=object if f in _TEXT else np.int64) for f in _FIELDS))

    @classmethod
    def of(cls, host: str, steps: np.ndarray, spans: np.ndarray, cause: str, kind: str, detail: str) -> "WaitTable":
        """``spans`` (``[start, end)`` rows) of one cause on one host, each in its step of ``steps``."""
        n = len(spans)
        texts = {"host": host, "cause": cause, "kind": kind, "detail": detail}
        columns = {f: _repeated(texts[f], n) for f in _TEXT}
        columns.update(step=np.asarray(steps, dtype=np.int64), start_ns=spans[:, 0].copy(), end_ns=spans[:, 1].copy())
        return cls(**columns)

    @classmethod
    def joined(cls, parts: Sequence["WaitTable"]) -> "WaitTable":
        """``parts``' rows, one after another."""
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))

    def take(self, rows: np.ndarray) -> "WaitTable":
        return WaitTable(*(getattr(self, f)[rows] for f in _FIELDS))

    def __len__(self) -> int:
        return len(self.step)

    def __iter__(self) -> Iterator[Wait]:
        return (Wait(*row) for row in zip(*(getattr(self, f).tolist() for f in _FIELDS)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WaitTable):
            return NotImplemented
        return all(np.array_equal(getattr(self, f), getattr(other, f)) for f in _FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def totals(self, *columns: str, where: np.ndarray | None = None) -> dict[tuple[Any, ...], float]:
        """The milliseconds of the rows (``where`` selects some) of each distinct combination of ``columns``'
        values, in order of first appearance; each added up row by row, as a loop over the waits would."""
        rows = np.arange(len(self)) if where is None else np.flatnonzero(where)
        group, keys = self._groups(columns, rows)
        ms = (self.end_ns[rows] - self.start_ns[rows]) / 1e6
        return dict(zip(keys, np.bincount(group, weights=ms, minlength=len(keys)).tolist()))

    def distinct_steps(self, *columns: str) -> dict[tuple[Any, ...], int]:
        """How many steps the rows of each distinct combination of ``columns``' values fall in."""
        import pandas as pd

        group, keys = self._groups(columns, np.arange(len(self)))
        steps, _ = pd.factorize(self.step, sort=False)
        width = max(len(self), 1)
        pairs = np.unique(group.astype(np.int64) * width + steps)  # each (combination, step) once
        return dict(zip(keys, np.bincount(pairs // width, minlength=len(keys)).tolist()))

    def _groups(self, columns: tuple[str, ...], rows: np.ndarray) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
        """Each of ``rows``' combination of ``columns``' values as a number, in order of first appearance, and
        the combinations."""
        import pandas as pd

        key = np.zeros(len(rows), dtype=np.int64)
        for column in columns:
            codes, uniques = pd.factorize(getattr(self, column)[rows], sort=False)
            key = key * max(len(uniques), 1) + codes
        group, _ = pd.factorize(key, sort=False)
        first = rows[np.unique(group, return_index=True)[1]]  # each combination's first row
        return group, list(zip(*(getattr(self, column)[first].tolist() for column in columns)))


def _repeated(text: str, n: int) -> np.ndarray:
    """``text`` ``n`` times, as an object array (filled by a slice: ``np.full`` sets each one apart)."""
    out = np.empty(n, dtype=object)
    out[:] = text
    return out

"""Vectorised arithmetic on sets of time intervals, so overlap is never counted twice.

An interval set is an ``(n, 2)`` int64 array of ``[start, end)`` rows in
nanoseconds. Functions that say they return a *union* return sorted, disjoint,
non-empty intervals; every other function accepts any rows (overlapping,
unsorted, empty) and merges them first. Every analysis counts time through these
helpers: two kernels that overlap on two streams count once, not twice.
"""

from __future__ import annotations

import numpy as np

#: The empty interval set.
EMPTY = np.zeros((0, 2), dtype=np.int64)


def as_intervals(starts: object, ends: object) -> np.ndarray:
    """Stack start and end arrays into an interval set."""
    s = np.asarray(starts, dtype=np.int64).reshape(-1)
    e = np.asarray(ends, dtype=np.int64).reshape(-1)
    if s.shape != e.shape:
        raise ValueError(f"starts and ends differ in length: {s.shape[0]} != {e.shape[0]}")
    return np.stack([s, e], axis=1) if s.size else EMPTY.copy()


def union(iv: np.ndarray) -> np.ndarray:
    """Merge overlapping or touching intervals; drop empty ones."""
    iv = np.asarray(iv, dtype=np.int64).reshape(-1, 2)
    nonempty = iv[:, 1] > iv[:, 0]
    if not nonempty.all():
        iv = iv.compress(nonempty, axis=0)  # rows by a mask: compress and take run several times faster than iv[mask]
    if iv.shape[0] <= 1 or (iv[1:, 0] > iv[:-1, 1]).all():  # a union already (most callers pass one)
        return iv.copy()
    if not (iv[1:, 0] >= iv[:-1, 0]).all():  # most sets arrive sorted: a stable sort would not move them
        iv = iv.take(np.argsort(iv[:, 0], kind="stable"), axis=0)
    reach = np.maximum.accumulate(iv[:, 1])
    # A new run starts where an interval begins after everything before it ended.
    new_run = np.empty(iv.shape[0], dtype=bool)
    new_run[0] = True
    new_run[1:] = iv[1:, 0] > reach[:-1]
    first = np.flatnonzero(new_run)
    last = np.append(first[1:] - 1, iv.shape[0] - 1)
    return np.stack([iv[first, 0], reach[last]], axis=1)


def total(iv: np.ndarray) -> int:
    """Length of the union of ``iv``, in the intervals' unit."""
    u = union(iv)
    return int((u[:, 1] - u[:, 0]).sum())


def totals(iv: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """``total`` of each group's intervals (``groups[i]`` in ``0..count-1``: the group of interval ``i``; -1: no
    group's), at once.

    Each group is moved to a stretch of its own (its times less its first start, plus the group's
    number times the longest group's extent), so one ``union`` of all of them keeps the groups apart.
    """
    iv = np.asarray(iv, dtype=np.int64).reshape(-1, 2)
    groups = np.asarray(groups, dtype=np.int64).reshape(-1)
    nonempty = (iv[:, 1] > iv[:, 0]) & (groups >= 0)
    iv, groups = iv[nonempty], groups[nonempty]
    out = np.zeros(count, dtype=np.int64)
    if not len(iv):
        return out
    first = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, groups, iv[:, 0])
    relative = iv - first[groups][:, None]
    width = int(relative[:, 1].max()) + 1
    if width * count >= 1 << 62:  # too far apart to line up: one group at a time
        for group in np.unique(groups).tolist():
            out[group] = total(iv[groups == group])
        return out
    merged = union(relative + (groups * width)[:, None])
    np.add.at(out, merged[:, 0] // width, merged[:, 1] - merged[:, 0])
    return out


def clip(iv: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The parts of ``iv`` inside ``[lo, hi)``, as a union."""
    u = union(iv)
    if u.size == 0 or hi <= lo:
        return EMPTY.copy()
    c = np.stack([np.maximum(u[:, 0], lo), np.minimum(u[:, 1], hi)], axis=1)
    return c[c[:, 1] > c[:, 0]]


def _sweep(a: np.ndarray, b: np.ndarray, keep: str) -> np.ndarray:
    """Segments where (a covers, b covers) matches ``keep`` ("and" or "minus")."""
    ua, ub = union(a), union(b)
    if ua.size == 0:
        return EMPTY.copy()
    if ub.size == 0:
        return EMPTY.copy() if keep == "and" else ua
    pos = np.concatenate([ua[:, 0], ua[:, 1], ub[:, 0], ub[:, 1]])
    da = np.concatenate([np.ones(len(ua)), -np.ones(len(ua)), np.zeros(2 * len(ub))]).astype(np.int64)
    db = np.concatenate([np.zeros(2 * len(ua)), np.ones(len(ub)), -np.ones(len(ub))]).astype(np.int64)
    order = np.argsort(pos, kind="stable")
    pos, ca, cb = pos[order], np.cumsum(da[order]), np.cumsum(db[order])
    # Coverage after each point holds until the next point; within a union the
    # count is 0 or 1, so equal positions resolve by the last cumulative value.
    seg = np.stack([pos[:-1], pos[1:]], axis=1)
    inside = (ca[:-1] > 0) & ((cb[:-1] > 0) if keep == "and" else (cb[:-1] == 0))
    return union(seg.compress(inside, axis=0))


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The union of times covered by both ``a`` and ``b``."""
    return _sweep(a, b, "and")


def overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``intersect(a, b)`` is not empty, found by binary search rather than a sweep."""
    return unions_overlap(union(a), union(b))


def unions_overlap(ua: np.ndarray, ub: np.ndarray) -> bool:
    """``overlaps`` of two sets that are unions already (sorted, disjoint), without merging them again."""
    if ua.size == 0 or ub.size == 0:
        return False
    # For each run of b, the first run of a that ends after it starts: they meet if it starts before b's run ends.
    i = np.searchsorted(ua[:, 1], ub[:, 0], side="right")
    inside = i < len(ua)
    return bool((ua[i[inside], 0] < ub[inside, 1]).any())


def intersection_length(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the time covered by both ``a`` and ``b``."""
    x = intersect(a, b)
    return int((x[:, 1] - x[:, 0]).sum())


def subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The union of times covered by ``a`` but not by ``b``."""
    return _sweep(a, b, "minus")


def gaps(iv: np.ndarray, lo: int, hi: int, min_len: int = 0) -> np.ndarray:
    """Stretches of ``[lo, hi)`` that ``iv`` leaves uncovered, at least ``min_len`` long."""
    if hi <= lo:
        return EMPTY.copy()
    u = clip(iv, lo, hi)
    starts = np.concatenate([[lo], u[:, 1]])
    ends = np.concatenate([u[:, 0], [hi]])
    g = np.stack([starts, ends], axis=1).astype(np.int64)
    return g[(g[:, 1] - g[:, 0]) >= max(min_len, 1)]


def covered_in_windows(iv: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each window ``[lo[i], hi[i])``, how much of it ``iv`` covers.

    Runs in O((n + w) log n) for n intervals and w windows, so per-step figures on
    a million-event trace cost one sort, not one pass per step.
    """
    lo = np.asarray(lo, dtype=np.int64).reshape(-1)
    hi = np.asarray(hi, dtype=np.int64).reshape(-1)
    u = union(iv)
    if u.size == 0:
        return np.zeros(lo.shape[0], dtype=np.int64)
    lengths = u[:, 1] - u[:, 0]
    before = np.concatenate([[0], np.cumsum(lengths)])  # covered length before run i

    def covered_up_to(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(u[:, 0], t, side="right") - 1
        inside = np.clip(t - u[np.maximum(i, 0), 0], 0, lengths[np.maximum(i, 0)])
        return np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0)

    return np.maximum(covered_up_to(hi) - covered_up_to(lo), 0)


def length(iv: np.ndarray) -> int:
    """Sum of row lengths, without merging (for sets already known to be disjoint)."""
    iv = np.asarray(iv, dtype=np.int64).reshape(-1, 2)
    return int(np.clip(iv[:, 1] - iv[:, 0], 0, None).sum())

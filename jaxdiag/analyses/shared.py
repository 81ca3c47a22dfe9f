"""Intermediate results the analyses of one report share, computed once.

Every analysis asks the same questions of a capture (its compile spans, host
events, program device ops, step windows), and answering them costs more than
most analyses themselves. ``run_all`` opens a ``scope`` on the frames; inside
it, ``once`` keeps each answer by its question, so a report computes each once
instead of once per analysis. Outside a scope ``once`` computes afresh: an
analysis stays a pure function of its inputs, and a caller who edits a frame
between two calls sees the edit.

Answers are shared, so callers must treat them as read-only (every helper
returns frames and arrays that the analyses only select from).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Hashable, Iterator, TypeVar

T = TypeVar("T")

_SCOPE: contextvars.ContextVar[tuple[Any, dict[Hashable, Any]] | None] = contextvars.ContextVar(
    "jaxdiag_analyses_scope", default=None
)


@contextlib.contextmanager
def scope(frames: Any) -> Iterator[None]:
    """Share answers about ``frames`` until the block ends."""
    token = _SCOPE.set((frames, {}))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def once(frames: Any, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, or its earlier answer for ``key`` inside a scope on these ``frames``."""
    active = _SCOPE.get()
    if active is None or active[0] is not frames:
        return compute()
    answers = active[1]
    if key not in answers:
        answers[key] = compute()
    return answers[key]


def in_scope(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, or its earlier answer for ``key`` inside any scope.

    For answers that depend on nothing but ``key`` (what a pure function says of a
    string table the key holds), which any capture's analyses may share.
    """
    active = _SCOPE.get()
    if active is None:
        return compute()
    answers = active[1]
    if key not in answers:
        answers[key] = compute()
    return answers[key]

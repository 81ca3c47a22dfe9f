"""Explain a recompile: diff a new signature against the closest earlier one of its function.

``explain`` runs at compile time, once per compile after a function's first, so it
works on plain records, never imports jax, and compares against at most the last
``MAX_CANDIDATES`` signatures of the function. Its parts: ``closest_record`` picks the
earlier record (the fewest differing leaves and fields, the newest in a tie),
``record_diff`` lists what changed, ``explain_text`` words it.

An ``Explanation`` with no ``changes`` but a ``compared_to`` means the function was
lowered again with a signature identical to an earlier one.
"""

from __future__ import annotations

from typing import Sequence

from jaxdiag.recording.closest_record import closest, function_key, last_of_function
from jaxdiag.recording.explain_text import MAX_SUMMARY_CHANGES, describe, summarize
from jaxdiag.recording.record_diff import CONFIG_DEFAULTS, diff, path_parts, sharding_differs
from jaxdiag.recording.records import Change, CompileRecord, Explanation

__all__ = [
    "CONFIG_DEFAULTS",
    "MAX_CANDIDATES",
    "MAX_SUMMARY_CHANGES",
    "describe",
    "diff",
    "explain",
    "function_key",
    "path_parts",
    "sharding_differs",
    "summarize",
]

#: Only this many earlier signatures of a function are searched for the closest.
MAX_CANDIDATES = 64


def explain(history: Sequence[CompileRecord], new: CompileRecord) -> Explanation | None:
    """Explain why ``new`` compiled, given the records before it.

    Args:
      history: earlier records, oldest first, of any functions.
      new: the record to explain.

    Returns:
      ``None`` when no earlier record is of ``new``'s function (``function_key``);
      otherwise the diff against the closest earlier record of that function.
    """
    candidates = last_of_function(history, function_key(new), MAX_CANDIDATES, new.transform)
    if not candidates:
        others = last_of_function(history, function_key(new), MAX_CANDIDATES)
        if not others:
            return None
        if new.transform is None:  # the call itself, after compiles under transformations only
            seen = ", ".join(sorted({str(r.transform) for r in others}))
            change = Change("", "transform", seen, None)
        else:
            change = Change("", "transform", None, new.transform)
        return Explanation(summary=summarize(new, (change,)), changes=(change,))
    best = closest(candidates, new)
    changes = diff(best, new)
    return Explanation(
        summary=summarize(new, changes, best.compile_index), changes=changes, compared_to=best.compile_index
    )

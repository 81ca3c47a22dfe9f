"""Compile budgets: fail (or warn) when code compiles more often than allowed.

Two guards share one message format, which names each function, how often it
compiled and why: ``expect_compiles`` around a block of code (or a test), and
``jaxdiag.jit(max_compiles=N)`` on one function.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from typing import Any

from jaxdiag.errors import CompileBudgetExceeded, CompileBudgetWarning, ConfigError
from jaxdiag.recording import compile_log
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, CompileRecord


class expect_compiles(contextlib.ContextDecorator):
    """Raise ``CompileBudgetExceeded`` on exit if the code inside compiled more than ``max`` times.

    Counts the compiles of ``jaxdiag.jit`` functions from every thread while the
    block runs. Usable as ``with expect_compiles(max=1): ...`` or as a decorator. If
    the block raises, that exception goes through unchanged.

    Args:
      max: compiles allowed (``0``: the code must only hit caches).
      function: count only this function (a name, qualname, or the function).

    Attributes:
      records: the records counted, available inside and after the block.
    """

    def __init__(self, max: int = 0, function: Any = None) -> None:  # noqa: A002
        check_max("expect_compiles(max=...)", max)
        self.max = max
        self.function = function
        self._collecting: compile_log.collecting | None = None
        self._records: list[CompileRecord] = []

    @property
    def records(self) -> list[CompileRecord]:
        source = self._records if self._collecting is None else self._collecting.collector.records
        # JAX's own helpers (recorded under watch) are not the user's compiles to budget.
        return [r for r in source if r.origin != JAX_INTERNAL_ORIGIN and compile_log.matches(r, self.function)]

    def __enter__(self) -> "expect_compiles":
        self._records = []
        self._collecting = compile_log.collecting()
        self._collecting.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._collecting is not None
        self._collecting.__exit__(exc_type, exc, tb)
        self._records = self._collecting.collector.records
        self._collecting = None
        if exc_type is None:
            check(self.records, self.max, self.function)


def check_max(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{what} must be a non-negative integer, got {value!r}")


def check(records: Sequence[CompileRecord], max: int, function: Any = None) -> None:  # noqa: A002
    """Raise ``CompileBudgetExceeded`` if ``records`` number more than ``max``."""
    if len(records) > max:
        of = "" if function is None else f" of {_function_text(function)}"
        raise CompileBudgetExceeded(f"expected at most {max} compile(s){of}, got {len(records)}: {summarize(records)}")


def summarize(records: Sequence[CompileRecord]) -> str:
    """``"step: 2 compiles (first compile; args[0] shape axis 0: 3 -> 4)"``, one part per function."""
    groups: dict[tuple[str, str | None], list[CompileRecord]] = {}
    for r in records:
        groups.setdefault((r.qualname, r.source), []).append(r)
    names = [rs[0].function for rs in groups.values()]
    parts = []
    for (qualname, _), rs in groups.items():
        name = rs[0].function if names.count(rs[0].function) == 1 else qualname
        causes = "; ".join(dict.fromkeys(compile_log.cause(r) or "unexplained" for r in rs))
        count = f"{len(rs)} compile{'s' if len(rs) != 1 else ''}"
        parts.append(f"{name}: {count} ({causes})")
    return ", ".join(parts)


def over_budget_message(record: CompileRecord, max_compiles: int) -> str:
    """Why one function's compile went past its ``max_compiles``."""
    return (
        f"{record.function} compiled {record.compile_index} times, more than "
        f"max_compiles={max_compiles}; this time because: {compile_log.cause(record)} "
        f"(call at {record.call_site or 'an unknown site'})"
    )


def enforce(record: CompileRecord, max_compiles: int | None, on_exceed: str, *, starting: bool) -> None:
    """Apply ``jaxdiag.jit(max_compiles=..., on_exceed=...)`` to one compile.

    ``on_exceed="raise"`` acts when the compile is ``starting`` (so it never
    happens); ``"warn"`` acts once it is done, pointing the warning at the call site.
    """
    if max_compiles is None or record.compile_index <= max_compiles:
        return
    if on_exceed == "raise" and starting:
        raise CompileBudgetExceeded(over_budget_message(record, max_compiles))
    if on_exceed == "warn" and not starting:
        filename, _, line = (record.call_site or "").rpartition(":")
        message = over_budget_message(record, max_compiles)
        if filename and line.isdigit():
            warnings.warn_explicit(message, CompileBudgetWarning, filename, int(line))
        else:
            warnings.warn(message, CompileBudgetWarning, stacklevel=2)


def _function_text(function: Any) -> str:
    if isinstance(function, str):
        return repr(function)
    return repr(getattr(function, "__name__", None) or function)

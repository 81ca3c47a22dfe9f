"""The process-wide compile log: a bounded ring of records in memory, plus an optional JSONL file.

This is the one piece of mutable module state in jaxdiag. It is thread-safe, it
never imports jax (commands that read logs must start fast), and a failure to
write the file never breaks the user's program: it warns once and keeps
recording in memory. The file itself is ``jsonl_sink``'s.
"""

from __future__ import annotations

import collections
import itertools
import os
import pathlib
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from jaxdiag import config
from jaxdiag.errors import CompileLogError, ConfigError, JaxdiagWarning, warn_once
from jaxdiag.recording.jsonl_sink import JsonlSink, RecordSink
from jaxdiag.recording.records import FIRST_COMPILE, FIRST_SEEN, CompileRecord, history_key, unseen_cause

if TYPE_CHECKING:  # pragma: no cover
    import pandas

_UNSET: Any = object()


class Collector:
    """The records added while it is registered (see ``collecting``)."""

    def __init__(self) -> None:
        self.records: list[CompileRecord] = []


class CompileLog:
    """Records in arrival order, the per-function compile counters, and the file sink."""

    def __init__(self, max_records: int) -> None:
        self._lock = threading.RLock()
        self._records: collections.deque[CompileRecord] = collections.deque(maxlen=max_records)
        self._counts: dict[tuple[str, str | None, str], int] = {}
        self._collectors: list[Collector] = []
        self.sink: RecordSink | None = None
        self.analysis: bool | None = None  # None: not configured, read the environment
        self._sink_set = False
        self._write_warned = False

    def reserve(self, key: tuple[str, str | None, str]) -> tuple[int, list[CompileRecord]]:
        """Take the next compile index for ``key`` and its earlier records, oldest first."""
        with self._lock:
            index = self._counts.get(key, 0) + 1
            self._counts[key] = index
            return index, self.history(key)

    def peek(self, key: tuple[str, str | None, str]) -> tuple[int, list[CompileRecord]]:
        """Like ``reserve``, without taking the index (for a compile that may not happen)."""
        with self._lock:
            return self._counts.get(key, 0) + 1, self.history(key)

    def history(self, key: tuple[str, str | None, str]) -> list[CompileRecord]:
        with self._lock:
            return [r for r in self._records if history_key(r) == key]

    def append(self, record: CompileRecord) -> None:
        """Keep ``record``, hand it to the collectors and the sink; then to collectors that act on records."""
        with self._lock:
            hooks = [hook for c in self._collectors if (hook := getattr(c, "on_record", None)) is not None]
        self._store(record)
        for hook in hooks:  # outside the lock: a hook may wait (``host_check``)
            hook(record)

    def _store(self, record: CompileRecord) -> None:
        with self._lock:
            self._records.append(record)
            for collector in self._collectors:
                collector.records.append(record)
            if self.sink is None:
                return
            try:
                self.sink.write(record)
            except (OSError, TypeError, ValueError) as exc:
                if not self._write_warned:
                    self._write_warned = True
                    try:  # even under -W error: a log problem must not fail the user's call
                        warnings.warn(
                            f"jaxdiag could not write the compile log {str(self.sink.path)!r} "
                            f"({type(exc).__name__}: {exc}); records are kept in memory only",
                            JaxdiagWarning,
                            stacklevel=2,
                        )
                    except Exception:
                        pass

    def records(self) -> list[CompileRecord]:
        with self._lock:
            return list(self._records)

    def resize(self, max_records: int) -> None:
        with self._lock:
            self._records = collections.deque(self._records, maxlen=max_records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._counts.clear()

    def add_collector(self, collector: Collector) -> None:
        with self._lock:
            self._collectors.append(collector)

    def remove_collector(self, collector: Collector) -> None:
        with self._lock:
            if collector in self._collectors:
                self._collectors.remove(collector)


LOG = CompileLog(config.DEFAULT_THRESHOLDS.max_records)
_ids_lock = threading.Lock()
_ids: dict[int, tuple[weakref.ref[Any], int]] = {}
_next_id = itertools.count(1)
_env_lock = threading.Lock()
_env_read = False
_analysis_chosen = False  # ``configure(analysis=...)`` was called: a capture window leaves it alone


def configure(
    *,
    log_dir: str | os.PathLike[str] | None = _UNSET,
    analysis: bool | None = _UNSET,
    max_records: int = _UNSET,
) -> pathlib.Path | None:
    """Set where the compile log goes and what it records; unnamed settings keep their value.

    Args:
      log_dir: folder for the JSONL log (created if missing); ``None`` stops writing a file.
        Overrides ``JAXDIAG_LOG_DIR``.
      analysis: add cost (flops, bytes accessed) and memory figures to each record. This
        asks the compiler for its analysis after every compile, so it is off by default.
        Overrides ``JAXDIAG_COMPILE_ANALYSIS``; ``jaxdiag.jit(analysis=...)`` overrides it
        per function. ``None`` returns to the default: off, except inside a capture window
        (``jaxdiag.profile``), which records it.
      max_records: how many records to keep in memory (oldest dropped first).

    Returns:
      The path of the JSONL file being written, or ``None``.

    Raises:
      CompileLogError: ``log_dir`` cannot be created or written.
      ConfigError: ``max_records`` is not a positive integer.
    """
    if max_records is not _UNSET:
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise ConfigError(f"max_records must be a positive integer, got {max_records!r}")
        LOG.resize(max_records)
    if analysis is not _UNSET:
        global _analysis_chosen
        LOG.analysis = None if analysis is None else bool(analysis)
        _analysis_chosen = analysis is not None
    if log_dir is not _UNSET:
        sink = None if log_dir is None else JsonlSink(log_dir)
        with LOG._lock:
            LOG.sink, LOG._sink_set, LOG._write_warned = sink, True, False
    return None if LOG.sink is None else LOG.sink.path


def apply_env() -> None:
    """Read ``JAXDIAG_LOG_DIR`` and ``JAXDIAG_COMPILE_ANALYSIS`` once, unless configured in code.

    Called from inside the user's program (``jaxdiag.jit``, ``watch``): a folder named
    by ``JAXDIAG_LOG_DIR`` that cannot be written is warned about once and records
    stay in memory, as for a write that fails later; the program goes on.
    """
    global _env_read
    if _env_read:
        return
    with _env_lock:
        if _env_read:
            return
        folder = config.log_dir_from_env()
        if folder is not None and not LOG._sink_set:
            try:
                configure(log_dir=folder)
            except CompileLogError as exc:
                warn_once(
                    f"env-log-dir:{folder}",
                    f"{config.ENV_LOG_DIR}: {exc}; compile records are kept in memory only",
                    stacklevel=3,
                )
        if LOG.analysis is None:
            LOG.analysis = config.analysis_from_env()
        _env_read = True


def analysis_on_unless_chosen() -> tuple[bool, bool | None]:
    """Turn cost and memory analysis on, unless ``configure`` or ``JAXDIAG_COMPILE_ANALYSIS`` chose.

    A capture window calls this at start: its compiles then carry FLOPs for MFU and
    memory figures, which cost little next to the compile itself. Returns the token
    to hand to ``restore_analysis`` when the window closes.
    """
    import os

    chosen = _analysis_chosen or bool(os.environ.get(config.ENV_ANALYSIS, "").strip())
    previous = LOG.analysis
    if not chosen:
        LOG.analysis = True
    return (not chosen, previous)


def restore_analysis(token: tuple[bool, bool | None]) -> None:
    """Undo ``analysis_on_unless_chosen`` (unless ``configure`` chose a setting meanwhile)."""
    changed, previous = token
    if changed and not _analysis_chosen:
        LOG.analysis = previous


def analysis_enabled() -> bool:
    """Whether records get cost and memory figures unless a function says otherwise."""
    return bool(LOG.analysis)


def function_id(fun: Any, *, create: bool = True) -> int | None:
    """A number for the function object ``fun``, never reused in this process.

    ``id()`` is reused once an object dies, so a lambda made anew each step would
    look like the same function; these numbers tell such functions apart.
    ``None`` when ``create`` is false and ``fun`` has none (or cannot be weakly referenced).
    """
    with _ids_lock:
        entry = _ids.get(id(fun))
        if entry is not None and entry[0]() is fun:
            return entry[1]
        if not create:
            return None
        try:
            ref = weakref.ref(fun, lambda _, key=id(fun), ids=_ids: ids.pop(key, None))
        except TypeError:
            return None
        number = next(_next_id)
        _ids[id(fun)] = (ref, number)
        return number


def matches(record: CompileRecord, function: Any) -> bool:
    """Whether ``record`` belongs to ``function``: a name, a qualname, or the function itself
    (or what ``jaxdiag.jit`` made of it)."""
    if function is None:
        return True
    if isinstance(function, str):
        return function in (record.function, record.qualname) or record.qualname.endswith("." + function)
    ids = {function_id(f, create=False) for f in (function, getattr(function, "__wrapped__", None)) if f is not None}
    return record.function_id in ids - {None}


def records(function: Any = None) -> list[CompileRecord]:
    """The compile records in memory, oldest first, optionally of one function."""
    return [r for r in LOG.records() if matches(r, function)]


def clear() -> None:
    """Forget every record in memory and restart compile counts (the file is left alone)."""
    LOG.clear()


class collecting:
    """Context manager gathering the records added while it is open, from every thread."""

    def __init__(self) -> None:
        self.collector = Collector()

    def __enter__(self) -> Collector:
        LOG.add_collector(self.collector)
        return self.collector

    def __exit__(self, *exc: object) -> None:
        LOG.remove_collector(self.collector)


def compiles(function: Any = None) -> "pandas.DataFrame":
    """The compile log as a table, one row per record, oldest first.

    Args:
      function: keep only this function's records (its name, qualname, or the function).

    Returns:
      Columns ``function``, ``compile_index``, ``compile_s``, ``trace_s``, ``lower_s``,
      ``backend_compile_s``, ``cause`` (why it compiled again), ``call_site``, ``source``,
      ``qualname``, ``time``, ``traced``, ``lowered``, ``compiled``,
      ``persistent_cache_hit``, ``n_args``, ``flops``, ``bytes_accessed``,
      ``argument_bytes``, ``output_bytes``, ``temp_bytes``, ``generated_code_bytes``,
      ``origin``, ``function_id``, ``pid``, ``thread`` and ``record`` (the record's dict).
    """
    import pandas

    rows = [_row(r) for r in records(function)]
    frame = pandas.DataFrame(rows, columns=list(_row_columns()))
    frame["time"] = pandas.to_datetime(frame["time"], unit="s")
    return frame


def cause(record: CompileRecord) -> str | None:
    """One line on why ``record`` happened: its explanation, or "first compile"."""
    if record.explanation is not None:
        return record.explanation.summary
    if record.compile_index != 1:
        return None
    if record.earlier_unseen:
        return unseen_cause(record.earlier_unseen)
    # A late watch cannot tell a first compile from the first it saw, unless JAX's cache says.
    return FIRST_COMPILE if record.origin == "jit" or record.earlier_unseen == 0 else FIRST_SEEN


def _row_columns() -> Iterator[str]:
    yield from (
        "function",
        "compile_index",
        "compile_s",
        "trace_s",
        "lower_s",
        "backend_compile_s",
        "cause",
        "call_site",
        "source",
        "qualname",
        "time",
        "traced",
        "lowered",
        "compiled",
        "persistent_cache_hit",
        "n_args",
        "flops",
        "bytes_accessed",
        "argument_bytes",
        "output_bytes",
        "temp_bytes",
        "generated_code_bytes",
        "origin",
        "function_id",
        "pid",
        "thread",
        "record",
    )


def _row(r: CompileRecord) -> dict[str, Any]:
    cost, memory = r.cost or {}, r.memory or {}
    return {
        "function": r.function,
        "compile_index": r.compile_index,
        "compile_s": r.compile_s,
        "trace_s": r.trace_s,
        "lower_s": r.lower_s,
        "backend_compile_s": r.backend_compile_s,
        "cause": cause(r),
        "call_site": r.call_site,
        "source": r.source,
        "qualname": r.qualname,
        "time": r.time_unix,
        "traced": r.traced,
        "lowered": r.lowered,
        "compiled": r.compiled,
        "persistent_cache_hit": r.persistent_cache_hit,
        "n_args": sum(1 for a in r.args if a.kind == "array"),
        "flops": cost.get("flops"),
        "bytes_accessed": cost.get("bytes_accessed"),
        "argument_bytes": memory.get("argument_bytes"),
        "output_bytes": memory.get("output_bytes"),
        "temp_bytes": memory.get("temp_bytes"),
        "generated_code_bytes": memory.get("generated_code_bytes"),
        "origin": r.origin,
        "function_id": r.function_id,
        "pid": r.pid,
        "thread": r.thread,
        "record": r.to_dict(),
    }


__all__ = ["configure", "compiles", "records", "clear", "cause", "JsonlSink", "RecordSink", "collecting"]

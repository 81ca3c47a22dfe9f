"""Read a JSONL compile log (a file or a folder of them) back into ``CompileRecord``s.

Reading never imports jax or pandas, so ``jaxdiag compiles`` starts fast. Lines that
are not valid compile records (a corrupt line, a partial last line left by a crash,
a record of another schema) are skipped and listed, never fatal; a path with no
valid record at all is an error.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

from jaxdiag.errors import CompileLogError
from jaxdiag.recording.record_checks import args_problem, explanation_problem, fields_problem, record_problem
from jaxdiag.recording.records import (
    _FIELD_DEFAULTS,
    _FIELD_NAMES,
    SCHEMA,
    ArgSignature,
    CompileRecord,
    Explanation,
    record_from_row,
)

#: In a folder, files matching this are the compile log; other ``*.jsonl`` are read only if none do.
LOG_GLOB = "compiles*.jsonl"


@dataclasses.dataclass(frozen=True, slots=True)
class CompileLog:
    """Every record read from a compile log, oldest first.

    Attributes:
      records: the valid records, ordered by start time (stable within a file).
      files: the files read.
      skipped_lines: ``(file, line_number, reason)`` for each line that was not a
        valid record (line numbers count from 1).
    """

    records: tuple[CompileRecord, ...]
    files: tuple[str, ...]
    skipped_lines: tuple[tuple[str, int, str], ...] = ()


def read_compile_log(path: str | os.PathLike[str]) -> CompileLog:
    """Read one ``.jsonl`` compile log, or every compile log in a folder.

    Args:
      path: a JSONL file, or a folder holding ``compiles*.jsonl`` files (searched
        recursively; any ``*.jsonl`` when no file is named ``compiles*``).

    Raises:
      CompileLogError: the path is missing or unreadable, the folder holds no
        ``.jsonl`` file, or no line anywhere is a valid compile record.
    """
    root = Path(path)
    if not root.exists():
        raise CompileLogError(f"{root}: no such file or folder (give a compile log .jsonl or its folder)")
    files = _log_files(root)
    records: list[CompileRecord] = []
    skipped: list[tuple[str, int, str]] = []
    for f in files:
        records += _read_file(f, skipped)
    if not records:
        where = f"{root}" if root.is_file() else f"{root} ({len(files)} .jsonl file(s))"
        first = f"; first problem: line {skipped[0][1]}: {skipped[0][2]}" if skipped else ""
        raise CompileLogError(f"{where}: no valid compile record ({SCHEMA}){first}")
    # Files from several processes interleave in time; sorted() is stable within a file.
    records.sort(key=operator.attrgetter("time_unix"))
    return CompileLog(tuple(records), tuple(str(f) for f in files), tuple(skipped))


def _log_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise CompileLogError(f"{root}: not a file or folder")
    try:
        files = sorted(p for p in root.rglob(LOG_GLOB) if p.is_file())
        if not files:
            files = sorted(p for p in root.rglob("*.jsonl") if p.is_file())
    except OSError as exc:
        raise CompileLogError(f"{root}: cannot list folder ({exc.strerror or exc})") from None
    if not files:
        raise CompileLogError(f"{root}: folder holds no compile log (no *.jsonl file)")
    return files


#: The longest line read as a record (a record is a few kB; a pytree of thousands of leaves, a few MB).
MAX_LINE_BYTES = 16 * 2**20


def _read_file(path: Path, skipped: list[tuple[str, int, str]]) -> list[CompileRecord]:
    """The records of one JSONL file, read line by line (a long run's log is gigabytes).

    A log past ``log_chunks.PARALLEL_MIN_BYTES`` is read in pieces by worker processes
    as well (``log_chunks``), each piece by ``read_span`` as here.
    """
    from jaxdiag.files import open_regular
    from jaxdiag.recording import log_chunks

    handle, size = open_regular(path, "a compile log (JSONL)", CompileLogError)
    try:
        with handle:
            chunked = log_chunks.read_chunked(path, size, skipped)
            if chunked is not None:
                return chunked
            return read_span(handle, str(path), None, skipped, LineValues())[0]
    except OSError as exc:
        raise CompileLogError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_span(
    handle: Any, source: str, end: int | None, skipped: list[tuple[str, int, str]], shared: "LineValues"
) -> tuple[list[CompileRecord], int]:
    """The records of the lines that begin before byte ``end`` (``None``: the file's end), from
    ``handle``'s position, and how many lines there were; line numbers count from 1 at that position.

    Raises:
      OSError: the file cannot be read.
    """
    out: list[CompileRecord] = []
    number = 0
    for number, line, whole in _lines(handle, end):
        if not whole:
            skipped.append((source, number, f"a line longer than {MAX_LINE_BYTES:,} bytes"))
            continue
        if not line.strip():
            continue
        record = _record(line, skipped, source, number, shared)
        if record is not None:
            out.append(record)
    return out, number


class LineValues:
    """One object for each argument list, explanation, name and small dict met in a file.

    A long run's log repeats them (the same signatures recompile in every restart and
    process): held once, a million records fit in memory. Each distinct argument list
    and explanation is also checked and built once, keyed by its exact JSON content
    (types included, so ``1`` and ``1.0`` or ``true`` stay apart). An argument list is
    most of a line, so it is also known by its text (``decode``), as is an explanation:
    a line whose values were met before decodes only the rest.
    """

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}
        self._built: dict[Any, Any] = {}
        self._texts: dict[tuple[str, str], tuple[Any, str | None]] = {}
        # Put in place of a value's text: no log holds them (128 random bits), so finding one as the
        # record's ``args`` or ``explanation`` proves the place held the record's own value.
        self._slots = {name: f"\x00jaxdiag {name} {uuid.uuid4().hex}" for name, *_ in _CUT}
        self._slot_texts = {name: json.dumps(slot) for name, slot in self._slots.items()}

    def _one(self, value: Any) -> Any:
        try:
            return self._seen.setdefault(value, value)
        except TypeError:  # an unhashable value in a hand-edited record: kept as it is
            return value

    def _keep(self, cache: dict[Any, Any], key: Any, value: Any) -> Any:
        if len(cache) < CACHE_ENTRIES:  # past it (every record unlike the others) built each time
            cache[key] = value
        return value

    def decode(self, text: str) -> tuple[Any, dict[str, tuple[Any, str | None]]]:
        """``text``'s JSON value, and those of its ``args`` and ``explanation`` that were read apart
        from the rest, checked and built (``name -> (built, problem)``; read the others with ``part``).

        The writer puts ``"in_tree"`` right after ``"args"`` and ``"cost"`` right after
        ``"explanation"``; lines written otherwise, and any whose cut does not give the
        record's own values, are decoded whole.

        Raises:
          ValueError, RecursionError: ``text`` is not JSON, or is nested too deeply.
        """
        pieces: list[str] = []
        cut: list[tuple[str, str]] = []
        at = 0
        for name, before, after, opener in _CUT:
            start = text.find(before, at)
            begin = start + len(before)
            end = text.find(after, begin) if start >= 0 else -1
            if end > 0 and text[begin] == opener:
                pieces += (text[at:begin], self._slot_texts[name])
                cut.append((name, text[begin:end]))
                at = end
        if cut:
            try:
                d = _JSON.decode("".join(pieces) + text[at:])
                if type(d) is dict and all(d.get(name) == self._slots[name] for name, _ in cut):
                    return d, {name: self._part_text(name, raw) for name, raw in cut}
            except (ValueError, RecursionError):  # cut in the wrong place: decoded whole below
                pass
        return _JSON.decode(text), {}

    def _part_text(self, name: str, raw: str) -> tuple[Any, str | None]:
        """``part`` of the value whose JSON text is ``raw``, once per distinct text.

        Raises:
          ValueError, RecursionError: ``raw`` is not one JSON value (the line is then decoded whole).
        """
        built = self._texts.get((name, raw))
        if built is None:
            # A whole JSON value that begins where the record's value begins is that value.
            built = self._keep(self._texts, (name, raw), self.part(name, _JSON.decode(raw)))
        return built

    def part(self, name: str, value: Any) -> tuple[Any, str | None]:
        """``value`` (the record's ``args`` or ``explanation``) checked and built, or the problem with it."""
        try:
            key = (name, "null" if value is None else _key(value))
        except (RecursionError, ValueError):  # nested too deeply to re-encode: checked and built each time
            return _build(name, value, self._one)
        built = self._built.get(key)
        if built is None:
            built = self._keep(self._built, key, _build(name, value, self._one))
        return built

    def record(self, d: dict[str, Any], args: Any, explanation: Any) -> CompileRecord:
        """The record of a line that passed ``fields_problem`` (so its required fields are there)."""
        row = []
        get, seen, built = d.get, self._seen, self._built
        for name, default in _FIELD_DEFAULTS:  # one pass: a long log reads a million lines
            v = get(name, default)
            if type(v) is str:
                v = seen.setdefault(v, v)
            elif type(v) is dict and name in _SMALL_DICTS:
                try:
                    v = built.setdefault(("dict", name, _key(v) if v else "{}"), v)
                except (RecursionError, ValueError):
                    pass
            row.append(v)
        row[_ARGS_AT_ROW] = args
        row[_EXPLANATION_AT_ROW] = explanation
        return record_from_row(tuple(row))


#: Distinct argument lists and explanations kept built per file; a log whose every record
#: differs builds the rest each time rather than hold them all twice.
CACHE_ENTRIES = 1 << 16
_ARGS_AT_ROW = _FIELD_NAMES.index("args")
_EXPLANATION_AT_ROW = _FIELD_NAMES.index("explanation")
#: ``(field, the text before its value, the text after it, the value's first character)`` for the
#: values most of a line is made of, as the writer puts them.
_CUT = (("args", '"args": ', ', "in_tree": ', "["), ("explanation", '"explanation": ', ', "cost": ', "{"))


#: Per-record dicts of scalars that repeat across a log (cost and memory analyses, config states).
_SMALL_DICTS = frozenset({"cost", "memory", "config", "jit_leaves"})


_KEY = json.JSONEncoder(check_circular=False, separators=(",", ":"))


def _key(value: Any) -> str:
    """A key equal only for JSON values equal in content and types (``1``, ``1.0`` and ``true`` differ)."""
    return _KEY.encode(value)


def _build(name: str, value: Any, one: Any) -> tuple[Any, str | None]:
    """``(built, None)`` for a valid ``args`` list or ``explanation``, else ``(None, problem)``."""
    if name == "args":
        problem = args_problem(value)
        if problem is not None:
            return None, problem
        try:
            return one(tuple(one(ArgSignature.from_dict(a)) for a in value or ())), None
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            return None, f"not a compile record ({type(exc).__name__}: {exc})"
    problem = explanation_problem(value)
    if problem is not None:
        return None, problem
    if value is None:
        return None, None
    try:
        return one(Explanation.from_dict(value)), None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        return None, f"not a compile record ({type(exc).__name__}: {exc})"


def _lines(handle: Any, end: int | None = None) -> Iterator[tuple[int, bytes, bool]]:
    """``(number, line, whole)`` for each line that begins before byte ``end``, numbered from 1; a
    line past ``MAX_LINE_BYTES`` is skipped to its end and comes back empty with ``whole`` false.
    A last line without its newline (a writer cut short) comes back without one."""
    number = 0
    while end is None or handle.tell() < end:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = handle.readline(MAX_LINE_BYTES)
            yield number, b"", False
            continue
        yield number, line, True


def _unknown(_constant: str) -> None:
    return None


# NaN and Infinity (Python's json writes them for a cost analysis' unknown figures) read as
# unknown: no count, size or shape is infinite. One decoder for every line (``json.loads`` with
# an argument makes one per call).
_JSON = json.JSONDecoder(parse_constant=_unknown)


def _record(
    line: bytes, skipped: list[tuple[str, int, str]], source: str, number: int, shared: LineValues
) -> CompileRecord | None:
    """The record on ``line``, or ``None`` with the reason added to ``skipped``."""
    try:  # json's own recursion guard bounds nesting: nothing below walks a record recursively
        d, built = shared.decode(line.decode("utf-8", errors="replace"))
    except RecursionError:
        skipped.append((source, number, "nested too deeply to be a compile record"))
        return None
    except ValueError:
        reason = "partial last line" if not line.endswith(b"\n") else "not valid JSON"
        skipped.append((source, number, reason))
        return None
    problem = fields_problem(d)
    args = explanation = None
    if problem is None:
        args, problem = built.get("args") or shared.part("args", d.get("args"))
    if problem is None:
        explanation, problem = built.get("explanation") or shared.part("explanation", d.get("explanation"))
    if problem is not None:
        skipped.append((source, number, problem))
        return None
    try:
        return shared.record(d, args, explanation)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        skipped.append((source, number, f"not a compile record ({type(exc).__name__}: {exc})"))
    return None


def records_from_dicts(dicts: Any, source: str) -> tuple[list[CompileRecord], list[tuple[str, int, str]]]:
    """Compile records from dicts (a capture sidecar's ``compile_log``), and ``(source, index, reason)``
    for each that is not one (indices count from 1)."""
    out: list[CompileRecord] = []
    skipped: list[tuple[str, int, str]] = []
    for number, d in enumerate(dicts if isinstance(dicts, (list, tuple)) else (), start=1):
        problem = record_problem(d)
        if problem is None:
            try:
                out.append(CompileRecord.from_dict(d))
                continue
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                problem = f"not a compile record ({type(exc).__name__}: {exc})"
        skipped.append((source, number, problem))
    return out, skipped

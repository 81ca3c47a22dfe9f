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
from pathlib import Path
from typing import Any, Iterator

from jaxdiag.errors import CompileLogError
from jaxdiag.recording.records import _RECORD_FIELDS, SCHEMA, ArgSignature, CompileRecord, Explanation

_SCHEMA_FAMILY, _, _SCHEMA_MAJOR = SCHEMA.rpartition("/")
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
    (types included, so ``1`` and ``1.0`` or ``true`` stay apart).
    """

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}
        self._built: dict[Any, Any] = {}

    def _one(self, value: Any) -> Any:
        try:
            return self._seen.setdefault(value, value)
        except TypeError:  # an unhashable value in a hand-edited record: kept as it is
            return value

    def part(self, name: str, value: Any) -> tuple[Any, str | None]:
        """``value`` (the record's ``args`` or ``explanation``) checked and built, or the problem with it."""
        try:
            key = (name, _key(value))
        except (RecursionError, ValueError):  # nested too deeply to re-encode: checked and built each time
            return _build(name, value, self._one)
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = _build(name, value, self._one)
        return built

    def record(self, d: dict[str, Any], args: Any, explanation: Any) -> CompileRecord:
        kw: dict[str, Any] = {}
        for k, v in d.items():  # one pass: a long log reads a million lines
            if k not in _RECORD_FIELDS:
                continue
            if type(v) is str:
                v = self._one(v)
            elif type(v) is dict and k in _SMALL_DICTS:
                try:
                    v = self._built.setdefault(("dict", k, _key(v) if v else "{}"), v)
                except (RecursionError, ValueError):
                    pass
            kw[k] = v
        kw["args"] = args
        kw["explanation"] = explanation
        return CompileRecord.from_fields(kw)


#: Per-record dicts of scalars that repeat across a log (cost and memory analyses, config states).
_SMALL_DICTS = frozenset({"cost", "memory", "config", "jit_leaves"})


_KEY = json.JSONEncoder(check_circular=False, separators=(",", ":"))


def _key(value: Any) -> str:
    """A key equal only for JSON values equal in content and types (``1``, ``1.0`` and ``true`` differ)."""
    return _KEY.encode(value)


def _build(name: str, value: Any, one: Any) -> tuple[Any, str | None]:
    """``(built, None)`` for a valid ``args`` list or ``explanation``, else ``(None, problem)``."""
    if name == "args":
        problem = _args_problem(value)
        if problem is not None:
            return None, problem
        try:
            return one(tuple(one(ArgSignature.from_dict(a)) for a in value or ())), None
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            return None, f"not a compile record ({type(exc).__name__}: {exc})"
    problem = _explanation_problem(value)
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


def _record(
    line: bytes, skipped: list[tuple[str, int, str]], source: str, number: int, shared: LineValues
) -> CompileRecord | None:
    """The record on ``line``, or ``None`` with the reason added to ``skipped``."""
    try:  # json's own recursion guard bounds nesting: nothing below walks a record recursively
        # NaN and Infinity (Python's json writes them for a cost analysis' unknown figures) read as
        # unknown: no count, size or shape is infinite.
        d = json.loads(line.decode("utf-8", errors="replace"), parse_constant=_unknown)
    except RecursionError:
        skipped.append((source, number, "nested too deeply to be a compile record"))
        return None
    except ValueError:
        reason = "partial last line" if not line.endswith(b"\n") else "not valid JSON"
        skipped.append((source, number, reason))
        return None
    problem = _fields_problem(d)
    args = explanation = None
    if problem is None:
        args, problem = shared.part("args", d.get("args"))
    if problem is None:
        explanation, problem = shared.part("explanation", d.get("explanation"))
    if problem is not None:
        skipped.append((source, number, problem))
        return None
    try:
        return shared.record(d, args, explanation)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        skipped.append((source, number, f"not a compile record ({type(exc).__name__}: {exc})"))
    return None


def _problem(d: Any) -> str | None:
    """Why ``d`` is not a readable compile record, or ``None``.

    Checks the types the readers rely on, so a hand-edited line fails here, named,
    rather than later in a table.
    """
    return _fields_problem(d) or _args_problem(d.get("args")) or _explanation_problem(d.get("explanation"))


def _fields_problem(d: Any) -> str | None:
    """``_problem`` for everything but ``args`` and ``explanation``."""
    if not isinstance(d, dict):
        return f"not a compile record (a JSON {type(d).__name__})"
    schema = d.get("schema")
    if schema is not None:
        family, _, version = str(schema).rpartition("/")
        if family != _SCHEMA_FAMILY or version.split(".")[0] != _SCHEMA_MAJOR:
            return f"schema {schema!r} is not {SCHEMA}"
    for name in ("function", "qualname"):
        if not isinstance(d.get(name), str):
            return f"not a compile record (field {name!r} missing or not text)"
    if not _is_int(d.get("compile_index")):
        return "not a compile record (field 'compile_index' missing or not an integer)"
    if not _is_number(d.get("time_unix")):
        return "not a compile record (field 'time_unix' missing or not a number)"
    for name in ("trace_s", "lower_s", "backend_compile_s"):
        if d.get(name) is not None and not _is_number(d[name]):
            return f"field {name!r} is not a number"
    for name, kind in _OPTIONAL_FIELDS.items():
        value = d.get(name)
        if value is not None and not (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
            return f"field {name!r} is not {_KIND_NAMES[kind]}"
    return None


def _args_problem(args: Any) -> str | None:
    args = args or []
    if not isinstance(args, list):
        return "field 'args' is not a list"
    for a in args:
        if not isinstance(a, dict) or not isinstance(a.get("path"), str):
            return "an entry of 'args' has no text 'path'"
        for name in ("kind", "dtype", "sharding", "memory_kind", "value"):
            if a.get(name) is not None and not isinstance(a[name], str):
                return f"args {a['path']!r}: {name!r} is not text"
        shape = a.get("shape")
        if shape is not None and not (isinstance(shape, list) and all(type(x) is int for x in shape)):
            return f"args {a['path']!r}: 'shape' is not a list of integers"
    return None


def _explanation_problem(exp: Any) -> str | None:
    if exp is not None and not (isinstance(exp, dict) and isinstance(exp.get("changes", []), list)):
        return "field 'explanation' is not an object with a 'changes' list"
    if exp is not None and exp.get("compared_to") is not None and not _is_int(exp["compared_to"]):
        return "field 'explanation.compared_to' is not an integer"
    if exp is not None and not isinstance(exp.get("summary", ""), str):
        return "field 'explanation.summary' is not text"
    for change in (exp or {}).get("changes") or ():
        if not (
            isinstance(change, dict)
            and isinstance(change.get("what"), str)
            and isinstance(change.get("path"), str)
            and all(change.get(k) is None or isinstance(change[k], str) for k in ("old", "new"))
            and (change.get("axis") is None or _is_int(change["axis"]))
        ):
            return "not a compile record (an entry of 'explanation.changes' lacks text 'what' and 'path')"
    return None


def record_problem(d: Any) -> str | None:
    """Why the dict ``d`` is not a readable compile record, or ``None`` (what the reader checks per line)."""
    return _problem(d)


def records_from_dicts(dicts: Any, source: str) -> tuple[list[CompileRecord], list[tuple[str, int, str]]]:
    """Compile records from dicts (a capture sidecar's ``compile_log``), and ``(source, index, reason)``
    for each that is not one (indices count from 1)."""
    out: list[CompileRecord] = []
    skipped: list[tuple[str, int, str]] = []
    for number, d in enumerate(dicts if isinstance(dicts, (list, tuple)) else (), start=1):
        problem = _problem(d)
        if problem is None:
            try:
                out.append(CompileRecord.from_dict(d))
                continue
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                problem = f"not a compile record ({type(exc).__name__}: {exc})"
        skipped.append((source, number, problem))
    return out, skipped


#: Fields a record may leave out, and the JSON type each has when present.
_OPTIONAL_FIELDS: dict[str, type] = {
    "source": str,
    "call_site": str,
    "in_tree": str,
    "origin": str,
    "thread": str,
    "function_id": int,
    "pid": int,
    "traced": bool,
    "lowered": bool,
    "compiled": bool,
    "persistent_cache_hit": bool,
    "cost": dict,
    "memory": dict,
    "sharding": dict,
    "program_id": int,
}
_KIND_NAMES = {str: "text", int: "an integer", bool: "true or false", dict: "an object"}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)

"""Format a compile log and its advice: a rich table per function, or JSON for ``--json``.

Formatting only: causes come from the records' explanations and advice from
``jaxdiag.recording.advice``; nothing here diffs signatures.

JSON (``to_json``; ``write_json`` writes it, one record a line), schema ``jaxdiag.compiles/1``:

- ``schema_version``: ``"jaxdiag.compiles/1"``; a new major number means a renamed or
  removed field.
- ``files``: the log files read; ``skipped_lines``: ``[{"file", "line", "reason"}]``.
- ``totals``: ``{"compiles", "recompiles", "functions", "compile_s"}`` over the log.
- ``functions``: one entry per function (qualname and source), most compile time first:
  ``function`` (name), ``qualname``, ``source``, ``compiles``, ``recompiles``,
  ``compile_s``, ``causes`` (``[{"what", "path", "axis", "label", "count"}]``, one per
  distinct cause, most frequent first) and ``records`` (per compile:
  ``compile_index``, ``time_unix``, ``call_site``, ``call_function`` (the function the
  call site is in), ``transform`` (``"grad-forward"``, ``"grad-backward"``, ``"vmap"``...
  or ``null``), ``jit_options``, ``compile_s``, ``trace_s``,
  ``lower_s``, ``backend_compile_s``, ``persistent_cache_hit``, ``pid``, and
  ``explanation`` as ``{"summary", "changes", "compared_to"}`` or ``null`` for a first
  compile).
- ``advice``: ``[{"function", "source", "kind", "message", "suggestion", "compiles",
  "compile_s", "evidence"}]``, costliest first (see ``jaxdiag.recording.advice``);
  ``function`` and ``source`` match an entry of ``functions``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Sequence

from jaxdiag.recording.explain import function_key
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, Change, CompileRecord

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.recording.advice import Advice
    from jaxdiag.recording.log_reader import CompileLog

SCHEMA_VERSION = "jaxdiag.compiles/1"
#: A cause with no change in the signature: the function compiled with an identical one.
SAME_SIGNATURE = "same_signature"
UNKNOWN_CAUSE = "unknown"
_JAX_INTERNAL = "(jax internal)"
_MAX_CAUSES = 6
#: Terminal width from which the advice has a column of its own.
_WIDE = 140
_MAX_SITES = 2


def call_site_text(record: CompileRecord) -> str:
    """``train.py:42 (train)``: the call site (relative to the working folder, else the file's
    name; JSON keeps the full path) and the function it is in."""
    site, function = record.call_site, record.call_function
    return _site_text(
        site if site is None or isinstance(site, str) else str(site),  # a hand-edited log: any JSON value
        function if function is None or isinstance(function, str) else str(function),
        os.getcwd(),
    )


@functools.lru_cache(maxsize=4096)  # a long log repeats a few call sites a million times
def _site_text(call_site: str | None, call_function: str | None, cwd: str) -> str:
    site = call_site or "?"
    try:
        rel = os.path.relpath(site, cwd)
        site = rel if not rel.startswith("..") else os.path.basename(site)
    except ValueError:
        site = os.path.basename(site)
    return f"{site} ({call_function})" if call_function else site


@dataclasses.dataclass(frozen=True, slots=True)
class Cause:
    """One kind of change that made a function compile again, and how often."""

    what: str
    path: str
    axis: int | None
    count: int
    name: str | None = None  # the path as the user wrote it (parameter names)

    @property
    def label(self) -> str:
        path = self.name or self.path
        if self.what == SAME_SIGNATURE:
            return "same signature (context, cache or committed devices)"
        if self.what == UNKNOWN_CAUSE:
            return "cause unknown (the same argument signature as an earlier compile; see its summary)"
        if self.what == "committed":
            return "inputs uncommitted (NumPy) <-> committed to devices"
        if self.what == "function":
            return "new function object / closure"
        if self.what == "shape":
            return f"{path} shape" + (f" axis {self.axis}" if self.axis is not None else " (rank)")
        if self.what == "weak_type":
            return f"{path} Python scalar <-> typed array"
        if self.what == "static":
            return f"static {path}"
        if self.what == "structure":
            return f"{path or 'argument tree'} structure"
        if self.what == "container":
            return f"{path} container type"
        if self.what == "config":
            return f"jax config {path}"
        if self.what == "jit_options":
            return f"jit option {path} (another jit object)"
        if self.what == "transform":
            return "first compile under a transformation (grad/vmap)"
        return f"{path} {self.what.replace('_', ' ')}"


@dataclasses.dataclass(frozen=True, slots=True)
class FunctionRow:
    """One function's compiles, in the log's order."""

    function: str
    qualname: str
    source: str | None
    records: tuple[CompileRecord, ...]
    causes: tuple[Cause, ...]
    #: The records' compile seconds, summed once (a long log's rows are sorted and shown by it).
    compile_s: float = 0.0

    @property
    def compiles(self) -> int:
        return len(self.records)

    @property
    def recompiles(self) -> int:
        return sum(r.compile_index > 1 for r in self.records)


def function_rows(records: Sequence[CompileRecord]) -> list[FunctionRow]:
    """Group records by function, most compile time first."""
    groups: dict[tuple[str, str | None], list[CompileRecord]] = {}
    for r in records:
        # JAX's own jitted helpers (eager jnp ops, device_put slicing) fold into one row.
        key = (_JAX_INTERNAL, None) if r.origin == JAX_INTERNAL_ORIGIN else function_key(r)
        groups.setdefault(key, []).append(r)
    rows = []
    for (qualname, source), recs in groups.items():
        counts: Counter[tuple[str, str, int | None]] = Counter()
        names: dict[tuple[str, str, int | None], str] = {}
        # A log reader holds each distinct explanation once: count them, then their causes.
        explained: dict[int, list[Any]] = {}
        for r in recs:
            if r.explanation is not None:
                explained.setdefault(id(r.explanation), [r.explanation, 0])[1] += 1
        for explanation, times in explained.values():
            changes: Sequence[Change] = explanation.changes
            if not changes and "unknown" in explanation.summary:
                counts[(UNKNOWN_CAUSE, "", None)] += times
            elif not changes:
                counts[(SAME_SIGNATURE, "", None)] += times
            # Several axes of one leaf, or one leaf in several fields, count once per kind; in the
            # explanation's order, so that causes with equal counts keep one order from run to run.
            # The leaves that changed commitment count once: they are one cause (NumPy inputs, once).
            for key in dict.fromkeys((c.what, "" if c.what == "committed" else c.path, c.axis) for c in changes):
                counts[key] += times
            names.update({(c.what, c.path, c.axis): c.label for c in changes if c.label})
        causes = tuple(Cause(w, p, a, n, names.get((w, p, a))) for (w, p, a), n in counts.most_common())
        name = recs[0].function
        if qualname == _JAX_INTERNAL:
            top = Counter(r.function for r in recs).most_common(3)
            name = "JAX internals: " + ", ".join(f"{n} {c}x" for n, c in top)
        rows.append(FunctionRow(name, qualname, source, tuple(recs), causes, sum(r.compile_s for r in recs)))
    rows.sort(key=lambda row: (-row.compile_s, -row.compiles, row.qualname))
    return rows


def render(
    log: "CompileLog", advice: Sequence["Advice"], *, width: int | None = None, color: bool | None = None
) -> str:
    """The compile table as text (with ANSI colour when ``color``)."""
    from jaxdiag.render.terminal_text import esc as escape
    from rich.table import Table

    from jaxdiag.render.terminal import text_console

    console, buf = text_console(width, color)
    rows = function_rows(log.records)
    total_s = sum(r.compile_s for r in rows)
    console.print(
        f"[bold]jaxdiag compiles[/bold]  {len(log.records)} compile(s) of {len(rows)} function(s), "
        f"{total_s:.2f} s compiling" + (f"  ({len(log.files)} file(s))" if log.files else "")
    )
    # Below ``_WIDE`` columns the advice goes under the table, so that causes keep room to read.
    wide = console.width >= _WIDE
    table = Table(show_edge=False, show_lines=True, expand=True)
    for col, just, ratio, least in (
        ("function", "left", None, None),
        ("compiles", "right", None, None),
        ("compile s", "right", None, None),
        ("causes", "left", 2, 24),
        *((("advice", "left", 3, 30),) if wide else ()),
    ):
        table.add_column(col, justify=just, overflow="fold", ratio=ratio, min_width=least)
    below: list[str] = []
    by_function: dict[tuple[str, str | None], list[Advice]] = {}
    for a in advice:
        by_function.setdefault((a.function, a.source), []).append(a)
    for row, name in zip(rows, _display_names(rows)):
        causes = [f"{c.count}x {escape(c.label)}" for c in row.causes[:_MAX_CAUSES]]
        if len(row.causes) > _MAX_CAUSES:
            causes.append(f"... {len(row.causes) - _MAX_CAUSES} more")
        tips = [
            f"{escape(a.message.removeprefix(row.function + ': '))}\n[bold]->[/bold] {escape(a.suggestion)}"
            for a in by_function.get((row.qualname, row.source), [])
        ]
        sites = list(dict.fromkeys(call_site_text(r) for r in row.records if r.call_site))
        shown = "\n".join(f"called at {escape(s)}" for s in sites[:_MAX_SITES])
        if len(sites) > _MAX_SITES:
            shown += f"\n... {len(sites) - _MAX_SITES} more call sites"
        cells = [
            escape(name) + (f"\n[dim]{shown}[/dim]" if shown else ""),
            str(row.compiles),
            f"{row.compile_s:.2f}",
            "\n".join(causes) or "—",
        ]
        if wide:
            cells.append("\n\n".join(tips) or "—")
        elif tips:
            below.append(f"[bold]{escape(name)}[/bold]")
            below += [f"\t{t}" for t in tips]
        table.add_row(*cells)
    console.print(table)
    if below:
        console.print("\n[bold]Advice[/bold]")
        from rich.padding import Padding

        for text in below:  # each tip indented under its function, wrapped within the indent
            console.print(Padding(text[1:], (0, 0, 0, 2)) if text.startswith("\t") else text)
    return buf.getvalue()


def _display_names(rows: list[FunctionRow]) -> list[str]:
    """Short names, made longer only where two rows would read the same."""
    names = Counter(row.function for row in rows)
    qualnames = Counter(row.qualname for row in rows)
    return [
        row.function
        if names[row.function] == 1
        else row.qualname
        if qualnames[row.qualname] == 1
        else f"{row.qualname} ({row.source})"
        for row in rows
    ]


def to_json(log: "CompileLog", advice: Sequence["Advice"]) -> dict[str, Any]:
    """The compile log, per-function causes and advice as plain JSON data (schema above)."""
    return _document(log, advice, function_rows(log.records))


def _document(
    log: "CompileLog", advice: Sequence["Advice"], rows: list[FunctionRow], records: Sequence[Any] | None = None
) -> dict[str, Any]:
    """``to_json``'s document; ``records``: what stands for each function's records (default: them)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "files": list(log.files),
        "skipped_lines": [{"file": f, "line": n, "reason": why} for f, n, why in log.skipped_lines],
        "totals": {
            "compiles": len(log.records),
            "recompiles": sum(row.recompiles for row in rows),
            "functions": len(rows),
            "compile_s": round(sum(row.compile_s for row in rows), 6),
        },
        "functions": [_function_json(row, None if records is None else records[i]) for i, row in enumerate(rows)],
        "advice": [a.to_dict() for a in advice],
    }


def write_json(log: "CompileLog", advice: Sequence["Advice"], write: Callable[[str], Any]) -> None:
    """``to_json``'s document as text, a part at a time: indented as ``json.dumps(indent=2)``
    indents it, but each compile record on one line.

    A long run's log holds a million records: indented, they would be a hundred
    million lines written by ``json``'s pure-Python encoder, and the whole text held
    at once. Here each record goes through ``json``'s C encoder and is written as made.
    """
    rows = function_rows(log.records)
    doc = _document(log, advice, rows, [_RECORDS.format(i) for i in range(len(rows))])
    text = json.dumps(doc, indent=2)
    explained: dict[int, tuple[Any, str]] = {}  # each distinct explanation's text (a log reader holds each once)
    for i, row in enumerate(rows):
        head, _, text = text.partition(json.dumps(_RECORDS.format(i)))
        write(head)
        if not row.records:
            write("[]")
            continue
        write("[")
        last = len(row.records) - 1
        lines: list[str] = []
        for n, r in enumerate(row.records):
            explanation = r.explanation
            known = explained.get(id(explanation))
            if known is None or known[0] is not explanation:
                text_of = "null" if explanation is None else _COMPACT(explanation.to_dict())
                known = explained[id(explanation)] = (explanation, text_of)
            fields = _COMPACT(_record_fields(r))
            lines.append(f'{_ITEM_INDENT}{fields[:-1]}, "explanation": {known[1]}}}' + ("," if n < last else ""))
            if len(lines) == 1000 or n == last:
                write("\n" + "\n".join(lines))
                lines = []
        write("\n" + _CLOSE_INDENT + "]")
    write(text + "\n")


#: Where each function's records go in the text (a NUL never appears in a name: unique).
_RECORDS = "\x00records {}"
_COMPACT = json.JSONEncoder(separators=(", ", ": ")).encode
#: A function's records sit at depth 3 of the document (functions, a function, its records).
_ITEM_INDENT = " " * 8
_CLOSE_INDENT = " " * 6


def _function_json(row: FunctionRow, records: Any = None) -> dict[str, Any]:
    return {
        "function": row.function,
        "qualname": row.qualname,
        "source": row.records[0].source,
        "compiles": row.compiles,
        "recompiles": row.recompiles,
        "compile_s": round(row.compile_s, 6),
        "causes": [
            {"what": c.what, "path": c.path, "axis": c.axis, "label": c.label, "count": c.count} for c in row.causes
        ],
        "records": [_record_json(r) for r in row.records] if records is None else records,
    }


def _record_json(r: CompileRecord) -> dict[str, Any]:
    return {**_record_fields(r), "explanation": None if r.explanation is None else r.explanation.to_dict()}


def _record_fields(r: CompileRecord) -> dict[str, Any]:
    """``_record_json`` but its last entry, ``explanation``."""
    return {
        "compile_index": r.compile_index,
        "time_unix": r.time_unix,
        "call_site": r.call_site,
        "call_function": r.call_function,
        "transform": r.transform,
        "jit_options": r.jit_options,
        "compile_s": round(r.compile_s, 6),
        "trace_s": r.trace_s,
        "lower_s": r.lower_s,
        "backend_compile_s": r.backend_compile_s,
        "persistent_cache_hit": r.persistent_cache_hit,
        "pid": r.pid,
    }

"""Fallback reader for runs that only have ``<host>.trace.json.gz`` (Chrome trace format).

``jax.profiler`` writes this beside the ``.xplane.pb`` on some versions. Its
processes (``pid``) are the XPlanes and its threads (``tid``) the XLines, named by
``process_name``/``thread_name`` metadata events; complete events (``ph: "X"``)
carry ``ts``/``dur`` in microseconds and their stats in ``args``. The events are
read into the reader contract's columns and handed to ``xspace.collect_host``, so both
formats follow the same rules. Plane
stats (device facts, versions) are not in this format: those columns are NaN.
"""

from __future__ import annotations

import gzip
import math
import zlib
from array import array
from pathlib import Path
from typing import Any

from jaxdiag.errors import TraceFormatError
from jaxdiag.files import MAX_DEPTH, loads, open_regular
from jaxdiag.trace.contract import LineColumns, PlaneColumns, stat_columns
from jaxdiag.trace.xspace import HostColumns, collect_host, is_profiler_plane

#: Top-level keys and event categories of a PyTorch profiler (Kineto) trace, which jax.profiler never writes.
_KINETO_KEYS = ("schemaVersion", "deviceProperties", "traceName")
_KINETO_CATEGORIES = frozenset({"cpu_op", "python_function", "kernel", "cuda_runtime", "gpu_memcpy"})


#: The most JSON text a trace may decompress to (its events take about eight times that in memory).
MAX_JSON_BYTES = 256 << 20
#: Timestamps and durations beyond this many microseconds (about 300 years) are not times.
_MAX_US = 1e16


class _Line:
    __slots__ = ("name", "names", "starts", "durs", "stats", "frames")

    def __init__(self, name: str):
        self.name, self.names, self.starts, self.durs, self.stats, self.frames = name, [], [], [], [], 0


def read_json_trace(path: Path, host: str, *, include_python: bool = False) -> HostColumns:
    """Read one ``.trace.json.gz`` into the same columns as ``xspace.read_xspace``.

    Raises:
      TraceFormatError: not gzip, truncated, not JSON, or no ``traceEvents``.
    """
    raw = _decompressed(path)
    if not raw.strip():
        raise TraceFormatError(f"{path}: empty trace")
    try:
        doc = loads(raw, constants=True)  # a NaN time makes its event malformed, not the trace
    except ValueError as exc:
        raise TraceFormatError(f"{path}: not a JSON trace ({str(exc)[:80]})") from None
    except RecursionError:
        raise TraceFormatError(f"{path}: not a JSON trace (nested more than {MAX_DEPTH} deep)") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceFormatError(f"{path}: no 'traceEvents' list; not a Chrome trace")
    planes, bad, first = _planes(events, include_python)
    if not planes:
        why = f"; all {bad:,} were malformed (first: {first})" if bad else ""
        raise TraceFormatError(f"{path}: no complete ('X') events with a named process{why}")
    if not any(is_profiler_plane(p.name) for p in planes):
        raise TraceFormatError(
            f"{path}: not a jax.profiler trace{_made_by(doc, events)}: none of its processes "
            f"({_names(p.name for p in planes)}) is a host or device plane (/host:CPU, /device:...)"
        )
    cols = collect_host(planes, host, include_python=include_python)
    if bad:
        cols.notes.append(f"{host}: {bad} malformed JSON trace events skipped (first: {first})")
    return cols


def _decompressed(path: Path) -> bytes:
    """The JSON text of ``path``: gunzipped, or as it is when it is plain JSON under the ``.gz`` name.

    At most ``MAX_JSON_BYTES`` are decompressed, so a small file that inflates to
    gigabytes (a gzip bomb) is refused before it fills memory.
    """
    f, _size = open_regular(path, "a JSON trace (.trace.json.gz)", TraceFormatError)
    with f:
        try:
            head = f.read(2)
            f.seek(0)
            if head != b"\x1f\x8b":  # jax.profiler gzips it; a plain JSON trace under the name reads the same
                raw = f.read(MAX_JSON_BYTES + 1)
                if raw.lstrip()[:1] not in (b"{", b"["):
                    raise TraceFormatError(f"{path}: not a gzip file nor JSON text; expected a Chrome trace")
            else:
                with gzip.GzipFile(fileobj=f, mode="rb") as unzipped:
                    raw = unzipped.read(MAX_JSON_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"{path}: truncated or not a gzip file ({exc})") from None
    if len(raw) > MAX_JSON_BYTES:
        raise TraceFormatError(
            f"{path}: decompresses to more than {MAX_JSON_BYTES:,} bytes, the most jaxdiag reads of a JSON trace "
            "(read the .xplane.pb of the capture instead)"
        )
    return raw


def _made_by(doc: Any, events: list[Any]) -> str:
    """``" (a PyTorch profiler trace)"`` where the trace says so, else ``""``."""
    if isinstance(doc, dict) and any(k in doc for k in _KINETO_KEYS):
        return " (a PyTorch profiler trace)"
    if any(isinstance(e, dict) and e.get("cat") in _KINETO_CATEGORIES for e in events[:1000]):
        return " (a PyTorch profiler trace)"
    return ""


def _names(names: Any, most: int = 4) -> str:
    names = sorted(set(map(repr, names)))
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _planes(events: list[Any], include_python: bool) -> tuple[list[PlaneColumns], int, str]:
    """Group complete events into planes and lines (Python frames left out and counted unless
    ``include_python``); count the malformed ones and say what was wrong with the first."""
    process: dict[Any, str] = {}
    thread: dict[tuple[Any, Any], str] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and isinstance(e.get("args"), dict):
            if not (_is_id(e.get("pid")) and _is_id(e.get("tid"))):
                continue
            if e.get("name") == "process_name":
                process[e.get("pid")] = str(e["args"].get("name", ""))
            elif e.get("name") == "thread_name":
                thread[(e.get("pid"), e.get("tid"))] = str(e["args"].get("name", ""))
    planes: dict[Any, dict[Any, _Line]] = {}
    bad, first = 0, ""
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        pid, tid = e.get("pid"), e.get("tid")
        problem = _event_problem(e)
        if problem is not None:
            bad += 1
            first = first or problem
            continue
        lines = planes.setdefault(pid, {})
        line = lines.get(tid)
        if line is None:
            line = lines[tid] = _Line(thread.get((pid, tid), f"tid {tid}"))
        name = str(e.get("name", ""))
        if not include_python and name[:1] == "$":
            line.frames += 1
            continue
        args = e.get("args")
        line.names.append(name)
        line.starts.append(float(e["ts"]) * 1e3)
        line.durs.append(float(e.get("dur", 0.0)) * 1e3)
        line.stats.append(dict(args) if isinstance(args, dict) else {})
    out = [
        PlaneColumns(
            process.get(pid, f"pid {pid}"),
            {},
            [
                LineColumns(
                    x.name, x.names, array("d", x.starts), array("d", x.durs), stat_columns(x.stats), x.frames, i
                )
                for i, x in enumerate(lines.values())
            ],
            index,
        )
        for index, (pid, lines) in enumerate(planes.items())
    ]
    return out, bad, first


def _is_id(value: Any) -> bool:
    """Whether ``value`` can be a process or thread id: a number or text (Chrome writes either), or absent."""
    return value is None or (isinstance(value, (int, float, str)) and not isinstance(value, bool))


def _event_problem(e: dict[str, Any]) -> str | None:
    """Why the complete event ``e`` cannot be placed on the timeline, or ``None``."""
    if not (_is_id(e.get("pid")) and _is_id(e.get("tid"))):
        return "a pid or tid that is neither a number nor text"
    ts, dur = e.get("ts"), e.get("dur", 0.0)
    for field, value in (("ts", ts), ("dur", dur)):
        if value is None:
            return f"no {field}"
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return f"{field} is {type(value).__name__}, not a number"
        if not math.isfinite(float(value)) or abs(float(value)) > _MAX_US:
            return f"{field} {value!r} out of range"
    if float(dur) < 0:
        return f"a negative duration (dur {dur!r})"
    return None

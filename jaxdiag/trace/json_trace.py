"""Fallback reader for runs that only have ``<host>.trace.json.gz`` (Chrome trace format).

``jax.profiler`` writes this beside the ``.xplane.pb`` on some versions. Its
processes (``pid``) are the XPlanes and its threads (``tid``) the XLines, named by
``process_name``/``thread_name`` metadata events; complete events (``ph: "X"``)
carry ``ts``/``dur`` in microseconds and their stats in ``args``. The events are
handed to ``xspace.collect_host`` so both formats follow the same rules. Plane
stats (device facts, versions) are not in this format: those columns are NaN.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path
from typing import Any

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.xspace import HostColumns, collect_host, is_profiler_plane

#: Top-level keys and event categories of a PyTorch profiler (Kineto) trace, which jax.profiler never writes.
_KINETO_KEYS = ("schemaVersion", "deviceProperties", "traceName")
_KINETO_CATEGORIES = frozenset({"cpu_op", "python_function", "kernel", "cuda_runtime", "gpu_memcpy"})


class _Event:
    __slots__ = ("name", "start_ns", "duration_ns", "stats")

    def __init__(self, name: str, start_ns: float, duration_ns: float, stats: list[tuple[str, Any]]):
        self.name, self.start_ns, self.duration_ns, self.stats = name, start_ns, duration_ns, stats


class _Line:
    __slots__ = ("name", "events")

    def __init__(self, name: str):
        self.name, self.events = name, []


class _Plane:
    __slots__ = ("name", "stats", "lines")

    def __init__(self, name: str):
        self.name, self.stats, self.lines = name, [], {}


def read_json_trace(path: Path, host: str, *, include_python: bool = False) -> HostColumns:
    """Read one ``.trace.json.gz`` into the same columns as ``xspace.read_xspace``.

    Raises:
      TraceFormatError: not gzip, truncated, not JSON, or no ``traceEvents``.
    """
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: truncated or not a gzip file ({exc})") from None
    if not raw.strip():
        raise TraceFormatError(f"{path}: empty trace")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not a JSON trace ({str(exc)[:80]})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceFormatError(f"{path}: no 'traceEvents' list; not a Chrome trace")
    planes, bad = _planes(events)
    if not planes:
        raise TraceFormatError(f"{path}: no complete ('X') events with a named process")
    if not any(is_profiler_plane(p.name) for p in planes):
        raise TraceFormatError(
            f"{path}: not a jax.profiler trace{_made_by(doc, events)}: none of its processes "
            f"({_names(p.name for p in planes)}) is a host or device plane (/host:CPU, /device:...)"
        )
    cols = collect_host(planes, host, include_python=include_python)
    if bad:
        cols.notes.append(f"{host}: {bad} malformed JSON trace events skipped")
    return cols


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


def _planes(events: list[Any]) -> tuple[list[_Plane], int]:
    """Group complete events into planes and lines; count the malformed ones."""
    process: dict[Any, str] = {}
    thread: dict[tuple[Any, Any], str] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and isinstance(e.get("args"), dict):
            if e.get("name") == "process_name":
                process[e.get("pid")] = str(e["args"].get("name", ""))
            elif e.get("name") == "thread_name":
                thread[(e.get("pid"), e.get("tid"))] = str(e["args"].get("name", ""))
    planes: dict[Any, _Plane] = {}
    bad = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        pid, tid = e.get("pid"), e.get("tid")
        try:
            start, dur = float(e["ts"]) * 1e3, float(e.get("dur", 0.0)) * 1e3
            name = str(e.get("name", ""))
        except (KeyError, TypeError, ValueError):
            bad += 1
            continue
        if not (math.isfinite(start) and math.isfinite(dur)):
            bad += 1
            continue
        args = e.get("args")
        stats = list(args.items()) if isinstance(args, dict) else []
        plane = planes.get(pid)
        if plane is None:
            plane = planes[pid] = _Plane(process.get(pid, f"pid {pid}"))
        line = plane.lines.get(tid)
        if line is None:
            line = plane.lines[tid] = _Line(thread.get((pid, tid), f"tid {tid}"))
        line.events.append(_Event(name, start, dur, stats))
    out = []
    for plane in planes.values():
        plane.lines = list(plane.lines.values())
        out.append(plane)
    return out, bad

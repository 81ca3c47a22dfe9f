"""Goodput of a monitored run: where its time went, from the metrics streams alone (no jax).

Each process's time from the monitor's start to its stop (or its last line, for a
run still going or one that died) is split into:

- **steady steps**: the time inside steps (from a step's mark to its end), less compiles;
- **compile**: compiles during the steps, before warm-up ended or first compiles;
- **recompiles after warm-up**: compiles in steps the monitor flagged as recompiling
  after warm-up, their own line (they are what a run should not have);
- **data wait**: the time between a step's end and the next one's mark, where it is
  ordinary (at most ``slow_factor`` times the median step): loading the next batch;
- **between steps**: such gaps that are longer: evaluation, checkpointing, logging;
- **idle**: the rest: from the monitor's start to the first step's mark, after the
  last step, and any time no step covers.

A stream with only step ends (no marks) books the whole step as steady. Goodput is
the share of steady steps in the whole.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from jaxdiag.monitoring.stream import read_all, steps_of

CATEGORIES = ("steady steps", "compile", "recompiles after warm-up", "data wait", "between steps", "idle")
SCHEMA = "jaxdiag.monitor-summary/1"


def summarize(folder: str | Path) -> dict[str, Any]:
    """The summary of every stream in ``folder`` (see the module doc); a JSON-ready dict.

    Raises:
      MonitorLogError: no stream, or an unreadable one.
    """
    processes = []
    for path, lines, bad in read_all(folder):
        processes.append(_process(path, lines, bad))
    processes.sort(key=lambda p: (p["process"] if isinstance(p["process"], int) else 0, p["host"] or "", p["file"]))
    return {"schema": SCHEMA, "folder": str(folder), "processes": processes}


def _process(path: Path, lines: list[dict[str, Any]], bad: int) -> dict[str, Any]:
    starts = [line for line in lines if line.get("event") == "start"]
    start = starts[-1] if starts else {}
    steps = steps_of(lines)
    stops = [line for line in lines if line.get("event") == "stop"]
    factor = _number(start.get("slow_factor")) or 3.0
    walls = [float(s["wall_ms"]) for s in steps]
    steady_walls = [float(s["wall_ms"]) for s in steps if not s.get("compiles")] or walls
    median = statistics.median(steady_walls) if steady_walls else 0.0
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    for i, s in enumerate(steps):
        wall = float(s["wall_ms"])
        compile_ms = min(_number(s.get("compile_ms")) or 0.0, wall)
        rest = wall - compile_ms
        gap = min(_number(s.get("gap_ms")) or 0.0, rest)
        seconds["recompiles after warm-up" if s.get("recompile") else "compile"] += compile_ms / 1e3
        if i == 0:  # from the monitor's start to the first step: set-up
            seconds["idle"] += gap / 1e3
        else:
            seconds["between steps" if median and gap > factor * median else "data wait"] += gap / 1e3
        seconds["steady steps"] += (rest - gap) / 1e3
    t0 = _number(start.get("t"))
    t1 = _number(stops[-1].get("t")) if stops else max((_number(s.get("t")) or 0.0 for s in steps), default=None)
    span = max(0.0, t1 - t0) if t0 is not None and t1 is not None else sum(walls) / 1e3
    seconds["idle"] += max(0.0, span - sum(walls) / 1e3)
    total = sum(seconds.values()) or 1.0
    device = {}
    for line in lines:
        if line.get("event") == "device_time" and isinstance(line.get("device_ms"), dict):
            for k, v in line["device_ms"].items():
                if str(k).lstrip("-").isdigit() and _number(v) is not None:
                    device[int(k)] = float(v)
    return {
        "file": str(path),
        "host": start.get("host"),
        "process": start.get("process"),
        "running": not stops,
        "unreadable_lines": bad,
        "steps": len(steps),
        "span_s": span,
        "median_step_ms": median,
        "p90_step_ms": _quantile(steady_walls, 0.9),
        "goodput": seconds["steady steps"] / total,
        "seconds": seconds,
        "recompiles": [
            {
                "step": s["step"],
                "functions": [str(f) for f in _list(s.get("recompiled")) or _list(s.get("compiles"))],
                "ms": s.get("compile_ms"),
            }
            for s in steps
            if s.get("recompile")
        ],
        "windows": [
            _pick(line, ("window", "reason", "first_step", "last_step", "run_dir")) for line in _events(lines, "window")
        ],
        "dropped": [str(line.get("run_dir")) for line in _events(lines, "window_dropped")],
        "stragglers": [_pick(line, ("process", "host", "upto", "message")) for line in _events(lines, "straggler")],
        "hangs": [_pick(line, ("t", "stalled_s", "not_arrived", "message")) for line in _events(lines, "hang")],
        "series": {
            "step": [s["step"] for s in steps],
            "wall_ms": walls,
            "device_ms": [device.get(s["step"]) for s in steps],
        },
    }


def _events(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == kind]


def _pick(line: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: line.get(k) for k in keys}


def _number(value: Any) -> float | None:
    """A finite number read from a stream, else ``None`` (a hand-edited line is not trusted)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

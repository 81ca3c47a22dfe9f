"""The metrics stream: one JSONL file per process in the monitor's folder, and its reader.

Each line is one object. A step line has ``step`` (its number), ``t`` (when it
ended, seconds since the epoch), ``wall_ms`` (from the end of the step before,
so the data loading and work between steps belong to the step they feed),
``gap_ms`` (the part of it before the step began; absent when only ends are
known), ``compile_ms`` and ``compiles`` (the functions that compiled during it;
``recompile`` and ``recompiled`` when one was a recompile after warm-up) and
``window`` (the capture window it was in). Other lines have an ``event``:
``start`` (host, process, settings), ``window`` (a capture closed: why, its steps,
its folder), ``window_dropped``, ``window_skipped`` (the profiler was busy), ``device_time`` (device busy time per step of a
window, from its report: the device time the monitor knows), ``straggler``,
``hang``, ``stop``.

Lines are buffered and written every few steps (and at once for events), so a
step pays a list append; a crash loses at most the unwritten steps. Reading
needs no jax.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any, Iterable

from jaxdiag.errors import JaxdiagError

STREAM_GLOB = "metrics-*.jsonl"
SCHEMA = "jaxdiag.monitor/1"


class MonitorLogError(JaxdiagError):
    """A monitor folder or stream cannot be read."""


def stream_name(host: str, process_index: int) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)
    return f"metrics-{safe}-p{process_index}.jsonl"


class StreamWriter:
    """Appends lines to ``<folder>/metrics-<host>-p<process>.jsonl``; thread-safe."""

    def __init__(self, folder: Path, process_index: int, flush_every: int) -> None:
        self.path = folder / stream_name(socket.gethostname(), process_index)
        self.flush_every = max(1, int(flush_every))
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")
        self._failed = False

    def step(self, line: dict[str, Any]) -> None:
        self.step_text(json.dumps(line, separators=(",", ":"), allow_nan=False, default=str))

    def step_text(self, text: str) -> None:
        """Append one line already formatted as JSON; written every ``flush_every`` lines."""
        with self._lock:
            self._lines.append(text)
            due = len(self._lines) >= self.flush_every
        if due:
            self.flush()

    def event(self, line: dict[str, Any]) -> None:
        """Write ``line`` now (from any thread)."""
        text = json.dumps(line, separators=(",", ":"), default=str)
        with self._lock:
            self._lines.append(text)
        self.flush()

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
            if not lines or self._failed:
                return
            try:
                self._file.write("\n".join(lines) + "\n")
                self._file.flush()
            except (OSError, ValueError) as exc:  # a full disk or a closed file: never the user's error
                self._failed = True
                _warn(f"jaxdiag.monitor: the metrics stream {self.path} is no longer written ({exc})")

    def close(self) -> None:
        self.flush()
        with self._lock:
            try:
                self._file.close()
            except OSError:
                pass


def _warn(message: str) -> None:
    import warnings

    try:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    except Exception:  # noqa: BLE001 - under -W error
        pass


def stream_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The streams of a monitor folder.

    Raises:
      MonitorLogError: not a folder, or no stream in it.
    """
    path = Path(folder)
    if path.is_file() and path.name.endswith(".jsonl"):
        return [path]
    if not path.is_dir():
        raise MonitorLogError(f"{folder}: no such monitor folder")
    files = sorted(path.glob(STREAM_GLOB))
    if not files:
        raise MonitorLogError(
            f"{folder}: no metrics stream ({STREAM_GLOB}) in this folder; is it a jaxdiag.monitor logdir?"
        )
    return files


def read_stream(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The lines of one stream as dicts, and how many were unreadable (a torn last line, a damaged one).

    Raises:
      MonitorLogError: the file cannot be read, or no line of it is a monitor line.
    """
    lines: list[dict[str, Any]] = []
    bad = 0
    if not path.is_file():  # a folder, a FIFO, a device: never opened (a FIFO would wait forever)
        raise MonitorLogError(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    value = json.loads(raw)
                except (ValueError, RecursionError):
                    bad += 1
                    continue
                if isinstance(value, dict) and (_is_step(value) or isinstance(value.get("event"), str)):
                    lines.append(value)
                else:
                    bad += 1
    except OSError as exc:
        raise MonitorLogError(f"{path}: cannot read the metrics stream ({exc.strerror or exc})") from None
    if not lines and bad:
        raise MonitorLogError(f"{path}: not a jaxdiag metrics stream (no line of it is one)")
    return lines, bad


def _is_step(value: dict[str, Any]) -> bool:
    step, wall = value.get("step"), value.get("wall_ms")
    return (
        isinstance(step, int)
        and not isinstance(step, bool)
        and isinstance(wall, (int, float))
        and not isinstance(wall, bool)
        and 0 <= wall < float("inf")
    )


def read_all(folder: str | os.PathLike[str]) -> list[tuple[Path, list[dict[str, Any]], int]]:
    """Every stream of ``folder``: its path, its lines, its unreadable line count."""
    out = []
    for path in stream_files(folder):
        lines, bad = read_stream(path)
        out.append((path, lines, bad))
    return out


def steps_of(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "event" not in line and _is_step(line)]

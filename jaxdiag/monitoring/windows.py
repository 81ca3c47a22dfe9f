"""Capture windows the monitor opens: a ``jax.profiler`` capture of a few steps, kept within a budget.

Each window is a run of ``capturing.profile.Capture`` under ``<logdir>/windows``
(``plugins/profile/<run>/``), its sidecar tagged with why it was captured
(``captured_because``, which ``jaxdiag report`` shows). Once it closes, process 0
builds its report beside it (``report.json``) in a child process at low priority, so
the training loop is not slowed by the analyses (the child waits, at most a minute,
for every process's host file to land in the run folder); and the oldest windows are
removed while there are more than ``max_windows`` or they take more than the disk
budget.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

#: The file each window's report is written to, beside its trace.
REPORT_NAME = "report.json"
#: The sidecar tag holding why a window was captured.
REASON_TAG = "captured_because"


class WindowKeeper:
    """Opens, closes, reports on and prunes the monitor's capture windows."""

    def __init__(
        self,
        folder: Path,
        *,
        steps: int,
        max_windows: int,
        budget_bytes: int,
        reports: bool,
        process_index: int,
        process_count: int,
    ) -> None:
        self.folder = folder
        self.steps = max(1, int(steps))
        self.max_windows = max(1, int(max_windows))
        self.budget_bytes = int(budget_bytes)
        self.reports = reports and process_index == 0
        self.process_index = process_index
        self.process_count = process_count
        self.capture: Any = None
        self.start_step: int | None = None
        self.reason: str | None = None
        self.count = 0
        self.kept: list[Path] = []
        self._children: list[tuple[subprocess.Popen[bytes], Path, float]] = []

    @property
    def open(self) -> bool:
        return self.capture is not None

    def last_step(self) -> int | None:
        return None if self.start_step is None else self.start_step + self.steps - 1

    def start(self, step: int, reason: str) -> bool:
        """Start a capture of steps ``step`` to ``step + steps - 1``; False when it cannot start."""
        from jaxdiag.capturing.profile import Capture, active

        if active() is not None:  # the program's own capture is running: it has the profiler
            return False
        self.count += 1
        run = f"w{self.count:03d}-step{step:07d}"
        capture = Capture(self.folder, run=run, tags={REASON_TAG: reason, "monitor_window": self.count})
        try:
            capture.start()
        except Exception as exc:  # noqa: BLE001 - the profiler may be busy (another tool's trace)
            _warn(f"jaxdiag.monitor: could not start a capture window at step {step}: {exc}")
            return False
        self.capture, self.start_step, self.reason = capture, step, reason
        return True

    @property
    def building(self) -> bool:
        """Whether a report is being built."""
        return bool(self._children)

    def stop(self, last_step: int) -> dict[str, Any] | None:
        """Stop the running capture after ``last_step``; the ``window`` event describing it (``None`` if none ran)."""
        capture, self.capture = self.capture, None
        if capture is None:
            return None
        try:
            run_dir = capture.stop()
        except Exception as exc:  # noqa: BLE001
            _warn(f"jaxdiag.monitor: the capture window at step {self.start_step} was not written: {exc}")
            return None
        self.kept.append(run_dir)
        event = {
            "event": "window",
            "t": time.time(),
            "window": self.count,
            "reason": self.reason,
            "first_step": self.start_step,
            "last_step": last_step,
            "run_dir": str(run_dir),
        }
        if self.reports:
            self._report(run_dir)
        return event

    def discard(self) -> None:
        """Stop the running capture and remove it (it holds no step)."""
        capture, self.capture = self.capture, None
        try:
            shutil.rmtree(capture.stop(), ignore_errors=True)
        except Exception:  # noqa: BLE001
            pass

    def _report(self, run_dir: Path) -> None:
        """Build the window's report in a child process at low priority (see the module doc)."""
        code = (
            "import os, sys, time, pathlib\n"
            "try:\n    os.nice(10)\nexcept OSError:\n    pass\n"
            # the other processes' host files land in the run folder as they stop: wait for them, boundedly
            "until = time.monotonic() + 60\n"
            "while len(list(pathlib.Path(sys.argv[1]).glob('*.xplane.pb'))) < int(sys.argv[3]) "
            "and time.monotonic() < until:\n    time.sleep(0.5)\n"
            "from jaxdiag.cli.app import main\n"
            "sys.exit(main(['report', sys.argv[1], '--json', '-o', sys.argv[2]]))\n"
        )
        try:
            with open(run_dir / "report.log", "wb") as log:
                child = subprocess.Popen(
                    [sys.executable, "-c", code, str(run_dir), str(run_dir / REPORT_NAME), str(self.process_count)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
        except OSError as exc:
            _warn(f"jaxdiag.monitor: no report for {run_dir}: {exc}")
            return
        self._children.append((child, run_dir, time.monotonic()))

    def finished_reports(self) -> list[Path]:
        """Reports finished since the last call (their run folders); does not wait."""
        done = []
        for item in list(self._children):
            child, run_dir, _ = item
            if child.poll() is not None:
                self._children.remove(item)
                if child.returncode == 0:
                    done.append(run_dir)
        return done

    def wait_reports(self, timeout_s: float) -> list[Path]:
        """Wait at most ``timeout_s`` in all for the reports still being built; kill what is left."""
        deadline = time.monotonic() + timeout_s
        for child, _, _ in list(self._children):
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        return self.finished_reports()

    def prune(self) -> list[str]:
        """Remove the oldest windows past the count or the disk budget; the folders removed."""
        removed = []
        while len(self.kept) > 1 and (len(self.kept) > self.max_windows or self._bytes() > self.budget_bytes):
            oldest = self.kept.pop(0)
            if any(run == oldest for _, run, _ in self._children):  # its report is still being built
                self.kept.insert(0, oldest)
                break
            shutil.rmtree(oldest, ignore_errors=True)
            removed.append(str(oldest))
        return removed

    def _bytes(self) -> int:
        total = 0
        for run in self.kept:
            for root, _, files in os.walk(run):
                for name in files:
                    try:
                        total += os.path.getsize(os.path.join(root, name))
                    except OSError:
                        pass
        return total


def device_ms_by_step(run_dir: Path) -> dict[int, float]:
    """Device busy time per step from a window's saved report (empty when unreadable)."""
    try:
        doc = json.loads((run_dir / REPORT_NAME).read_text())
        return {
            int(s["step"]): float(s["device_busy_ms"])
            for s in doc.get("steps") or ()
            if isinstance(s, dict) and isinstance(s.get("device_busy_ms"), (int, float))
        }
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def _warn(message: str) -> None:
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    except Exception:  # noqa: BLE001
        pass

"""Whether the processes a test started still run, asked of the kernel, and a bounded wait for them to end.

A ``Process`` or ``Popen`` can answer "alive" while another thread reaps it, and a zombie keeps its pid:
``/proc/PID/stat`` tells, a process absent or a zombie (``Z``) being gone.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Iterable


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (neither gone nor a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:  # gone (no file), or going (ESRCH while the kernel tears it down)
        return False


def left_running(pids: Iterable[int], within_s: float = 60.0) -> list[int]:
    """Wait for ``pids`` to end, at most ``within_s`` (a bound: the test fails rather than hangs); those still
    running then are killed, the test's own tidying so that nothing is left behind when it fails, and returned."""
    pids = list(pids)
    deadline = time.monotonic() + within_s
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.01)
    alive = [pid for pid in pids if running(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return alive

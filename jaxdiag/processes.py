"""Worker processes that read files: when fork is safe, and how a pool is stopped at once.

Trace files (``trace.reading``) and long compile logs (``recording.log_chunks``) are
read by a ``concurrent.futures.ProcessPoolExecutor`` beside this process; both start
their workers the same way and kill them the same way when a wait runs out.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import sys


def fork_is_safe() -> bool:
    """Linux, and this process runs a single thread (``/proc/self/task`` counts native threads too).

    A fork with other threads alive can deadlock the child; a single-threaded
    process forks safely, and its workers inherit its imports.
    """
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def kill_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """SIGKILL the pool's workers (``kill_workers`` from Python 3.14; its process table before)."""
    kill = getattr(pool, "kill_workers", None)
    if kill is not None:
        kill()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            os.kill(process.pid, signal.SIGKILL)
        except (OSError, TypeError):  # gone already, or never started
            pass

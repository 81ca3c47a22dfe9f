"""This process and its workers: when fork is safe, how a pool is stopped at once, and the collector paused.

Trace files (``trace.reading``) and long compile logs (``recording.log_chunks``) are
read by a ``concurrent.futures.ProcessPoolExecutor`` beside this process; both start
their workers the same way (``start_worker``) and kill them the same way when a wait runs out.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os
import signal
import sys
import threading
from typing import Any, Iterator, Sequence


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a capture is read or a report built.

    Both allocate a few million short-lived objects, and each allocation burst makes
    the collector walk every object of pandas and numpy again: about a tenth of the
    time of a report. Nothing here depends on cycles being freed early; the collector
    runs again as soon as the block ends (a block inside another leaves it to the outer).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


def workers_of(pool: concurrent.futures.ProcessPoolExecutor) -> list[Any]:
    """The pool's worker processes now (its process table), to be killed later with ``kill_workers``.

    A pool's own table can lose a worker before the worker is gone (its manager
    thread tidies the table when another worker dies), so a reader keeps the ones it
    saw start.
    """
    return list((getattr(pool, "_processes", None) or {}).values())


def kill_workers(pool: concurrent.futures.ProcessPoolExecutor, started: Sequence[Any] = ()) -> None:
    """SIGKILL the pool's workers (``kill_workers`` from Python 3.14; its process table before),
    and the ``started`` ones (``workers_of``) still running."""
    kill = getattr(pool, "kill_workers", None)
    if kill is not None:
        kill()
    for process in [*workers_of(pool), *started]:
        try:
            if process.exitcode is None:  # a process not yet reaped keeps its pid: never another's
                os.kill(process.pid, signal.SIGKILL)
        except (OSError, TypeError, ValueError, AssertionError):  # gone already, or never started
            pass


def start_worker() -> None:
    """A pool worker's start (its ``initializer``): no cyclic collections, and an end with its parent.

    A worker lives for one reading and frees everything at exit, so collections are wasted work.
    A parent killed outright (SIGKILL, the OOM killer) leaves its pool's workers waiting for tasks
    for ever, on pipes they hold both ends of: a thread here waits on the parent's sentinel, which
    every start method gives a worker, and ends the worker when it fires.
    """
    import multiprocessing

    gc.disable()
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with, args=(parent.sentinel,), name="jaxdiag-parent", daemon=True).start()


def _end_with(sentinel: int) -> None:
    from multiprocessing.connection import wait

    wait([sentinel])
    os._exit(1)

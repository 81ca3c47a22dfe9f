"""Read the host files of a run in parallel: a process pool here, or the workers of a Dask cluster.

On this machine, ``start`` cuts the files into *tasks* (a plane, or some
threads of an accelerated host's host plane: ``wire.sub_space`` cuts their
bytes out of the mapped file, so nothing is serialized on the way in) and
hands them, the largest first, to a ``concurrent.futures.ProcessPoolExecutor``
of forked workers, one per core but this one by default, while this process
imports what it needs: two tasks per worker until this process begins to
read (so that a worker goes on at once from one task to the next, rather than
waiting for this busy process to hand it one), then one per idle worker (a
task handed to a pool can no longer be taken back). This process takes the
tasks no worker has taken, smallest first, and the two meet in the middle. Each worker maps its
file itself, so the same task runs in a process started any way.
``Reading.finish`` collects the pieces and puts them together in file order
(``xspace.join_host``): the result is the one a single process reads. Workers
are forked only on Linux from a process running a single thread (a fork with
other threads alive can deadlock the child), and only when there is enough to
read. A task a worker cannot do (a plane the parser rejects, a crash, a kill)
is done again here, so errors read exactly as they do without workers.

Past one machine, ``scheduler`` names a Dask ``distributed`` scheduler
(``tcp://HOST:PORT``) or is a ``distributed.Client``: each host file is read on
a worker (``read_file``, which needs the path to be readable there) and only
its columns, the per-host frames the analyses need, come back. Dask is
imported only then.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import gc
import mmap
import multiprocessing
import os
import sys
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import wire
from jaxdiag.trace.discover import host_name
from jaxdiag.trace.host_bytes import prepare_lines
from jaxdiag.trace.prepared import PreparedSpace
from jaxdiag.trace.host_plane import HOST_PLANE, is_runtime_thread, unique_labels
from jaxdiag.trace.xspace import HostColumns, has_devices, is_device_plane, join_host, read_planes, read_xspace

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.dask_reading import DaskReading

#: Rough cost of reading, in ns per byte in a worker (measured on the H100 captures): device
#: events carry many stats; host threads are read from the bytes (``host_bytes``), a runtime
#: thread's events all decoded, a Python thread's mostly frames cut out; other planes (metadata)
#: are only parsed. Only the order of tasks and whether to use workers depend on it.
_NS_PER_BYTE = {"device": 38.0, "host": 22.0, "python": 5.5, "other": 0.3}
#: Workers are started only for at least this much work: the 8 MB H100 capture (about 0.1 s)
#: reports in 0.42 s with a worker and 0.50 s without, its reading beside the report's imports.
_MIN_WORK_NS = 40e6
#: Threads of a host plane are put together in tasks of about this many bytes.
_TASK_BYTES = 1 << 20

Outcome = HostColumns | TraceFormatError
#: What a file is cut into: ``(plane, line)``, ``line`` -1 for a whole plane.
Unit = tuple[int, int]


@dataclasses.dataclass(slots=True)
class _File:
    """One host file: its bytes, planes and the planes read thread by thread."""

    path: Path
    data: bytes | mmap.mmap = b""  # mapped: pages are read from the file system's cache, nothing is copied
    planes: list[wire.PlaneRecord] = dataclasses.field(default_factory=list)
    lines: dict[int, wire.PlaneLines] = dataclasses.field(default_factory=dict)
    outcome: Outcome | None = None  # known before any plane is read (unreadable, not a trace)

    def release(self) -> None:
        if isinstance(self.data, mmap.mmap):
            try:
                self.data.close()
            except BufferError:  # a view of it is still alive: it closes with its last user
                pass
        self.data = b""

    def units(self) -> list[Unit]:
        return [
            (p, line)
            for p in range(len(self.planes))
            for line in (range(len(self.lines[p].names)) if p in self.lines else (-1,))
        ]


@dataclasses.dataclass(frozen=True, slots=True)
class _Task:
    """Units of one file, read together (one parse) by whichever process takes the task."""

    file: int
    units: tuple[Unit, ...]
    cost_ns: float


def read_file(file: Path, kind: str, include_python: bool = False, data: bytes = b"") -> HostColumns:
    """Read one host file in this process (``data``: its bytes, when already read).

    Raises:
      TraceFormatError: the file cannot be read or is not a trace.
    """
    host = host_name(file)
    if kind == "json":
        from jaxdiag.trace.json_trace import read_json_trace

        return read_json_trace(file, host, include_python=include_python)
    return read_xspace(data or _read_bytes(file), host, source=str(file), include_python=include_python)


def start(
    files: Sequence[Path],
    kind: str,
    include_python: bool = False,
    parallel: bool | None = None,
    workers: int | None = None,
    scheduler: Any = None,
) -> "Reading | DaskReading":
    """Begin reading ``files``; ``finish()`` on the result gives one outcome per file, in order.

    Args:
      files: the host files of one run.
      kind: ``"xplane"`` or ``"json"``.
      include_python: keep Python-tracer frames (then everything is read here:
        sending a million frames back costs more than reading them).
      parallel: ``None`` uses worker processes when it pays, ``True`` whenever
        it is safe, ``False`` never.
      workers: worker processes on this machine (default: one per core but
        this process's, which takes the tasks no worker has started).
      scheduler: a Dask ``distributed`` scheduler address or ``Client``: each
        file is read on its workers instead (``parallel`` and ``workers`` are
        then the cluster's business).
    """
    paths = [Path(f) for f in files]
    if scheduler is not None:
        from jaxdiag.trace.dask_reading import DaskReading

        return DaskReading(paths, kind, include_python, scheduler)
    reading = Reading([_File(p) for p in paths], kind, include_python)
    if kind == "xplane" and not include_python and parallel is not False and _fork_is_safe():
        # This process reads too (``Reading._take``): with the workers, every core.
        reading._share(force=parallel is True, workers=workers or max((os.cpu_count() or 1) - 1, 1))
    return reading


class Reading:
    """Host files being read, perhaps partly by worker processes."""

    def __init__(self, files: list[_File], kind: str, include_python: bool) -> None:
        self._files, self._kind, self._include_python = files, kind, include_python
        self._tasks: list[_Task] = []
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        # Tasks not yet handed out, largest first: the pool is fed a task or two per worker
        # (``_feed``), so that this process can take any task a worker has not started.
        self._pending: list[int] = []
        self._futures: dict[int, concurrent.futures.Future[Any]] = {}
        self._handed = threading.Condition()
        self._unfinished = 0  # tasks handed out and not yet done
        self._taking = False  # whether this process has begun to read tasks itself

    @property
    def workers(self) -> int:
        """Worker processes reading (0: everything is read here)."""
        return self._pool._max_workers if self._pool is not None else 0  # type: ignore[attr-defined]

    def finish(self) -> list[Outcome]:
        """Each file's columns, or the ``TraceFormatError`` that stopped it, in file order."""
        return list(self.each())

    def each(self) -> Iterator[Outcome]:
        """``finish``, one file at a time: a caller that packs each file's columns holds one file's lists at once."""
        by_file: dict[int, list[int]] = {}
        for number, task in enumerate(self._tasks):
            by_file.setdefault(task.file, []).append(number)
        last = max(by_file, default=-1)
        for index, f in enumerate(self._files):
            outcome = f.outcome
            if outcome is None and index in by_file:
                outcome = self._joined(f, [(self._tasks[n], got) for n, got in self._take(by_file[index])])
            if index == last:  # every task is taken
                self._stop()
            if outcome is None:
                try:
                    data = f.data if isinstance(f.data, bytes) else b""  # a mapped file is read again
                    outcome = read_file(f.path, self._kind, self._include_python, data)
                except TraceFormatError as exc:
                    outcome = exc
            f.release()
            yield outcome

    def _joined(self, f: _File, tasks: list[tuple[_Task, Any]]) -> HostColumns | None:
        """``f`` from its tasks' pieces; ``None`` to read it whole here (for its own error)."""
        units: dict[Unit, HostColumns] = {}
        for task, got in tasks:
            if got is None:  # the worker failed or died: read it here, where an error reads as without workers
                got = _read_units(f, task.units)
            if got is None:
                return None
            units.update(zip(task.units, got))
        names = [p.name for p in f.planes]
        return join_host(host_name(f.path), [units[u] for u in f.units()], names, has_devices(names))

    # --- sharing the work -------------------------------------------------------
    def _share(self, force: bool, workers: int) -> None:
        """Cut the files into tasks and hand them to worker processes, when that pays."""
        for index, f in enumerate(self._files):
            try:
                f.data = _map(f.path)
                planes = wire.plane_records(f.data, str(f.path))
            except TraceFormatError as exc:
                f.outcome = exc
                continue
            if not planes:  # left to ``read_file``, which says why
                continue
            f.planes = planes
            if has_devices(p.name for p in planes):  # else XLA:CPU ops: its threads are read together
                for i, plane in enumerate(planes):
                    lines = wire.plane_lines(f.data, plane) if plane.name == HOST_PLANE else None
                    if lines is not None and len(lines.names) > 1:
                        f.lines[i] = lines
            self._tasks += _tasks(index, f)
        self._tasks.sort(key=lambda t: (-t.cost_ns, t.file, t.units))
        total = sum(t.cost_ns for t in self._tasks)
        if not (self._tasks and workers >= 1 and (force or total >= _MIN_WORK_NS)):
            self._tasks = []  # everything is read here, file by file, as without workers
            return
        # Every process needs numpy (the bulk reading, the frames) and protobuf's views of the planes
        # (``line_bytes``): loaded once, before the fork.
        import numpy  # noqa: F401

        from jaxdiag.trace import line_bytes

        line_bytes.available()

        self._pending = list(range(len(self._tasks)))
        try:
            # Forked (the parent runs one thread, checked above) at the first submit, before the
            # pool's own thread starts; later tasks are handed out from that thread (``_feed``).
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=min(workers, len(self._tasks)),
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
            )
            self._feed()
        except (OSError, RuntimeError):  # no process to be had: read here
            self._stop()
            self._tasks = []

    def _feed(self) -> None:
        """Hand the largest tasks not yet taken to the pool, up to one per worker, two while this process
        is not reading (at the start, and as each task ends)."""
        handed: list[concurrent.futures.Future[Any]] = []
        with self._handed:
            while self._pool is not None and self._pending:
                if self._unfinished >= self.workers * (1 if self._taking else 2):
                    break
                number = self._pending.pop(0)
                task = self._tasks[number]
                f = self._files[task.file]
                try:
                    future = self._pool.submit(
                        _read_task,
                        str(f.path),
                        f.planes,
                        {p: f.lines[p] for p, _ in task.units if p in f.lines},
                        task.units,
                    )
                except RuntimeError:  # the pool broke or shut down: this process reads it
                    self._pending.insert(0, number)
                    break
                self._futures[number] = future
                self._unfinished += 1
                handed.append(future)
            self._handed.notify_all()
        for future in handed:
            future.add_done_callback(functools.partial(_feed_again, weakref.ref(self)))

    def _take(self, numbers: list[int]) -> list[tuple[int, Any]]:
        """The pieces of these tasks (``None`` for a task a worker failed).

        This process reads the ones no worker has taken, smallest first, while the
        workers go on from the largest: they meet in the middle, once this process's
        imports are done, and every process ends together; file by file, so that it
        holds one file's pieces at a time.
        """
        with self._handed:
            self._taking = True
        import pickle

        got: dict[int, Any] = {}
        for number in reversed(numbers):
            if self._claim(number):
                task = self._tasks[number]
                got[number] = _packed(_read_units(self._files[task.file], task.units))
        for number in numbers:
            while number not in got:
                with self._handed:  # handed out, or put back by a broken pool: wait for one or the other
                    self._handed.wait_for(lambda: number in self._futures or number in self._pending)
                    future = self._futures.get(number)
                if future is None:
                    if self._claim(number):
                        task = self._tasks[number]
                        got[number] = _packed(_read_units(self._files[task.file], task.units))
                    continue
                try:
                    payload = future.result()
                except Exception:  # a worker that died (BrokenProcessPool) or failed: read here
                    payload = None
                # Unpickled now, while the workers may still be reading what comes after it.
                got[number] = pickle.loads(payload) if isinstance(payload, bytes) else payload
        return [(n, got[n]) for n in numbers]

    def _claim(self, number: int) -> bool:
        """Take task ``number`` for this process, if no worker has it."""
        with self._handed:
            if number in self._pending:
                self._pending.remove(number)
                return True
            return False

    def _stop(self) -> None:
        with self._handed:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self._futures = {}

    def __del__(self) -> None:  # a reading dropped unfinished must not leave its workers behind
        try:
            self._stop()
        except Exception:
            pass


def _feed_again(reading: "weakref.ref[Reading]", done: "concurrent.futures.Future[Any]") -> None:
    """A task ended: hand its worker the next (weakly: a reading dropped unfinished stops its workers, ``__del__``)."""
    alive = reading()
    if alive is not None:
        with alive._handed:
            alive._unfinished -= 1
        alive._feed()


#: In a worker: parsed planes, kept until the worker exits (freeing them costs time nobody waits for),
#: up to about this many bytes of trace (one large host file); past that (a pod's files) they are freed as read.
_KEEP_BYTES = 48 << 20
_PARSED: list[Any] | None = None
_kept_bytes = 0


def _start_worker() -> None:
    global _PARSED
    gc.disable()  # it lives for one reading and frees everything at exit: collections are wasted work
    _PARSED = []


def _read_task(
    path: str, planes: list[wire.PlaneRecord], lines: dict[int, wire.PlaneLines], units: tuple[Unit, ...]
) -> bytes | None:
    """In a worker: the pieces of ``units`` of the file at ``path``, pickled; ``None`` when they cannot be read apart."""
    import pickle

    global _kept_bytes
    f = _File(Path(path), _map(Path(path)), planes, lines)
    _kept_bytes += sum(planes[p].size for p in {p for p, _ in units})
    pieces = _read_units(f, units, keep=_PARSED if _kept_bytes <= _KEEP_BYTES else None)
    HostColumns.pack_together(pieces or [])  # a few bytes per event to send, and to join
    return pickle.dumps(pieces, protocol=pickle.HIGHEST_PROTOCOL)


def _packed(pieces: list[HostColumns] | None) -> list[HostColumns] | None:
    """Pieces read here, packed as a worker's are (``HostColumns.pack``): joined with those, they cost no more."""
    HostColumns.pack_together(pieces or [])
    return pieces


def _read_units(f: _File, units: Sequence[Unit], keep: list[Any] | None = None) -> list[HostColumns] | None:
    """One piece per unit of ``f`` (units in file order); ``None`` if they cannot be read apart."""
    parts: list[tuple[wire.PlaneRecord, wire.PlaneLines | None, list[int] | None]] = []
    expected: list[tuple[str, list[tuple[str, str]] | None]] = []
    for plane in dict.fromkeys(p for p, _ in units):
        record, lines = f.planes[plane], f.lines.get(plane)
        mine = [line for p, line in units if p == plane and line >= 0]
        parts.append((record, lines, mine if lines is not None else None))
        if lines is None:
            expected.append((record.name, None))
        else:
            labels = unique_labels(lines.names)
            expected.append((record.name, [(lines.names[i], labels[i]) for i in mine]))
    names = [p.name for p in f.planes]
    accelerated = has_devices(names)
    by_line = [(record, lines, mine) for record, lines, mine in parts if lines is not None and mine is not None]
    prepared = None
    if by_line:  # a host plane's threads: prepared here, where the plane's layout is known (``host_bytes``)
        record, lines, mine = by_line[0]
        got = prepare_lines(f.data, lines, mine, accelerated=accelerated)
        at = {line: i for i, line in enumerate(mine)}  # a line's index in the cut-out plane
        prepared = (
            got.cut,
            {at[line]: n for line, n in got.dropped.items()},
            {at[line]: events for line, events in got.threads.items()},
        )
    try:
        data = wire.sub_space(f.data, parts, replace=prepared[0] if prepared else None)
        pieces = read_planes(
            data,
            host_name(f.path),
            expected,
            source=str(f.path),
            accelerated=accelerated,
            keep=keep,
            prepared=PreparedSpace(data, prepared[1], prepared[2]) if prepared else None,
        )
    except TraceFormatError:
        return None
    return pieces if len(pieces) == len(units) else None


def _tasks(index: int, f: _File) -> list[_Task]:
    """``f`` cut into tasks: each plane whole, and the threads of a host plane alone or bundled.

    Each task costs a parse of its plane's metadata, so small threads go together.
    """
    tasks: list[_Task] = []
    bundle: list[Unit] = []
    size = cost = 0.0
    for plane, line in f.units():
        record = f.planes[plane]
        if line < 0:
            kind = "device" if is_device_plane(record.name) else "host" if record.name == HOST_PLANE else "other"
            tasks.append(_Task(index, ((plane, line),), record.size * _NS_PER_BYTE[kind]))
            continue
        line_size = sum(b - a for a, b, at in f.lines[plane].chunks if at == line)
        line_cost = line_size * _NS_PER_BYTE["host" if is_runtime_thread(f.lines[plane].names[line]) else "python"]
        if line_size >= _TASK_BYTES:
            tasks.append(_Task(index, ((plane, line),), line_cost))
            continue
        bundle.append((plane, line))
        size += line_size
        cost += line_cost
        if size >= _TASK_BYTES:
            tasks.append(_Task(index, tuple(bundle), cost))
            bundle, size, cost = [], 0.0, 0.0
    if bundle:
        tasks.append(_Task(index, tuple(bundle), cost))
    return tasks


def _map(file: Path) -> bytes | mmap.mmap:
    """The bytes of ``file``, mapped where the system allows (an empty file cannot be)."""
    try:
        with open(file, "rb") as handle:
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return _read_bytes(file)


def _read_bytes(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{file}: cannot read ({exc.strerror or exc})") from None


def _fork_is_safe() -> bool:
    """Linux, and this process runs a single thread (``/proc/self/task`` counts native threads too)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False

"""Read the host files of a run in parallel: a process pool here, or the workers of a Dask cluster.

On this machine, ``start`` cuts the files into *tasks* (planes, or, with fewer
than two files per process, threads of an accelerated host's host plane; bundled
to about a megabyte; a worker maps the file and reads only its task's planes and
lines through the reader contract, so nothing is serialized on the way in) and
submits them all, the largest first, to a
``concurrent.futures.ProcessPoolExecutor`` with an explicit start method. This
process reads too: file by file, it takes back the tasks no worker has begun
(``Future.cancel``), smallest first, while the workers go on from the largest.
``Reading.each`` collects the pieces and puts them together in file order
(``xspace.join_host``): the result is the one a single process reads.

Every wait is bounded. A task a worker cannot do (a plane the parser rejects,
a crash, a kill: ``BrokenProcessPool``) is read again here, so errors read
exactly as they do without workers; when no worker has finished a task for
``STUCK_AFTER_S`` (or ten times the slowest task's expected cost), the workers
are killed and what they held is read here too.

Start methods: ``fork`` by default, and only on Linux from a process running a
single thread (a fork with other threads alive can deadlock the child): the
workers inherit this process's imports, so they start in milliseconds. Python
3.14 makes ``forkserver`` Linux's default, which changes nothing here (the
context is chosen explicitly); ``forkserver`` and ``spawn`` work when asked for
(``method``), at the price of each worker importing numpy and the reader, and of
re-importing the caller's ``__main__`` as ``multiprocessing`` does. Workers
start only when there is enough to read.

Past one machine, ``scheduler`` names a Dask ``distributed`` scheduler
(``tcp://HOST:PORT``) or is a ``distributed.Client``: each host file is read on
a worker (``read_file``, which needs the path to be readable there) and only
its columns, the per-host frames the analyses need, come back. Dask is
imported only then.

The pool, the work sharing and the bounded waits are one protocol between this process and its
workers, which is why the module runs past 400 lines.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import mmap
import multiprocessing
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from jaxdiag.errors import TraceFormatError
from jaxdiag.processes import fork_is_safe, kill_workers, start_worker, workers_of
from jaxdiag.trace import wire
from jaxdiag.trace.discover import host_name
from jaxdiag.trace.host_plane import HOST_PLANE, is_runtime_thread, unique_labels
from jaxdiag.trace.xspace import HostColumns, has_devices, is_device_plane, join_host, read_units, read_xspace

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.trace.dask_reading import DaskReading

#: Rough cost of reading, in ns per byte in a worker (measured on the H100 captures): device
#: events carry many stats; a runtime thread's events are all decoded, a Python thread's are
#: mostly frames, left out unread; other planes (metadata) are only parsed. Only the order of tasks, whether to use workers and how long to wait depend on it.
_NS_PER_BYTE = {"device": 38.0, "host": 22.0, "python": 5.5, "other": 0.3}
#: Workers are started only for at least this much work: the 8 MB H100 capture (about 0.1 s)
#: reports in 0.42 s with a worker and 0.50 s without, its reading beside the report's imports.
_MIN_WORK_NS = 40e6
#: Units (planes, or threads of a host plane) are put together in tasks of about this many bytes.
_TASK_BYTES = 1 << 20
#: A worker pool that finishes no task for this long (or ten times the slowest pending task's
#: expected cost, if longer) is stuck: its workers are killed and their tasks read here.
STUCK_AFTER_S = 30.0
#: Start methods ``method`` may name; ``None`` is ``fork`` where that is safe, else no workers.
METHODS = ("fork", "forkserver", "spawn")

Outcome = HostColumns | TraceFormatError
#: What a file is cut into: ``(plane, line)``, ``line`` -1 for a whole plane.
Unit = tuple[int, int]


@dataclasses.dataclass(slots=True)
class _File:
    """One host file: its bytes, planes (by index; a worker gets only its task's) and the planes read thread by thread."""

    path: Path
    data: bytes | mmap.mmap = b""  # mapped: pages are read from the file system's cache, nothing is copied
    planes: dict[int, wire.PlaneRecord] = dataclasses.field(default_factory=dict)
    lines: dict[int, wire.PlaneLines] = dataclasses.field(default_factory=dict)
    accelerated: bool = False  # whether the file has device planes (its host plane is read thread by thread)
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
            for p in sorted(self.planes)
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
    method: str | None = None,
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
      method: how workers start, one of ``METHODS`` (default ``fork``, which is
        used only from a single-threaded process on Linux: else there are no workers).
    """
    paths = [Path(f) for f in files]
    if scheduler is not None:
        from jaxdiag.trace.dask_reading import DaskReading

        return DaskReading(paths, kind, include_python, scheduler)
    if method is not None and method not in METHODS:
        raise ValueError(f"start method {method!r}: expected one of {', '.join(METHODS)}")
    reading = Reading([_File(p) for p in paths], kind, include_python)
    if method in (None, "fork"):
        method = "fork" if fork_is_safe() else None
    if kind == "xplane" and not include_python and parallel is not False and method is not None:
        # This process reads too (``Reading.each``): with the workers, every core.
        reading._share(parallel is True, workers or max((os.cpu_count() or 1) - 1, 1), method)
    return reading


class Reading:
    """Host files being read, perhaps partly by worker processes."""

    def __init__(self, files: list[_File], kind: str, include_python: bool) -> None:
        self._files, self._kind, self._include_python = files, kind, include_python
        self._tasks: list[_Task] = []  # largest first
        self._futures: list[concurrent.futures.Future[Any]] = []  # one per task
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._started: list[Any] = []  # the pool's worker processes, as they started
        self._workers = 0

    @property
    def workers(self) -> int:
        """Worker processes reading (0: everything is read here)."""
        return self._workers

    def finish(self) -> list[Outcome]:
        """Each file's columns, or the ``TraceFormatError`` that stopped it, in file order."""
        return list(self.each())

    def each(self) -> Iterator[Outcome]:
        """``finish``, one file at a time: a caller that packs each file's columns holds one file's lists at once."""
        by_file: dict[int, list[int]] = {}
        for number, task in enumerate(self._tasks):
            by_file.setdefault(task.file, []).append(number)
        last = max(by_file, default=-1)
        try:
            for index, f in enumerate(self._files):
                outcome = f.outcome
                if outcome is None and index in by_file:
                    got = self._take(by_file[index])
                    outcome = self._joined(f, [(self._tasks[n], got[n]) for n in by_file[index]])
                if index == last:  # every task is done
                    self._stop()
                if outcome is None:
                    try:
                        data = f.data if isinstance(f.data, bytes) else b""  # a mapped file is read again
                        outcome = read_file(f.path, self._kind, self._include_python, data)
                    except TraceFormatError as exc:
                        outcome = exc
                f.release()
                yield outcome
        finally:
            self._stop()

    def _joined(self, f: _File, tasks: list[tuple[_Task, Any]]) -> HostColumns | None:
        """``f`` from its tasks' pieces; ``None`` to read it whole here (for its own error)."""
        units: dict[Unit, HostColumns | None] = {}
        for task, got in tasks:
            if got is None:  # its worker failed, died or is stuck: read here, where an error reads as without workers
                got = _read_runs(f, task.units)
            if got is None:
                return None
            for run, piece in zip(_runs(task.units), got):
                units.update(dict.fromkeys(run[1:]))  # a run's piece holds its units' events, in order
                units[run[0]] = piece
        names = [p.name for p in f.planes.values()]
        pieces = [piece for piece in map(units.__getitem__, f.units()) if piece is not None]
        return join_host(host_name(f.path), pieces, names, f.accelerated)

    # --- sharing the work -------------------------------------------------------
    def _share(self, force: bool, workers: int, method: str) -> None:
        """Cut the files into tasks and submit them to worker processes, when that pays.

        An accelerated host's host plane is cut into its threads only when there are too few files to
        keep every process busy: each task of a plane parses the plane's metadata again.
        """
        by_thread = len(self._files) < 2 * (workers + 1)
        for index, f in enumerate(self._files):
            try:
                f.data = _map(f.path)
                planes = wire.plane_records(f.data, str(f.path))
            except TraceFormatError as exc:
                f.outcome = exc
                continue
            if not planes:  # left to ``read_file``, which says why
                continue
            f.planes = dict(enumerate(planes))
            f.accelerated = has_devices(p.name for p in planes)
            if f.accelerated and by_thread:  # else XLA:CPU ops, or files enough: its threads are read together
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
        context = multiprocessing.get_context(method)
        if method == "fork":
            # Every process needs numpy (the reading, the frames): loaded once, before the fork. Protobuf's
            # classes of the planes are built by the workers, as they first read: this process needs them
            # only when it reads a task itself, and it is the one on which the report waits.
            import numpy  # noqa: F401
        elif method == "forkserver":
            context.set_forkserver_preload([__name__])  # type: ignore[attr-defined]
        try:
            # Under fork, every worker is forked at the first submit (the parent runs one thread, checked
            # in ``start``), before the pool's own thread starts.
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=min(workers, len(self._tasks)), mp_context=context, initializer=start_worker
            )
            for task in self._tasks:
                f = self._files[task.file]
                planes = sorted({p for p, _ in task.units})
                self._futures.append(
                    self._pool.submit(
                        _read_task,
                        str(f.path),
                        {p: f.planes[p] for p in planes},
                        {p: f.lines[p] for p in planes if p in f.lines},
                        task.units,
                        f.accelerated,
                    )
                )
        except (OSError, RuntimeError):  # no process to be had: read here
            self._stop()
            self._tasks, self._futures = [], []
            return
        self._started = workers_of(self._pool)
        self._workers = min(workers, len(self._tasks))

    def _take(self, numbers: list[int]) -> dict[int, Any]:
        """The pieces of these tasks (``None`` for one no worker could read).

        This process reads the ones no worker has begun, smallest first, while the
        workers go on from the largest: they meet in the middle. Then it waits for
        the workers' pieces, each wait bounded (``_collect``).
        """
        got: dict[int, Any] = {}
        for number in reversed(numbers):
            if self._futures[number].cancel():
                task = self._tasks[number]
                got[number] = _read_runs(self._files[task.file], task.units)
        got.update(self._collect([n for n in numbers if n not in got]))
        return got

    def _collect(self, numbers: list[int]) -> dict[int, Any]:
        """The workers' pieces of these tasks; ``None`` for a task whose worker failed, died or is stuck."""
        got: dict[int, Any] = {}
        waiting = {self._futures[n]: n for n in numbers}
        while waiting:
            patience = max(STUCK_AFTER_S, 10e-9 * max(self._tasks[n].cost_ns for n in waiting.values()))
            done, _ = concurrent.futures.wait(waiting, timeout=patience, return_when=concurrent.futures.FIRST_COMPLETED)
            if not done:  # no task finished for that long: the workers are stuck, their tasks are read here
                self._stop(kill=True)
                got.update(dict.fromkeys(waiting.values()))
                break
            for future in done:
                number = waiting.pop(future)
                try:
                    payload = future.result(timeout=0)
                except Exception:  # a worker that died (BrokenProcessPool), failed, or was stopped
                    payload = None
                # Unpickled now, while the workers may still be reading what comes after it.
                got[number] = pickle.loads(payload) if isinstance(payload, bytes) else None
        return got

    def _stop(self, kill: bool = False) -> None:
        """Stop the workers (``kill``: at once, whatever they are doing; so too when the reading is
        abandoned with tasks unfinished, whose pieces nobody will read)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if kill or not all(future.done() for future in self._futures):
            kill_workers(pool, self._started)
        pool.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:  # a reading dropped unfinished must not leave its workers behind
        try:
            self._stop()
        except Exception:
            pass


def _read_task(
    path: str,
    planes: dict[int, wire.PlaneRecord],
    lines: dict[int, wire.PlaneLines],
    units: tuple[Unit, ...],
    accelerated: bool,
) -> bytes | None:
    """In a worker: the pieces of ``units`` of the file at ``path``, pickled; ``None`` when they cannot be read apart."""
    f = _File(Path(path), _map(Path(path)), planes, lines, accelerated)
    pieces = _read_runs(f, units)
    return pickle.dumps(pieces, protocol=pickle.HIGHEST_PROTOCOL)


def _runs(units: Sequence[Unit]) -> list[tuple[Unit, ...]]:
    """``units`` (in file order) in runs that follow each other in the file: whole planes one after
    another, or threads of one plane one after another."""
    runs: list[list[Unit]] = []
    for plane, line in units:
        if runs:
            last_plane, last_line = runs[-1][-1]
            whole = line < 0 and last_line < 0 and plane == last_plane + 1
            if whole or (line >= 0 and plane == last_plane and line == last_line + 1):
                runs[-1].append((plane, line))
                continue
        runs.append([(plane, line)])
    return [tuple(run) for run in runs]


def _read_runs(f: _File, units: Sequence[Unit]) -> list[HostColumns] | None:
    """One piece per run of ``units`` (``_runs``), packed (``HostColumns.pack``): a few bytes per event to
    send, and to join; ``None`` if they cannot be read apart."""
    pieces = _read_units(f, units)
    if pieces is None:
        return None
    joined = []
    at = 0
    for run in _runs(units):
        first = pieces[at]
        first.extend(*pieces[at + 1 : at + len(run)])
        joined.append(first)
        at += len(run)
    HostColumns.pack_together(joined)
    return joined


def _read_units(f: _File, units: Sequence[Unit]) -> list[HostColumns] | None:
    """One piece per unit of ``f`` (units in file order); ``None`` if they cannot be read apart."""
    by_plane: dict[
        int, list[int] | None
    ] = {}  # each plane's lines among ``units`` (one pass: a task may hold 50,000 planes)
    for plane, line in units:
        mine = by_plane.setdefault(plane, None if line < 0 else [])
        if mine is not None:
            mine.append(line)
    labels = {plane: unique_labels(f.lines[plane].names) for plane, mine in by_plane.items() if mine is not None}
    try:
        pieces = read_units(f.data, host_name(f.path), by_plane, labels, source=str(f.path), accelerated=f.accelerated)
    except TraceFormatError:
        return None
    return pieces if len(pieces) == len(units) else None


def _tasks(index: int, f: _File) -> list[_Task]:
    """``f`` cut into tasks: planes, and the threads of a host plane, alone when large, else bundled.

    Each task costs a parse of its planes' metadata, and a pickle of what it is
    handed, so small planes go together, as do small threads (apart from whole planes).
    """
    tasks: list[_Task] = []
    bundles: dict[bool, tuple[list[Unit], float, float]] = {}  # by whether it holds threads: units, bytes, cost
    for plane, line in f.units():
        record = f.planes[plane]
        if line < 0:
            kind = "device" if is_device_plane(record.name) else "host" if record.name == HOST_PLANE else "other"
            size, cost = float(record.size), record.size * _NS_PER_BYTE[kind]
        else:
            size = float(sum(b - a for a, b, at in f.lines[plane].chunks if at == line))
            cost = size * _NS_PER_BYTE["host" if is_runtime_thread(f.lines[plane].names[line]) else "python"]
        if size >= _TASK_BYTES:
            tasks.append(_Task(index, ((plane, line),), cost))
            continue
        units, bundle_size, bundle_cost = bundles.get(line >= 0, ([], 0.0, 0.0))
        units.append((plane, line))
        bundles[line >= 0] = (units, bundle_size + size, bundle_cost + cost)
        if bundle_size + size >= _TASK_BYTES:
            tasks.append(_Task(index, tuple(units), bundle_cost + cost))
            del bundles[line >= 0]
    tasks += [_Task(index, tuple(units), cost) for units, _size, cost in bundles.values()]
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

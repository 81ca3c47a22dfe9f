"""Read a long compile log in pieces, with worker processes beside this one.

A long run's log (or many runs appended to one folder) holds a million records,
and a line costs tens of microseconds to read (JSON, the checks, the record): a
minute on one core. Past ``PARALLEL_MIN_BYTES`` the file is cut into pieces of
``PIECE_BYTES`` at line starts (piece ``i`` holds the lines that begin in its
byte range) and a ``concurrent.futures.ProcessPoolExecutor`` reads them with
``log_reader.read_span``, the one reader of lines, each sending its records back
as rows (``records.record_row``: plain tuples pickle in a tenth of the time).

This process reads too: every ``(workers + 1)``-th piece is its own, read while
the workers read theirs (it reads on ahead rather than wait), and a queued piece
no worker has begun when it is needed (``Future.cancel``) is read here. At most
``IN_FLIGHT_PER_WORKER`` pieces per worker are queued, so what waits to be put in
order stays small. Every wait is bounded: a
piece whose worker failed, died or is stuck (no piece done for
``STUCK_AFTER_S``) is read here, so errors read as without workers. Workers
start by ``fork`` only, and only from a single-threaded process
(``processes.fork_is_safe``); elsewhere the log is read here, line by line.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from pathlib import Path
from typing import Any

from jaxdiag.processes import fork_is_safe, kill_workers, start_worker, workers_of
from jaxdiag.recording.records import CompileRecord, record_from_row, record_row

#: Smaller logs are read here: a piece costs a worker's start and a round trip.
PARALLEL_MIN_BYTES = 64 << 20
#: About ten thousand records of a few kB: a second of reading, a few MB of rows to send back.
PIECE_BYTES = 16 << 20
IN_FLIGHT_PER_WORKER = 2
#: No piece done for this long: the workers are killed and their pieces read here.
STUCK_AFTER_S = 30.0

#: ``(records or rows, skipped lines numbered from the piece's first line, lines in the piece)``.
Piece = tuple[list[Any], list[tuple[str, int, str]], int]


def read_chunked(
    path: Path, size: int, skipped: list[tuple[str, int, str]], workers: int | None = None
) -> list[CompileRecord] | None:
    """``path``'s records, read with worker processes; ``None`` when the file is read here instead
    (small, a single core, or a process whose threads make ``fork`` unsafe).

    Args:
      path: the log.
      size: its size in bytes when opened (the last piece reads on to the end, as a
        reader on one core does).
      skipped: ``(file, line, reason)`` is added for each line that is not a record.
      workers: worker processes (default: one per core but this process's).

    Raises:
      OSError: the file cannot be read here.
    """
    workers = workers if workers is not None else (os.cpu_count() or 1) - 1
    if size < PARALLEL_MIN_BYTES or workers < 1 or not fork_is_safe():
        return None
    count = -(-size // PIECE_BYTES)
    try:
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("fork"), initializer=start_worker
        )
    except (OSError, RuntimeError):  # no process to be had
        return None
    pieces = _Pieces(pool, str(path), count, workers)
    out: list[CompileRecord] = []
    lines = 0
    try:
        for index in range(count):
            got, bad, n = pieces.take(index)
            out += got
            skipped += [(source, lines + number, reason) for source, number, reason in bad]
            lines += n
    finally:
        pieces.stop()
    return out


class _Pieces:
    """The pieces of one log: every ``(workers + 1)``-th is this process's, the others queued a few
    ahead for the workers; taken in order."""

    def __init__(self, pool: concurrent.futures.ProcessPoolExecutor, path: str, count: int, workers: int) -> None:
        self._pool: concurrent.futures.ProcessPoolExecutor | None = pool
        self._path, self._count, self._every = path, count, workers + 1
        self._ahead = workers * IN_FLIGHT_PER_WORKER + 1
        self._futures: dict[int, concurrent.futures.Future[Piece]] = {}
        self._read_here: dict[int, Piece] = {}
        self._submitted = 0
        self._started: list[Any] = []  # the pool's worker processes, as they started

    def _ours(self, index: int) -> bool:
        return index % self._every == self._every - 1

    def take(self, index: int) -> Piece:
        """Piece ``index``'s records, skipped lines and line count."""
        while True:
            self._top_up(index)
            if index in self._read_here:
                return self._read_here.pop(index)
            future = self._futures.get(index)
            if future is None or future.cancel():  # ours, no worker, or none has begun it
                self._futures.pop(index, None)
                return read_piece(self._path, index, self._count)
            if future.done():
                del self._futures[index]
                try:
                    rows, bad, n = future.result(timeout=0)
                except Exception:  # a worker that died (BrokenProcessPool) or failed: read here
                    return read_piece(self._path, index, self._count)
                return [record_from_row(row) for row in rows], bad, n
            ahead = range(index + 1, min(self._count, index + self._ahead))
            ours = next((i for i in ahead if i not in self._futures and i not in self._read_here), None)
            if ours is not None:  # while a worker reads this one: one of ours, further on
                self._read_here[ours] = read_piece(self._path, ours, self._count)
                continue
            done, _ = concurrent.futures.wait([future], timeout=STUCK_AFTER_S)
            if not done:  # stuck: every piece is read here from now on
                self.stop(kill=True)

    def _top_up(self, index: int) -> None:
        """Queue the workers' pieces up to ``ahead`` past ``index``."""
        self._submitted = max(self._submitted, index)
        while self._pool is not None and self._submitted < min(self._count, index + self._ahead):
            if not self._ours(self._submitted):
                try:
                    self._futures[self._submitted] = self._pool.submit(
                        _worker_piece, self._path, self._submitted, self._count
                    )
                    self._started += [p for p in workers_of(self._pool) if p not in self._started]
                except (OSError, RuntimeError):  # no worker could start, or the pool broke: the rest is read here
                    self.stop(kill=True)
                    return
            self._submitted += 1

    def stop(self, kill: bool = False) -> None:
        """Stop the workers (at once when asked, or when pieces nobody will read are unfinished)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if kill or not all(f.done() for f in self._futures.values()):
            kill_workers(pool, self._started)
        pool.shutdown(wait=False, cancel_futures=True)
        self._futures.clear()


def read_piece(path: str, index: int, count: int) -> Piece:
    """Piece ``index`` of ``count``: the lines that begin in its byte range, read into records.

    Raises:
      OSError: the file cannot be read.
    """
    from jaxdiag.recording.log_reader import MAX_LINE_BYTES, LineValues, read_span

    skipped: list[tuple[str, int, str]] = []
    with open(path, "rb") as handle:
        if index:
            handle.seek(index * PIECE_BYTES - 1)  # from the byte before: a line that begins at the edge is this piece's
            line = handle.readline(MAX_LINE_BYTES)
            while line and not line.endswith(b"\n"):  # the rest of a line begun in an earlier piece
                line = handle.readline(MAX_LINE_BYTES)
        end = (index + 1) * PIECE_BYTES if index + 1 < count else None
        records, lines = read_span(handle, path, end, skipped, LineValues())
    return records, skipped, lines


def _worker_piece(path: str, index: int, count: int) -> Piece:
    """In a worker: ``read_piece``, its records as rows."""
    records, skipped, lines = read_piece(path, index, count)
    return [record_row(r) for r in records], skipped, lines

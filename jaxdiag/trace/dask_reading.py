"""Host files read on the workers of a Dask ``distributed`` cluster (``reading.start(..., scheduler=...)``).

Each host file is read on a worker (``read_file``, which needs the path to be
readable there) and only its columns, the per-host frames the analyses need,
come back; they are fetched one by one, so the others wait on the workers.
Dask is imported only here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.reading import Outcome, read_file


class DaskReading:
    """Host files read on the workers of a Dask ``distributed`` cluster, one task per file."""

    def __init__(self, files: list[Path], kind: str, include_python: bool, scheduler: Any) -> None:
        try:
            from distributed import Client
        except ImportError:
            from jaxdiag.errors import ConfigError

            raise ConfigError(
                "reading on a Dask cluster needs dask[distributed]: pip install 'dask[distributed]'"
            ) from None
        self._own = not isinstance(scheduler, Client)
        try:
            self._client = Client(scheduler, timeout="10s") if self._own else scheduler
        except (OSError, TimeoutError, ValueError) as exc:
            from jaxdiag.errors import ConfigError

            raise ConfigError(f"cannot reach the Dask scheduler {scheduler!r}: {exc}") from None
        self._files = files
        self._futures = self._client.map(
            read_remote, [str(f) for f in files], kind=kind, include_python=include_python, pure=False
        )

    @property
    def workers(self) -> int:
        return len(self._client.scheduler_info().get("workers", {}))

    def finish(self) -> list[Outcome]:
        return list(self.each())

    def each(self) -> Iterator[Outcome]:
        try:
            for future in self._futures:  # fetched one by one: the rest wait on the workers
                yield future.result()
                future.release()
        finally:
            if self._own:
                self._client.close()


def read_remote(path: str, kind: str, include_python: bool) -> Outcome:
    """One host file, read where the task runs; its error is returned, to be raised where it is read."""
    try:
        columns = read_file(Path(path), kind, include_python)
    except TraceFormatError as exc:
        return exc
    return columns.pack()  # codes: a few bytes per event to send back

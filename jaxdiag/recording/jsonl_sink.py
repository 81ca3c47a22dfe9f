"""Where compile records go besides memory: a JSONL file per process, one record a line."""

from __future__ import annotations

import json
import os
import pathlib
import socket
from typing import Protocol

from jaxdiag import config
from jaxdiag.errors import CompileLogError
from jaxdiag.recording.records import CompileRecord


class RecordSink(Protocol):
    """Where records go besides memory. ``write`` raises ``OSError`` when it cannot write."""

    path: pathlib.Path

    def write(self, record: CompileRecord) -> None: ...


class JsonlSink:
    """Appends one ``CompileRecord.to_dict()`` per line to ``<folder>/compiles-<host>-<pid>.jsonl``.

    The file is opened, appended, flushed and closed per record: records are rare,
    a crash leaves every earlier line whole, a forked child writes its own file,
    and a folder removed under us shows up as an error instead of lost writes.
    A write that fails part way (a full disk) is cut back off the file, and a
    line left without its newline (a crash mid-write) is ended before the next
    record, so that a record written once space returns is not joined to a
    torn line and lost with it.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = pathlib.Path(folder).expanduser()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise CompileLogError(
                f"compile log folder {str(self.folder)!r} is not writable "
                f"({exc.strerror or type(exc).__name__}); pass a writable folder to "
                f"jaxdiag.configure(log_dir=...) or {config.ENV_LOG_DIR}"
            ) from None

    @property
    def path(self) -> pathlib.Path:
        return self.folder / f"compiles-{socket.gethostname()}-{os.getpid()}.jsonl"

    def write(self, record: CompileRecord) -> None:
        data = (json.dumps(record.to_dict(), default=str) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            if end and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                try:
                    os.ftruncate(fd, end)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)

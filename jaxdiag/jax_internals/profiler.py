"""The profiler: its options, and jaxlib's XSpace reader, asked whether it survives corrupt data.

``parse_xspace`` is the one way a ``.xplane.pb`` is parsed by jaxlib; where the reader
aborts on corrupt data (older jaxlib), each file is first parsed in a child process.
Nothing here imports jax at import time, nor when reading: ``trace`` reads without jax.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from jaxdiag.errors import TraceFormatError
from jaxdiag.jax_internals.capabilities import CAPABILITIES


@functools.cache
def profile_options() -> type | None:
    """``jax.profiler.ProfileOptions`` (Python tracer level, session id...)."""
    import jax

    return getattr(jax.profiler, "ProfileOptions", None)


@functools.cache
def xspace_reader() -> Callable[[bytes], Any] | None:
    """``ProfileData.from_serialized_xspace`` (jaxlib 0.7 on); imports in milliseconds, without jax."""
    try:
        profile_data = importlib.import_module("jaxlib._profile_data")

        return profile_data.ProfileData.from_serialized_xspace
    except Exception:
        return None


@functools.cache
def xspace_reader_raises() -> bool | None:
    """Whether the XSpace reader raises on corrupt data instead of aborting the process.

    Asked once per process, of a child process: older jaxlib aborts (a failed ``CHECK``).
    """
    reader = xspace_reader()
    if reader is None:
        return None
    return True if _parses_in_child(reader, b"", corrupt=True) else None


#: A plane record, then bytes that are no field: every protobuf parser rejects it.
_CORRUPT_XSPACE = b"\x0a\x05\x12\x03abc\xff\xff"


def parse_xspace(data: bytes, source: str) -> list[Any]:
    """The planes of a serialized XSpace (``ProfileData`` planes).

    Raises:
      TraceFormatError: the protobuf parser rejects the data, or this jaxlib has no reader.
    """
    reader = xspace_reader()
    if reader is None:
        raise TraceFormatError(
            f"{source}: {CAPABILITIES['xspace_reader'].lost}: it lacks "
            f"{CAPABILITIES['xspace_reader'].reads}; install jaxlib>=0.8"
        )
    if xspace_reader_raises() is None and not _parses_in_child(reader, data):
        raise TraceFormatError(f"{source}: corrupt XSpace, the protobuf parser rejected it")
    with _parser_log_held() as held:
        try:
            return list(reader(data).planes)
        except RuntimeError as exc:
            held.drop_parser_lines = True
            raise TraceFormatError(f"{source}: corrupt XSpace, the protobuf parser rejected it ({exc})") from None


#: Lines the C++ protobuf parser and absl log to stderr on their own (``E0000 00:00:... wire_format_lite.cc``).
_PARSER_LOG_LINE = re.compile(rb"^(WARNING: All log messages before absl|[EWIF]\d{4} \d\d:\d\d:|\[libprotobuf )")


class _HeldLog:
    drop_parser_lines = False


@contextlib.contextmanager
def _parser_log_held() -> Iterator[_HeldLog]:
    """Hold what is written to file descriptor 2 while the C++ parser runs, then write it out.

    When the parser rejects the data, its own log lines ("String field ... contains
    invalid UTF-8") are dropped: the error raised says it in one line. Anything else
    written meanwhile is written out as it came.
    """
    import tempfile

    held = _HeldLog()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield held
        return
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield held
            finally:
                os.dup2(saved, 2)
                sink.seek(0)
                lines = sink.read().splitlines(keepends=True)
                if held.drop_parser_lines:
                    lines = [line for line in lines if not _PARSER_LOG_LINE.match(line)]
                if lines:
                    os.write(2, b"".join(lines))
    finally:
        os.close(saved)


def _parses_in_child(reader: Callable[[bytes], Any], data: bytes, *, corrupt: bool = False) -> bool:
    """Whether ``reader(data)`` returns in a child process (an aborting reader kills only the child).

    A forked child where jax is not imported (reading a trace); with jax running (it is
    multithreaded, so a fork may deadlock), or where no fork can be had, a fresh
    interpreter given the data on stdin. ``corrupt`` asks instead whether ``reader``
    raises on ``_CORRUPT_XSPACE``.
    """
    import os
    import sys

    if "jax" in sys.modules or not hasattr(os, "fork"):
        return _parses_in_interpreter(data, corrupt=corrupt)
    try:
        pid = os.fork()
    except OSError:
        return _parses_in_interpreter(data, corrupt=corrupt)
    if pid == 0:  # the child
        status = 1
        try:
            # An aborting reader prints its failed CHECK and a stack: the user's one line is ours.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            try:
                reader(_CORRUPT_XSPACE if corrupt else data)
            except RuntimeError:
                if not corrupt:
                    raise
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _parses_in_interpreter(data: bytes, *, corrupt: bool) -> bool:
    import subprocess
    import sys

    parse = "p.ProfileData.from_serialized_xspace(sys.stdin.buffer.read())"
    script = "import sys\nfrom jaxlib import _profile_data as p\n" + (
        f"try: {parse}\nexcept RuntimeError: pass" if corrupt else parse
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], input=_CORRUPT_XSPACE if corrupt else data, capture_output=True
        )
    except OSError:  # no process at all: trust the reader
        return True
    return done.returncode == 0

"""Read the files jaxdiag is given (saved reports, baselines, sidecars, TOML, logs) or refuse them in one line.

Every problem becomes the caller's ``JaxdiagError`` subclass with a message that
names the file and what is wrong with it, in units ("the file ends after 312
bytes"), so that the CLI prints one line and exits 2: a traceback and exit 1
would read as a regression in CI. Every read is bounded: only regular files
(a FIFO or ``/dev/zero`` would hang or fill memory), at most a stated size,
JSON at most ``MAX_DEPTH`` deep, and numbers that a profile can hold (within
64 bits, not negative where they measure time, size or a count; ``NaN`` reads
as unknown, as jaxdiag writes it).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import IO, Any

from jaxdiag.errors import JaxdiagError

#: First bytes of files that are certainly not text: gzip, zip, XSpace/protobuf-ish NUL runs.
_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"

#: The most a saved report, baseline, sidecar or TOML file may hold; a report of a long pod run is a few MB.
MAX_TEXT_BYTES = 256 * 2**20
#: The deepest JSON value read (saved reports nest 6 deep, compile records fewer).
MAX_DEPTH = 64
#: The largest magnitude a number may have: 64-bit program ids and nanosecond clocks fit, 1e308 does not.
MAX_NUMBER = float(2**64)
#: Counts must be exact in a float and fit a 64-bit integer.
MAX_COUNT = float(2**53)

_SPECIAL = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path: str | Path, what: str, error: type[JaxdiagError] = JaxdiagError) -> tuple[IO[bytes], int]:
    """``path`` opened for binary reading, with its size, if it is a regular file.

    The file is checked before it is opened (opening a FIFO blocks until a writer
    comes) and again through the open handle (the path may have changed between).

    Raises:
      error: missing, a folder, a special file (FIFO, device, socket) or unreadable.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc}); expected {what}") from None
    _refuse_special(p, st.st_mode, what, error)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc}); expected {what}") from None
    try:
        st = os.fstat(fd)
        _refuse_special(p, st.st_mode, what, error)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def _refuse_special(p: Path, mode: int, what: str, error: type[JaxdiagError]) -> None:
    if stat.S_ISDIR(mode):
        raise error(f"{p}: is a folder; expected {what}")
    for test, kind in _SPECIAL:
        if test(mode):
            raise error(f"{p}: {kind}, not a regular file; expected {what}")


def read_bytes(
    path: str | Path, what: str, error: type[JaxdiagError] = JaxdiagError, *, max_bytes: int = MAX_TEXT_BYTES
) -> bytes:
    """The bytes of the regular file ``path``, refused beyond ``max_bytes``.

    Raises:
      error: not a regular file, unreadable, or larger than ``max_bytes``.
    """
    p = Path(path)
    f, size = open_regular(p, what, error)
    with f:
        if size > max_bytes:
            raise error(f"{p}: {size:,} bytes, more than the {max_bytes:,} bytes jaxdiag reads as {what}")
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{p}: cannot read ({exc.strerror or exc}); expected {what}") from None
    if len(data) > max_bytes:  # grew while read, or a file whose size says nothing (/proc)
        raise error(f"{p}: more than the {max_bytes:,} bytes jaxdiag reads as {what}")
    return data


def read_text(
    path: str | Path, what: str, error: type[JaxdiagError] = JaxdiagError, *, max_bytes: int = MAX_TEXT_BYTES
) -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped).

    Args:
      path: the file to read.
      what: what the file should hold, for messages ("a saved report").
      error: the exception class to raise.
      max_bytes: the largest file read.

    Raises:
      error: the file is missing, a folder, a special file, too large, empty,
        compressed, binary or not UTF-8.
    """
    p = Path(path)
    data = read_bytes(p, what, error, max_bytes=max_bytes)
    if not data.strip():
        raise error(f"{p}: the file is empty ({len(data)} bytes); expected {what}")
    if data.startswith(_GZIP_MAGIC):
        raise error(
            f"{p}: gzip-compressed ({len(data):,} bytes); expected {what} as plain text: "
            "decompress it first (gunzip -k)"
        )
    if data.startswith(_ZIP_MAGIC):
        raise error(f"{p}: a zip archive ({len(data):,} bytes); expected {what} as plain text")
    nul = data.find(b"\x00", 0, 4096)
    if nul >= 0:
        raise error(f"{p}: binary data (a NUL byte at offset {nul} of {len(data):,} bytes); expected {what}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{p}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start} of "
            f"{len(data):,} bytes); expected {what}"
        ) from None


def _unknown(name: str) -> None:
    """``NaN`` and ``Infinity``, which JSON lacks, read as unknown: ``Report.to_json`` writes them as null."""
    return None


def loads(text: str | bytes, *, constants: bool = False) -> Any:
    """``json.loads`` that refuses deep nesting (``RecursionError``) and, unless ``constants``,
    reads ``NaN`` and ``Infinity`` (not JSON, but written by Python's ``json.dumps``) as ``None``."""
    value = json.loads(text) if constants else json.loads(text, parse_constant=_unknown)
    if depth_beyond(value, MAX_DEPTH):
        raise RecursionError(f"nested more than {MAX_DEPTH} deep")
    return value


def read_json(path: str | Path, what: str, error: type[JaxdiagError] = JaxdiagError) -> Any:
    """The JSON value in ``path``, its numbers checked (see ``number_problem``); ``error`` naming the file otherwise."""
    p = Path(path)
    text = read_text(p, what, error)
    try:
        value = loads(text)
    except json.JSONDecodeError as exc:
        size = len(text.encode("utf-8"))
        if not text[exc.pos :].strip():
            raise error(
                f"{p}: truncated JSON: the file ends after {size:,} bytes, inside a value ({exc.msg}); expected {what}"
            ) from None
        raise error(f"{p}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); expected {what}") from None
    except RecursionError:
        raise error(f"{p}: JSON nested more than {MAX_DEPTH} deep; expected {what}") from None
    problem = number_problem(value)
    if problem is not None:
        raise error(f"{p}: {problem}; expected {what}")
    return value


def depth_beyond(value: Any, most: int) -> bool:
    """Whether the JSON value ``value`` nests lists and objects more than ``most`` deep (without recursing)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth >= most:
            return True
        stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return False


#: Keys whose numbers may be below zero: times relative to a start, offsets and differences.
_SIGNED = re.compile(r"(^|_)(start|end|offset|offsets|delta|change|skew|diff|slope|unix)(_|$)")
#: Keys whose numbers measure a time, a size, a share or a count, which cannot be negative.
_MAGNITUDE = re.compile(
    r"(_ms|_us|_ns|_s|_bytes|_share|_count|_counts|_flops|_per_s|_hz|_bps|_tokens|_samples)$"
    r"|^(ms|us|ns|count|counts|n|tokens|samples|flops|median|iqr|mad|mean|p50|p90|p99|steps|compiles)$"
)
_COUNT = re.compile(r"(^|_)(count|counts|n)$")


def number_problem(value: Any) -> str | None:
    """Where the JSON value ``value`` holds a number no profile can: ``steps[3].wall_ms: -5.0 is negative``.

    Refused: non-finite numbers, magnitudes beyond 2**64, counts beyond 2**53, and
    negative values or text under keys that measure a time, size, share or count
    (``*_ms``, ``*_bytes``, ``count``, ``median``, ...). Keys of times relative to a
    start (``start_ms``, ``offsets_ms``, ``delta``) may be negative.
    """
    stack: list[tuple[Any, str, str]] = [(value, "", "")]
    while stack:
        item, where, key = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k), str(k)) for k, v in item.items())
            continue
        if isinstance(item, list):
            stack.extend((v, f"{where}[{i}]", key) for i, v in enumerate(item))
            continue
        magnitude = _MAGNITUDE.search(key) is not None and _SIGNED.search(key) is None
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, str):
            if magnitude:
                return f"{where or 'the value'}: text ({item[:20]!r}), not a number"
            continue
        x = float(item) if not isinstance(item, int) or abs(item) <= MAX_NUMBER else math.inf
        if not math.isfinite(x) or abs(x) > MAX_NUMBER:
            return f"{where or 'the value'}: {_short(item)} is out of range (beyond 2**64)"
        if magnitude and x < 0:
            return f"{where}: {_short(item)} is negative (it measures a time, size, share or count)"
        if _COUNT.search(key) and x > MAX_COUNT:
            return f"{where}: {_short(item)} is too large for a count (beyond 2**53)"
    return None


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"

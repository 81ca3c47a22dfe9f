"""Read the text files jaxdiag is given (saved reports, baselines, TOML) or refuse them in one line.

Every problem becomes the caller's ``JaxdiagError`` subclass with a message that
names the file and what is wrong with it, in units ("the file ends after 312
bytes"), so that the CLI prints one line and exits 2: a traceback and exit 1
would read as a regression in CI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jaxdiag.errors import JaxdiagError

#: First bytes of files that are certainly not text: gzip, zip, XSpace/protobuf-ish NUL runs.
_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"


def read_text(path: str | Path, what: str, error: type[JaxdiagError] = JaxdiagError) -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped).

    Args:
      path: the file to read.
      what: what the file should hold, for messages ("a saved report").
      error: the exception class to raise.

    Raises:
      error: the file is missing, a folder, empty, compressed, binary or not UTF-8.
    """
    p = Path(path)
    if p.is_dir():
        raise error(f"{p}: is a folder; expected {what}")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc}); expected {what}") from None
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


def read_json(path: str | Path, what: str, error: type[JaxdiagError] = JaxdiagError) -> Any:
    """The JSON value in ``path``; ``error`` naming the file and the problem otherwise."""
    p = Path(path)
    text = read_text(p, what, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        size = len(text.encode("utf-8"))
        if not text[exc.pos :].strip():
            raise error(
                f"{p}: truncated JSON: the file ends after {size:,} bytes, inside a value ({exc.msg}); expected {what}"
            ) from None
        raise error(f"{p}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); expected {what}") from None
    except RecursionError:
        raise error(f"{p}: JSON nested too deeply to read; expected {what}") from None

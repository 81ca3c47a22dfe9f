"""Types of the compiled line decoder (``_xline.c``)."""

from typing import Any

FIELDS: dict[str, tuple[int, ...]]

class Unexpected(Exception): ...

def codes(columns: list[list[Any]]) -> tuple[list[bytes], list[Any]]: ...
def split(payload: Any, offset: int, lines_field: int) -> tuple[list[tuple[int, int]], list[list[int]]]: ...
def head(payload: Any) -> tuple[bytes, int]: ...
def events(
    payload: Any,
    timestamp_ns: int,
    names: dict[int, str],
    stat_names: dict[int, str],
    wanted: dict[int, str],
    frame_bits: Any,
    keep_frames: bool,
) -> tuple[list[str], bytes, bytes, dict[str, list[Any]], int]: ...

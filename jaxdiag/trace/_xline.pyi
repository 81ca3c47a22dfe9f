"""Types of the compiled line decoder (``_xline.c``)."""

from typing import Any

FIELDS: dict[str, tuple[int, ...]]

class Unexpected(Exception): ...

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

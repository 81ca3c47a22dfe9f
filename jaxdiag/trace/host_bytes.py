"""The host plane's long threads, read from the bytes before the XSpace reader sees them.

A default ``jax.profiler`` capture records every Python call: on the H100
transformer capture, 925 thousand of the host plane's million events are such
frames (names starting with ``$``), all on the main thread, and nothing reads
them unless asked (``include_python``); the runtime's thread pools hold most of
the other events, of which only name, start and duration are read.

With every event located (``line_bytes``):

* on a runtime thread of an accelerated host (``host_plane.is_runtime_thread``),
  every event's id, offset and duration are decoded into the columns the reader
  would give (``PreparedLines.threads``), and the events are cut out of the bytes;
* on a thread the Python tracer followed, events whose ``metadata_id`` names a
  frame are cut out. On an accelerated host the events left (a few thousand
  annotations and runtime calls) are decoded too, with the stats that
  ``host_plane`` reads of them (``PYTHON_THREAD_STATS``); elsewhere (XLA:CPU
  ops run there) they are copied as they were, for the reader
  (``PreparedLines.dropped`` counts the frames).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from jaxdiag.trace import line_bytes, wire
from jaxdiag.trace.stat_bytes import event_stats
from jaxdiag.trace.host_plane import PYTHON_THREAD_STATS, is_runtime_thread
from jaxdiag.trace.line_bytes import EVENTS, METADATA_ID, LineEvents, Unexpected

#: Python-traced lines shorter than this are read as written: stripping them saves less than it costs.
MIN_LINE_BYTES = 1 << 16


@dataclasses.dataclass(frozen=True, slots=True)
class ThreadEvents:
    """A host thread's events as the reader gives them (Python frames left out and counted).

    ``stats``: each event's ``PYTHON_THREAD_STATS``, on a Python thread; ``None`` on a runtime thread.
    """

    names: list[str]
    starts: list[float]
    durs: list[float]
    frames: int
    stats: list[dict[str, Any]] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedLines:
    """What ``prepare_lines`` did, by line index in the host plane: new line records (``cut``), frames dropped
    (from threads left to the reader), threads read here."""

    cut: dict[int, bytes] = dataclasses.field(default_factory=dict)
    dropped: dict[int, int] = dataclasses.field(default_factory=dict)
    threads: dict[int, ThreadEvents] = dataclasses.field(default_factory=dict)


def prepare_lines(
    data: bytes | memoryview, layout: wire.PlaneLines, lines: Iterable[int], *, accelerated: bool
) -> PreparedLines:
    """Read these lines of the host plane whose ``layout`` is given (``accelerated``: the host has device planes)."""
    if not line_bytes.available():
        return PreparedLines()
    wanted = set(lines)
    runtime_lines = {i for i in wanted if accelerated and is_runtime_thread(layout.names[i])}
    todo = [
        (a, b, line)
        for a, b, line in layout.chunks
        if line in wanted and (line in runtime_lines or b - a >= MIN_LINE_BYTES)
    ]
    if not todo:
        return PreparedLines()
    view = memoryview(data)
    try:
        names, stat_names = line_bytes.plane_metadata(b"".join(view[a:b] for a, b, line in layout.chunks if line < 0))
    except Unexpected:
        return PreparedLines()
    frames = _frame_ids(names)
    todo = [t for t in todo if t[2] in runtime_lines or (len(frames) and _frames_early(view, t[0], t[1], frames))]
    if not todo:
        return PreparedLines()
    padded, located = line_bytes.locate_lines(view, todo)
    out = PreparedLines()
    for line, events in located.items():
        if line in runtime_lines:
            continue
        frame = _frame_mask(padded, events, frames)
        read = _read_python_thread(padded, events, frame, names, stat_names) if accelerated else None
        if read is not None:
            out.threads[line] = read
            continue
        stripped = _strip_frames(view, events, frame)
        if stripped is not None:
            out.cut[line], out.dropped[line] = stripped
    out.threads.update(_read_runtime(padded, {i: e for i, e in located.items() if i in runtime_lines}, names))
    for line in out.threads:
        out.cut[line] = located[line].without_events(view)
    return out


def _frame_ids(names: dict[int, str]) -> Any:
    """The sorted metadata ids of Python-tracer frames (the reader names an event by its metadata's ``name``)."""
    import numpy as np

    return np.array(sorted(key for key, name in names.items() if name.startswith("$")), dtype=np.int64)


def _frame_mask(padded: Any, events: LineEvents, frames: Any) -> Any:
    """Which of a line's events are Python frames, by the metadata id each is written with first."""
    import numpy as np

    at = events.content
    first_field = padded[at] == METADATA_ID << 3
    if frames[-1] < 1 << 14:  # every frame's id is one or two bytes: look those two bytes up at once
        pairs = np.ndarray((len(padded) - 1,), dtype="<u2", buffer=padded, strides=(1,))  # bytes i, i + 1
        width = _frame_id_widths(frames)[pairs[at + 1]]
        return first_field & (width > 0) & (width < events.sizes)
    ids, width = line_bytes.varints(padded, at + 1)
    is_frame = np.zeros(int(frames[-1]) + 1, dtype=bool)
    is_frame[frames] = True
    frame = first_field & (width > 0) & (1 + width <= events.sizes)
    frame &= (ids < len(is_frame)) & is_frame[np.minimum(ids, len(is_frame) - 1)]
    return frame


def _frame_id_widths(frames: Any) -> Any:
    """For each two bytes (little-endian), the width of the frame id they begin with as a varint; 0 for no frame's.

    An id under 128 is one byte, whatever follows it; one under 16384 is two.
    """
    import numpy as np

    widths = np.zeros(1 << 16, dtype=np.uint8)
    short = frames[frames < 1 << 7]
    for low in short.tolist():
        widths[low : 1 << 16 : 1 << 8] = 1  # the byte ``low``, then any byte
    long = frames[frames >= 1 << 7]
    widths[(long & 0x7F | 0x80) | (long >> 7) << 8] = 2
    return widths


def _strip_frames(view: memoryview, events: LineEvents, frame: Any) -> tuple[bytes, int] | None:
    """A line's record without its Python frames (``frame``), and how many; ``None`` to keep it as written."""
    import numpy as np

    dropped = int(np.count_nonzero(frame))
    if dropped == 0:
        return None
    # Copy the kept events in runs: consecutive kept records are one slice.
    edges = np.flatnonzero(np.diff(np.concatenate([[False], ~frame, [False]]).view(np.int8)))
    bounds = (np.append(events.starts, events.end - events.base)[edges] + events.base).tolist()
    pieces = [view[events.payload : events.first]]
    pieces += [view[lo:hi] for lo, hi in zip(bounds[::2], bounds[1::2])]
    pieces.append(view[events.end : events.record_end])
    body = b"".join(pieces)
    return line_bytes.header(line_bytes.LINES, len(body)) + body, dropped


def _read_python_thread(
    padded: Any, events: LineEvents, frame: Any, names: dict[int, str], stat_names: dict[int, str]
) -> ThreadEvents | None:
    """A Python thread's events but its frames (``frame``), with their ``PYTHON_THREAD_STATS``; ``None``
    when they cannot be read here."""
    import numpy as np

    kept = np.flatnonzero(~frame)
    line = dataclasses.replace(
        events, starts=events.starts[kept], content=events.content[kept], sizes=events.sizes[kept]
    )
    rounds: list[Any] = []
    try:
        got = line_bytes.decode_lines(padded, {0: line}, names, stats=rounds)
        stats = event_stats(padded, rounds, len(got.names), stat_names, PYTHON_THREAD_STATS)
    except (Unexpected, UnicodeDecodeError):
        return None
    named = ~got.frames  # an event written without its id first is still a frame by name, as the reader sees it
    rows = np.flatnonzero(named).tolist()
    return ThreadEvents(
        got.names[named].tolist(),
        got.starts[named].tolist(),
        got.durs[named].tolist(),
        len(frame) - len(rows),
        [stats[i] for i in rows],
    )


def _read_runtime(padded: Any, lines: dict[int, LineEvents], names: dict[int, str]) -> dict[int, ThreadEvents]:
    """Runtime lines' events as columns, all lines decoded at once; a line left out is left to the reader."""

    def read(some: dict[int, LineEvents]) -> dict[int, ThreadEvents]:
        got = line_bytes.decode_lines(padded, some, names)
        kept = ~got.frames
        out = {}
        for line, lo, hi in got.spans:
            mine = kept[lo:hi]
            out[line] = ThreadEvents(
                got.names[lo:hi][mine].tolist(),
                got.starts[lo:hi][mine].tolist(),
                got.durs[lo:hi][mine].tolist(),
                int(hi - lo - mine.sum()),
            )
        return out

    return line_bytes.read_in_bulk(lines, read)


def _frames_early(view: memoryview, a: int, b: int, frames: Any, events: int = 64) -> bool:
    """Whether a frame is among the first ``events`` events of the line record ``view[a:b]``: a thread the
    Python tracer followed has frames throughout, and threads without any are not worth a parse."""
    from jaxdiag.errors import TraceFormatError

    wanted = set(frames.tolist())
    try:
        _, start = wire._varint(view, a, "")
        _, start = wire._varint(view, start, "")
        for field, _, begin, _ in wire._fields(view, start, b):
            if field != EVENTS:
                continue
            if view[begin] == METADATA_ID << 3 and wire._varint(view, begin + 1, "")[0] in wanted:
                return True
            events -= 1
            if events == 0:
                return False
    except (TraceFormatError, IndexError):
        return False
    return False

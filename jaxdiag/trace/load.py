"""``load(path)``: a ``jax.profiler`` capture as ``TraceFrames``.

Finds the run, reads every host file (a file that cannot be read is skipped and
named, as long as another one can), builds one events table with categorical
string columns, and finds the steps. Reading may go on in worker processes, or
on a Dask cluster's workers (``trace.reading``), between ``start_load`` and
``PendingLoad.result``, and may start before the caller asks for it (``prefetch``).

Building the events table (its categorical columns, the checks on impossible values) is the loader's
one job beside finding the files, which is why the module runs past 400 lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from jaxdiag.config import DEFAULT_SETTINGS, Settings
from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.columns import Coded
from jaxdiag.trace.discover import Discovered, discover
from jaxdiag.trace.frames import (
    CATEGORY,
    DEVICE,
    DEVICE_COLUMNS,
    DUR_NS,
    EVENT_COLUMNS,
    FRAMEWORK_OP,
    HLO_MODULE,
    HLO_OP,
    HOST,
    LINE,
    LINE_KIND,
    NAME,
    PLANE,
    PROGRAM_ID,
    RUN_ID,
    START_NS,
    STEP,
    TraceFrames,
)
from jaxdiag.trace.reading import start as start_reading

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

    from jaxdiag.trace.xspace import HostColumns


def load(
    path: str | Path,
    *,
    run: str | None = None,
    host: str | None = None,
    include_python: bool = False,
    parallel: bool | None = None,
    workers: int | None = None,
    scheduler: Any = None,
    start_method: str | None = None,
    settings: Settings | None = None,
) -> TraceFrames:
    """Read a ``jax.profiler`` capture.

    Args:
      path: a logdir as given to ``jax.profiler.start_trace``, a ``plugins/profile``
        or ``plugins/profile/<run>`` folder, or one ``.xplane.pb`` file.
      run: the run folder to read (default: the newest).
      host: read only this host's file (default: every host).
      include_python: keep Python-tracer frames (category ``python``); they are
        most of the events of a default capture and no analysis needs them.
      parallel: read the capture in worker processes (see ``trace.reading``):
        ``None`` when it pays, ``True`` whenever it is safe, ``False`` never.
        The result is the same either way.
      workers: worker processes (default: one per core).
      scheduler: a Dask ``distributed`` scheduler address (``tcp://HOST:PORT``) or
        ``Client``: each host file is read on the cluster's workers, which must
        see the same path; only its columns come back. The result is the same.
      start_method: how worker processes start: ``fork`` (the default, used only
        from a single-threaded process), ``forkserver`` or ``spawn``.
      settings: the settings to read with (``TraceFrames.settings``; default: the defaults).

    Raises:
      TraceFormatError: nothing readable at ``path``, or every host file is
        empty, truncated or not a trace.
    """
    from jaxdiag.processes import collector_paused

    with collector_paused():
        return start_load(
            path,
            run=run,
            host=host,
            include_python=include_python,
            parallel=parallel,
            workers=workers,
            scheduler=scheduler,
            start_method=start_method,
        ).result(settings)


def start_load(
    path: str | Path,
    *,
    run: str | None = None,
    host: str | None = None,
    include_python: bool = False,
    parallel: bool | None = None,
    workers: int | None = None,
    scheduler: Any = None,
    start_method: str | None = None,
) -> "PendingLoad":
    """Begin ``load``; ``result()`` ends it. A caller may import what it needs in between, while a worker reads.

    Takes over a ``prefetch`` of the same capture.

    Raises:
      TraceFormatError: nothing to read at ``path`` (as ``load``).
    """
    if not include_python and parallel is None and workers is None and scheduler is None and start_method is None:
        pending = _PREFETCHED.pop((str(Path(path)), run, host), None)
        if pending is not None:
            return pending
    found = discover(path, run=run, host=host)
    if found.kind == "xplane" and scheduler is None:
        _ready_xspace_reader()
    reading = start_reading(
        found.files, found.kind, include_python, parallel, workers=workers, scheduler=scheduler, method=start_method
    )
    return PendingLoad(found, include_python, reading)


def prefetch(path: str | Path, *, run: str | None = None, host: str | None = None) -> None:
    """Start reading a capture now, for the next ``load`` or ``start_load`` of it to take over.

    A program that knows what it will read before its slower imports
    (``jaxdiag report TRACE``) calls this first: the workers fork while the process
    still runs one thread, and read while the program loads. A prefetch nobody
    claims is stopped when the process ends; a problem with the capture is left
    for the load itself to raise.
    """
    try:
        _PREFETCHED[(str(Path(path)), run, host)] = start_load(path, run=run, host=host)
    except TraceFormatError:
        pass


def _ready_xspace_reader() -> None:
    """Without upb, load jaxlib's reader before any worker forks (``contract.reader``), asked once whether it
    survives corrupt data: forked workers inherit it, where each would otherwise load it again (and fork a
    child of its own to ask), and this process would fork its child later, from the size pandas and the
    analyses have grown it to.

    The fast backend needs nothing here: protobuf's classes of the planes are built where a plane is
    first read, by the workers (which have time to spare while this process imports) and by this
    process only when it reads a task itself.
    """
    from jaxdiag.trace.contract import ColumnReader, reader

    if isinstance(reader(), ColumnReader):
        return
    from jaxdiag.jax_internals import xspace_reader_raises

    xspace_reader_raises()


def drop_prefetched() -> bool:
    """Drop every prefetch nobody took over, which stops its workers; whether there was one.

    A program that prefetched and then did not load (bad arguments, an error before reading)
    calls this before it exits, else its exit would wait for the workers to finish reading.
    """
    dropped = bool(_PREFETCHED)
    _PREFETCHED.clear()
    return dropped


#: Prefetched reads by ``(path, run, host)``.
_PREFETCHED: dict[tuple[str, str | None, str | None], "PendingLoad"] = {}


class PendingLoad:
    """A capture being read (see ``start_load``)."""

    def __init__(self, found: Discovered, include_python: bool, reading: Any) -> None:
        self._found, self._include_python, self._reading = found, include_python, reading

    @property
    def run_dir(self) -> str:
        """The run folder being read (``TraceFrames.run_dir`` of the result)."""
        return str(self._found.run_dir)

    def result(self, settings: Settings | None = None) -> TraceFrames:
        """The loaded capture, read with ``settings`` (see ``load``)."""
        import pandas as pd

        from jaxdiag.trace.executions import executions
        from jaxdiag.trace.steps import assign_steps, find_steps

        found, include_python = self._found, self._include_python
        parts: list[HostColumns] = []
        skipped: list[tuple[str, str]] = []
        several = len(found.files) > 1
        for file, outcome in zip(found.files, self._reading.each()):
            if isinstance(outcome, TraceFormatError):
                message = str(outcome)
                prefix = f"{file}: "
                skipped.append((str(file), message[len(prefix) :] if message.startswith(prefix) else message))
            else:
                parts.append(_pack(outcome) if several else outcome)  # a pod's lists are not all held at once
        if not parts:
            if len(skipped) == 1:
                raise TraceFormatError(f"{skipped[0][0]}: {skipped[0][1]}")
            reasons = "; ".join(f"{Path(f).name}: {r}" for f, r in skipped)
            raise TraceFormatError(f"{found.run_dir}: no host file could be read ({reasons})")

        events = events_frame(parts)
        events, impossible = _without_negative_durations(events)
        marks = [(p.host, n, s, round(a), round(b)) for p in parts for n, s, a, b in p.step_marks]
        device_steps = [(p.host, d, s, round(a), round(b)) for p in parts for d, s, a, b in p.device_steps]
        settings = settings if settings is not None else DEFAULT_SETTINGS
        execs = executions(events, settings.step_gap_us)
        found_steps = find_steps(events, marks, device_steps, settings.step_gap_us, execs)
        events[STEP] = assign_steps(events, found_steps.table)
        devices = pd.DataFrame([row for p in parts for row in p.devices], columns=list(DEVICE_COLUMNS))
        impossible += _negative_device_facts_dropped(devices)
        return TraceFrames(
            events=events,
            devices=devices,
            steps=found_steps.table,
            step_source=found_steps.source,
            run_dir=str(found.run_dir),
            files=tuple(str(f) for f in found.files),
            hosts=tuple(p.host for p in parts),
            skipped=tuple(skipped),
            meta=_meta(parts, include_python),
            notes=_notes(parts, skipped, include_python) + tuple(impossible) + found_steps.notes,
            settings=settings,
            executions=execs,
            step_program=found_steps.program,
        )


def _without_negative_durations(events: "pd.DataFrame") -> tuple["pd.DataFrame", list[str]]:
    """``events`` less those with a negative duration (a damaged trace: no clock runs backwards), and a note."""
    negative = events[DUR_NS].to_numpy() < 0
    count = int(negative.sum())
    if not count:
        return events, []
    where = events.loc[negative, [HOST, PLANE]].drop_duplicates().head(3)
    planes = ", ".join(f"{h} {p}" for h, p in where.itertuples(index=False))
    note = f"dropped {count:,} event(s) with a negative duration, which no trace can hold (on {planes})"
    return events.loc[~negative].reset_index(drop=True), [note]


#: Device facts that measure something, so cannot be below zero.
_DEVICE_MAGNITUDES = ("core_count", "clock_hz", "memory_bandwidth_bps", "memory_bytes", "peak_flops")


def _negative_device_facts_dropped(devices: "pd.DataFrame") -> list[str]:
    """Set negative device facts (cores, clock, bandwidth, memory, peak flops) to unknown, in place; a note each."""
    notes = []
    for column in _DEVICE_MAGNITUDES:
        values = devices[column].to_numpy(dtype=float, na_value=float("nan"))
        negative = values < 0
        if negative.any():
            devices.loc[negative, column] = float("nan")
            notes.append(f"{column} is negative for {int(negative.sum())} device(s) in the trace: left unknown")
    return notes


def _pack(part: "HostColumns") -> "HostColumns":
    """``part`` with its string columns coded (``HostColumns.pack``): a pod's hosts hold mostly the same
    few thousand names, and as codes each host costs a few bytes per event rather than a list of strings."""
    return part.pack()


def events_frame(parts: Sequence["HostColumns"]) -> "pd.DataFrame":
    """One events table from per-host columns, rows by host, plane and line, each line by start time."""
    import numpy as np
    import pandas as pd

    def strings(column: str) -> "pd.Categorical":
        return _categorical([p.coded(column) for p in parts])

    def numbers(column: str, dtype: Any) -> "np.ndarray":
        arrays = [p.numbers(column) for p in parts]
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype=dtype)

    keys: dict[tuple[str, str, str, str], int] = {}
    codes, counts = [], []
    for p in parts:
        for plane, line, kind, count in p.segments:
            codes.append(keys.setdefault((p.host, plane, line, kind), len(keys)))
            counts.append(count)
    segment = np.repeat(np.asarray(codes, dtype=np.int64), np.asarray(counts, dtype=np.int64))
    key_list = list(keys)
    start = np.rint(numbers("start_ns", np.float64)).astype(np.int64)
    columns: dict[str, Any] = {}
    for position, column in enumerate((HOST, PLANE, LINE, LINE_KIND)):
        labels = [k[position] for k in key_list]
        uniques = list(dict.fromkeys(labels))
        index = {label: i for i, label in enumerate(uniques)}
        mapping = np.asarray([index[label] for label in labels], dtype=np.int64)
        columns[column] = pd.Categorical.from_codes(mapping[segment], categories=uniques)
    columns[DEVICE] = numbers("device", np.int64)
    columns[NAME] = strings("name")
    columns[START_NS] = start
    columns[DUR_NS] = np.rint(numbers("dur_ns", np.float64)).astype(np.int64)
    columns[HLO_MODULE] = strings("hlo_module")
    columns[HLO_OP] = strings("hlo_op")
    columns[FRAMEWORK_OP] = strings("framework_op")
    columns[PROGRAM_ID] = numbers("program_id", np.int64)
    columns[STEP] = np.full(len(start), -1, dtype=np.int64)
    columns[CATEGORY] = strings("category")
    columns[RUN_ID] = numbers("run_id", np.int64)
    events = pd.DataFrame(columns, columns=list(EVENT_COLUMNS), copy=False)  # its arrays are new: no copy
    if not _in_order(segment, start):  # lines come in order from a reader: a check spares the sort
        order = np.lexsort((start, segment))
        events = events.take(order).reset_index(drop=True)
    return events


def _in_order(segment: "np.ndarray", start: "np.ndarray") -> bool:
    """Whether rows are already by segment, each segment by start (``np.lexsort((start, segment))``, being
    stable, would leave them where they are)."""
    if len(segment) < 2:
        return True
    same = segment[1:] == segment[:-1]
    return bool((segment[1:] >= segment[:-1]).all() and (~same | (start[1:] >= start[:-1])).all())


def _categorical(parts: Sequence["Coded | list[str]"]) -> "pd.Categorical":
    """String columns (coded, or lists), one after another, as one categorical with sorted categories
    (``pd.Categorical``'s): joined by their distinct values (``Coded.joined``), which are then ranked."""
    import numpy as np
    import pandas as pd

    try:
        coded = Coded.joined(parts)
        order = sorted(range(len(coded.values)), key=coded.values.__getitem__)
        if order:
            # In the narrowest type that holds the codes, which pandas would convert them to.
            rank = np.empty(
                len(order), dtype=np.int8 if len(order) < 1 << 7 else np.int16 if len(order) < 1 << 15 else np.int32
            )
            rank[order] = np.arange(len(order))
            categories = pd.Index(np.asarray([coded.values[i] for i in order], dtype=object))
            return pd.Categorical.from_codes(rank.take(coded.codes), categories=categories)
    except (TypeError, ValueError, UnicodeError):  # e.g. a lone surrogate from a JSON trace
        pass
    return pd.Categorical([v for p in parts for v in (p.strings() if isinstance(p, Coded) else p)])


def _meta(parts: Sequence["HostColumns"], include_python: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for p in parts:
        for key, value in p.meta.items():
            meta.setdefault(key, value)
    meta["python_frames"] = sum(p.python_frames for p in parts)
    meta["include_python"] = include_python
    return meta


def _notes(parts: Sequence["HostColumns"], skipped: Sequence[tuple[str, str]], include_python: bool) -> tuple[str, ...]:
    notes = [f"skipped {Path(f).name}: {reason}" for f, reason in skipped]
    for p in parts:
        notes += p.notes
        if not len(p):
            notes.append(f"{p.host}: the trace holds no events")
    frames = sum(p.python_frames for p in parts)
    if frames and not include_python:
        notes.append(
            f"dropped {frames:,} Python-tracer frames (load(..., include_python=True) keeps them). The Python "
            "tracer also slows the profiled program: capture with python_tracer_level=0 in "
            "jax.profiler.ProfileOptions unless Python call stacks are needed"
        )
    return tuple(notes)

"""Find step boundaries, and the step each event starts in.

In order of preference: ``StepTraceAnnotation`` events on the host (an event
named by the annotation with a ``step_num`` stat); a TPU "Steps" line; else the
executions of the step's program (``executions.step_module``: of the busy programs of
several ops, the one run most often; executions are told apart by ``trace.executions``).
Steps are per host because hosts do not share a clock.

Steps tile the run: each step begins where the one before it ended, so the
time between two marked spans (the loop's data loading, eager conversions, the
compile the next call triggers) belongs to the step it feeds, the next one. A
step ends where its marked span ends, or, when the host then reads the step's
results back (``float(loss)``) before starting other annotated work, where that
read ends: the read waits for the step's device work. When the device is still
busy there (with work queued behind the value read), the step runs on until the
device goes idle or the host launches more jitted work, whichever comes first,
never past the next mark. The first step begins at
its own mark (for module runs: at the host's first event, so the first compile
is booked to the first run). The last step ends where the device work that
started in it ends, so it is not cut short when the device runs behind the host.

Work between steps is not a step: executions of another program that runs in
fewer than half of the steps (an evaluation, a checkpoint, a reshard), before a
step's mark, are cut out of that step, which then begins where they end. The
hole this leaves in the tiling is reported on its own row (``analyses.between_steps``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Sequence

from jaxdiag.config import DEFAULT_SETTINGS
from jaxdiag.trace.executions import (
    END_NS,
    SOURCE,
    between_steps_cut,
    executions,
    device_rows,
    find_step_program,
    inferred_steps_note,
    step_module,
)
from jaxdiag.trace.frames import (
    CATEGORY,
    DEVICE,
    DUR_NS,
    HLO_MODULE,
    HOST,
    LINE_KIND,
    NAME,
    START_NS,
    STEP,
    STEP_COLUMNS,
)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd


#: Host events that read device results back (``float(x)``, ``np.asarray``,
#: ``jax.device_get``, ``block_until_ready``): a wait for the device work before them.
_READ_BACK_ANYWHERE = (
    r"np\.asarray\(|ToLiteral|BlockUntilReady|block_until_ready|TransferLiteralFromDevice|"
    r"CopyRawDeviceToHost|TransferFromDevice|device_get|CommonPjRtBuffer::Await|AwaitBuffersReady"
)
READ_BACK = re.compile(_READ_BACK_ANYWHERE + r"|^D2H")
_READ_BACK_SEARCH = re.compile(_READ_BACK_ANYWHERE)


@functools.lru_cache(maxsize=1 << 16)
def reads_back(name: str) -> bool:
    """Whether ``READ_BACK`` finds ``name``: the same test in half the time (an anchored branch stops
    ``re`` from skipping ahead to the branches' first letters). Remembered: finding the steps asks it
    of a host's event names, and the report's host waits ask it of the same names again."""
    return name.startswith("D2H") or _READ_BACK_SEARCH.search(name) is not None


#: Host annotations that launch jitted work rather than mark the user's own code.
_LAUNCH = re.compile(r"^PjitFunction\(")

#: ``(host, name, step_num, start_ns, end_ns)`` of one step-annotation event.
StepMark = tuple[str, str, int, int, int]
#: ``(host, device, step, start_ns, end_ns)`` of one event on a TPU "Steps" line.
DeviceStep = tuple[str, int, int, int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class FoundSteps:
    """Step boundaries and how they were found.

    Attributes:
      table: one row per step per host, columns ``STEP_COLUMNS``, by host then start.
      source: one of ``STEP_SOURCES``.
      notes: what was guessed, for the user.
    """

    table: "pd.DataFrame"
    source: str
    notes: tuple[str, ...]
    #: the program whose executions are the steps (``executions.step_module``), found on the way; ``None``: not
    program: str | None = None


def find_steps(
    events: "pd.DataFrame",
    marks: Sequence[StepMark] = (),
    device_steps: Sequence[DeviceStep] = (),
    step_gap_us: float = DEFAULT_SETTINGS.step_gap_us,
    execs: "pd.DataFrame | None" = None,
) -> FoundSteps:
    """Find steps from annotations, TPU step lines or the dominant module, in that order.

    Args:
      events: the events frame (``EVENT_COLUMNS``; the ``step`` column is not read).
      marks: host events carrying a ``step_num`` stat.
      device_steps: events of TPU "Steps" lines.
      step_gap_us: the setting: where executions are told apart by timing alone, a device
        idle this long ends one (``trace.executions``).
      execs: ``trace.executions.executions(events, step_gap_us)``, when the caller has it
        (TPU step lines need none).
    """
    if marks:
        rows, notes = _from_marks(marks)
        names = {r[2] for r in rows}
        tiled = tile(rows, events, read_back=True, step_names=names)
        execs = execs if execs is not None else executions(events, step_gap_us)
        program = find_step_program(events, execs)
        if program:
            tiled = between_steps_cut(tiled, {(r[0], r[1]): (r[3], r[4]) for r in rows}, execs, program)
        return FoundSteps(_table(tiled), "annotation", notes, program)
    if device_steps:
        merged: dict[tuple[str, int], list[int]] = {}
        for host, _device, step, start, end in device_steps:
            span = merged.setdefault((host, step), [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
        rows = [(h, s, "Steps", a, b) for (h, s), (a, b) in merged.items()]
        return FoundSteps(_table(tile(rows, events)), "device_steps", ())
    return _from_module(events, execs if execs is not None else executions(events, step_gap_us))


Row = tuple[str, int, str, int, int]


def tile(
    rows: Sequence[Row],
    events: "pd.DataFrame",
    *,
    read_back: bool = False,
    step_names: set[str] | frozenset[str] = frozenset(),
    first_from_host_start: bool = False,
) -> list[Row]:
    """Make each host's steps tile its run (see the module docstring).

    Args:
      rows: ``(host, step, name, start_ns, end_ns)`` of the marked spans.
      events: the events frame, for read-backs and device work.
      read_back: end a step at the end of the host's first read-back after its
        span, when that comes before the next span and before other annotated work.
      step_names: annotation names that mark steps (not the user's own work).
      first_from_host_start: begin the first step at the host's first event.
    """
    import numpy as np

    out: list[Row] = []
    by_host: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_host[row[0]].append(row)
    no_rows = np.zeros(0, dtype=np.int64)
    if len(events):
        device = (events[CATEGORY] == "device").to_numpy()
        all_starts = events[START_NS].to_numpy(np.int64)
        all_durs = events[DUR_NS].to_numpy(np.int64)
    for host, mine in by_host.items():
        mine.sort(key=lambda r: (r[3], r[4]))
        host_rows = dev_rows = no_rows
        if len(events):
            on_host = (events[HOST] == host).to_numpy()
            host_rows, dev_rows = np.flatnonzero(on_host & ~device), np.flatnonzero(on_host & device)
        reads = np.zeros((0, 2), dtype=np.int64)
        marks = np.zeros(0, dtype=np.int64)
        launches = np.zeros(0, dtype=np.int64)
        if read_back and len(host_rows):
            flag = _Flags(events[NAME], host_rows)
            is_read = flag(reads_back)
            is_launch = flag(_LAUNCH.match)
            is_mark = (
                (events[CATEGORY] == "annotation").to_numpy()[host_rows]
                & ~is_read
                & ~(is_launch | flag(frozenset(step_names).__contains__))
            )
            starts = all_starts[host_rows]
            reads = np.stack([starts[is_read], starts[is_read] + all_durs[host_rows][is_read]], axis=1)
            reads = reads[np.argsort(reads[:, 0], kind="stable")]
            marks = np.sort(starts[is_mark])
            launches = np.sort(starts[is_launch])
        runs = np.zeros((0, 2), dtype=np.int64)
        if read_back and len(dev_rows):
            work = dev_rows[(events[LINE_KIND] != "steps").to_numpy()[dev_rows]]
            runs = _busy_runs(all_starts[work], all_durs[work])
        ends = [r[4] for r in mine]
        for i, row in enumerate(mine):
            nxt = mine[i + 1][3] if i + 1 < len(mine) else None
            if len(reads):
                j = int(np.searchsorted(reads[:, 0], ends[i], side="left"))
                limit = nxt if nxt is not None else np.iinfo(np.int64).max
                k = int(np.searchsorted(marks, ends[i], side="left"))
                if k < len(marks):
                    limit = min(limit, int(marks[k]))
                if j < len(reads) and reads[j, 0] < limit:
                    ends[i] = max(ends[i], min(int(reads[j, 1]), limit))
            if len(runs) and nxt is not None:
                # The device may still run what the step launched after the host moved on
                # (work queued behind the value it read back): the step lasts until the device
                # goes idle, or until the host launches more work, whichever comes first.
                r = int(np.searchsorted(runs[:, 0], ends[i], side="right")) - 1
                if r >= 0 and runs[r, 1] > ends[i]:
                    cap = nxt
                    k = int(np.searchsorted(launches, ends[i], side="left"))
                    if k < len(launches):
                        cap = min(cap, int(launches[k]))
                    ends[i] = max(ends[i], min(int(runs[r, 1]), cap))
        if len(dev_rows):
            last_start = mine[-1][3]
            dstart = all_starts[dev_rows]
            later = dstart >= last_start
            if later.any():
                ends[-1] = max(ends[-1], int((dstart[later] + all_durs[dev_rows][later]).max()))
        begin = mine[0][3]
        if first_from_host_start and len(host_rows):
            begin = min(begin, int(all_starts[host_rows].min()))
        for i, (h, step, name, _start, _end) in enumerate(mine):
            start = begin if i == 0 else ends[i - 1]
            out.append((h, step, name, start, max(ends[i], start)))
    return out


def assign_steps(events: "pd.DataFrame", steps: "pd.DataFrame") -> "np.ndarray":
    """The step each event starts in (``[start, end)``), or -1; an int64 array aligned with ``events``."""
    import numpy as np

    out = np.full(len(events), -1, dtype=np.int64)
    if steps.empty or events.empty:
        return out
    hosts = events[HOST]
    starts = events[START_NS].to_numpy()
    step_hosts = steps[HOST].to_numpy()
    step_starts, step_ends, numbers = (steps[c].to_numpy() for c in (START_NS, "end_ns", STEP))
    for host in dict.fromkeys(h for h in step_hosts.tolist() if h == h):  # each host's steps, by start
        mine = np.flatnonzero(step_hosts == host)
        mine = mine[np.argsort(step_starts[mine], kind="quicksort")]  # as ``sort_values`` orders them
        on_host = (hosts == host).to_numpy()
        every = bool(on_host.all())  # one host: every row, without selecting them
        rows = None if every else np.flatnonzero(on_host)
        t = starts if every else starts[rows]
        at = np.searchsorted(step_starts[mine], t, side="right") - 1
        holding = np.maximum(at, 0)
        found = np.where((at >= 0) & (t < step_ends[mine][holding]), numbers[mine][holding], -1)
        if every:
            out = found.astype(np.int64, copy=False)
        else:
            out[rows] = found
    return out


#: Device work with gaps shorter than this is one run of work (launch jitter, not idleness).
BUSY_GAP_NS = 50_000


def _busy_runs(starts: "np.ndarray", durs: "np.ndarray") -> "np.ndarray":
    """``(start, end)`` rows of the union of device work (TPU step spans left out), gaps under ``BUSY_GAP_NS`` closed."""
    import numpy as np

    if not len(starts):
        return np.zeros((0, 2), dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    ends = np.maximum.accumulate((starts + durs[order]))
    new_run = np.ones(len(starts), dtype=bool)
    new_run[1:] = starts[1:] > ends[:-1] + BUSY_GAP_NS
    firsts = np.flatnonzero(new_run)
    lasts = np.append(firsts[1:] - 1, len(starts) - 1)
    return np.stack([starts[firsts], ends[lasts]], axis=1)


class _Flags:
    """Tests of the names at positions ``rows``, each as a bool array, testing each distinct name those rows hold once."""

    def __init__(self, names: "pd.Series", rows: "np.ndarray") -> None:
        import numpy as np
        import pandas as pd

        self._names, self._rows = names, rows
        self._codes: np.ndarray | None = None
        if isinstance(names.dtype, pd.CategoricalDtype):
            categories = names.cat.categories
            codes = np.asarray(names.cat.codes.to_numpy()[rows], dtype=np.intp)
            used = np.zeros(len(categories) + 1, dtype=bool)
            used[codes] = True  # code -1 (missing) marks the last place, which no test reads
            self._used = np.flatnonzero(used[:-1])
            listed = categories.tolist()
            self._strings = [str(listed[i]) for i in self._used.tolist()]
            self._codes = codes

    def __call__(self, test: "Callable[[str], object]") -> "np.ndarray":
        import numpy as np

        if self._codes is None:
            return np.fromiter((test(str(n)) for n in self._names.iloc[self._rows]), dtype=bool, count=len(self._rows))
        flags = np.zeros(len(self._names.cat.categories) + 1, dtype=bool)  # the last place: missing names, False
        flags[self._used] = np.fromiter(map(test, self._strings), dtype=bool, count=len(self._strings))
        return flags[self._codes]


def _from_marks(marks: Sequence[StepMark]) -> tuple[list[tuple[str, int, str, int, int]], tuple[str, ...]]:
    """One step per (host, step_num) of the step name with the most events."""
    count: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for _host, name, _step, start, end in marks:
        count[name] += 1
        total[name] += end - start
    chosen = max(count, key=lambda n: (count[n], total[n]))
    notes: tuple[str, ...] = ()
    if len(count) > 1:
        others = ", ".join(f"{n!r} ({count[n]})" for n in sorted(count) if n != chosen)
        notes = (f"several step annotations; used {chosen!r} ({count[chosen]} events, the most), not {others}",)
    spans: dict[tuple[str, int], list[int]] = {}
    for host, name, step, start, end in marks:
        if name == chosen:
            span = spans.setdefault((host, step), [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    return [(h, s, chosen, a, b) for (h, s), (a, b) in spans.items()], notes


def _from_module(events: "pd.DataFrame", execs: "pd.DataFrame") -> FoundSteps:
    on_device = device_rows(events)
    if not len(on_device):
        note = (
            "no step annotations and no device work with a module name; every event has step -1. "
            "Wrap each training step in jax.profiler.StepTraceAnnotation('train', step_num=i)"
        )
        return FoundSteps(_table([]), "none", (note,), "")
    module = step_module(events, on_device, execs)
    device = events.take(on_device)
    rows: list[tuple[str, int, str, int, int]] = []
    sources: set[str] = set()
    for host, on_host in execs.groupby(HOST, sort=False):
        mine = on_host[on_host[HLO_MODULE] == module]
        if mine.empty:
            continue
        if (mine[SOURCE] != "run_id").any():  # per-device runs: the device with the most of the module's ops
            ops = device[(device[HOST] == host) & (device[HLO_MODULE] == module)]
            ordinal = ops[DEVICE].value_counts().sort_index().idxmax()
            mine = mine[mine[DEVICE] == ordinal]
        sources |= set(mine[SOURCE])
        for i, (start, end) in enumerate(sorted(zip(mine[START_NS].tolist(), mine[END_NS].tolist()))):
            rows.append((str(host), i, module, start, end))
    note = inferred_steps_note(module, execs, sources, len(rows))
    tiled = tile(rows, events, first_from_host_start=True)
    marked = {(r[0], r[1]): (r[3], r[4]) for r in rows}
    return FoundSteps(_table(between_steps_cut(tiled, marked, execs, module)), "module", (note,), module)


def _table(rows: Sequence[tuple[str, int, str, int, int]]) -> "pd.DataFrame":
    """The steps table: ``rows`` by host and start, hosts and names as objects, the rest ``int64``.

    Built from columns: a frame of a dozen rows costs more to convert and sort in
    pandas than in Python.
    """
    import numpy as np
    import pandas as pd

    listed: list[tuple[Any, ...]] = [tuple(r) for r in rows]
    if not all(len(r) == 5 and type(r[0]) is str for r in listed):  # what only pandas sorts the same way
        table = pd.DataFrame(listed, columns=list(STEP_COLUMNS))
        table = table.astype(
            {STEP: "int64", START_NS: "int64", "end_ns": "int64", HOST: "object", "step_name": "object"}
        )
        return table.sort_values([HOST, START_NS], kind="stable").reset_index(drop=True)
    listed.sort(key=lambda r: (r[0], int(r[3])))
    columns = list(zip(*listed)) if listed else [()] * 5
    dtypes = (object, np.int64, object, np.int64, np.int64)
    return pd.DataFrame(  # a Series of dtype object stays one (an array of strings would be read as text)
        {
            name: pd.Series(np.array(values, dtype=dtype), dtype=dtype)
            for name, values, dtype in zip(STEP_COLUMNS, columns, dtypes)
        },
        columns=list(STEP_COLUMNS),
    )

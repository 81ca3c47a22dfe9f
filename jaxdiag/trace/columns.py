"""``HostColumns``: the events of one host as parallel columns, as the readers build them.

Both readers (``xspace`` for ``.xplane.pb`` files, ``json_trace`` for Chrome JSON)
fill these columns, and ``load.events_frame`` turns them into the events table.
Number columns are ``array``s: as quick to append to as lists, and numpy reads
them (and pickle writes them) as one block of memory. String columns are lists
while a reader fills them, and may then be packed into ``Coded`` columns.
"""

from __future__ import annotations

import dataclasses
import itertools
from array import array
from typing import Any, Sequence, Union


@dataclasses.dataclass(frozen=True, slots=True)
class Coded:
    """A string column as codes into its distinct values (in the order they first appear).

    Events repeat a few thousand names: as codes, a column costs four bytes per
    event, pickles as one block (a reading worker sends its pieces so), and the
    events table's categoricals are made from the distinct values alone.
    """

    codes: Any  # numpy, one per event: uint8, uint16 or int32, the smallest that holds every code
    values: list[str]

    @classmethod
    def of(cls, strings: Sequence[str]) -> "Coded":
        """``strings`` coded."""
        return cls.sharing([strings])[0]

    @classmethod
    def sharing(cls, columns: Sequence[Sequence[str]]) -> list["Coded"]:
        """``columns`` coded into one list of values, which they all hold: it pickles once, and
        ``joined`` looks it up once for all of them."""
        import numpy as np

        from jaxdiag.trace.contract import line_decoder

        decoder = line_decoder()
        if decoder is not None:  # the same numbering, in C
            numbered, found = decoder.codes([s if type(s) is list else list(s) for s in columns])
            code_type = _code_type(len(found))
            return [cls(np.frombuffer(raw, dtype=np.int32).astype(code_type), found) for raw in numbered]
        values: list[str] = []
        position: dict[str, int] = {}
        codes = []
        for strings in columns:
            constant = bool(strings) and strings.count(strings[0]) == len(strings)  # a line's category
            for value in strings[:1] if constant else dict.fromkeys(strings):
                if value not in position:
                    position[value] = len(values)
                    values.append(value)
            if constant:
                codes.append(np.full(len(strings), position[strings[0]], dtype=np.int32))
            else:
                codes.append(np.fromiter(map(position.__getitem__, strings), dtype=np.int32, count=len(strings)))
        code_type = _code_type(len(values))
        return [cls(c.astype(code_type), values) for c in codes]

    @classmethod
    def joined(cls, parts: Sequence["StringColumn"]) -> "Coded":
        """The columns ``parts``, one after another, coded."""
        import numpy as np

        if len(parts) == 1 and isinstance(parts[0], Coded):
            return parts[0]

        coded = [part if isinstance(part, Coded) else Coded.of(part) for part in parts]
        lists = {id(c.values): c.values for c in coded}  # parts coded together share theirs (``sharing``)
        firsts = dict(zip(lists, itertools.accumulate((len(v) for v in lists.values()), initial=0)))
        position: dict[str, int] = {}
        every = list(itertools.chain.from_iterable(lists.values()))  # each list of values, in turn
        where = np.fromiter((position.setdefault(v, len(position)) for v in every), dtype=np.int64, count=len(every))
        codes = np.concatenate([c.codes for c in coded] + [np.zeros(0, np.uint8)], dtype=np.int64)
        codes += np.repeat([firsts[id(c.values)] for c in coded], [len(c.codes) for c in coded])
        return cls(where[codes].astype(_code_type(len(position))), list(position))

    def __len__(self) -> int:
        return len(self.codes)

    def strings(self) -> list[str]:
        """The column as a list."""
        import numpy as np

        return np.asarray(self.values, dtype=object)[self.codes].tolist() if self.values else []


def _code_type(values: int) -> Any:
    """The smallest numpy integer type that numbers ``values`` distinct values."""
    import numpy as np

    return np.uint8 if values <= 1 << 8 else np.uint16 if values <= 1 << 16 else np.int32


#: A string column of ``HostColumns``: as a reader fills it, or packed.
StringColumn = Union[list[str], Coded]


@dataclasses.dataclass(slots=True)
class HostColumns:
    """The events of one host as parallel columns, plus what the loader needs beside them.

    Events are stored per line: ``segments`` holds ``(plane, line, line_kind, count)``
    for consecutive runs of events, so the four per-line columns are not
    repeated per event. The string columns are lists, which readers append to,
    until ``pack`` makes them ``Coded`` (then read them with ``strings``).
    """

    host: str
    segments: list[tuple[str, str, str, int]] = dataclasses.field(default_factory=list)
    device: "array[int]" = dataclasses.field(default_factory=lambda: array("q"))
    name: list[str] = dataclasses.field(default_factory=list)
    start_ns: "array[float]" = dataclasses.field(default_factory=lambda: array("d"))
    dur_ns: "array[float]" = dataclasses.field(default_factory=lambda: array("d"))
    hlo_module: list[str] = dataclasses.field(default_factory=list)
    hlo_op: list[str] = dataclasses.field(default_factory=list)
    framework_op: list[str] = dataclasses.field(default_factory=list)
    program_id: "array[int]" = dataclasses.field(default_factory=lambda: array("q"))
    run_id: "array[int]" = dataclasses.field(default_factory=lambda: array("q"))
    category: list[str] = dataclasses.field(default_factory=list)
    #: a GPU kernel's CUPTI/ROCtracer correlation id, which names the host call that launched it; -1 none
    correlation: "array[int]" = dataclasses.field(default_factory=lambda: array("q"))
    #: one dict per device, keys ``DEVICE_COLUMNS``
    devices: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: ``(name, step_num, start_ns, end_ns)`` of host events with a ``step_num`` stat
    step_marks: list[tuple[str, int, float, float]] = dataclasses.field(default_factory=list)
    #: ``(device, step, start_ns, end_ns)`` from TPU "Steps" lines
    device_steps: list[tuple[int, int, float, float]] = dataclasses.field(default_factory=list)
    #: ``(correlation id, start_ns, line)`` of host calls that launched device work (``cuGraphLaunch``, ...)
    launches: list[tuple[int, float, str]] = dataclasses.field(default_factory=list)
    #: ``(start_ns, end_ns, line, run id)`` of the runtime's executions of a program on the host (``run_id`` stat)
    executes: list[tuple[float, float, str, int]] = dataclasses.field(default_factory=list)
    python_frames: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)

    def add(
        self,
        device: int,
        name: str,
        start: float,
        dur: float,
        module: str = "",
        op: str = "",
        framework: str = "",
        program: int = -1,
        category: str = "runtime",
        run: int = -1,
    ) -> None:
        """Append one event (the plane/line come from the open segment)."""
        self.device.append(device)
        self.name.append(name)
        self.start_ns.append(start)
        self.dur_ns.append(dur)
        self.hlo_module.append(module)
        self.hlo_op.append(op)
        self.framework_op.append(framework)
        self.program_id.append(program)
        self.run_id.append(run)
        self.category.append(category)
        self.correlation.append(-1)

    def add_events(
        self,
        names: list[str],
        starts: Sequence[float],
        durs: Sequence[float],
        category: str | list[str],
        *,
        devices: Sequence[int] | None = None,
        modules: list[str] | None = None,
        ops: list[str] | None = None,
        frameworks: list[str] | None = None,
        programs: Sequence[int] | None = None,
        runs: Sequence[int] | None = None,
        correlations: Sequence[int] | None = None,
    ) -> None:
        """Append events in bulk (there can be a million), as ``add`` would one by one: of one category, or
        each of its own; a column not given holds none (-1, or an empty string) for every event."""
        n = len(names)
        none, blank = _NONE * n, [""] * n
        self.name += names
        self.start_ns.extend(starts)
        self.dur_ns.extend(durs)
        self.device.extend(none if devices is None else devices)
        self.program_id.extend(none if programs is None else programs)
        self.run_id.extend(none if runs is None else runs)
        self.correlation.extend(none if correlations is None else correlations)
        self.hlo_module += blank if modules is None else modules
        self.hlo_op += blank if ops is None else ops
        self.framework_op += blank if frameworks is None else frameworks
        self.category += [category] * n if isinstance(category, str) else category

    def extend(self, *others: "HostColumns") -> None:
        """Append ``others``' events and facts after this one's (the pieces of one host, in plane order).

        A string column that is ``Coded`` in any of them comes out ``Coded``.
        """
        import numpy as np

        for column in _LISTS:
            mine = getattr(self, column)
            theirs = [getattr(other, column) for other in others]
            if column in STRING_COLUMNS and (isinstance(mine, Coded) or any(isinstance(t, Coded) for t in theirs)):
                setattr(self, column, Coded.joined([mine, *theirs]))
            elif column in _INTEGER_COLUMNS and any(isinstance(c, np.ndarray) for c in (mine, *theirs)):
                setattr(self, column, np.concatenate([np.asarray(c, dtype=np.int64) for c in (mine, *theirs)]))
            else:
                for values in theirs:
                    mine.extend(values)
        for other in others:
            self.meta.update(other.meta)
            self.python_frames += other.python_frames

    @staticmethod
    def pack_together(pieces: Sequence["HostColumns"]) -> None:
        """``pack`` each of ``pieces`` (one task's), their string columns coded into shared values (``Coded.sharing``)."""
        import numpy as np

        for column in STRING_COLUMNS:
            lists = [getattr(p, column) for p in pieces if not isinstance(getattr(p, column), Coded)]
            shared = iter(Coded.sharing(lists))
            for piece in pieces:
                if not isinstance(getattr(piece, column), Coded):
                    setattr(piece, column, next(shared))
        for piece in pieces:
            for column in _INTEGER_COLUMNS:
                numbers = np.asarray(getattr(piece, column), dtype=np.int64)
                if len(numbers) and -(1 << 7) <= numbers.min() and numbers.max() < 1 << 7:
                    numbers = numbers.astype(np.int8)  # the device ordinals; -1: none, as most programs are
                setattr(piece, column, numbers)

    def pack(self) -> "HostColumns":
        """Code the string columns (``Coded``) and put the device and program numbers in the smallest numpy
        integers that hold them, in place: once no reader adds to them. Returns ``self``."""
        HostColumns.pack_together([self])
        return self

    def strings(self, column: str) -> list[str]:
        """A string column as a list, packed or not."""
        values = getattr(self, column)
        return values.strings() if isinstance(values, Coded) else values

    def integers(self, column: str) -> list[int]:
        """``device``, ``program_id``, ``run_id`` or ``correlation`` as a list of ints, packed or not."""
        values = getattr(self, column)
        return values.tolist() if hasattr(values, "tolist") else list(values)

    def close_segment(self, plane: str, line: str, kind: str, first: int) -> None:
        """Record that events ``first:`` (up to now) belong to ``plane``/``line``."""
        count = len(self.name) - first
        if count:
            self.segments.append((plane, line, kind, count))


_NONE = array("q", [-1])  # no device, no program
STRING_COLUMNS = ("name", "hlo_module", "hlo_op", "framework_op", "category")
_INTEGER_COLUMNS = ("device", "program_id", "run_id", "correlation")
#: The list and array fields that ``HostColumns.extend`` concatenates.
_LISTS = (
    "segments",
    "device",
    "name",
    "start_ns",
    "dur_ns",
    "hlo_module",
    "hlo_op",
    "framework_op",
    "program_id",
    "run_id",
    "category",
    "correlation",
    "devices",
    "step_marks",
    "device_steps",
    "launches",
    "executes",
    "notes",
)

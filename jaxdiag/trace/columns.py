"""``HostColumns``: the events of one host as parallel columns, as the readers build them.

Both readers (``xspace`` for ``.xplane.pb`` files, ``json_trace`` for Chrome JSON)
fill these columns, and ``load.events_frame`` turns them into the events table.
A reader hands each line's columns over whole (the decoder's lists and arrays),
and a value a line's events share is kept once (``Fill``): nothing is copied
per event until the table is made, or until ``pack`` codes the string columns
(``Coded``) and puts the numbers in numpy arrays for a reading worker to send.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


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
    def joined(cls, parts: Sequence["Coded | list[str]"]) -> "Coded":
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


@dataclasses.dataclass(frozen=True, slots=True)
class Fill:
    """One value, ``count`` times: a column that a line's events share (their category, no module, no
    program) costs nothing per event until the events table is made."""

    value: Any
    count: int

    def __len__(self) -> int:
        return self.count


#: The per-event columns of ``HostColumns``: text, and numbers (``float`` times, else ``int``).
STRING_COLUMNS = ("name", "hlo_module", "hlo_op", "framework_op", "category")
NUMBER_COLUMNS = ("device", "start_ns", "dur_ns", "program_id", "run_id", "correlation")
_FLOAT_COLUMNS = ("start_ns", "dur_ns")


@dataclasses.dataclass(slots=True)
class HostColumns:
    """The events of one host as parallel columns, plus what the loader needs beside them.

    Events are stored per line: ``segments`` holds ``(plane, line, line_kind, count)``
    for consecutive runs of events, so the four per-line columns are not
    repeated per event. Each per-event column (``STRING_COLUMNS``, ``NUMBER_COLUMNS``)
    is a list of parts, one after another, which the readers hand over and nothing
    copies until the events table is made: the lists and arrays of a line's
    columns, ``Fill`` for a value its events share, and once ``pack``ed one
    ``Coded`` part (text) or numpy array (numbers). ``strings``, ``integers`` and
    ``numbers`` read a column whole.
    """

    host: str
    segments: list[tuple[str, str, str, int]] = dataclasses.field(default_factory=list)
    #: by column, its parts (see above)
    parts: dict[str, list[Any]] = dataclasses.field(
        default_factory=lambda: {column: [] for column in STRING_COLUMNS + NUMBER_COLUMNS}
    )
    count: int = 0
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

    def __len__(self) -> int:
        return self.count

    def add_events(
        self,
        names: list[str],
        starts: Sequence[float],
        durs: Sequence[float],
        category: str | list[str],
        *,
        devices: "Sequence[int] | np.ndarray | None" = None,
        modules: list[str] | None = None,
        ops: list[str] | None = None,
        frameworks: list[str] | None = None,
        programs: "Sequence[int] | np.ndarray | None" = None,
        runs: "Sequence[int] | np.ndarray | None" = None,
        correlations: "Sequence[int] | np.ndarray | None" = None,
    ) -> None:
        """Append events in bulk (there can be a million): of one category, or each of its own; a column not
        given holds none (-1, or an empty string) for every event. The columns given become parts as they are,
        not copied: a caller hands them over."""
        n = len(names)
        if not n:
            return
        given = (
            ("name", names, None),
            ("start_ns", starts, None),
            ("dur_ns", durs, None),
            ("category", category, None),
            ("device", devices, -1),
            ("hlo_module", modules, ""),
            ("hlo_op", ops, ""),
            ("framework_op", frameworks, ""),
            ("program_id", programs, -1),
            ("run_id", runs, -1),
            ("correlation", correlations, -1),
        )
        for column, values, none in given:
            self.parts[column].append(
                Fill(none, n) if values is None else Fill(values, n) if isinstance(values, str) else values
            )
        self.count += n

    def extend(self, *others: "HostColumns") -> None:
        """Append ``others``' events and facts after this one's (the pieces of one host, in plane order)."""
        for other in others:
            for column, parts in other.parts.items():
                self.parts[column].extend(parts)
            self.count += other.count
            for name in _LISTS:
                getattr(self, name).extend(getattr(other, name))
            self.meta.update(other.meta)
            self.python_frames += other.python_frames

    @staticmethod
    def pack_together(pieces: Sequence["HostColumns"]) -> None:
        """Each of ``pieces`` (one task's) as one ``Coded`` part per string column, coded into shared values
        (``Coded.sharing``), and one numpy part per number column, in the smallest integers that hold it."""
        import numpy as np

        for column in STRING_COLUMNS:
            coded = _coded([piece.parts[column] for piece in pieces])
            for piece, one in zip(pieces, coded):
                piece.parts[column] = [one]
        for piece in pieces:
            for column in NUMBER_COLUMNS:
                numbers = piece.numbers(column)
                if (
                    column not in _FLOAT_COLUMNS
                    and len(numbers)
                    and -(1 << 7) <= numbers.min()
                    and numbers.max() < 1 << 7
                ):
                    numbers = numbers.astype(np.int8)  # the device ordinals; -1: none, as most programs are
                piece.parts[column] = [numbers]

    def pack(self) -> "HostColumns":
        """Code the string columns (``Coded``) and put the number columns in numpy arrays, the device and program
        numbers in the smallest integers that hold them, in place: once no reader adds to them. Returns ``self``."""
        HostColumns.pack_together([self])
        return self

    def coded(self, column: str) -> Coded:
        """A string column as one ``Coded`` (its own if packed)."""
        parts = self.parts[column]
        if len(parts) == 1 and isinstance(parts[0], Coded):
            return parts[0]
        return _coded([parts])[0]

    def strings(self, column: str) -> list[str]:
        """A string column as a list."""
        parts = self.parts[column]
        if len(parts) == 1 and type(parts[0]) is list:
            return list(parts[0])
        return self.coded(column).strings()

    def numbers(self, column: str) -> Any:
        """A number column as a new numpy array (``float64`` times, else ``int64``)."""
        import numpy as np

        out = np.empty(self.count, dtype=np.float64 if column in _FLOAT_COLUMNS else np.int64)
        at = 0
        for part in self.parts[column]:  # each into its place: no array per part, no copy to join them
            out[at : at + len(part)] = part.value if type(part) is Fill else part
            at += len(part)
        return out

    def integers(self, column: str) -> list[int]:
        """``device``, ``program_id``, ``run_id`` or ``correlation`` as a list of ints."""
        return self.numbers(column).tolist()

    def replace(self, column: str, values: Sequence[Any]) -> None:
        """Put ``values`` (one per event) in place of a column."""
        if len(values) != self.count:
            raise ValueError(f"{column}: {len(values)} values for {self.count} events")
        self.parts[column] = [values]

    def close_segment(self, plane: str, line: str, kind: str, first: int) -> None:
        """Record that events ``first:`` (up to now) belong to ``plane``/``line``."""
        count = self.count - first
        if count:
            self.segments.append((plane, line, kind, count))


def _coded(columns: Sequence[Sequence[Any]]) -> list[Coded]:
    """Columns given as parts (lists, ``Fill``, ``Coded``), each as one ``Coded``, all sharing one list of values
    (``Coded.sharing``'s numbering: in order of first appearance)."""
    import numpy as np

    lists = []
    for parts in columns:
        for part in parts:
            lists.append([part.value] if type(part) is Fill else part.values if isinstance(part, Coded) else part)
    shared = Coded.sharing(lists) if lists else []
    values = shared[0].values if shared else []
    code_type = _code_type(len(values))
    numbered = iter(shared)
    out = []
    for parts in columns:
        codes = np.empty(sum(map(len, parts)), dtype=code_type)
        at = 0
        for part in parts:  # each part's codes into its place
            mine = next(numbered)
            n = len(part)
            if type(part) is Fill:
                codes[at : at + n] = mine.codes[0]
            elif isinstance(part, Coded):
                codes[at : at + n] = mine.codes[part.codes]
            else:
                codes[at : at + n] = mine.codes
            at += n
        out.append(Coded(codes, values))
    return out


#: The list fields that ``HostColumns.extend`` concatenates, beside the per-event columns.
_LISTS = ("segments", "devices", "step_marks", "device_steps", "launches", "executes", "notes")

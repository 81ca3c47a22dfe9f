"""Which compiles of a function the sharding views show, and which of them is the steady one.

Each distinct compile of a function is shown (``distinct_compiles``), the steady
one first: compiles whose placements are equal (``P('model', None)`` and
``P('model',)`` place an array the same way) are one. The steady compile is the
one that ran most on the timeline, when the timeline can tell (the compiles share no
op name, see ``_timeline_tells``); otherwise it is unknown which ran most, and the
latest compile comes first, marked so (``steady_by``). The tables, their JSON and
the placement figure read the same grouping.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.sharding_section import LeafPlacement, ProgramSharding, SpecEntry


@dataclasses.dataclass(frozen=True)
class DistinctCompile:
    """One distinct compile of a function, as the sharding views show it.

    Attributes:
      program: the program, its ``compiles`` (sorted), ``program_ids`` and ``timeline_joined_by``
        those of every compile with equal placements.
      steady: whether it is the compile that ran most on the timeline, or the latest when that is unknown.
      steady_by: ``"timeline"``, ``"latest compile"``, or ``None`` for a function compiled once.
    """

    program: ProgramSharding
    steady: bool = True
    steady_by: str | None = None

    @property
    def runs(self) -> int:
        """How often its collectives ran on the timeline (0 without a capture)."""
        return sum(c.timeline_count for c in self.program.collectives)

    def to_json(self) -> dict[str, Any]:
        """The program's JSON with ``steady`` and ``steady_by`` added (``jaxdiag sharding --json``)."""
        from jaxdiag.reporting import codec

        return {**codec.to_json(self.program), "steady": self.steady, "steady_by": self.steady_by}


def distinct_compiles(functions: Sequence[ProgramSharding]) -> list[DistinctCompile]:
    """Each distinct compile of each function, the steady one first, equal placements merged.

    Keeps first-seen function order.
    """
    groups: dict[str, dict[Any, ProgramSharding]] = {}
    for fn in functions:
        merged = groups.setdefault(fn.qualname or fn.function, {})
        key = _placement_key(fn)
        seen = merged.get(key)
        if seen is not None:
            merged[key] = dataclasses.replace(
                seen,
                compiles=tuple(sorted({*seen.compiles, *fn.compiles})),
                program_ids=tuple(dict.fromkeys([*seen.program_ids, *fn.program_ids])),
                timeline_joined_by=tuple(dict.fromkeys([*seen.timeline_joined_by, *fn.timeline_joined_by])),
            )
        else:
            merged[key] = dataclasses.replace(fn, compiles=tuple(sorted(fn.compiles)))
    out: list[DistinctCompile] = []
    for merged in groups.values():
        entries = [DistinctCompile(p) for p in merged.values()]
        by_runs = _timeline_tells(entries)
        entries.sort(key=lambda e: (-e.runs if by_runs else 0, -max(e.program.compiles, default=-1)))
        steady_by = None if len(entries) == 1 else ("timeline" if by_runs else "latest compile")
        out += [dataclasses.replace(e, steady=i == 0, steady_by=steady_by) for i, e in enumerate(entries)]
    return out


def _timeline_tells(entries: Sequence[DistinctCompile]) -> bool:
    """Whether the timeline's runs tell these compiles apart.

    The timeline names a collective by module and op, which compiles of one function
    share; runs can be told apart when every compile's ops were joined to it by the
    program that ran them (``timeline_joined_by``), or else when no two compiles
    have an op name in common; and one ran more than every other.
    """
    seen: set[str] = set()
    by_program = all(e.program.program_ids for e in entries) and all(
        set(e.program.timeline_joined_by) <= {"program_id"} for e in entries
    )
    for e in entries if not by_program else ():
        names = {n for c in e.program.collectives for n in (c.name, *c.aliases)}
        if names & seen:
            return False
        seen |= names
    runs = sorted((e.runs for e in entries), reverse=True)
    return len(runs) > 1 and runs[0] > runs[1]


def _placement_key(fn: ProgramSharding) -> ProgramSharding:
    """The program without what differs between compiles of one placement (their indexes, program ids and
    timeline figures), and with equivalent specs written one way."""

    def leaves(xs: tuple[LeafPlacement, ...]) -> tuple[LeafPlacement, ...]:
        return tuple(x if x.spec is None else dataclasses.replace(x, spec=normal_spec(x.spec)) for x in xs)

    return dataclasses.replace(
        fn,
        compiles=(),
        program_ids=(),
        timeline_joined_by=(),
        inputs=leaves(fn.inputs),
        outputs=leaves(fn.outputs),
        collectives=tuple(dataclasses.replace(c, timeline_count=0, timeline_ms=0.0) for c in fn.collectives),
    )


def normal_spec(spec: Sequence[SpecEntry]) -> tuple[SpecEntry, ...]:
    """A spec written one way: ``('model',)`` -> ``'model'``, ``()`` -> ``None``, trailing ``None``s dropped.

    ``P('model', None)``, ``P('model',)`` and ``P(('model',), None)`` place an array the same way.
    """
    out: list[SpecEntry] = []
    for entry in spec:
        if isinstance(entry, (list, tuple)):
            entry = None if not entry else (entry[0] if len(entry) == 1 else tuple(entry))
        out.append(entry)
    while out and out[-1] is None:
        out.pop()
    return tuple(out)

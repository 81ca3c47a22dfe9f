"""Sharding: what each jitted function moves between devices, and what the user's specs did not ask for.

Reads the ``sharding`` facts of the compile log's records (``jaxdiag.sharding``)
and, when there is a timeline, its collective ops. Each collective the compiler
inserted gets an *origin* from the JAX op it came from:

- ``user``: written by the user (``psum``, ``all_gather``, ``ppermute``, ... in ``shard_map``);
- ``constraint``: asked for by ``with_sharding_constraint`` or a reshard;
- ``requested``: the program's output layout the user asked for (jit's
  ``out_shardings``, as ``multihost_utils.process_allgather`` does): a collective
  with no JAX op of its own whose result is a user-laid-out output; not implicit;
- ``reduction``: an all-reduce or reduce-scatter finishing a contraction over a
  sharded dimension (a gradient sum under data parallelism, a row-parallel
  matmul): what the specs imply;
- ``resharding``: an all-gather, all-to-all or collective-permute the compiler
  added because a consumer needs a layout the specs did not give: *implicit
  resharding*, reported as a finding with the function, the array and the mesh axes.

It also reports inputs replicated on every device that are larger than
``Thresholds.replicated_param_bytes``, and recompiles whose cause is a changed
sharding. Timeline collectives are joined to their function and array by the
program that ran them: the ops' ``program_id`` stat is the compile record's
``program_id``, so when a function was compiled again inside the window each
compile gets its own ops. Where either id is unknown, by HLO module and op name
(``jit_step`` / ``all-gather.3``) to the module's latest compile.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Mapping, Sequence

from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.sharding_findings import (
    collectives_of,
    moved_spec,
    replicated_findings,
    resharding_findings,
    sharding_recompiles,
)
from jaxdiag.analyses.sharding_section import (
    CollectiveRow,
    LeafPlacement,
    ProgramMesh,
    ProgramSharding,
    ShardingSection,
    TimelineCollective,
)
from jaxdiag.config import DEFAULT_THRESHOLDS, Thresholds
from jaxdiag.sharding.facts import LeafSharding, ShardingFacts
from jaxdiag.sharding.hlo import Collective

#: ``TimelineCollective.joined_by``: how a timeline op found its compile.
JOINED_BY_PROGRAM = "program_id"
JOINED_BY_MODULE = "module (latest compile)"
#: A timeline key: ``(module, op, program id)``, -1 for an unknown id.
TimelineKey = tuple[str, str, int]

#: Primitives of collectives users write themselves (in ``shard_map``).
USER_PRIMITIVES = frozenset(
    {
        "psum",
        "pmax",
        "pmin",
        "pmean",
        "all_gather",
        "all_gather_invariant",
        "all_to_all",
        "ragged_all_to_all",
        "ppermute",
        "pshuffle",
        "psum_scatter",
        "reduce_scatter",
        "pbroadcast",
        "psum_invariant",
        "pcast",
        "pvary",
    }
)
_CONSTRAINT = ("sharding_constraint", "reshard", "device_put")
_MAX_RESHARD_FINDINGS = 10


@dataclasses.dataclass(frozen=True, slots=True)
class CollectiveUse:
    """One collective of one compiled function, with its origin and timeline time.

    Attributes:
      collective: the facts from the HLO.
      origin: ``user``, ``constraint``, ``reduction`` or ``resharding`` (see the module doc).
      timeline_count: its ops on the timeline (every device's).
      timeline_ms: their time, per device (mean over the host's devices).
    """

    collective: Collective
    origin: str
    timeline_count: int = 0
    timeline_ms: float = 0.0

    def row(self) -> CollectiveRow:
        """As the report holds it: the HLO's facts, what they add up to, and the time to 3 decimals."""
        c = self.collective
        return CollectiveRow(
            **{f.name: getattr(c, f.name) for f in dataclasses.fields(c)},
            bytes=c.bytes,
            origin=self.origin,
            bytes_per_call=c.bytes * c.count,
            timeline_count=self.timeline_count,
            timeline_ms=round(self.timeline_ms, 3),
        )


@dataclasses.dataclass(frozen=True)
class FunctionSharding:
    """One distinct compiled program of one function.

    Attributes:
      function, qualname: the jitted function.
      compiles: the ``compile_index`` of each compile that produced these facts.
      facts: the mesh, leaves and collectives.
      collectives: the collectives with their origins.
      program_ids: the recorded ``program_id`` of those compiles (the known ones).
      timeline_joined_by: how the timeline ops counted in ``collectives`` were joined
        to it (``TimelineCollective.joined_by``), each rule once.
    """

    function: str
    qualname: str
    compiles: tuple[int, ...]
    facts: ShardingFacts
    collectives: tuple[CollectiveUse, ...]
    program_ids: tuple[int, ...] = ()
    timeline_joined_by: tuple[str, ...] = ()

    def row(self) -> ProgramSharding:
        """As the report holds it."""
        f = self.facts
        m = f.mesh
        return ProgramSharding(
            function=self.function,
            qualname=self.qualname,
            compiles=self.compiles,
            module=f.module,
            mesh=ProgramMesh(m.axis_names, m.axis_sizes, m.device_kinds, m.platform, m.axis_types, m.inferred),
            hlo=f.hlo,
            inputs=tuple(_placement(x) for x in f.inputs),
            outputs=tuple(_placement(x) for x in f.outputs),
            collectives=tuple(c.row() for c in self.collectives),
            comm_bytes_per_call=f.comm_bytes_per_call,
            program_ids=self.program_ids,
            timeline_joined_by=self.timeline_joined_by,
        )


def _placement(leaf: LeafSharding) -> LeafPlacement:
    return LeafPlacement(
        leaf.path,
        leaf.name,
        leaf.shape,
        leaf.dtype,
        leaf.spec,
        leaf.replicated,
        leaf.bytes_per_device,
        leaf.chosen_by,
        leaf.hlo_sharding,
    )


@dataclasses.dataclass(frozen=True)
class ShardingResult:
    """Sharding facts per function, collectives on the timeline, and findings."""

    functions: tuple[FunctionSharding, ...] = ()
    timeline: tuple[TimelineCollective, ...] = ()
    findings: tuple[Finding, ...] = ()
    #: Whether a capture's timeline was read (so "ran most" can be asked of it).
    captured: bool = False

    def section(self) -> ShardingSection:
        """The report's ``sharding`` section."""
        return ShardingSection(
            tuple(f.row() for f in self.functions), tuple(t.rounded() for t in self.timeline), self.captured
        )


def origin_of(c: Collective) -> str:
    """Classify a collective by the JAX op it came from (see the module doc)."""
    prims = {m.group(1) for part in c.op_name.split(";") if (m := re.match(r"(\w+)", part.rsplit("/", 1)[-1]))}
    if prims & USER_PRIMITIVES:
        return "user"
    if any(p.startswith(_CONSTRAINT) for p in prims):
        return "constraint"
    if c.kind in ("all-reduce", "reduce-scatter"):
        return "reduction"
    return "resharding"


def asked_for(c: Collective, facts: ShardingFacts) -> bool:
    """Whether ``c`` makes an output in the layout the user gave it (see ``requested`` in the module doc).

    A collective no JAX op made sits at the program's boundary; when its result is
    exactly one device's share of an output whose layout the user chose, the
    program asked for that move.
    """
    if c.op_name or c.kind not in ("all-gather", "collective-broadcast", "all-to-all", "collective-permute"):
        return False
    return any(o.chosen_by == "user" and o.bytes_per_device == c.result_bytes for o in facts.outputs)


def analyze(inputs: AnalysisInputs) -> ShardingResult:
    """Sharding facts of the compile log, joined to the timeline's collectives."""
    from jaxdiag.analyses.sharding_timeline import timeline_collectives

    ops, wall_ms = timeline_collectives(inputs.frames, inputs.host, inputs.steps)
    return analyze_records(inputs.compile_log, inputs.thresholds, timeline=ops, wall_ms=wall_ms)


def analyze_records(
    records: Sequence[Mapping[str, Any]],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    timeline: Mapping[tuple[Any, ...], tuple[str, int, float]] | None = None,
    wall_ms: float = 0.0,
) -> ShardingResult:
    """Findings from compile records (as dicts), with timeline times when given.

    Args:
      records: compile records (``CompileRecord.to_dict()``), oldest first.
      thresholds: ``replicated_param_bytes`` is read.
      timeline: ``(module, op, program id) -> (kind, count, per-device ms)`` of collective
        ops (-1 or a ``(module, op)`` key: the program is unknown).
      wall_ms: the analysed wall time, to grade findings that cost time.
    """
    keyed = {(str(k[0]), str(k[1]), int(k[2]) if len(k) > 2 else -1): v for k, v in (timeline or {}).items()}
    functions, rows = _joined(_functions(records), keyed)
    findings = [
        *resharding_findings(functions, wall_ms, thresholds),
        *replicated_findings(functions, thresholds, wall_ms),
        *sharding_recompiles(list(records)),
    ]
    return ShardingResult(tuple(functions), tuple(rows), tuple(findings), captured=timeline is not None)


def _functions(records: Iterable[Mapping[str, Any]]) -> list[FunctionSharding]:
    """One entry per distinct program of each function: recompiles to the same program share one."""
    by_key: dict[tuple[str, str], tuple[dict[str, Any], list[int], ShardingFacts, list[int]]] = {}
    for r in records:
        raw = r.get("sharding")
        if not isinstance(raw, dict):
            continue
        try:
            facts = ShardingFacts.from_dict(raw)
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError):  # a hand-edited record: no facts
            continue
        if facts.mesh.n_devices <= 1:  # a single-device program (analysis on) has no placement to show
            continue
        key = (str(r.get("qualname", r.get("function", ""))), repr(facts.to_dict()))
        entry = by_key.setdefault(key, (dict(r), [], facts, []))
        entry[1].append(int(r.get("compile_index", 0)))
        program = r.get("program_id")
        if isinstance(program, int) and not isinstance(program, bool) and program >= 0:
            entry[3].append(program)
    out = []
    for (_, _), (r, compiles, facts, programs) in by_key.items():
        uses = [CollectiveUse(c, "requested" if asked_for(c, facts) else origin_of(c)) for c in facts.collectives]
        out.append(
            FunctionSharding(
                str(r.get("function", "?")),
                str(r.get("qualname", "?")),
                tuple(compiles),
                facts,
                tuple(uses),
                tuple(dict.fromkeys(programs)),
            )
        )
    return out


def _joined(
    functions: list[FunctionSharding], timeline: Mapping[TimelineKey, tuple[str, int, float]]
) -> tuple[list[FunctionSharding], list[TimelineCollective]]:
    """Each timeline op joined to the compile that ran it, and each compile's collectives given their ops' time.

    An op whose program id a record carries belongs to that record's program (and to
    no other: an op name it lacks stays unattributed). Otherwise the latest program
    of its module wins: a recompile may reuse op names for other transfers.
    """
    by_program: dict[tuple[int, str], tuple[int, CollectiveUse]] = {}
    by_module: dict[tuple[str, str], tuple[int, CollectiveUse]] = {}
    programs: set[int] = set()
    for i, f in enumerate(functions):
        programs.update(f.program_ids)
        for use in f.collectives:
            for name in (use.collective.name, *use.collective.aliases):
                by_module[(f.facts.module, name)] = (i, use)
                for program in f.program_ids:
                    by_program[(program, name)] = (i, use)
    totals: dict[tuple[int, int], list] = {}
    rules: dict[int, dict[str, None]] = {}
    rows = []
    for (module, op, program), (kind, count, ms) in sorted(timeline.items(), key=lambda kv: (-kv[1][2], kv[0])):
        pid = program if program >= 0 else None
        if pid is not None and pid in programs:
            hit, joined_by = by_program.get((pid, op)), JOINED_BY_PROGRAM
        else:
            hit, joined_by = by_module.get((module, op)), JOINED_BY_MODULE
        if hit is None:
            rows.append(TimelineCollective(module, op, pid, kind=kind, count=count, total_ms=ms))
            continue
        i, use = hit
        f, c = functions[i], use.collective
        acc = totals.setdefault((i, id(use)), [0, 0.0])
        acc[0], acc[1] = acc[0] + count, acc[1] + ms
        rules.setdefault(i, {})[joined_by] = None
        rows.append(
            TimelineCollective(
                module,
                op,
                pid,
                joined_by,
                f.compiles,
                c.kind,
                count,
                ms,
                f.function,
                c.arrays,
                c.mesh_axes,
                use.origin,
                c.bytes,
            )
        )
    out = []
    for i, f in enumerate(functions):
        uses = []
        for use in f.collectives:
            count, ms = totals.get((i, id(use)), (0, 0.0))
            uses.append(dataclasses.replace(use, timeline_count=int(count), timeline_ms=float(ms)))
        out.append(dataclasses.replace(f, collectives=tuple(uses), timeline_joined_by=tuple(rules.get(i, {}))))
    return out, rows


__all__ = ["analyze", "analyze_records", "asked_for", "collectives_of", "moved_spec", "origin_of"]

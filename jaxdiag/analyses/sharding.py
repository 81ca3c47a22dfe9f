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
sharding. Timeline collectives are joined to their function and array by HLO
module and op name (``jit_step`` / ``all-gather.3``).
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
from jaxdiag.config import DEFAULT_THRESHOLDS, Thresholds
from jaxdiag.sharding.facts import ShardingFacts
from jaxdiag.sharding.hlo import Collective

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

    def to_dict(self) -> dict[str, Any]:
        d = self.collective.to_dict()
        d.update(
            origin=self.origin,
            bytes_per_call=self.collective.bytes * self.collective.count,
            timeline_count=self.timeline_count,
            timeline_ms=round(self.timeline_ms, 3),
        )
        return d


@dataclasses.dataclass(frozen=True)
class FunctionSharding:
    """One distinct compiled program of one function.

    Attributes:
      function, qualname: the jitted function.
      compiles: the ``compile_index`` of each compile that produced these facts.
      facts: the mesh, leaves and collectives.
      collectives: the collectives with their origins.
    """

    function: str
    qualname: str
    compiles: tuple[int, ...]
    facts: ShardingFacts
    collectives: tuple[CollectiveUse, ...]

    def to_dict(self) -> dict[str, Any]:
        f = self.facts
        return {
            "function": self.function,
            "qualname": self.qualname,
            "compiles": list(self.compiles),
            "module": f.module,
            "mesh": f.mesh.to_dict(),
            "hlo": f.hlo,
            "inputs": [x.to_dict() for x in f.inputs],
            "outputs": [x.to_dict() for x in f.outputs],
            "collectives": [c.to_dict() for c in self.collectives],
            "comm_bytes_per_call": f.comm_bytes_per_call,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class TimelineCollective:
    """Collective ops of one HLO op on the timeline, joined to the function and arrays they serve.

    ``function`` is ``None`` when no compile record has the module and op.
    """

    module: str
    op: str
    kind: str
    count: int
    total_ms: float
    function: str | None = None
    arrays: tuple[str, ...] = ()
    mesh_axes: tuple[str, ...] | None = None
    origin: str | None = None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "op": self.op,
            "kind": self.kind,
            "count": self.count,
            "total_ms": round(self.total_ms, 3),
            "function": self.function,
            "arrays": list(self.arrays),
            "mesh_axes": None if self.mesh_axes is None else list(self.mesh_axes),
            "origin": self.origin,
            "bytes": self.bytes,
        }


@dataclasses.dataclass(frozen=True)
class ShardingResult:
    """Sharding facts per function, collectives on the timeline, and findings."""

    functions: tuple[FunctionSharding, ...] = ()
    timeline: tuple[TimelineCollective, ...] = ()
    findings: tuple[Finding, ...] = ()
    #: Whether a capture's timeline was read (so "ran most" can be asked of it).
    captured: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": [f.to_dict() for f in self.functions],
            "timeline": [t.to_dict() for t in self.timeline],
            "captured": self.captured,
        }


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
    timeline: Mapping[tuple[str, str], tuple[str, int, float]] | None = None,
    wall_ms: float = 0.0,
) -> ShardingResult:
    """Findings from compile records (as dicts), with timeline times when given.

    Args:
      records: compile records (``CompileRecord.to_dict()``), oldest first.
      thresholds: ``replicated_param_bytes`` is read.
      timeline: ``(module, op) -> (kind, count, per-device ms)`` of collective ops.
      wall_ms: the analysed wall time, to grade findings that cost time.
    """
    functions = _functions(records, timeline or {})
    rows = _timeline_rows(functions, timeline or {})
    findings = [
        *resharding_findings(functions, wall_ms),
        *replicated_findings(functions, thresholds, wall_ms),
        *sharding_recompiles(list(records)),
    ]
    return ShardingResult(tuple(functions), tuple(rows), tuple(findings), captured=timeline is not None)


def _functions(
    records: Iterable[Mapping[str, Any]], timeline: Mapping[tuple[str, str], tuple[str, int, float]]
) -> list[FunctionSharding]:
    """One entry per distinct program of each function: recompiles to the same program share one."""
    by_key: dict[tuple[str, str], tuple[dict[str, Any], list[int], ShardingFacts]] = {}
    for r in records:
        raw = r.get("sharding")
        if not isinstance(raw, dict):
            continue
        try:
            facts = ShardingFacts.from_dict(raw)
        except (AttributeError, KeyError, TypeError, ValueError):  # a hand-edited record: no facts
            continue
        if facts.mesh.n_devices <= 1:  # a single-device program (analysis on) has no placement to show
            continue
        key = (str(r.get("qualname", r.get("function", ""))), repr(facts.to_dict()))
        entry = by_key.setdefault(key, (dict(r), [], facts))
        entry[1].append(int(r.get("compile_index", 0)))
    out = []
    for (_, _), (r, compiles, facts) in by_key.items():
        uses = []
        for c in facts.collectives:
            kind, count, ms = _timeline_of(timeline, facts.module, c)
            uses.append(CollectiveUse(c, "requested" if asked_for(c, facts) else origin_of(c), count, ms))
        out.append(
            FunctionSharding(
                str(r.get("function", "?")), str(r.get("qualname", "?")), tuple(compiles), facts, tuple(uses)
            )
        )
    return out


def _timeline_of(
    timeline: Mapping[tuple[str, str], tuple[str, int, float]], module: str, c: Collective
) -> tuple[str, int, float]:
    count, ms = 0, 0.0
    for name in (c.name, *c.aliases):
        hit = timeline.get((module, name))
        if hit is not None:
            count, ms = count + hit[1], ms + hit[2]
    return c.kind, count, ms


def _timeline_rows(
    functions: Sequence[FunctionSharding], timeline: Mapping[tuple[str, str], tuple[str, int, float]]
) -> list[TimelineCollective]:
    # The latest program of a module wins: a recompile may reuse op names for other transfers.
    known: dict[tuple[str, str], tuple[FunctionSharding, CollectiveUse]] = {}
    for f in functions:
        for use in f.collectives:
            for name in (use.collective.name, *use.collective.aliases):
                known[(f.facts.module, name)] = (f, use)
    rows = []
    for (module, op), (kind, count, ms) in sorted(timeline.items(), key=lambda kv: -kv[1][2]):
        hit = known.get((module, op))
        if hit is None:
            rows.append(TimelineCollective(module, op, kind, count, ms))
            continue
        f, use = hit
        c = use.collective
        rows.append(
            TimelineCollective(module, op, c.kind, count, ms, f.function, c.arrays, c.mesh_axes, use.origin, c.bytes)
        )
    return rows


__all__ = ["analyze", "analyze_records", "asked_for", "collectives_of", "moved_spec", "origin_of"]

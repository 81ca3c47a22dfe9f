"""The report's ``sharding`` section as a type: per compiled program its mesh, leaves and collectives, and the
timeline's collectives joined to them.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis. The recording
layer's ``ShardingFacts`` are not reused as rows: they read XLA's sharding text with numpy, and the report
writes figures they derive (``replicated``, ``bytes``, ``bytes_per_call``) as values of their own.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described

#: One ``PartitionSpec`` entry: unsplit (``None``), one mesh axis, or several, major first.
SpecEntry = str | tuple[str, ...] | None


@dataclasses.dataclass(frozen=True, slots=True)
class ProgramMesh:
    """The mesh a program runs on."""

    axis_names: tuple[str, ...] = described("major first", ())
    axis_sizes: tuple[int, ...] = ()
    device_kinds: tuple[str, ...] = ()
    platform: str | None = None
    axis_types: tuple[str, ...] = ()
    inferred: bool = described(
        "true when no named mesh was found and one axis `devices` spans the program's devices", False
    )


@dataclasses.dataclass(frozen=True, slots=True)
class LeafPlacement:
    """How one input or output leaf is laid out."""

    path: str = described("`args[0]['w']`, `out[0]`")
    name: str | None = described(
        "the argument's name as the user wrote it, `params['w']`, `model.w1` for a flax nnx or equinox module's "
        "parameter",
        None,
    )
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    spec: tuple[SpecEntry, ...] | None = described(
        "one entry per dimension: `null`, an axis name or a list of names; `[]` is replicated; `null` when it fits "
        "no mesh axis, then `hlo_sharding` holds XLA's annotation",
        None,
    )
    replicated: bool = False
    bytes_per_device: int | None = None
    chosen_by: str = described("`user` or `compiler`", "compiler")
    hlo_sharding: str | None = described("XLA's annotation, when `spec` is `null`", None, omit_null=True)

    @property
    def label(self) -> str:
        return self.name or self.path


@dataclasses.dataclass(frozen=True, slots=True)
class CollectiveRow:
    """One collective the compiler inserted in a program, with its origin and its time on the timeline."""

    name: str = described("HLO op", "")
    kind: str = ""
    computation: str = ""
    operand_shapes: tuple[str, ...] = ()
    result_shapes: tuple[str, ...] = ()
    operand_bytes: int = 0
    result_bytes: int = 0
    group_size: int | None = None
    n_groups: int | None = None
    mesh_axes: tuple[str, ...] | None = described("`null` when the groups fit no mesh axes", None)
    count: int = described("runs per call; loops with known trip counts multiplied", 1)
    count_exact: bool = True
    op_name: str = described("the JAX op", "")
    arrays: tuple[str, ...] = described("entry arguments it moves, or whose update it reduces, or `out[i]`", ())
    array_role: str = described("`operand`, `update`, `output`", "")
    aliases: tuple[str, ...] = described("other HLO names of the same transfer", ())
    bytes: int = described("the larger: bytes one device sends or receives per run", 0)
    origin: str = described(
        "`user`: shard_map collectives; `constraint`: with_sharding_constraint; `requested`: the output layout "
        "jit's `out_shardings` asked for; `reduction`: all-reduce/reduce-scatter implied by a sharded contraction; "
        "`resharding`: an all-gather, all-to-all or collective-permute the specs did not ask for",
        "",
    )
    bytes_per_call: int = 0
    timeline_count: int = described("its ops joined to the program on the timeline", 0)
    timeline_ms: float = described("their time, per device", 0.0)


@dataclasses.dataclass(frozen=True)
class ProgramSharding:
    """One distinct compiled program of one function."""

    function: str
    qualname: str = ""
    compiles: tuple[int, ...] = described("compile indexes that built it", ())
    module: str = described("HLO module name, as on the timeline", "")
    mesh: ProgramMesh = described("the mesh it runs on", factory=ProgramMesh)
    hlo: bool = described("whether the optimized HLO was read; without it no collectives are known", True)
    inputs: tuple[LeafPlacement, ...] = described("per leaf, and `outputs` alike", ())
    outputs: tuple[LeafPlacement, ...] = ()
    collectives: tuple[CollectiveRow, ...] = described("per collective the compiler inserted", ())
    comm_bytes_per_call: int = 0
    program_ids: tuple[int, ...] = described("the compile records' `program_id`s, the known ones", ())
    timeline_joined_by: tuple[str, ...] = described(
        "how the timeline ops counted in its collectives were joined to it, each rule once; see `timeline`", ()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class TimelineCollective:
    """Collective ops of one HLO op of one program in the analysed steps, joined to the function and arrays they
    serve."""

    module: str
    op: str
    program_id: int | None = described(
        "the ops' `program_id` stat, XLA's id of the program that ran them; `null` when the trace has none", None
    )
    joined_by: str | None = described(
        'how the ops found their compile: `"program_id"`, the compile record whose `program_id` is the ops\' (the '
        'compile that ran them, also when a function compiled again inside the window); `"module (latest '
        'compile)"`, where either id is unknown (older compile logs, traces without the stat), the latest compile '
        "of that module with that op; `null`: none found",
        None,
    )
    compiles: tuple[int, ...] = described("the compile indexes of the program it was joined to", ())
    kind: str = ""
    count: int = 0
    total_ms: float = described("per device", 0.0)
    function: str | None = described("`null` when not joined; so are `arrays`, `mesh_axes`, `origin`, `bytes`", None)
    arrays: tuple[str, ...] = ()
    mesh_axes: tuple[str, ...] | None = None
    origin: str | None = None
    bytes: int | None = None

    def rounded(self) -> TimelineCollective:
        """As the report holds it: time to 3 decimals."""
        return dataclasses.replace(self, total_ms=round(self.total_ms, 3))


@dataclasses.dataclass(frozen=True)
class ShardingSection:
    """The report's ``sharding`` section (1.2).

    From the compile log's sharding facts (recorded by `jaxdiag.jit` for programs on more than one device, or with
    `analysis=True`) and the timeline. A function entry's `timeline_count` and `timeline_ms` count only the ops
    joined to it. Programs on one device are left out. Findings: `implicit_resharding`, `replicated_param` (an
    input replicated on every device, at least `replicated_param_bytes`; time lost: its share of the collectives
    that sum its updates, `evidence.collectives`), `sharding_recompile`.
    """

    functions: tuple[ProgramSharding, ...] = described("one object per distinct compiled program", ())
    timeline: tuple[TimelineCollective, ...] = described(
        "one object per collective HLO op of one program seen in the analysed steps, largest time first", ()
    )
    captured: bool = described("whether a capture's timeline was read", False)

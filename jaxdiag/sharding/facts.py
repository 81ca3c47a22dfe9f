"""Sharding facts of one compile, as plain data: the mesh, each input and output leaf, the collectives.

``ShardingFacts.to_dict()`` is what a ``CompileRecord``'s ``sharding`` field holds,
so logs and reports carry it as JSON and readers rebuild it without jax.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from jaxdiag.sharding.hlo import Collective
from jaxdiag.sharding.tiles import Spec, spec_text

#: How HLO names element types, and the names numpy and JAX give them.
DTYPE_NAMES = {
    "pred": "bool",
    "s4": "int4",
    "u4": "uint4",
    "s8": "int8",
    "u8": "uint8",
    "s16": "int16",
    "u16": "uint16",
    "s32": "int32",
    "u32": "uint32",
    "s64": "int64",
    "u64": "uint64",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "c64": "complex64",
    "c128": "complex128",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}


@dataclasses.dataclass(frozen=True, slots=True)
class MeshFacts:
    """The mesh a program runs on.

    Attributes:
      axis_names, axis_sizes: its axes, major first.
      device_kinds: the distinct ``device_kind`` of its devices (``"NVIDIA H100 80GB HBM3"``, ``"cpu"``).
      platform: ``"gpu"``, ``"tpu"``, ``"cpu"``.
      axis_types: ``"Auto"``, ``"Explicit"`` or ``"Manual"`` per axis, when the mesh says.
      inferred: no named mesh was found; one axis, ``devices``, spans the program's devices.
    """

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    device_kinds: tuple[str, ...] = ()
    platform: str | None = None
    axis_types: tuple[str, ...] = ()
    inferred: bool = False

    @property
    def n_devices(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def text(self) -> str:
        return "mesh(" + ", ".join(f"{n}={s}" for n, s in zip(self.axis_names, self.axis_sizes)) + ")"

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis_names": list(self.axis_names),
            "axis_sizes": list(self.axis_sizes),
            "device_kinds": list(self.device_kinds),
            "platform": self.platform,
            "axis_types": list(self.axis_types),
            "inferred": self.inferred,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MeshFacts":
        return cls(
            tuple(d.get("axis_names") or ()),
            tuple(int(s) for s in d.get("axis_sizes") or ()),
            tuple(d.get("device_kinds") or ()),
            d.get("platform"),
            tuple(d.get("axis_types") or ()),
            bool(d.get("inferred", False)),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class LeafSharding:
    """How one input or output leaf is laid out.

    Attributes:
      path: the leaf's path: ``args[0]['w1']`` (as in ``ArgSignature``) or ``out[0]``
        (outputs, in flattened order).
      name: JAX's name for an input (``params['w1']``, from the function's signature).
      shape: the global shape.
      dtype: element type name.
      spec: ``PartitionSpec`` entries (``None``, an axis, or a tuple of axes per
        dimension; ``()`` is replicated); ``None`` when it fits no mesh axes.
      bytes_per_device: bytes one device holds.
      chosen_by: ``"user"`` (a committed array, or jit's ``in_shardings``/``out_shardings``)
        or ``"compiler"`` (left unspecified, so sharding propagation picked it).
      hlo_sharding: XLA's annotation, kept when ``spec`` is ``None``.
    """

    path: str
    name: str | None
    shape: tuple[int, ...] | None
    dtype: str | None
    spec: Spec | None
    bytes_per_device: int | None
    chosen_by: str = "compiler"
    hlo_sharding: str | None = None

    @property
    def replicated(self) -> bool:
        return self.spec is not None and all(e is None for e in self.spec)

    @property
    def label(self) -> str:
        return self.name or self.path

    @property
    def spec_text(self) -> str:
        return spec_text(self.spec) if self.spec is not None else (self.hlo_sharding or "?")

    def sharded_axes(self) -> tuple[str, ...]:
        """The mesh axes this leaf is split over."""
        out: list[str] = []
        for entry in self.spec or ():
            out += [entry] if isinstance(entry, str) else list(entry or ())
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "path": self.path,
            "name": self.name,
            "shape": None if self.shape is None else list(self.shape),
            "dtype": self.dtype,
            "spec": None
            if self.spec is None
            else [e if e is None or isinstance(e, str) else list(e) for e in self.spec],
            "replicated": self.replicated,
            "bytes_per_device": self.bytes_per_device,
            "chosen_by": self.chosen_by,
        }
        if self.hlo_sharding is not None:
            d["hlo_sharding"] = self.hlo_sharding
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LeafSharding":
        spec = d.get("spec")
        return cls(
            path=str(d.get("path", "")),
            name=d.get("name"),
            shape=None if d.get("shape") is None else tuple(int(x) for x in d["shape"]),
            dtype=d.get("dtype"),
            spec=None if spec is None else tuple(e if e is None or isinstance(e, str) else tuple(e) for e in spec),
            bytes_per_device=d.get("bytes_per_device"),
            chosen_by=str(d.get("chosen_by", "compiler")),
            hlo_sharding=d.get("hlo_sharding"),
        )


@dataclasses.dataclass(frozen=True)
class ShardingFacts:
    """Where one compiled program's arrays live and what it moves between devices.

    Attributes:
      module: the HLO module name (``jit_step``), as the profiler timeline shows it.
      mesh: the mesh it runs on.
      inputs, outputs: one entry per array leaf.
      collectives: the collectives the compiler inserted (empty without the HLO).
      hlo: whether the optimized HLO was read (else only the leaves' shardings are known).
    """

    module: str
    mesh: MeshFacts
    inputs: tuple[LeafSharding, ...] = ()
    outputs: tuple[LeafSharding, ...] = ()
    collectives: tuple[Collective, ...] = ()
    hlo: bool = True

    @property
    def comm_bytes_per_call(self) -> int:
        """Bytes each device sends or receives in collectives per call (loops unrolled)."""
        return sum(c.bytes * c.count for c in self.collectives)

    def input_named(self, name: str) -> LeafSharding | None:
        """The input whose JAX name or path is ``name``."""
        return next((leaf for leaf in self.inputs if name in (leaf.name, leaf.path)), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "mesh": self.mesh.to_dict(),
            "inputs": [x.to_dict() for x in self.inputs],
            "outputs": [x.to_dict() for x in self.outputs],
            "collectives": [c.to_dict() for c in self.collectives],
            "comm_bytes_per_call": self.comm_bytes_per_call,
            "hlo": self.hlo,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ShardingFacts":
        """Rebuild facts from a record's ``sharding`` dict; raises ``KeyError``/``TypeError`` on bad input."""
        if not isinstance(d, dict) or not isinstance(d.get("mesh"), dict):
            raise TypeError("sharding facts must be an object with a mesh object")
        facts = cls(
            module=str(d.get("module", "")),
            mesh=MeshFacts.from_dict(d["mesh"]),
            inputs=tuple(LeafSharding.from_dict(x) for x in d.get("inputs") or ()),
            outputs=tuple(LeafSharding.from_dict(x) for x in d.get("outputs") or ()),
            collectives=tuple(Collective.from_dict(c) for c in d.get("collectives") or ()),
            hlo=bool(d.get("hlo", True)),
        )
        for part in (facts.mesh, *facts.inputs, *facts.outputs, *facts.collectives):
            _check_types(part)
        return facts


#: Field types whose values a hand-edited record could get wrong, and the check for each.
_TYPE_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "tuple[str, ...]": lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
    "tuple[int, ...]": lambda v: isinstance(v, tuple) and all(isinstance(x, int) for x in v),
    # a PartitionSpec: per dimension no axis, an axis, or several
    "Spec": lambda v: (
        isinstance(v, tuple)
        and all(
            x is None or isinstance(x, str) or (isinstance(x, tuple) and all(isinstance(a, str) for a in x)) for x in v
        )
    ),
}


def _check_types(part: Any) -> None:
    """``TypeError`` when a field read from JSON has another type than its declared one."""
    for f in dataclasses.fields(part):
        value, kind = getattr(part, f.name), str(f.type)
        if value is None and kind.endswith("| None"):
            continue
        check = _TYPE_CHECKS.get(kind.removesuffix(" | None"))
        if check is not None and not check(value):
            raise TypeError(f"{type(part).__name__}.{f.name} is {value!r}, not {kind}")


def format_bytes(n: float | None) -> str:
    """``1.5 MiB``-style text."""
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def global_shape(per_device: Sequence[int], tiles: Sequence[int]) -> tuple[int, ...]:
    """The global shape of a leaf cut into ``tiles`` pieces per dimension (padding ignored)."""
    if len(tiles) != len(per_device):
        return tuple(per_device)
    return tuple(int(d) * int(t) for d, t in zip(per_device, tiles))

"""Device arrays in XLA's text forms, and what they mean on a named mesh.

XLA writes device sets three ways: explicit lists (``{{0,1},{2,3}}``), iota
tile assignments (``[2,4]<=[8]``, ``[4,2]<=[2,4]T(1,0)``: ``arange(8)`` reshaped
to ``[2,4]``, transposed, then reshaped to ``[4,2]``) and, in newer XLA, its own
mesh (``mesh['a'=2,'b'=4], device_ids=([2,4]T(1,0)) {'b'}``). Every id is a
*logical* device id: a position in the executable's device assignment, which
for a JAX ``NamedSharding`` is the mesh's devices in row-major order.
``MeshGeometry`` turns replica groups and HLO shardings into the JAX mesh axes
they span, and gives ``None`` rather than a guess when they fit no axis.
Pure text and numpy: no jax import.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from typing import Sequence

import numpy as np

_INTS = re.compile(r"-?\d+")
_IOTA = re.compile(r"^\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?")
_MESH_AXIS = re.compile(r"'?([^'=,\s]+)'?=(\d+)")
_AXIS_REF = re.compile(r"'?([^':,\s]+)'?(?::\((\d+)\)(\d+))?")


def _ints(text: str) -> list[int]:
    return [int(x) for x in _INTS.findall(text)]


def iota(dims: Sequence[int], reshape_dims: Sequence[int], perm: Sequence[int] | None = None) -> np.ndarray:
    """``arange`` reshaped to ``reshape_dims``, transposed by ``perm``, reshaped to ``dims``."""
    n = math.prod(reshape_dims)
    a = np.arange(n, dtype=np.int64).reshape(tuple(reshape_dims))
    if perm:
        a = a.transpose(tuple(perm))
    return a.reshape(tuple(dims))


def device_array(text: str) -> np.ndarray | None:
    """The device array of ``[2,4]<=[8]``/``[4,2]<=[2,4]T(1,0)`` or ``[2,2]0,2,1,3``."""
    text = text.strip()
    m = _IOTA.match(text)
    if m:
        perm = _ints(m.group(3)) if m.group(3) else None
        return iota(_ints(m.group(1)), _ints(m.group(2)), perm)
    m = re.match(r"^\[([\d,\s]*)\]\s*([\d,\s]+)", text)
    if m:
        dims, ids = _ints(m.group(1)), _ints(m.group(2))
        if math.prod(dims) == len(ids):
            return np.array(ids, dtype=np.int64).reshape(dims)
    return None


def replica_groups(text: str, n_devices: int | None = None) -> list[tuple[int, ...]] | None:
    """The groups of a ``replica_groups=`` value (any of XLA's three forms).

    ``{}`` means every device in one group, which needs ``n_devices``.
    """
    text = text.strip()
    if text.startswith("mesh["):
        return _mesh_groups(text)
    if text.startswith("["):
        arr = device_array(text)
        return None if arr is None or arr.ndim != 2 else [tuple(int(x) for x in row) for row in arr]
    if text.startswith("{"):
        groups = [tuple(_ints(g)) for g in re.findall(r"\{([\d,\s]*)\}", text[1:-1])]
        groups = [g for g in groups if g]
        if groups:
            return groups
        return [tuple(range(n_devices))] if n_devices else None
    return None


def source_target_pairs(text: str) -> list[tuple[int, int]]:
    """The ``(source, target)`` pairs of a ``source_target_pairs={{0,1},...}`` value."""
    return [(a, b) for a, b in (_ints(p) for p in re.findall(r"\{(\d+\s*,\s*\d+)\}", text))]


def _mesh_groups(text: str) -> list[tuple[int, ...]] | None:
    """Groups of XLA's mesh form: ``mesh['x'=2,'y'=4][, device_ids=(...)] {'y'}``."""
    head = re.match(r"mesh\[([^\]]*)\]", text)
    brace = text.rfind("{")
    if head is None or brace < 0:
        return None
    axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(head.group(1))]
    names = [a for a, _ in axes]
    sizes = [s for _, s in axes]
    n = math.prod(sizes)
    ids_at = text.find("device_ids=(")
    if ids_at >= 0:
        inner = text[ids_at + len("device_ids=(") : brace].strip().removesuffix(")").strip()
        arr = _mesh_device_ids(inner, n)
        if arr is None:
            return None
    else:
        arr = np.arange(n, dtype=np.int64)
    refs = [
        (name, int(pre) if pre else None, int(size) if size else None)
        for name, pre, size in _AXIS_REF.findall(text[brace + 1 : text.rfind("}")])
    ]
    if not refs or any(r[0] not in names for r in refs):
        return None
    # Split each axis into the pieces its sub-axis refs name, then group those pieces
    # in the refs' order (XLA lists a group's devices in that order).
    dims: list[int] = []
    dim_of: dict[tuple[str, int | None, int | None], int] = {}
    for name, size in axes:
        mine = sorted((r for r in refs if r[0] == name), key=lambda r: r[1] or 0)
        if not mine or mine[0][1] is None:
            if mine:
                dim_of[mine[0]] = len(dims)
            dims.append(size)
            continue
        prefix = 1
        for ref in mine:
            pre, sub = ref[1] or 1, ref[2] or 1
            if pre != prefix:
                dims.append(pre // prefix)
                prefix = pre
            dim_of[ref] = len(dims)
            dims.append(sub)
            prefix *= sub
        if prefix != size:
            dims.append(size // prefix)
    grouped = [dim_of[r] for r in refs]
    rest = [d for d in range(len(dims)) if d not in grouped]
    group_size = math.prod(dims[d] for d in grouped)
    if math.prod(dims) != arr.size:
        return None
    arr = arr.reshape(dims).transpose(rest + grouped).reshape(-1, group_size)
    return [tuple(int(x) for x in row) for row in arr]


def _mesh_device_ids(text: str, n: int) -> np.ndarray | None:
    if text.startswith("["):
        m = re.match(r"^\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?", text)
        if m is None:
            return None
        dims = _ints(m.group(1))
        return iota([n], dims, _ints(m.group(2)) if m.group(2) else None)
    ids = _ints(text)
    return np.array(ids, dtype=np.int64) if len(ids) == n else None


@dataclasses.dataclass(frozen=True, slots=True)
class HloSharding:
    """One HLO sharding annotation, parsed.

    Attributes:
      kind: ``"replicated"``, ``"maximal"``, ``"manual"``, ``"tiled"``, ``"tuple"`` or ``"unknown"``.
      tiles: how many pieces each tensor dimension is cut into (``"tiled"`` only).
      devices: logical device ids, shape ``tiles`` plus any trailing replication or
        manual dimensions.
      elements: the parts of a ``"tuple"`` sharding.
      text: the annotation as XLA wrote it.
    """

    kind: str
    text: str
    tiles: tuple[int, ...] = ()
    devices: np.ndarray | None = dataclasses.field(default=None, compare=False)
    elements: tuple["HloSharding", ...] = ()

    @property
    def n_tiles(self) -> int:
        return math.prod(self.tiles) if self.kind == "tiled" else 1


def parse_sharding(text: str) -> HloSharding:
    """Parse ``{replicated}``, ``{devices=[2,1,4]<=[8] last_tile_dim_replicate}``, tuples, ..."""
    t = text.strip()
    body = t[1:-1].strip() if t.startswith("{") and t.endswith("}") else t
    if body.startswith("{"):
        return HloSharding("tuple", t, elements=tuple(parse_sharding(p) for p in _top_level_braces(body)))
    if body.startswith("replicated"):
        return HloSharding("replicated", t)
    if body.startswith("maximal"):
        return HloSharding("maximal", t)
    if body.startswith("manual"):
        return HloSharding("manual", t)
    if not body.startswith("devices="):
        return HloSharding("unknown", t)
    arr = device_array(body[len("devices=") :])
    if arr is None:
        return HloSharding("unknown", t)
    trailing = 0
    if "last_tile_dim_replicate" in body:
        trailing = 1
    else:
        m = re.search(r"last_tile_dims=\{([^}]*)\}", body)
        if m:
            trailing = len([p for p in m.group(1).split(",") if p.strip()])
            if "manual" in m.group(1):
                return HloSharding("manual", t)
    tiles = tuple(int(d) for d in arr.shape[: arr.ndim - trailing])
    if math.prod(tiles) == 1:
        return HloSharding("replicated", t)
    return HloSharding("tiled", t, tiles=tiles, devices=arr)


def _top_level_braces(text: str) -> list[str]:
    parts, depth, start = [], 0, -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                parts.append(text[start : i + 1])
    return parts


Spec = tuple[None | str | tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class MeshGeometry:
    """A named mesh, and where each logical device id sits on it.

    Attributes:
      axis_names, axis_sizes: the mesh's axes, major first.
      positions: ``positions[i]`` is the row-major mesh position of logical device
        ``i`` (identity when the device assignment is the mesh's own order).
    """

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    positions: tuple[int, ...] | None = None

    @property
    def n_devices(self) -> int:
        return math.prod(self.axis_sizes)

    def coords(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Mesh coordinates (one row per id, one column per axis)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if self.positions is not None:
            ids = np.asarray(self.positions, dtype=np.int64)[ids]
        return np.stack(np.unravel_index(ids, self.axis_sizes), axis=1)

    def axes_of_groups(self, groups: Sequence[Sequence[int]]) -> tuple[str, ...] | None:
        """The mesh axes a set of replica groups spans; ``None`` if they span no whole axes."""
        if not groups or not self._ids_fit(itertools.chain.from_iterable(groups)):
            return None
        axes: set[int] | None = None
        for g in groups:
            c = self.coords(g)
            varying = {a for a in range(len(self.axis_sizes)) if len(set(c[:, a].tolist())) > 1}
            if axes is None:
                axes = varying
            if varying != axes or len(set(map(tuple, c.tolist()))) != len(g):
                return None
            if math.prod(self.axis_sizes[a] for a in varying) != len(g):
                return None
        return tuple(self.axis_names[a] for a in sorted(axes or ()))

    def axes_of_pairs(self, pairs: Sequence[tuple[int, int]]) -> tuple[str, ...] | None:
        """The mesh axes along which a collective-permute moves data."""
        moving = [(s, t) for s, t in pairs if s != t]
        if not moving or not self._ids_fit(itertools.chain.from_iterable(moving)):
            return None if moving else ()
        src = self.coords([s for s, _ in moving])
        dst = self.coords([t for _, t in moving])
        changed = np.flatnonzero((src != dst).any(axis=0))
        return tuple(self.axis_names[a] for a in changed)

    def spec_of(self, sharding: HloSharding) -> Spec | None:
        """The ``PartitionSpec`` entries of a tiled sharding on this mesh, or ``None``.

        Each tensor dimension gets ``None``, one axis name, or a tuple of names
        (major first), checked against every device of the tile assignment.
        """
        if sharding.kind == "replicated":
            return ()
        if sharding.kind != "tiled" or sharding.devices is None:
            return None
        devices = sharding.devices
        if not self._ids_fit(devices.reshape(-1).tolist()):
            return None
        coords = self.coords(devices.reshape(-1)).reshape(devices.shape + (len(self.axis_sizes),))
        used: set[int] = set()
        spec: list[None | str | tuple[str, ...]] = []
        for dim, n in enumerate(sharding.tiles):
            if n == 1:
                spec.append(None)
                continue
            line = coords[tuple(slice(None) if d == dim else 0 for d in range(devices.ndim))]
            varying = [a for a in range(len(self.axis_sizes)) if len(set(line[:, a].tolist())) > 1]
            order = self._order(line, varying, n)
            if order is None or used & set(order):
                return None
            used |= set(order)
            names = tuple(self.axis_names[a] for a in order)
            spec.append(names[0] if len(names) == 1 else names)
            index = np.zeros(devices.shape, dtype=np.int64)
            for a in order:
                index = index * self.axis_sizes[a] + coords[..., a]
            expected = np.arange(devices.shape[dim]).reshape([-1 if d == dim else 1 for d in range(devices.ndim)])
            if not np.array_equal(index, np.broadcast_to(expected, devices.shape)):
                return None
        return tuple(spec) if any(e is not None for e in spec) else ()

    def _order(self, line: np.ndarray, varying: list[int], n: int) -> tuple[int, ...] | None:
        if math.prod(self.axis_sizes[a] for a in varying) != n:
            return None
        for order in itertools.permutations(varying):
            index = np.zeros(len(line), dtype=np.int64)
            for a in order:
                index = index * self.axis_sizes[a] + line[:, a]
            if np.array_equal(index, np.arange(n)):
                return order
        return None

    def _ids_fit(self, ids: Sequence[int] | itertools.chain[int]) -> bool:
        limit = len(self.positions) if self.positions is not None else self.n_devices
        return all(0 <= i < limit for i in ids)


def spec_text(spec: Sequence[None | str | Sequence[str]] | None) -> str:
    """``P('data', None)``-style text for a spec (``P()`` is replicated)."""
    if spec is None:
        return "?"
    parts = []
    for entry in spec:
        if entry is None:
            parts.append("None")
        elif isinstance(entry, str):
            parts.append(repr(entry))
        else:
            parts.append("(" + ", ".join(repr(e) for e in entry) + ("," if len(entry) == 1 else "") + ")")
    return "P(" + ", ".join(parts) + ")"

"""The collectives in a compiled executable's optimized HLO text, and the arrays they move.

``parse_module(compiled.as_text())`` reads every computation; ``collectives``
lists each all-reduce, all-gather, reduce-scatter, all-to-all,
collective-permute (and collective-broadcast, ragged-all-to-all) the compiler
inserted, including async ``-start``/``-done`` pairs and collectives wrapped in
``async-start``, with their shapes, bytes, replica groups, the mesh axes those
groups span, how often one call runs them (known while-loop trip counts), and
the entry parameter or output they serve. The HLO op name (``all-gather.3``) and
module name (``jit_step``) are what the profiler timeline shows, so the two can
be joined. Pure text parsing: no jax import.

Parsing the HLO text and reading its collectives share the text's grammar, which is why the module
runs past 400 lines.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any, Iterator, Sequence

from jaxdiag.sharding.tiles import HloSharding, MeshGeometry, parse_sharding, replica_groups, source_target_pairs

#: Collective opcodes, their async ``-start`` forms map to the same kind.
KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
    "collective-broadcast",
)
_START = {f"{k}-start": k for k in KINDS}
#: Bytes per element; sub-byte types count as fractions.
_ITEMSIZE = {
    "pred": 1,
    "s2": 0.25,
    "u2": 0.25,
    "s4": 0.5,
    "u4": 0.5,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "token": 0,
    "f4e2m1fn": 0.5,
    "f8e8m0fnu": 1,
    "f8e3m4": 1,
    "f8e4m3": 1,
    "f8e4m3fn": 1,
    "f8e4m3fnuz": 1,
    "f8e4m3b11fnuz": 1,
    "f8e5m2": 1,
    "f8e5m2fnuz": 1,
}
_LEAF = re.compile(r"\b([a-z][a-z0-9]*)\[([^\]]*)\]")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_COMP_HEAD = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_BRACKETS = re.compile(r'[()\[\]{}"]')
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")


@dataclasses.dataclass(frozen=True, slots=True)
class Instr:
    """One HLO instruction: its name, result leaves ``(dtype, dims)``, opcode, operands, attributes."""

    name: str
    shape: tuple[tuple[str, tuple[int, ...]], ...]
    op: str
    operands: tuple[str, ...]
    attrs: str
    root: bool = False

    def attr(self, key: str, default: str = "") -> str:
        """The value of attribute ``key`` (``replica_groups``, ``calls``, ...), parsed on demand:
        most instructions are never asked, and large modules have tens of thousands."""
        m = re.search(r"(?:^|, )" + re.escape(key) + "=", self.attrs)
        if m is None:
            return default
        return self.attrs[m.end() : _value_end(self.attrs, m.end())].strip()

    @property
    def op_name(self) -> str:
        m = _OP_NAME.search(self.attrs)
        return m.group(1).replace("\\'", "'").replace('\\"', '"') if m else ""

    @property
    def nbytes(self) -> int:
        return shape_bytes(self.shape)


@dataclasses.dataclass(frozen=True)
class HloModule:
    """A parsed HLO module: computations by name (instructions in order) and the entry's name."""

    name: str
    computations: dict[str, dict[str, Instr]]
    entry: str
    num_partitions: int = 1

    def entry_params(self) -> list[Instr]:
        """The entry computation's parameters, by parameter number."""
        params = [i for i in self.computations.get(self.entry, {}).values() if i.op == "parameter"]
        return sorted(params, key=lambda i: int(i.operands[0]) if i.operands and i.operands[0].isdigit() else 0)

    def entry_root(self) -> Instr | None:
        return next((i for i in self.computations.get(self.entry, {}).values() if i.root), None)

    @functools.cached_property
    def calls(self) -> dict[str, list[tuple[Instr, str, str]]]:
        """For each computation, ``(instruction, attribute, callee)`` of the computations it calls."""
        out: dict[str, list[tuple[Instr, str, str]]] = {}
        for comp_name, comp in self.computations.items():
            out[comp_name] = [
                (ins, key, callee)
                for ins in comp.values()
                for key, callee in _calls(ins)
                if callee in self.computations
            ]
        return out

    @functools.cached_property
    def callers(self) -> dict[str, tuple[str, Instr]]:
        """For each called computation, the computation and instruction that call it."""
        out: dict[str, tuple[str, Instr]] = {}
        for comp_name, edges in self.calls.items():
            for ins, _, callee in edges:
                out.setdefault(callee, (comp_name, ins))
        return out

    @functools.cached_property
    def done_of(self) -> dict[tuple[str, str], list[str]]:
        """``(computation, -start op) -> [its -done ops]``."""
        out: dict[tuple[str, str], list[str]] = {}
        for comp_name, comp in self.computations.items():
            for ins in comp.values():
                if ins.op.endswith("-done"):
                    for o in ins.operands:
                        out.setdefault((comp_name, o), []).append(ins.name)
        return out

    @functools.cached_property
    def entry_users(self) -> dict[str, list[Instr]]:
        """For each entry instruction, the entry instructions that use it."""
        users: dict[str, list[Instr]] = {}
        for ins in self.computations.get(self.entry, {}).values():
            for o in ins.operands:
                users.setdefault(o, []).append(ins)
        return users


@dataclasses.dataclass(frozen=True, slots=True)
class Collective:
    """One collective the compiler put in a program.

    Attributes:
      name: HLO op name (``all-gather.3``; the ``-start`` op of an async pair).
      kind: ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``, ...
      computation: the computation holding it (the entry, a loop body, ...).
      operand_shapes, result_shapes: ``dtype[dims]`` per device, as text.
      operand_bytes, result_bytes: their sizes per device.
      bytes: the larger of the two: the buffer each device sends or receives per run.
      group_size: devices per replica group (pairs count 2 for a permute).
      n_groups: replica groups (source/target pairs for a permute).
      mesh_axes: the JAX mesh axes the groups span; ``None`` when unknown.
      count: runs per call of the program (known loop trip counts multiplied).
      count_exact: false when it sits in a loop of unknown trip count or a branch.
      op_name: the JAX op it came from (``jit(step)/transpose(jvp())/dot_general``).
      arrays: entry parameters (or ``out[i]``) it gathers or reduces into.
      array_role: ``"operand"`` (it moves that array), ``"update"`` (its result is
        combined with that array), ``"output"`` (it becomes that output), or ``""``.
      aliases: other op names of the same transfer (``-done``, ``async-start``).
    """

    name: str
    kind: str
    computation: str
    operand_shapes: tuple[str, ...]
    result_shapes: tuple[str, ...]
    operand_bytes: int
    result_bytes: int
    group_size: int | None
    n_groups: int | None
    mesh_axes: tuple[str, ...] | None
    count: int = 1
    count_exact: bool = True
    op_name: str = ""
    arrays: tuple[str, ...] = ()
    array_role: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return max(self.operand_bytes, self.result_bytes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["bytes"] = self.bytes
        for k in ("operand_shapes", "result_shapes", "arrays", "aliases"):
            d[k] = list(d[k])
        d["mesh_axes"] = None if self.mesh_axes is None else list(self.mesh_axes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Collective":
        kw = {k: d[k] for k in _COLLECTIVE_FIELDS if k in d}
        for k in ("operand_shapes", "result_shapes", "arrays", "aliases"):
            kw[k] = tuple(kw.get(k) or ())
        if kw.get("mesh_axes") is not None:
            kw["mesh_axes"] = tuple(kw["mesh_axes"])
        return cls(**kw)


_COLLECTIVE_FIELDS = frozenset(f.name for f in dataclasses.fields(Collective))


@functools.lru_cache(maxsize=4096)  # a module repeats a few hundred shapes thousands of times
def shape_leaves(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``(dtype, dims)`` of each array in a shape (``f32[2,3]{1,0}`` or a tuple of them)."""
    out = []
    for dtype, dims in _LEAF.findall(text):
        if dtype in _ITEMSIZE:
            out.append((dtype, tuple(int(d.strip().lstrip("<=")) for d in dims.split(",") if d.strip())))
    return tuple(out)


def shape_bytes(leaves: tuple[tuple[str, tuple[int, ...]], ...]) -> int:
    return int(sum(_ITEMSIZE.get(dt, 4) * math.prod(dims) for dt, dims in leaves))


def shape_text(leaf: tuple[str, tuple[int, ...]]) -> str:
    return f"{leaf[0]}[{','.join(map(str, leaf[1]))}]"


def parse_module(text: str) -> HloModule:
    """Parse the text of an HLO module (``compiled.as_text()`` or an HLO dump)."""
    name, entry, parts = "", "", 1
    comps: dict[str, dict[str, Instr]] = {}
    current: dict[str, Instr] | None = None
    for line in text.splitlines():
        if line.startswith("HloModule "):
            name = line.split()[1].rstrip(",")
            m = re.search(r"num_partitions=(\d+)", line)
            parts = int(m.group(1)) if m else 1
            continue
        if current is None:
            m = _COMP_HEAD.match(line.strip())
            if m:
                current = comps.setdefault(m.group(2), {})
                if m.group(1):
                    entry = m.group(2)
            continue
        if line.strip() == "}":
            current = None
            continue
        ins = _parse_instr(line)
        if ins is not None:
            current[ins.name] = ins
    return HloModule(name, comps, entry or next(iter(comps), ""), parts)


def _parse_instr(line: str) -> Instr | None:
    m = _INSTR.match(line)
    if m is None:
        return None
    rest = m.group(3)
    end = _balanced_end(rest, 0) if rest.startswith("(") else rest.find(" ")
    if end < 0:
        return None
    shape, rest = rest[:end], rest[end:].lstrip()
    paren = rest.find("(")
    if paren <= 0:
        return None
    op = rest[:paren].strip()
    close = _balanced_end(rest, paren)
    operand_text = rest[paren + 1 : close - 1]
    if op == "parameter":
        operands: tuple[str, ...] = (operand_text.strip(),)
    else:
        operands = tuple(re.findall(r"%([\w.\-]+)", operand_text)) or tuple(
            p.split()[-1] for p in _split_top(operand_text) if p.strip() and not p.strip()[0].isdigit()
        )
    return Instr(m.group(2), shape_leaves(shape), op, operands, rest[close:].lstrip(", "), bool(m.group(1)))


def _balanced_end(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``start`` (jumping from bracket to bracket)."""
    depth, quote = 0, False
    for m in _BRACKETS.finditer(text, start):
        ch = m.group()
        if ch == '"' and text[m.start() - 1] != "\\":
            quote = not quote
        elif quote:
            continue
        elif ch in "([{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.end()
    return len(text)


def _value_end(text: str, start: int) -> int:
    """Index of the comma ending the attribute value that starts at ``start``."""
    depth, quote = 0, False
    for i in range(start, len(text)):
        ch = text[i]
        if ch == '"' and text[i - 1] != "\\":
            quote = not quote
        elif quote:
            continue
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            return i
    return len(text)


def _split_top(text: str) -> Iterator[str]:
    """Split on commas outside brackets and quotes."""
    depth, quote, start = 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quote = not quote
        elif not quote and ch in "([{":
            depth += 1
        elif not quote and ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0 and not quote:
            yield text[start:i].strip()
            start = i + 1
    if text[start:].strip():
        yield text[start:].strip()


def collectives(module: HloModule, mesh: MeshGeometry | None = None) -> list[Collective]:
    """Every collective in ``module``, in program order, entry computation first."""
    counts = _run_counts(module)
    found = []
    for comp_name in sorted(module.computations, key=lambda c: c != module.entry):
        comp = module.computations[comp_name]
        for ins in comp.values():
            kind = _START.get(ins.op, ins.op if ins.op in KINDS else "")
            if kind:
                count, exact = counts.get(comp_name, (1, False))
                found.append(_collective(module, comp_name, ins, kind, mesh, count, exact))
    return found


def _collective(
    module: HloModule, comp_name: str, ins: Instr, kind: str, mesh: MeshGeometry | None, count: int, exact: bool
) -> Collective:
    comp = module.computations[comp_name]
    operand_leaves = tuple(leaf for o in ins.operands if o in comp for leaf in comp[o].shape)
    result = ins.shape
    aliases = list(module.done_of.get((comp_name, ins.name), ()))
    if ins.op in _START and len(result) > len(operand_leaves) >= 1:
        # A -start's shape is (operands, results[, context scalars]).
        result = result[len(operand_leaves) : 2 * len(operand_leaves)]
    caller = module.callers.get(comp_name)
    if caller is not None and caller[1].op == "async-start":
        aliases.append(caller[1].name)
    mesh_axes: tuple[str, ...] | None = None
    if kind == "collective-permute":
        pairs = source_target_pairs(ins.attr("source_target_pairs"))
        group_size, n_groups = (2, len(pairs)) if pairs else (None, None)
        if mesh is not None and pairs:
            mesh_axes = mesh.axes_of_pairs(pairs)
    else:
        text = ins.attr("replica_groups", "{}")
        if text.startswith("mesh[") and ins.attr("device_ids"):
            text += ", device_ids=" + ins.attr("device_ids")
        groups = replica_groups(text, module.num_partitions)
        group_size, n_groups = (len(groups[0]), len(groups)) if groups else (None, None)
        if mesh is not None and groups:
            mesh_axes = mesh.axes_of_groups(groups)
    arrays, role = arrays_served(module, comp_name, ins, kind)
    return Collective(
        name=ins.name,
        kind=kind,
        computation=comp_name,
        operand_shapes=tuple(shape_text(s) for s in operand_leaves),
        result_shapes=tuple(shape_text(s) for s in result),
        operand_bytes=shape_bytes(operand_leaves),
        result_bytes=shape_bytes(result),
        group_size=group_size,
        n_groups=n_groups,
        mesh_axes=mesh_axes,
        count=count,
        count_exact=exact,
        op_name=ins.op_name,
        arrays=arrays,
        array_role=role,
        aliases=tuple(aliases),
    )


_CALL_ATTR = re.compile(
    r"(?:^|, )(calls|body|condition|to_apply|true_computation|false_computation|"
    r"branch_computations)="
)


def _calls(ins: Instr) -> Iterator[tuple[str, str]]:
    """``(attribute, computation)`` for each computation ``ins`` calls."""
    for m in _CALL_ATTR.finditer(ins.attrs):
        for callee in re.findall(r"%?([\w.\-]+)", ins.attr(m.group(1))):
            yield m.group(1), callee


def _run_counts(module: HloModule) -> dict[str, tuple[int, bool]]:
    """Runs per call of each computation reachable from the entry, and whether that is exact."""
    counts = {module.entry: (1, True)}
    todo = [module.entry]
    while todo:
        name = todo.pop()
        count, exact = counts[name]
        for ins, key, callee in module.calls.get(name, ()):
            if key in ("condition", "to_apply") or callee in counts:
                continue
            c, e = count, exact
            if key == "body":
                trip = _TRIP.search(ins.attr("backend_config"))
                c, e = (c * int(trip.group(1)), e) if trip else (c, False)
            elif key != "calls":
                e = False  # a branch may or may not run
            counts[callee] = (c, e)
            todo.append(callee)
    return counts


def entry_param_sharding(ins: Instr, compiled: Sequence[HloSharding] | None = None) -> HloSharding:
    """The sharding of an entry parameter: the executable's own (``compiled``, one per parameter
    number, when known), else the ``sharding=`` the HLO text gives it, else replicated.

    The executable's come first: from JAX 0.12 on, the optimized HLO text leaves the entry
    parameters' shardings out, and absent no longer means replicated.
    """
    number = int(ins.operands[0]) if ins.operands and ins.operands[0].isdigit() else -1
    if compiled is not None and 0 <= number < len(compiled):
        return compiled[number]
    return parse_sharding(ins.attr("sharding", "{replicated}"))


# Last, so that the names above exist if dataflow is imported first; it needs no name from here.
from jaxdiag.sharding.dataflow import arrays_served, param_name, source_param  # noqa: E402,F401

"""Which array a collective serves: follow the HLO data flow back to an entry parameter, or forward
to the parameter its result updates.

Backward, through copies, views, transfers and loop carries (a while body's
parameter is its caller's operand), to the entry parameter the collective
moves: ``all-gather(copy(param))`` moves that parameter. Forward, for
reductions, a few elementwise steps to the parameter of the same shape the
result is combined with: ``w - lr * all-reduce(grad)`` reduces the update of
``w``; failing that, the output the result becomes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.sharding.hlo import HloModule, Instr

# Ops through which an array passes unchanged in identity (a copy, a view, a transfer).
_PASS = frozenset(
    {
        "copy",
        "bitcast",
        "reshape",
        "transpose",
        "convert",
        "broadcast",
        "slice",
        "dynamic-slice",
        "copy-start",
        "copy-done",
        "bitcast-convert",
        "fusion",
        "custom-call",
        "optimization-barrier",
        "all-gather",
        "all-to-all",
        "collective-permute",
        "all-gather-start",
        "all-gather-done",
        "collective-permute-start",
        "collective-permute-done",
        "async-start",
        "async-done",
    }
)
_NOT_DATA = frozenset({"constant", "iota", "partition-id", "replica-id"})


def param_name(param: Instr) -> str:
    """The JAX argument name of an entry parameter (its ``op_name``), else ``param[N]``."""
    return param.op_name or f"param[{param.operands[0] if param.operands else '?'}]"


def arrays_served(module: HloModule, comp_name: str, ins: Instr, kind: str) -> tuple[tuple[str, ...], str]:
    """The entry parameters a collective moves, or (for reductions) the ones its result updates."""
    sources = [p for o in ins.operands if (p := source_param(module, comp_name, o)) is not None]
    names = tuple(dict.fromkeys(param_name(p) for p in sources))
    if names and kind not in ("all-reduce", "reduce-scatter"):
        return names, "operand"
    if comp_name == module.entry:
        updates = _updated_params(module, ins)
        if updates[0]:
            return updates
    return (names, "operand") if names else ((), "")


def source_param(
    module: HloModule, comp_name: str, name: str, tuple_path: tuple[int, ...] = (), depth: int = 0
) -> Instr | None:
    """Follow copies, views and transfers of ``name`` back to the entry parameter it is, if any."""
    comp = module.computations.get(comp_name, {})
    ins = comp.get(name)
    if ins is None or depth > 40:
        return None
    if ins.op == "parameter":
        if comp_name == module.entry:
            return ins
        caller = module.callers.get(comp_name)
        if caller is None or caller[1].op not in ("while", "call", "fusion", "async-start"):
            return None
        number = int(ins.operands[0]) if ins.operands and ins.operands[0].isdigit() else 0
        if number >= len(caller[1].operands):
            return None
        return source_param(module, caller[0], caller[1].operands[number], tuple_path, depth + 1)
    if ins.op == "get-tuple-element":
        index = int(ins.attr("index", "0"))
        return source_param(module, comp_name, ins.operands[0], (index,) + tuple_path, depth + 1)
    if ins.op == "tuple":
        if not tuple_path or tuple_path[0] >= len(ins.operands):
            return None
        return source_param(module, comp_name, ins.operands[tuple_path[0]], tuple_path[1:], depth + 1)
    if ins.op in _PASS or ins.op.endswith(("-start", "-done")):
        if ins.op == "dynamic-slice":
            data = list(ins.operands[:1])
        else:  # constants, ids and scalars (offsets, scales) are not the array
            data = [
                o
                for o in ins.operands
                if o in comp and comp[o].op not in _NOT_DATA and comp[o].shape and math.prod(comp[o].shape[0][1]) > 1
            ]
        if len(data) == 1:
            return source_param(module, comp_name, data[0], tuple_path, depth + 1)
    return None


def _updated_params(module: HloModule, ins: Instr) -> tuple[tuple[str, ...], str]:
    """Parameters combined elementwise with a reduction's result (a gradient applied to its
    weight), else the outputs that result becomes."""
    users = module.entry_users
    if len(ins.shape) == 1:
        starts = [(ins.name, ins.shape[0])]
    else:  # a combined reduction: follow each element through its get-tuple-element
        starts = [
            (u.name, u.shape[0]) for u in users.get(ins.name, ()) if u.op == "get-tuple-element" and len(u.shape) == 1
        ]
    params: list[str] = []
    outputs: list[str] = []
    for name, leaf in starts:
        found = _update_target(module, name, leaf, users, outputs)
        if found is not None:
            params.append(found)
    if params:
        return tuple(dict.fromkeys(params)), "update"
    return (tuple(dict.fromkeys(outputs)), "output") if outputs else ((), "")


def _update_target(
    module: HloModule, name: str, leaf: tuple[str, tuple[int, ...]], users: dict[str, list[Instr]], outputs: list[str]
) -> str | None:
    """Within a few elementwise steps of ``name``, the parameter of the same shape it is combined with."""
    frontier, seen = [name], {name}
    for _ in range(4):
        following = []
        for n in frontier:
            for user in users.get(n, ()):
                if user.name in seen:
                    continue
                seen.add(user.name)
                if user.root and user.op == "tuple":
                    outputs.append(f"out[{user.operands.index(n)}]")
                    continue
                if not _same_size(user.shape, leaf):  # fusions may transpose on the way
                    continue
                for other in user.operands:
                    p = None if other == n else source_param(module, module.entry, other)
                    if p is not None and p.shape == user.shape and _reaches_output(module, user, users):
                        return param_name(p)
                following.append(user.name)
        frontier = following
    return None


def _reaches_output(module: HloModule, start: Instr, users: dict[str, list[Instr]]) -> bool:
    """Whether ``start``'s result, through a few steps of its own size, is returned: a new value of
    the parameter (``w - lr * g``), not a use of it (``pred - y``, whose result is reduced to a loss)."""
    if start.root:
        return True
    frontier, seen = [start], {start.name}
    for _ in range(4):
        following = []
        for ins in frontier:
            for user in users.get(ins.name, ()):
                if user.name in seen:
                    continue
                seen.add(user.name)
                if user.root:
                    return True
                if len(ins.shape) == 1 and _same_size(user.shape, ins.shape[0]) and _elementwise(user):
                    following.append(user)
        frontier = following
    return False


#: Ops that mix elements (a matmul of the residual with the input is a gradient, not the value).
_MIXING = frozenset({"dot", "convolution", "custom-call", "reduce", "reduce-window", "scatter", "gather", "sort"})


def _elementwise(ins: Instr) -> bool:
    if ins.op == "fusion":
        return ins.attr("kind", "kLoop") == "kLoop"
    return ins.op not in _MIXING and not ins.op.startswith(("all-", "reduce-scatter", "collective"))


def _same_size(shape: tuple[tuple[str, tuple[int, ...]], ...], leaf: tuple[str, tuple[int, ...]]) -> bool:
    return len(shape) == 1 and shape[0][0] == leaf[0] and math.prod(shape[0][1]) == math.prod(leaf[1])

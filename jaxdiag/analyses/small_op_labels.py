"""What a small op is called in the report's table of small ops, and the ops that took the most time.

An op is grouped under its framework op, else its HLO op, else its kernel's name,
without the numbers XLA appends (``fusion.12`` is a ``fusion``): the table says
which kind of op is small and frequent, not which instance.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

import numpy as np

from jaxdiag.analyses.small_op_section import OpTotal
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

_NUMBERED = re.compile(r"(?:[._]\d+)+$")
_USELESS_FRAMEWORK_OP = re.compile(r"^(?:XlaModule:.*|(?:jit|pjit|pmap)\([^/]*\)|)$")
_JIT_PREFIX = re.compile(r"^(?:jit|pjit|pmap)\([^/]*\)/")


def op_label(row_name: str, hlo_op: str, framework_op: str) -> str:
    """What to call an op when grouping: framework op, else HLO op, else kernel name, unnumbered.

    Kernels replayed from a CUDA graph carry the graph's thunk (``command_buffer_1``)
    as their HLO op, so the kernel name says more there. A framework op that only
    names the jitted function (``jit(step)``) says nothing and is skipped; a path
    (``jit(step)/jvp(mlp)/dot_general``) loses its ``jit(step)/`` head.
    """
    if framework_op and not _USELESS_FRAMEWORK_OP.match(framework_op):
        return _JIT_PREFIX.sub("", framework_op)
    if not hlo_op or hlo_op.startswith("command_buffer"):
        hlo_op = row_name
    return _NUMBERED.sub("", hlo_op)


def _label_memo() -> Callable[[str, str, str], str]:
    """``op_label``, each framework op and each name it strips of numbers looked at once (keys share them)."""
    framework: dict[str, str | None] = {}
    unnumbered: dict[str, str] = {}

    def label(row_name: str, hlo_op: str, framework_op: str) -> str:
        if framework_op not in framework:
            useful = framework_op and not _USELESS_FRAMEWORK_OP.match(framework_op)
            framework[framework_op] = _JIT_PREFIX.sub("", framework_op) if useful else None
        found = framework[framework_op]
        if found is not None:
            return found
        name = row_name if not hlo_op or hlo_op.startswith("command_buffer") else hlo_op
        if name not in unnumbered:
            unnumbered[name] = _NUMBERED.sub("", name)
        return unnumbered[name]

    return label


def row_labels(small: "pd.DataFrame") -> np.ndarray:
    """``op_label`` of each row, computed once per distinct (name, HLO op, framework op): ops repeat every step."""
    import pandas as pd

    codes, tables = [], []
    for column, missing in ((F.NAME, "nan"), (F.HLO_OP, ""), (F.FRAMEWORK_OP, "")):
        c, uniques = pd.factorize(small[column], sort=False)
        tables.append([str(u) for u in uniques.tolist()] + [missing])
        codes.append(np.where(c < 0, len(uniques), c).astype(np.int64))
    names, hlo_ops, framework_ops = tables
    key = (codes[0] * len(hlo_ops) + codes[1]) * len(framework_ops) + codes[2]
    keys, inverse = np.unique(key, return_inverse=True)
    rest, f = np.divmod(keys, len(framework_ops))
    n, h = np.divmod(rest, len(hlo_ops))
    label = _label_memo()
    found = [label(names[i], hlo_ops[j], framework_ops[k]) for i, j, k in zip(n.tolist(), h.tolist(), f.tolist())]
    return np.asarray(found, dtype=object)[inverse.reshape(-1)]


def top(small: "pd.DataFrame | None", keep: int) -> tuple[OpTotal, ...]:
    """The ``keep`` (label, module) groups of ``small`` ops with the most time, ties in order of first appearance."""
    if small is None or small.empty:
        return ()
    import pandas as pd

    # Group by (label, module) in order of first appearance, then keep the largest totals (ties in that order).
    label, labels = pd.factorize(row_labels(small), sort=False)
    module, modules = pd.factorize(small[F.HLO_MODULE], sort=False)
    named = module >= 0
    group, keys = pd.factorize(label[named] * len(modules) + module[named], sort=False)
    count = np.bincount(group, minlength=len(keys))
    total_ns = np.zeros(len(keys), dtype=np.int64)
    np.add.at(total_ns, group, small[F.DUR_NS].to_numpy(np.int64)[named])
    largest = np.argsort(-total_ns, kind="stable")[:keep]
    return tuple(
        OpTotal(
            str(labels[keys[i] // len(modules)]), str(modules[keys[i] % len(modules)]), int(count[i]), total_ns[i] / 1e6
        )
        for i in largest.tolist()
    )

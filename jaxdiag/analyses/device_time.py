"""Device time by jitted module and by op: what regression checks and diffs compare.

``total_ms`` of a module is the sum of its op durations divided by the number of
devices that ran ops on that host, so it reads against the per-step wall times
(eight devices each busy 1 ms in a step count as 1 ms, not 8). Overlapping ops
on one device are summed, not merged: this is a bill of work, not busy time
(``steps.device_busy_ms`` is that). Autotuning kernels inside compiles are left
out, as everywhere else.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

import numpy as np

from jaxdiag.analyses import device_work as W
from jaxdiag.analyses.base import AnalysisInputs, Finding
from jaxdiag.analyses.categories import positions_by_code
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.device_time_section import DeviceTimeSection, ModuleTime
from jaxdiag.analyses.host_wait_section import StepMs
from jaxdiag.analyses.small_op_section import OpTotal
from jaxdiag.trace import frames as F

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Ops listed in ``top_ops``.
TOP_OPS = 20


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceTime:
    """Device time per module (with its per-step split) and the costliest ops."""

    by_module: tuple[ModuleTime, ...]
    top_ops: tuple[OpTotal, ...]
    findings: tuple[Finding, ...] = ()

    def section(self) -> DeviceTimeSection:
        """The report's ``device_time`` section."""
        return DeviceTimeSection(self.by_module, self.top_ops)


def analyze(inputs: AnalysisInputs) -> DeviceTime:
    """Sum device op time per module, per step and per op."""
    import pandas as pd

    frames = inputs.frames
    ops = W.device_ops(frames, inputs.host, compile_windows(compile_spans(frames, inputs.host)))
    if ops.empty:
        return DeviceTime((), ())
    step, scale = W.steps_and_device_share(frames, ops, inputs.host, inputs.steps)
    ms = ops[F.DUR_NS].to_numpy(dtype=np.float64) / 1e6 * scale
    # Each row's module and op as the number of its text (equal texts, one number), from each column's few
    # categories rather than its rows: an op is its HLO op, else its kernel's name.
    texts: dict[str, int] = {}
    module = _text_ids(ops[F.HLO_MODULE], texts, lambda text: text or "(no module)")
    hlo_op = _text_ids(ops[F.HLO_OP], texts)
    op = np.where(hlo_op != texts.setdefault("", len(texts)), hlo_op, _text_ids(ops[F.NAME], texts))
    if inputs.steps is not None:
        keep = step >= 0
        step, ms, module, op = step[keep], ms[keep], module[keep], op[keep]
    text_of = list(texts)
    # Groups by codes rather than sub-frames; pandas still sums each group (per step, and
    # per op), so every total is added up as before, in the same order.
    module_code, module_ids = pd.factorize(module, sort=False)
    modules = [text_of[i] for i in module_ids.tolist()]
    by_module = []
    step_code, steps = pd.factorize(step, sort=True)
    per_step = pd.Series(ms).groupby(module_code * max(len(steps), 1) + step_code).sum()
    sums = dict(zip(per_step.index.tolist(), per_step.tolist()))
    for m, rows in enumerate(positions_by_code(module_code, len(modules))):
        by_module.append(
            ModuleTime(
                str(modules[m]),
                int(len(rows)),
                round(float(pd.Series(ms[rows]).sum()), 4),
                tuple(
                    StepMs(int(steps[k]), round(float(sums[m * max(len(steps), 1) + k]), 4))
                    for k in np.unique(step_code[rows]).tolist()
                    if steps[k] >= 0
                ),
            )
        )
    by_module.sort(key=lambda m: -m.total_ms)
    op_code, op_ids = pd.factorize(op, sort=False)
    ops_named = [text_of[i] for i in op_ids.tolist()]
    pair, pairs = pd.factorize(op_code * max(len(modules), 1) + module_code, sort=False)
    top = pd.Series(ms).groupby(pair, sort=False).agg(["count", "sum"])
    top = top.sort_values("sum", ascending=False).head(inputs.thresholds.top_ops)
    top_ops = tuple(
        OpTotal(
            str(ops_named[pairs[k] // max(len(modules), 1)]),
            str(modules[pairs[k] % max(len(modules), 1)]),
            int(n),
            round(float(total), 4),
        )
        for k, n, total in zip(top.index.tolist(), top["count"].tolist(), top["sum"].tolist())
    )
    return DeviceTime(tuple(by_module), top_ops)


def _text_ids(column: "pd.Series", ids: dict[str, int], rule: Callable[[str], str] = str) -> np.ndarray:
    """Each row's text (``column.astype(str)``, then ``rule``) as its number in ``ids``, which numbers each new
    text as it comes; a categorical column with no missing value through its categories' text (a few hundred
    strings) rather than each row's."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = W.category_codes(column)
        categories = column.cat.categories.tolist()
        if (codes >= 0).all() and all(type(c) is str for c in categories):
            numbers = np.array([ids.setdefault(rule(c), len(ids)) for c in categories], dtype=np.int64)
            return numbers[codes]
    rows = column.astype(str).to_numpy(object).tolist()
    return np.array([ids.setdefault(rule(text), len(ids)) for text in rows], dtype=np.int64)

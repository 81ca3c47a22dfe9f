"""What MFU is computed from: FLOPs per step and the devices' peak, each with its source.

FLOPs per step, in order of preference:

1. given: ``--flops-per-step`` or the capture's ``record_step(flops=...)``;
2. compile records: ``cost_analysis()["flops"]`` of each jitted function (recorded
   by default inside a capture window), times the number of times the function's
   module ran in the step. ``cost_analysis`` counts one device's program, so
   executions are counted on every device (the fewest times any op of the module
   ran in the step, on all devices together: an op inside a loop runs more
   often, never less). A function compiled more than once counts its latest
   compile (the one steady state runs).

The peak is summed over the analysed devices, for the dtype the program mostly
computes in (the floating dtype holding the most bytes among the arguments of
the functions that carry FLOPs):

- GPU: streaming multiprocessors x clock (the trace's ``core_count`` and
  ``clock_rate`` device stats) x dense tensor-core FLOPs per SM per clock of the
  architecture; else the datasheet bf16 peak the trace reader gives by device
  name. bf16/f16 use it as is; f32 uses half (TF32 tensor cores, which XLA uses
  for f32 matmuls at JAX's default precision); 8-bit floats twice; f64 is unknown.
- TPU: the ``peak_teraflops_per_second`` stat (bf16, which TPUs also use for f32
  matmuls at default precision).
- anything else (XLA:CPU): unknown, and MFU with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxdiag.analyses import device_work as W
from jaxdiag.analyses.base import AnalysisInputs
from jaxdiag.analyses.compile_spans import compile_spans, compile_windows
from jaxdiag.analyses.throughput_section import MfuBasisFacts
from jaxdiag.trace import frames as F
from jaxdiag.trace.gpu_specs import gpu_spec

_DTYPE_SCALE = {"bfloat16": 1.0, "float16": 1.0, "float32": 0.5, "tensorfloat32": 0.5}
_ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}


@dataclasses.dataclass(frozen=True)
class MfuBasis:
    """FLOPs per step and peak FLOP/s, with where each came from (``None`` where unknown)."""

    flops_per_step: float | None
    flops_source: str
    peak_flops: float | None
    peak_source: str
    dtype: str | None
    dtype_source: str
    per_step_flops: Mapping[int, float] = dataclasses.field(default_factory=dict)
    by_function: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def flops_of(self, step: int) -> float | None:
        """FLOPs of ``step``: the given figure, else the counted one, else ``None``."""
        if self.per_step_flops:
            return self.per_step_flops.get(step)
        return self.flops_per_step

    def facts(self) -> MfuBasisFacts:
        """What the report's ``throughput.mfu_basis`` says (numbers to 6 significant digits)."""
        return MfuBasisFacts(
            flops_per_step=_r(self.flops_per_step),
            flops_source=self.flops_source,
            peak_flops=_r(self.peak_flops),
            peak_source=self.peak_source,
            dtype=self.dtype,
            dtype_source=self.dtype_source,
            flops_by_function={k: _r(v) for k, v in self.by_function.items()},
        )


def _r(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")


def _no_cost_reason(records: Sequence[Mapping[str, Any]]) -> str:
    """Why no FLOPs are known, and what gives them, for the records there are."""
    if not records:
        return "unknown: no compile records (record with jaxdiag.jit or jaxdiag.profile, or pass --flops-per-step)"
    if any(r.get("before_capture") for r in records):
        return (
            "unknown: no compile record carries cost analysis; compiles before the capture window record it "
            "only with jaxdiag.configure(analysis=True) (or jaxdiag.jit(analysis=True)) set before they "
            "compile, or pass --flops-per-step"
        )
    return (
        "unknown: no compile record carries cost analysis (record it with jaxdiag.configure(analysis=True), "
        "or pass --flops-per-step)"
    )


def mfu_basis(inputs: AnalysisInputs) -> MfuBasis:
    """FLOPs per step and the summed device peak for ``inputs``, with sources."""
    records = _latest_with_flops(inputs.compile_log)
    dtype, dtype_source = compute_dtype(records.values())
    peak, peak_source = peak_flops(inputs.frames, inputs.host, dtype)
    if inputs.flops_per_step is not None:
        return MfuBasis(
            float(inputs.flops_per_step),
            "given (--flops-per-step or the capture's record_step)",
            peak,
            peak_source,
            dtype,
            dtype_source,
        )
    if not records:
        return MfuBasis(
            None,
            _no_cost_reason(inputs.compile_log),
            peak,
            peak_source,
            dtype,
            dtype_source,
        )
    per_step, used = _counted_flops(inputs, {f: float(r["cost"]["flops"]) for f, r in records.items()})
    if not per_step:
        return MfuBasis(
            None,
            "unknown: no module of a function with cost analysis ran in an analysed step",
            peak,
            peak_source,
            dtype,
            dtype_source,
        )
    values = sorted(per_step.values())
    source = (
        "compile records: cost_analysis() FLOPs of "
        + ", ".join(f"{f} x its executions" for f in sorted(used))
        + " per step, on every device"
    )
    return MfuBasis(
        values[len(values) // 2],
        source,
        peak,
        peak_source,
        dtype,
        dtype_source,
        per_step_flops=per_step,
        by_function={f: float(records[f]["cost"]["flops"]) for f in sorted(used)},
    )


def _latest_with_flops(records: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Function -> its latest compile record that has ``cost.flops``."""
    out: dict[str, Mapping[str, Any]] = {}
    for r in records:
        cost = r.get("cost")
        if not isinstance(cost, Mapping) or not isinstance(cost.get("flops"), (int, float)):
            continue
        name = r.get("function")
        if not isinstance(name, str):
            continue
        if name not in out or (r.get("time_unix") or 0) >= (out[name].get("time_unix") or 0):
            out[name] = r
    return out


def _counted_flops(inputs: AnalysisInputs, flops: Mapping[str, float]) -> tuple[dict[int, float], set[str]]:
    """Per step: the functions' FLOPs times their executions on every device."""
    from jaxdiag.analyses.top_ops import function_of

    frames = inputs.frames
    ops = W.device_ops(frames, inputs.host, compile_windows(compile_spans(frames, inputs.host)))
    if ops.empty:
        return {}, set()
    module = ops[F.HLO_MODULE].astype(str)
    function = W.classify_names(module, function_of, key=function_of)
    keep = np.isin(function, list(flops))
    ops = ops.loc[keep]
    function = function[keep]
    if ops.empty:
        return {}, set()
    windows = W.step_windows(frames, inputs.host, inputs.steps)
    step = np.full(len(ops), -1, dtype=np.int64)
    hosts = ops[F.HOST].to_numpy()
    starts = ops[F.START_NS].to_numpy(dtype=np.int64)
    for host in np.unique(hosts):
        rows = hosts == host
        step[rows] = W.step_of(starts[rows], windows.loc[windows[F.HOST] == host])
    hlo = ops[F.HLO_OP].astype(str).to_numpy()
    name = np.where(hlo != "", hlo, ops[F.NAME].astype(str).to_numpy())
    import pandas as pd

    table = pd.DataFrame({"step": step, "function": function, "op": name})
    table = table.loc[table["step"] >= 0]
    counts = table.groupby(["step", "function", "op"], sort=False).size()
    runs = counts.groupby(level=["step", "function"]).min()
    per_step: dict[int, float] = {}
    used: set[str] = set()
    for (s, f), n in runs.items():
        per_step[int(s)] = per_step.get(int(s), 0.0) + flops[str(f)] * float(n)
        used.add(str(f))
    return per_step, used


def compute_dtype(records: Iterable[Mapping[str, Any]]) -> tuple[str | None, str]:
    """The floating dtype holding the most argument bytes of these records, and how it was chosen."""
    weight: dict[str, float] = {}
    for r in records:
        for a in r.get("args") or ():
            if not isinstance(a, Mapping) or a.get("kind", "array") != "array":
                continue
            dtype = str(a.get("dtype") or "")
            if dtype not in _ITEMSIZE and not dtype.startswith("float8"):
                continue
            shape = a.get("shape") or ()
            try:
                n = float(np.prod([int(d) for d in shape])) if shape else 1.0
            except (TypeError, ValueError):
                continue
            weight[dtype] = weight.get(dtype, 0.0) + n * _ITEMSIZE.get(dtype, 1)
    if not weight:
        return None, "unknown: no compile record lists floating-point arguments"
    dtype = max(weight, key=lambda d: weight[d])
    share = weight[dtype] / sum(weight.values())
    return dtype, f"compile records: {share * 100:.0f}% of floating-point argument bytes are {dtype}"


def peak_flops(frames: Any, host: str | None, dtype: str | None) -> tuple[float | None, str]:
    """Summed peak FLOP/s of the analysed devices for ``dtype`` (bf16 when unknown), and its source."""
    dev = frames.devices
    if host is not None and len(dev):
        dev = dev.loc[dev[F.HOST] == host]
    if dev.empty:
        return None, "unknown: the trace has no device planes"
    total, sources = 0.0, set()
    for row in dev.to_dict("records"):
        peak, source = _device_peak(row, dtype)
        if peak is None:
            return None, source
        total += peak
        sources.add(source)
    return total, f"{len(dev)} device(s) x " + "; ".join(sorted(sources))


def _device_peak(row: Mapping[str, Any], dtype: str | None) -> tuple[float | None, str]:
    platform = str(row.get("platform") or "")
    name = str(row.get("device_name") or "")
    wanted = dtype or "bfloat16"
    if platform == "gpu":
        if wanted.startswith("float8"):
            scale = 2.0
        elif wanted in _DTYPE_SCALE:
            scale = _DTYPE_SCALE[wanted]
        else:
            return None, f"unknown: no {wanted} peak for {name or 'this GPU'}"
        per_sm = gpu_spec(name)[0]
        cores, clock = _positive(row.get("core_count")), _positive(row.get("clock_hz"))
        how = {1.0: "bf16", 0.5: "TF32 (half of bf16) for f32", 2.0: "8-bit float (twice bf16)"}[scale]
        if per_sm and cores and clock:
            source = (
                f"{name}: {cores:.0f} SMs x {clock / 1e9:.2f} GHz x {per_sm} dense FLOPs/SM/clock "
                f"(trace device stats), {how}"
            )
            return cores * clock * per_sm * scale, source
        datasheet = _positive(row.get("peak_flops"))
        if datasheet:
            return datasheet * scale, f"{name}: datasheet bf16 peak {datasheet / 1e12:.0f} TFLOP/s, {how}"
        return None, f"unknown: the trace gives no peak for {name or 'this GPU'}"
    if platform == "tpu":
        peak = _positive(row.get("peak_flops"))
        if peak:
            return peak, f"{name or 'TPU'}: peak_teraflops_per_second device stat (bf16)"
        return None, f"unknown: the trace gives no peak for {name or 'this TPU'}"
    peak = _positive(row.get("peak_flops"))
    if peak:
        return peak, f"{name or platform}: peak FLOP/s of the trace's device row"
    return None, f"unknown: no peak FLOP/s for {platform or 'this'} devices"


def positive(value: Any) -> float | None:
    """``value`` as a finite positive float (a trace or XProf figure), else ``None``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


_positive = positive

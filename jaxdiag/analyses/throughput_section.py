"""The report's ``throughput`` section as a type: what renderers and checks read, and what its JSON is made from.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described

#: What a program may count per step.
COUNT_UNITS = ("tokens", "samples")


@dataclasses.dataclass(frozen=True)
class StepThroughput:
    """One step's period and rates (``None`` where unknown)."""

    step: int
    wall_ms: float = 0.0
    period_ms: float = described("from the step's start to the next one's", 0.0)
    compiled: bool = False
    steps_per_s: float | None = None
    tokens: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None


@dataclasses.dataclass(frozen=True)
class HostAhead:
    max: float
    median: float


@dataclasses.dataclass(frozen=True)
class MfuBasisFacts:
    """Where MFU's numbers come from."""

    flops_per_step: float | None = None
    flops_source: str = described(
        "`given ...`, `compile records: cost_analysis() FLOPs of f x its executions per step ...`, or `unknown: ...`",
        "",
    )
    peak_flops: float | None = described("summed over the analysed devices, FLOP/s", None)
    peak_source: str = described("e.g. `132 SMs x 1.98 GHz x 4096 dense FLOPs/SM/clock (trace device stats), bf16`", "")
    dtype: str | None = described(
        "the floating dtype holding most argument bytes of the functions with FLOPs; f32 on GPU takes the TF32 "
        "peak, half of bf16",
        None,
    )
    dtype_source: str = ""
    flops_by_function: dict[str, float | None] = described(factory=dict)


_STEADY = (
    "steady state excludes steps whose compiles the device waited for, at least `min_finding_ms` and a tenth of "
    "the median step's wall time per compile; a compile that ran while the device worked through executions the "
    "host had queued ahead does not exclude its step; where the trace tells the step program's executions apart, "
    "one per step, these are device executions per second, see `steady_from`"
)


@dataclasses.dataclass(frozen=True)
class Throughput:
    """The report's ``throughput`` section: rates over all analysed steps and over steady ones."""

    steady_from: str = described("`device executions of jit_f` or `step windows`", "step windows", since="1.4")
    host_ahead: HostAhead | None = described(
        "steps the host had queued beyond the device at each dispatch of the step program, or `null`",
        None,
        since="1.4",
    )
    mfu_basis: MfuBasisFacts = described("where MFU's numbers come from", MfuBasisFacts(), since="1.3")
    steps_per_s: float | None = None
    tokens_per_s: float | None = None
    steady_steps_per_s: float | None = described(_STEADY, None)
    steady_tokens_per_s: float | None = described("as `steady_steps_per_s`", None)
    mfu: float | None = described("when flops per step and device peak are known", None)
    count_unit: str = described(
        "`tokens` or `samples`: what the program counted, which `tokens_per_s` is per second of", "tokens"
    )
    per_step: tuple[StepThroughput, ...] = ()

    @property
    def unit(self) -> str:
        """What the run counted per step, ``tokens`` or ``samples`` (anything else read as tokens)."""
        return self.count_unit if self.count_unit in COUNT_UNITS else "tokens"

    def device_steady_rate(self) -> float | None:
        """The steady steps/s where it was measured from device executions (``steady_from``), else ``None``:
        the pace the device kept, whatever the host's step windows say."""
        if not self.steady_from.startswith("device executions"):
            return None
        rate = self.steady_steps_per_s
        return rate if rate is not None and rate > 0 else None

"""The report's ``top_ops`` section as a type: the ops with the most device time, and the roofline they face.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis. ``OpRow``
is both the analysis's row (full precision) and the section's (``rounded``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxdiag.analyses.base import described


def round_or_none(x: float | None, digits: int) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


@dataclasses.dataclass(frozen=True, slots=True)
class OpRow:
    """One op (or fusion) of one module, over the analysed steps."""

    id: str = described("`op1`, ...")
    name: str = described("HLO op, else the kernel name")
    module: str = described()
    function: str = described("`jit_train_step` -> `train_step`")
    kind: str = described("`compute`, `memcpy`, `collective`")
    count: int = described()
    total_ms: float = described("per device, over the analysed steps")
    per_step_ms: float | None = described("device work booked to the steps, as `device_busy_ms` books it, over `steps`")
    share: float = described("of all device op time")
    source: str = described(
        "the op's `file:line` from XProf with `--deep`, else the jitted function's from the compile log, else `\"\"`",
        "",
    )
    programs: tuple[int, ...] = described("XLA program ids", ())
    category: str = ""
    flops: float | None = described(
        "totals over every run; `null` without `--deep` or where XProf has none, e.g. XLA:CPU", None
    )
    bytes_accessed: float | None = described("as `flops`", None)
    intensity: float | None = described("FLOP per byte", None)
    bound: str = described(
        "`compute` when the intensity reaches the ridge point for the op's `dtype`, `memory` below it, else `unknown`",
        "unknown",
    )
    xprof_bound_by: str = described("XProf's own verdict, e.g. `HBM`", "")
    facts_from: str = "trace"
    kernel: dict[str, Any] | None = described(
        "with `--deep` on GPUs: the costliest kernel's `name`, `registers_per_thread`, `occupancy_pct`, "
        "`uses_tensor_core`, `tensor_core_eligible`",
        None,
    )
    achieved_flops_per_s: float | None = None
    dtype: str = described("the op's output type", "")

    def rounded(self) -> OpRow:
        """As the report holds it: ms to 4 decimals, shares to 5, FLOPs and bytes to 1, intensity to 3."""
        return dataclasses.replace(
            self,
            total_ms=round(self.total_ms, 4),
            per_step_ms=round_or_none(self.per_step_ms, 4),
            share=round(self.share, 5),
            flops=round_or_none(self.flops, 1),
            bytes_accessed=round_or_none(self.bytes_accessed, 1),
            intensity=round_or_none(self.intensity, 3),
            achieved_flops_per_s=round_or_none(self.achieved_flops_per_s, 1),
        )


@dataclasses.dataclass(frozen=True)
class TopOpsSection:
    """The report's ``top_ops`` section (1.3).

    The ops and fusions with the most device time.
    """

    rows: tuple[OpRow, ...] = described("at most 25, by time", ())
    total_ms: float = 0.0
    steps: int = 0
    peak_flops: float | None = described("one device, bf16", None)
    memory_bandwidth_bps: float | None = None
    ridge_point: float | None = None
    roofline_source: str = ""
    peak_flops_by_dtype: dict[str, float | None] = described(factory=dict)
    deep: bool = False
    between_rows: tuple[OpRow, ...] = described(
        "at most 10, ids `between1`, ...: rows like `rows`' for the ops of work between steps, programs other than "
        "the step's run in fewer than half of the steps, with `per_step_ms` `null`; they are not in `rows`",
        (),
    )

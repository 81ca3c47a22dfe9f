"""The report's ``steps`` section as a type: one row per step, where its wall time went.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class StepFigures:
    """One object per step."""

    step: int
    wall_ms: float = described("step span on the host", 0.0)
    device_busy_ms: float = described("union of device work in the step", 0.0)
    device_idle_ms: float = 0.0
    host_wait_ms: float = described(
        "device idle with no execution in flight or queued, while the host was busy elsewhere, compiling "
        "included: per step, the total of `host_waits.by_step`",
        0.0,
    )
    in_execution_gap_ms: float | None = described(
        "device idle while an execution was in flight: XLA:CPU's thread pool between thunks, a TPU module's own "
        "gaps; never a host wait; 0 on GPU, where a gap between kernels may be the host launching late (`null`: a "
        "report before 1.4)",
        None,
        since="1.4",
    )
    compile_ms: float = described("host compile spans in the step, whether or not the device waited for them", 0.0)
    compile_wait_ms: float | None = described(
        "the part of `host_wait_ms` spent compiling: what the step's compiles cost the device; 0 for a compile "
        "that ran while the device worked through executions the host had queued ahead (`null`: a report before "
        "1.4, whose `host_wait_ms` left compiles out)",
        None,
        since="1.4",
    )
    collective_ms: float = 0.0
    exposed_collective_ms: float = described("collective time not overlapped by compute", 0.0)
    tokens: float | None = described("tokens or samples in the step, or `null`", None)

    @property
    def compile_cost_ms(self) -> float:
        """What the step's compiles cost it: the compile wait, or a report before 1.4's compile time."""
        return self.compile_ms if self.compile_wait_ms is None else self.compile_wait_ms

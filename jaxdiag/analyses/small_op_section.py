"""The report's ``small_ops`` section as a type: what renderers and checks read, and what its JSON is made from.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class SmallOpsStep:
    """Small ops in one step: count, their own time, their launch gaps."""

    step: int
    count: int = 0
    time_ms: float = described("the small ops' own time (union)", 0.0)
    launch_gap_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class OpTotal:
    """Ops of one name in one module: how many ran, and their total time (small ops' ``top``, ``device_time``'s)."""

    name: str
    module: str = ""
    count: int = 0
    total_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class SmallOps:
    """The report's ``small_ops`` section: device ops shorter than the threshold, over the analysed steps."""

    threshold_us: float | None = described("ops shorter than this count as small", None)
    count: int = described("device ops shorter than the threshold", 0)
    device_time_share: float | None = described("their share of device busy time", None)
    per_step: tuple[SmallOpsStep, ...] = ()
    launch_gap_ms: float = described("idle gaps between consecutive small ops on one stream", 0.0)
    top: tuple[OpTotal, ...] = described("the worst offenders by total time", ())

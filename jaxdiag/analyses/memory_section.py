"""The report's ``memory`` section as a type: planned footprints per compile and measured peaks, against capacity.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class CompileFootprint:
    """One compile's planned footprint per device (bytes; ``None`` where unrecorded)."""

    function: str
    compile_index: int = 0
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    source: str = ""
    total_bytes: int = described("their sum: an upper bound, donated arguments count twice", 0)
    share_of_capacity: float | None = None


@dataclasses.dataclass(frozen=True)
class MemoryPeak:
    """An allocator's measured peak over the window (XProf ``memory_profile``)."""

    host: str
    allocator: str = ""
    peak_bytes: int = described("heap and stack in use at the window's peak", 0)
    capacity_bytes: int | None = None
    peak_time_ps: int | None = None
    lifetime_peak_bytes: int | None = described("the allocator's own peak since the process started", None)
    share_of_capacity: float | None = None


@dataclasses.dataclass(frozen=True)
class MemorySection:
    """The report's ``memory`` section (1.3).

    Findings: `memory_temporaries` (temporaries over half of a footprint that is at least a tenth of
    the device), `memory_near_capacity` (a footprint or measured peak at 85% of capacity or more).
    """

    capacity_bytes: int | None = described(
        "smallest device memory in the trace, `null` when unknown, e.g. XLA:CPU", None
    )
    capacity_source: str = ""
    compiles: tuple[CompileFootprint, ...] = described(
        "per compile record with memory analysis, recorded by default inside a `jaxdiag.profile` window", ()
    )
    peaks: tuple[MemoryPeak, ...] = described(
        "with `--deep`, from XProf's `memory_profile`, per host and allocator", ()
    )

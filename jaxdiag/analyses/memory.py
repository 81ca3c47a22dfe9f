"""Memory: what each compiled function holds on its device, against the device's capacity.

Per compile record with memory figures (``compiled.memory_analysis()``, recorded
by default inside a capture window): argument, output, temp and generated-code
bytes. Their sum is what one execution needs at once on each device (arguments
donated to outputs are counted twice, so it is an upper bound; the record does
not say which were donated). Capacity is the device plane's ``memory_bytes``
stat; ``None`` when the trace has none (XLA:CPU).

From the trace, XProf's ``memory_profile`` gives each allocator's peak bytes in
use over the window and its capacity (``join_memory_profile``, ``--deep``):
the measured peak, where the compile figures are the compiler's plan.

Findings: a function whose temporaries are most of its footprint (and a
noticeable share of the device), and a footprint or measured peak near capacity,
each with the changes that fit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from jaxdiag.analyses.base import AnalysisInputs, Finding, Severity
from jaxdiag.analyses.memory_section import CompileFootprint, MemoryPeak, MemorySection
from jaxdiag.trace import frames as F

_FIELDS = ("argument_bytes", "output_bytes", "temp_bytes", "generated_code_bytes")
#: A footprint (or measured peak) above this share of capacity is "near capacity".
NEAR_CAPACITY = 0.85
#: Temporaries above this share of a footprint "dominate" it ...
TEMP_DOMINATES = 0.5
#: ... and matter when the footprint is at least this share of capacity (or, capacity unknown, this many bytes).
TEMP_MIN_SHARE = 0.10
TEMP_MIN_BYTES = 1 << 30

TEMP_ADVICE = (
    "Rematerialise activations instead of keeping them: wrap the costliest layers in "
    "`jax.checkpoint` (with `jax.checkpoint_policies.dots_with_no_batch_dims_saveable` to keep "
    "matmuls), or use smaller micro-batches with gradient accumulation; temporaries scale with the batch."
)
CAPACITY_ADVICE = (
    "Donate the arguments the function replaces (`jax.jit(..., donate_argnums=...)`, e.g. params "
    "and optimizer state) so outputs reuse their buffers; rematerialise activations "
    "(`jax.checkpoint`); use smaller micro-batches; shard parameters and optimizer state over more "
    "devices; or offload what waits between uses to host memory (`memory_kind='pinned_host'`)."
)


@dataclasses.dataclass(frozen=True, slots=True)
class CompileMemory:
    """One compile's planned footprint per device (bytes); ``None`` where unrecorded."""

    function: str
    compile_index: int
    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None
    generated_code_bytes: int | None
    source: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(getattr(self, f) or 0 for f in _FIELDS)

    def footprint(self, capacity: float | None) -> CompileFootprint:
        """This compile's row of the report's ``memory.compiles``."""
        share = None if not capacity else round(self.total_bytes / capacity, 5)
        return CompileFootprint(
            self.function,
            self.compile_index,
            self.argument_bytes,
            self.output_bytes,
            self.temp_bytes,
            self.generated_code_bytes,
            self.source,
            self.total_bytes,
            share,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class DevicePeak:
    """An allocator's measured peak over the window (XProf ``memory_profile``).

    ``peak_bytes`` is heap plus stack in use at the window's peak;
    ``lifetime_peak_bytes`` the allocator's own peak since the process started
    (which may lie before the window).
    """

    host: str
    allocator: str
    peak_bytes: int
    capacity_bytes: int | None
    peak_time_ps: int | None = None
    lifetime_peak_bytes: int | None = None

    def peak(self) -> MemoryPeak:
        """This allocator's row of the report's ``memory.peaks``."""
        share = None if not self.capacity_bytes else round(self.peak_bytes / self.capacity_bytes, 5)
        return MemoryPeak(
            self.host,
            self.allocator,
            self.peak_bytes,
            self.capacity_bytes,
            self.peak_time_ps,
            self.lifetime_peak_bytes,
            share,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryResult:
    """Per-compile footprints, measured peaks where known, and the device capacity they face."""

    compiles: tuple[CompileMemory, ...]
    capacity_bytes: float | None
    capacity_source: str
    peaks: tuple[DevicePeak, ...] = ()
    findings: tuple[Finding, ...] = ()

    def section(self) -> MemorySection:
        """The report's ``memory`` section."""
        return MemorySection(
            None if self.capacity_bytes is None else int(self.capacity_bytes),
            self.capacity_source,
            tuple(c.footprint(self.capacity_bytes) for c in self.compiles),
            tuple(p.peak() for p in self.peaks),
        )


def analyze(inputs: AnalysisInputs) -> MemoryResult:
    """Footprints of the compile records against the capacity of the trace's devices."""
    capacity, source = device_capacity(inputs.frames, inputs.host)
    compiles = tuple(_compile_memory(inputs.compile_log))
    result = MemoryResult(compiles, capacity, source)
    return dataclasses.replace(result, findings=findings(result))


def device_capacity(frames: Any, host: str | None = None) -> tuple[float | None, str]:
    """The smallest device memory of the analysed devices (bytes) and where it came from."""
    dev = frames.devices
    if host is not None and len(dev):
        dev = dev.loc[dev[F.HOST] == host]
    sizes = []
    for row in dev.to_dict("records"):
        try:
            v = float(row.get("memory_bytes"))
        except (TypeError, ValueError):
            continue
        if math.isfinite(v) and v > 0:
            sizes.append((v, str(row.get("device_name") or row.get("plane") or "device")))
    if not sizes:
        return None, "unknown: the trace's device planes carry no memory size"
    v, name = min(sizes)
    return v, f"trace device stats of {name}"


def _compile_memory(records: Iterable[Mapping[str, Any]]) -> Iterable[CompileMemory]:
    for r in records:
        memory = r.get("memory")
        if not isinstance(memory, Mapping):
            continue
        values = {f: _int(memory.get(f)) for f in _FIELDS}
        if all(v is None for v in values.values()):
            continue
        yield CompileMemory(
            function=str(r.get("function") or "?"),
            compile_index=_int(r.get("compile_index")) or 0,
            source=str(r.get("source") or ""),
            **values,
        )


def _int(value: Any) -> int | None:
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return v if v >= 0 else None


def findings(result: MemoryResult) -> tuple[Finding, ...]:
    """Temporaries that dominate a footprint, and footprints or peaks near capacity."""
    out: list[Finding] = []
    cap = result.capacity_bytes
    worst: dict[str, CompileMemory] = {}
    for c in result.compiles:
        if c.function not in worst or c.total_bytes > worst[c.function].total_bytes:
            worst[c.function] = c
    for c in sorted(worst.values(), key=lambda c: -c.total_bytes):
        total, temp = c.total_bytes, c.temp_bytes or 0
        share = total / cap if cap else None
        where = f" ({c.source})" if c.source else ""
        if share is not None and share >= NEAR_CAPACITY:
            out.append(
                Finding(
                    kind="memory_near_capacity",
                    severity=Severity.CRITICAL if share >= 0.95 else Severity.WARNING,
                    time_lost_ms=0.0,
                    message=(
                        f"{c.function}{where} needs {_gib(total)} per device (arguments {_gib(c.argument_bytes)}, "
                        f"outputs {_gib(c.output_bytes)}, temporaries {_gib(c.temp_bytes)}), "
                        f"{share * 100:.0f}% of the device's {_gib(cap)}."
                    ),
                    suggestion=CAPACITY_ADVICE,
                    evidence={
                        "function": c.function,
                        "compile_index": c.compile_index,
                        "total_bytes": total,
                        "capacity_bytes": int(cap) if cap else None,
                        "share": round(share, 4),
                    },
                )
            )
        elif (
            total > 0
            and temp / total >= TEMP_DOMINATES
            and ((share is not None and share >= TEMP_MIN_SHARE) or (share is None and total >= TEMP_MIN_BYTES))
        ):
            of_device = f", {share * 100:.0f}% of the device's {_gib(cap)}" if share is not None else ""
            out.append(
                Finding(
                    kind="memory_temporaries",
                    severity=Severity.WARNING,
                    time_lost_ms=0.0,
                    message=(
                        f"Temporaries are {temp / total * 100:.0f}% of what {c.function}{where} holds per device "
                        f"({_gib(temp)} of {_gib(total)}{of_device})."
                    ),
                    suggestion=TEMP_ADVICE,
                    evidence={
                        "function": c.function,
                        "compile_index": c.compile_index,
                        "temp_bytes": temp,
                        "total_bytes": total,
                    },
                )
            )
    for p in result.peaks:
        if p.capacity_bytes and p.peak_bytes / p.capacity_bytes >= NEAR_CAPACITY:
            out.append(
                Finding(
                    kind="memory_near_capacity",
                    severity=Severity.WARNING,
                    time_lost_ms=0.0,
                    message=(
                        f"{p.host} {p.allocator} peaked at {_gib(p.peak_bytes)} in use, "
                        f"{p.peak_bytes / p.capacity_bytes * 100:.0f}% of its {_gib(p.capacity_bytes)}."
                    ),
                    suggestion=CAPACITY_ADVICE,
                    evidence={
                        "host": p.host,
                        "allocator": p.allocator,
                        "peak_bytes": p.peak_bytes,
                        "capacity_bytes": p.capacity_bytes,
                    },
                )
            )
    return tuple(out)


def _gib(n: float | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


# --- XProf's memory_profile ----------------------------------------------------------


def peaks_from_memory_profile(host: str, profile: Any) -> list[DevicePeak]:
    """Each allocator's peak and capacity from one host's ``memory_profile`` JSON; ``[]`` when absent.

    Host-side allocators (``xla_gpu_host_bfc``, pinned host memory) are kept: a
    peak there is real too, and their names say what they are.
    """
    per = profile.get("memoryProfilePerAllocator") if isinstance(profile, Mapping) else None
    if not isinstance(per, Mapping):
        return []
    out = []
    for allocator, data in per.items():
        summary = data.get("profileSummary") if isinstance(data, Mapping) else None
        if not isinstance(summary, Mapping):
            continue
        stats = summary.get("peakStats")
        stats = stats if isinstance(stats, Mapping) else {}
        heap, stack = _int(stats.get("heapAllocatedBytes")), _int(stats.get("stackReservedBytes"))
        lifetime = _int(summary.get("peakBytesUsageLifetime"))
        if heap is None and lifetime is None:
            continue
        peak = (heap or 0) + (stack or 0) if heap is not None else lifetime
        out.append(
            DevicePeak(
                host,
                str(allocator),
                int(peak or 0),
                _int(summary.get("memoryCapacity")) or None,
                _int(summary.get("peakStatsTimePs")),
                lifetime,
            )
        )
    return out


def join_memory_profile(result: MemoryResult, peaks: Iterable[DevicePeak]) -> MemoryResult:
    """``result`` with measured peaks, and its findings made again."""
    joined = dataclasses.replace(result, peaks=tuple(peaks))
    return dataclasses.replace(joined, findings=findings(joined))

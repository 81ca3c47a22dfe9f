"""Build synthetic XSpaces (what ``jax.profiler`` writes as ``<host>.xplane.pb``) for tests.

The planes, lines and stats copy the names seen in real H100 and TPU captures, so
the loader reads these exactly as it reads real files. Times are nanoseconds on
one host clock. Typical use::

    data = gpu_xspace(devices=2, kernels=[Kernel(0, "fusion_1", 1_000, 5_000)],
                      nccl=[Kernel(1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2_000, 8_000,
                                   op="all-reduce-start.1")],
                      steps=[(0, 0, 20_000)])
    run_dir = write_run(tmp_path, {"host0": data})
    frames = jaxdiag.load(tmp_path)

``XSpaceBuilder`` assembles any other shape plane by plane and line by line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from jaxlib import _profile_data

#: The compute stream name of the real H100 captures (one mixed stream per GPU).
GPU_COMPUTE_STREAM = "Stream #14(MemcpyOther,Compute,MemcpyD2D,Memset,MemcpyH2D)"
#: A stream that only runs NCCL kernels (XLA puts async collectives on their own stream).
GPU_COLLECTIVE_STREAM = "Stream #22(Compute)"
GPU_D2H_STREAM = "Stream #16(MemcpyD2H)"
H100_STATS: Mapping[str, Any] = {
    "device_vendor": "Nvidia",
    "gpu_device_name": "NVIDIA H100 80GB HBM3",
    "clock_rate": 1980000,
    "core_count": 132,
    "memory_bandwidth": 3352320000000,
    "memory_size": 85017493504,
    "compute_cap_major": 9,
    "compute_cap_minor": 0,
}
TPU_STATS: Mapping[str, Any] = {
    "device_type_string": "TPU v5 lite",
    "peak_teraflops_per_second": 197.0,
    "peak_hbm_bw_gigabytes_per_second": 819.0,
}
DEFAULT_RUN = "2026_01_01_00_00_00"


@dataclasses.dataclass(frozen=True)
class Ev:
    """One event: a name, a start and a duration (ns), and its stats."""

    name: str
    start_ns: int
    dur_ns: int
    stats: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One GPU kernel of an XLA module, with the stats XLA attaches to it.

    ``op`` defaults to the kernel name with its last ``_N`` turned into ``.N``,
    as XLA names them (kernel ``fusion_3`` runs HLO op ``fusion.3``).
    """

    device: int
    name: str
    start_ns: int
    dur_ns: int
    module: str = "jit_train_step"
    op: str | None = None
    program_id: int = 1
    framework: str = ""

    def event(self) -> Ev:
        head, _, tail = self.name.rpartition("_")
        op = self.op if self.op is not None else (f"{head}.{tail}" if tail.isdigit() and head else self.name)
        stats: dict[str, Any] = {
            "correlation_id": 1,
            "tf_op": "XlaModule:",
            "hlo_op": op,
            "hlo_module": self.module,
            "program_id": self.program_id,
        }
        if self.framework:
            stats["name"] = self.framework
        return Ev(self.name, self.start_ns, self.dur_ns, stats)


class XSpaceBuilder:
    """Assemble an XSpace plane by plane; ``serialize()`` gives the ``.xplane.pb`` bytes."""

    def __init__(self) -> None:
        self._planes: list[tuple[str, dict[str, Any], list[tuple[str, list[Ev]]]]] = []

    def plane(self, name: str, stats: Mapping[str, Any] | None = None) -> "XSpaceBuilder":
        """Start a plane (``"/device:GPU:0"``, ``"/host:CPU"``, ``"/host:metadata"``, ...)."""
        self._planes.append((name, dict(stats or {}), []))
        return self

    def line(self, name: str, events: Iterable[Ev | tuple]) -> "XSpaceBuilder":
        """Add a line to the last plane; events are ``Ev``s or ``(name, start_ns, dur_ns[, stats])``."""
        evs = [e if isinstance(e, Ev) else Ev(*e) for e in events]
        self._planes[-1][2].append((name, evs))
        return self

    def text(self) -> str:
        """The XSpace as a text proto."""
        out = []
        for plane_id, (name, stats, lines) in enumerate(self._planes, 1):
            names: dict[str, int] = {}
            stat_ids: dict[str, int] = {}

            def stat(key: str, value: Any) -> str:
                sid = stat_ids.setdefault(key, len(stat_ids) + 1)
                return f"stats {{ metadata_id: {sid} {_value(value)} }}"

            body = [f"id: {plane_id}", f"name: {_quote(name)}"]
            body += [stat(k, v) for k, v in stats.items()]
            for line_id, (line_name, events) in enumerate(lines, 1):
                base = min((e.start_ns for e in events), default=0)
                evs = []
                for e in events:
                    mid = names.setdefault(e.name, len(names) + 1)
                    ev_stats = " ".join(stat(k, v) for k, v in e.stats.items())
                    evs.append(
                        f"events {{ metadata_id: {mid} offset_ps: {(e.start_ns - base) * 1000} "
                        f"duration_ps: {e.dur_ns * 1000} {ev_stats} }}"
                    )
                body.append(
                    f"lines {{ id: {line_id} display_id: {line_id} name: {_quote(line_name)} "
                    f"timestamp_ns: {base} {' '.join(evs)} }}"
                )
            body += [f"event_metadata {{ key: {i} value {{ id: {i} name: {_quote(n)} }} }}" for n, i in names.items()]
            body += [f"stat_metadata {{ key: {i} value {{ id: {i} name: {_quote(n)} }} }}" for n, i in stat_ids.items()]
            out.append("planes { " + " ".join(body) + " }")
        return "\n".join(out)

    def serialize(self) -> bytes:
        """The serialized XSpace, checked to hold every plane and event (text-proto errors are silent)."""
        data = _profile_data.ProfileData.text_proto_to_serialized_xspace(self.text())
        planes = list(_profile_data.ProfileData.from_serialized_xspace(data).planes)
        want = sum(len(evs) for _, _, lines in self._planes for _, evs in lines)
        got = sum(1 for p in planes for line in p.lines for _ in line.events)
        if len(planes) != len(self._planes) or got != want:
            raise ValueError(f"text proto did not round-trip: {len(planes)} planes, {got}/{want} events")
        return data


def host_plane(
    builder: XSpaceBuilder,
    *,
    steps: Sequence[tuple[int, int, int]] = (),
    host_annotations: Sequence[tuple[str, int, int]] = (),
    python_frames: int = 0,
    step_name: str = "train",
    runtime: Sequence[tuple[str, int, int]] = (),
) -> XSpaceBuilder:
    """Add ``/host:metadata`` and a ``/host:CPU`` plane with a ``python3`` main-thread line.

    Args:
      steps: ``(step_num, start_ns, end_ns)`` StepTraceAnnotation events named ``step_name``.
      host_annotations: ``(name, start_ns, end_ns)`` TraceAnnotation spans.
      python_frames: this many ``$file.py:N fn`` Python-tracer frames, spread over the steps.
      runtime: ``(name, start_ns, end_ns)`` events on a ``tf_pjrt_compile_thread_pool`` line.
    """
    builder.plane("/host:metadata", {"jax_version": "0.11.2", "jaxlib_version": "0.11.2"})
    builder.plane("/host:CPU", {"process_id": 1})
    main = [Ev(step_name, a, b - a, {"_r": 1, "step_num": n}) for n, a, b in steps]
    main += [Ev(name, a, b - a) for name, a, b in host_annotations]
    end = max([b for _, _, b in steps] + [b for _, _, b in host_annotations] + [1000])
    main += [Ev(f"$train.py:{i % 50} fn", i * end // max(python_frames, 1), 100) for i in range(python_frames)]
    if main:
        builder.line("python3", main)
    if runtime:
        builder.line("tf_pjrt_compile_thread_pool/123", [Ev(n, a, b - a, {"_src": "x.cc"}) for n, a, b in runtime])
    return builder


def gpu_xspace(
    devices: int = 1,
    kernels: Sequence[Kernel] = (),
    nccl: Sequence[Kernel] = (),
    steps: Sequence[tuple[int, int, int]] = (),
    host_annotations: Sequence[tuple[str, int, int]] = (),
    memcpy: Sequence[tuple[int, int, int]] = (),
    python_frames: int = 0,
    device_stats: Mapping[str, Any] = H100_STATS,
) -> bytes:
    """A GPU host: ``devices`` GPU planes plus the host planes, as ``.xplane.pb`` bytes.

    Args:
      devices: number of ``/device:GPU:N`` planes.
      kernels: compute kernels, each on its device's mixed compute stream.
      nccl: collective kernels, each on its device's collective stream.
      steps: ``(step_num, start_ns, end_ns)`` for ``StepTraceAnnotation("train")``.
      host_annotations: ``(name, start_ns, end_ns)`` user annotations on the main thread.
      memcpy: ``(device, start_ns, dur_ns)`` device-to-host copies (``MemcpyD2H``).
      python_frames: Python-tracer frames to mix into the main thread.
      device_stats: the plane stats of every GPU.
    """
    builder = XSpaceBuilder()
    for d in range(devices):
        builder.plane(f"/device:GPU:{d}", device_stats)
        mine = [k.event() for k in kernels if k.device == d]
        if mine:
            builder.line(GPU_COMPUTE_STREAM, mine)
        collectives = [k.event() for k in nccl if k.device == d]
        if collectives:
            builder.line(GPU_COLLECTIVE_STREAM, collectives)
        copies = [
            Ev("MemcpyD2H", a, n, {"memcpy_details": "kind_src:device kind_dst:pinned size:4"})
            for dev, a, n in memcpy
            if dev == d
        ]
        if copies:
            builder.line(GPU_D2H_STREAM, copies)
    host_plane(builder, steps=steps, host_annotations=host_annotations, python_frames=python_frames)
    return builder.serialize()


def tpu_xspace(
    devices: int = 1,
    ops: Sequence[tuple[int, str, int, int]] = (),
    modules: Sequence[tuple[int, str, int, int, int]] = (),
    steps: Sequence[tuple[int, int, int, int]] = (),
    host_steps: Sequence[tuple[int, int, int]] = (),
) -> bytes:
    """A TPU host shaped like xprof's TPU planes, as ``.xplane.pb`` bytes.

    Args:
      ops: ``(device, hlo_text, start_ns, dur_ns)`` on "XLA Ops"; the name is the
        whole HLO instruction text (``"%fusion.3 = bf16[8]{0} fusion(...)"``) as on TPU.
      modules: ``(device, module, program_id, start_ns, dur_ns)`` on "XLA Modules",
        named ``module(program_id)``.
      steps: ``(device, step, start_ns, end_ns)`` on the device "Steps" line.
      host_steps: ``(step_num, start_ns, end_ns)`` host StepTraceAnnotations.
    """
    builder = XSpaceBuilder()
    for d in range(devices):
        builder.plane(f"/device:TPU:{d}", TPU_STATS)
        lines = {
            "Steps": [Ev(str(s), a, b - a, {"step_num": s}) for dev, s, a, b in steps if dev == d],
            "XLA Modules": [Ev(f"{m}({p})", a, n, {"run_id": 7}) for dev, m, p, a, n in modules if dev == d],
            "XLA Ops": [Ev(text, a, n, {"run_id": 7}) for dev, text, a, n in ops if dev == d],
        }
        for name, events in lines.items():
            if events:
                builder.line(name, events)
    host_plane(builder, steps=host_steps)
    return builder.serialize()


def write_run(logdir: Path, files: Mapping[str, bytes], run: str = DEFAULT_RUN) -> Path:
    """Write ``{host: bytes}`` as ``logdir/plugins/profile/<run>/<host>.xplane.pb``; returns the run folder."""
    run_dir = Path(logdir) / "plugins" / "profile" / run
    run_dir.mkdir(parents=True, exist_ok=True)
    for host, data in files.items():
        (run_dir / f"{host}.xplane.pb").write_bytes(data)
    return run_dir


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return f"int64_value: {int(value)}"
    if isinstance(value, int):  # TPU writes program ids and fingerprints as unsigned 64-bit
        return f"uint64_value: {value}" if value >= 1 << 63 else f"int64_value: {value}"
    if isinstance(value, float):
        return f"double_value: {value!r}"
    return f"str_value: {_quote(str(value))}"

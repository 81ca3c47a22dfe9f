"""The sidecar: facts only the program knows, written into the trace's run folder.

A trace knows what the devices did; it does not know how many tokens a step
processed, why a function compiled, or which XLA flags shaped the run. The
capture writes those into ``jaxdiag-<host>-p<process>.json`` beside the host's
``.xplane.pb`` (one file per process, so multi-process runs never race), and
``jaxdiag report`` merges every sidecar of the run. Reading needs no jax.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path
from typing import Any, Iterable, Mapping

from jaxdiag.errors import CompileLogError, JaxdiagError

SCHEMA = "jaxdiag.sidecar/1"
SIDECAR_GLOB = "jaxdiag-*.json"
#: Environment variables that change how XLA compiles and runs, recorded verbatim.
ENV_PREFIXES = ("XLA_", "LIBTPU", "TPU_", "NCCL_", "JAX_", "CUDA_VISIBLE_DEVICES", "ROCR_", "HIP_VISIBLE_DEVICES")


#: Set on a sidecar's compile record made before the capture window opened: a program
#: that may run in the window, known by its record; not a compile in the window.
BEFORE_CAPTURE = "before_capture"


def record_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two compile records (as dicts) the same compile, wherever each was read.

    A sidecar and the compile log beside the trace may both hold a compile; the
    report keeps one of each.
    """
    return (
        record.get("qualname"),
        record.get("source"),
        record.get("jit_options"),
        record.get("transform"),
        record.get("compile_index"),
        record.get("time_unix"),
        record.get("pid"),
    )


class SidecarError(JaxdiagError):
    """A sidecar file cannot be read."""


@dataclasses.dataclass(frozen=True)
class StepFacts:
    """Per-step counts the program reported (``None`` when not given)."""

    tokens: float | None = None
    samples: float | None = None
    flops: float | None = None


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """Every sidecar of a run, merged.

    Attributes:
      steps: per step, tokens/samples/flops summed over processes (each process
        reports its own share of a data-parallel batch).
      compile_log: compile records (dicts) of every process, in time order.
      processes: one dict per sidecar: host, pid, process_index, versions, env,
        devices, mesh, tags.
      files: the sidecar files read.
    """

    steps: Mapping[int, StepFacts]
    compile_log: tuple[dict[str, Any], ...]
    processes: tuple[dict[str, Any], ...]
    files: tuple[str, ...]

    def tokens_per_step(self) -> dict[int, float] | None:
        """Tokens by step, else samples by step, else ``None``."""
        for field in ("tokens", "samples"):
            values = {s: getattr(f, field) for s, f in self.steps.items() if getattr(f, field) is not None}
            if values:
                return values
        return None

    def count_unit(self) -> str | None:
        """What ``tokens_per_step`` counts: ``"tokens"``, ``"samples"``, or ``None`` when neither was recorded."""
        for field in ("tokens", "samples"):
            if any(getattr(f, field) is not None for f in self.steps.values()):
                return field
        return None

    def capture_reasons(self) -> list[str]:
        """Why the capture was taken, when a program said so (``jaxdiag.monitor``'s windows), one per reason."""
        reasons = [
            (p.get("tags") or {}).get("captured_because") for p in self.processes if isinstance(p.get("tags"), dict)
        ]
        return list(dict.fromkeys(str(r) for r in reasons if r))

    def flops_per_step(self) -> float | None:
        """The median reported flops per step, or ``None``."""
        values = sorted(f.flops for f in self.steps.values() if f.flops is not None)
        return values[len(values) // 2] if values else None


def sidecar_name(host: str, process_index: int) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)
    return f"jaxdiag-{safe}-p{process_index}.json"


def write_sidecar(run_dir: str | Path, content: Mapping[str, Any]) -> Path:
    """Write ``content`` (plus schema) atomically into ``run_dir``; returns the path."""
    run = Path(run_dir)
    host = str(content.get("host") or socket.gethostname())
    path = run / sidecar_name(host, int(content.get("process_index") or 0))
    tmp = path.with_suffix(".json.tmp")
    data = {"schema": SCHEMA, **content}
    try:
        tmp.write_text(json.dumps(data, indent=1, default=str, allow_nan=False))
        os.replace(tmp, path)
    except (OSError, ValueError) as exc:
        raise CompileLogError(f"{path}: cannot write the capture sidecar ({exc})") from None
    return path


def read_sidecars(run_dir: str | Path) -> RunFacts | None:
    """Merge every sidecar in ``run_dir``; ``None`` when there is none.

    Raises:
      SidecarError: a sidecar exists but is not valid JSON of this schema.
    """
    files = sorted(Path(run_dir).glob(SIDECAR_GLOB))
    if not files:
        return None
    docs = [_read_one(f) for f in files]
    return merge(docs, tuple(str(f) for f in files))


def merge(docs: Iterable[Mapping[str, Any]], files: tuple[str, ...] = ()) -> RunFacts:
    """Merge sidecar documents of several processes into one ``RunFacts``."""
    from jaxdiag.recording.record_checks import record_problem

    totals: dict[int, dict[str, float | None]] = {}
    records: list[dict[str, Any]] = []
    processes: list[dict[str, Any]] = []
    for doc in docs:
        for key, facts in (doc.get("steps") or {}).items():
            step = totals.setdefault(int(key), {"tokens": None, "samples": None, "flops": None})
            for field in step:
                value = facts.get(field) if isinstance(facts, Mapping) else None
                if isinstance(value, (int, float)) and not isinstance(value, bool):  # a hand-edited value is left out
                    step[field] = (step[field] or 0.0) + float(value)
        process = doc.get("process_index")  # which process compiled it: compile divergence compares them
        records += [
            r if process is None or "process_index" in r else {**r, "process_index": process}
            for r in doc.get("compile_log") or ()
            if record_problem(r) is None
        ]  # hand-edited ones: left out
        processes.append({k: v for k, v in doc.items() if k not in ("steps", "compile_log")})
    records.sort(key=lambda r: r.get("time_unix") or 0.0)
    steps = {s: StepFacts(**v) for s, v in sorted(totals.items())}
    return RunFacts(steps=steps, compile_log=tuple(records), processes=tuple(processes), files=files)


def _read_one(path: Path) -> dict[str, Any]:
    from jaxdiag.files import read_json

    doc = read_json(path, "a jaxdiag capture sidecar (JSON)", SidecarError)
    if isinstance(doc, dict) and not (
        isinstance(doc.get("steps") or {}, dict)
        and isinstance(doc.get("compile_log") or [], list)
        and all(isinstance(v, dict) and _is_step(k) for k, v in (doc.get("steps") or {}).items())
    ):
        raise SidecarError(
            f"{path}: malformed capture sidecar ('steps' must map step numbers to objects, "
            "'compile_log' must be a list)"
        )
    if not isinstance(doc, dict) or str(doc.get("schema", "")).split("/")[0] != SCHEMA.split("/")[0]:
        raise SidecarError(
            f"{path}: not a jaxdiag capture sidecar (schema {doc.get('schema') if isinstance(doc, dict) else None!r})"
        )
    if str(doc["schema"]) != SCHEMA:
        raise SidecarError(f"{path}: sidecar schema {doc['schema']} is newer than this jaxdiag reads ({SCHEMA})")
    return doc


def _is_step(key: str) -> bool:
    try:
        int(key)
    except ValueError:
        return False
    return True


def environment() -> dict[str, str]:
    """The environment variables that shape XLA's compile and run."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}

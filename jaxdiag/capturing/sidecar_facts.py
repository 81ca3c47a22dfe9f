"""What a capture's sidecar says beyond its steps: the process, and the compiles of the window and before it.

Split from ``profile`` (the capture's start and stop, signals, the run folder) to
keep each module small. Recording the window's compiles never stops the capture:
where a recorder cannot start or stop, a warning says so and the compiles are left out.
"""

from __future__ import annotations

import os
import socket
import warnings
from typing import Any

from jaxdiag.capturing import sidecar


def describe_process(mesh: Any | None) -> dict[str, Any]:
    """The host, JAX and jaxlib versions, backend, devices, ``mesh`` and environment, for the sidecar."""
    import jax
    import jaxlib

    devices = [
        {
            "id": d.id,
            "platform": d.platform,
            "kind": getattr(d, "device_kind", ""),
            "process_index": getattr(d, "process_index", 0),
        }
        for d in jax.devices()
    ]
    backend = getattr(jax.devices()[0], "client", None)
    described_mesh = None
    if mesh is not None:
        described_mesh = {
            "axis_names": [str(a) for a in mesh.axis_names],
            "shape": {str(k): int(v) for k, v in dict(mesh.shape).items()},
        }
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jaxlib, "__version__", None),
        "backend": getattr(backend, "platform", None),
        "platform_version": getattr(backend, "platform_version", None),
        "devices": devices,
        "mesh": described_mesh,
        "env": sidecar.environment(),
    }


def analysis_on() -> Any:
    """Record cost and memory of the window's compiles (for MFU and memory), unless chosen otherwise."""
    try:
        from jaxdiag.recording import compile_log

        return compile_log.analysis_on_unless_chosen()
    except Exception:  # noqa: BLE001 - instrumentation never stops the capture
        return None


def restore_analysis(token: Any) -> None:
    if token is None:
        return
    try:
        from jaxdiag.recording import compile_log

        compile_log.restore_analysis(token)
    except Exception:  # noqa: BLE001
        pass


def start_watch() -> Any:
    """Record every compile while the capture runs; ``None`` if recording cannot start."""
    try:
        from jaxdiag.recording.watch import watch

        recorder = watch()
        recorder.__enter__()
        return recorder
    except Exception as exc:  # instrumentation must never stop the capture
        warnings.warn(f"jaxdiag: compiles during the capture are not recorded: {exc}", RuntimeWarning, stacklevel=4)
        return None


def stop_watch(recorder: Any) -> list[dict[str, Any]] | None:
    """Stop recording; the records of the window as dicts (``None`` if none were taken)."""
    if recorder is None:
        return None
    try:
        recorder.__exit__(None, None, None)
        return [r.to_dict() for r in recorder.records]
    except Exception as exc:
        warnings.warn(f"jaxdiag: compiles during the capture are not recorded: {exc}", RuntimeWarning, stacklevel=4)
        return None


def compile_records_between(start: float, stop: float) -> list[dict[str, Any]]:
    try:
        from jaxdiag.recording import compile_log
    except ImportError:  # pragma: no cover
        return []
    return [r.to_dict() for r in compile_log.records() if start <= r.time_unix <= stop]


#: Compiles made before the window that the sidecar carries, per jit object and in all.
EARLIER_PER_HISTORY = 8
EARLIER_TOTAL = 256


def with_earlier(window: list[dict[str, Any]], start: float) -> list[dict[str, Any]]:
    """The window's records, after the compiles made before it (marked ``before_capture``).

    A program compiled during warm-up and run in the window is known to the report
    only through its record: its mesh, specs and collectives, its cost. The last
    ``EARLIER_PER_HISTORY`` compiles of each jit object before the window (at most
    ``EARLIER_TOTAL``) come along; analyses that count compiles leave them out.
    """
    try:
        from jaxdiag.recording import compile_log
        from jaxdiag.recording.records import history_key
    except ImportError:  # pragma: no cover
        return window
    seen = {sidecar.record_key(r) for r in window}
    per_history: dict[Any, int] = {}
    earlier: list[dict[str, Any]] = []
    for rec in reversed(compile_log.records()):
        if rec.time_unix >= start or len(earlier) >= EARLIER_TOTAL:
            continue
        key = history_key(rec)
        if per_history.get(key, 0) >= EARLIER_PER_HISTORY:
            continue
        d = rec.to_dict()
        if sidecar.record_key(d) in seen:
            continue
        per_history[key] = per_history.get(key, 0) + 1
        earlier.append({**d, sidecar.BEFORE_CAPTURE: True})
    return earlier[::-1] + list(window)

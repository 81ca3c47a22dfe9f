"""A hand-built ``Report`` for renderer and model tests."""

from __future__ import annotations

import math

from jaxdiag.analyses.base import Finding, Severity
from jaxdiag.reporting.model import Report


def make_report(**overrides) -> Report:
    fields = dict(
        source={
            "run_dir": "/tmp/run",
            "files": ["/tmp/run/h.xplane.pb"],
            "hosts": ["h"],
            "devices": [],
            "skipped": [],
            "step_source": "annotation",
            "meta": {},
        },
        steps=[
            {
                "step": 0,
                "wall_ms": 12.5,
                "device_busy_ms": 10.0,
                "host_wait_ms": 2.0,
                "compile_ms": 0.0,
                "collective_ms": 0.0,
                "exposed_collective_ms": 0.0,
                "tokens": None,
            }
        ],
        recompiles=[{"function": "train_step", "step": 3, "compile_ms": 850.0, "cause": "args[1] axis 0: 8 -> 9"}],
        host_waits={"total_ms": 2.0, "by_cause": [{"cause": "load_batch", "ms": 2.0}]},
        small_ops={"threshold_us": 10.0, "count": 0, "device_time_share": 0.0, "top": []},
        collectives={"overlap_fraction": None, "exposed_ms": 0.0, "by_kind": []},
        throughput={
            "steps_per_s": 80.0,
            "tokens_per_s": math.nan,
            "steady_steps_per_s": 80.0,
            "steady_tokens_per_s": None,
        },
        findings=(
            Finding("recompile", Severity.CRITICAL, 850.0, "train_step recompiled at step 3", "pad batches"),
            Finding("host_wait", Severity.WARNING, 2.0, "waited on load_batch", "prefetch"),
        ),
        notes=("no problem",),
    )
    fields.update(overrides)
    return Report(**fields)

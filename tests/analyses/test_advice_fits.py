"""Advice that fits the program, each applied to a real program to show the problem shrink.

Truth comes from the trace through ``jax.profiler.ProfileData`` alone: XLA's compiles are the
host's ``backend_compile`` events, device-to-host reads the host's ``np.asarray``/``ToLiteral``
events, steps the ``StepTraceAnnotation`` events.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdiag

BATCH = 32


def _events(run_dir: Path, match) -> list[tuple[str, dict]]:
    from jax.profiler import ProfileData

    out = []
    for path in run_dir.glob("*.xplane.pb"):
        for plane in ProfileData.from_file(str(path)).planes:
            for line in plane.lines:
                out += [(e.name, dict(e.stats)) for e in line.events if match(e.name)]
    return out


def _compiles(run_dir: Path) -> int:
    """XLA compiles in the trace: the host's ``backend_compile`` spans (ProfileData alone)."""
    return len(_events(run_dir, lambda name: name.startswith("backend_compile")))


def _epochs(logdir: Path, *, rows: int, drop_remainder: bool) -> Path:
    """Two epochs over ``rows`` examples in batches of 32; the last batch of each is the remainder."""

    @jax.jit
    def train_step(w, x):
        return w - 0.01 * jnp.tanh(x @ w).T @ x / x.shape[0]

    data = np.ones((rows, 64), np.float32)
    w = jnp.zeros((64, 64))
    n = rows // BATCH if drop_remainder else -(-rows // BATCH)
    with jaxdiag.capture(logdir, skip=1, take=2 * n - 1, run="epochs") as cap:
        for _epoch in range(2):
            for i in range(n):
                with cap.step(samples=min(BATCH, rows - i * BATCH)):
                    w = train_step(w, data[i * BATCH : (i + 1) * BATCH])
                    float(w[0, 0])
    return cap.run_dir


@pytest.fixture(scope="module")
def remainder(tmp_path_factory):
    run_dir = _epochs(tmp_path_factory.mktemp("remainder"), rows=4 * BATCH + 8, drop_remainder=False)
    return jaxdiag.report(run_dir), run_dir


def test_a_remainder_batch_gets_remainder_advice_not_buckets(remainder):
    report, run_dir = remainder
    assert _compiles(run_dir) >= 1  # the 8-row batch compiled, in the trace
    (finding,) = [f for f in report.findings if f.kind == "recompile" and f.evidence.get("function") == "train_step"]
    assert finding.evidence["count"] == 1  # once: the full batch came back from the cache in epoch 2
    assert "remainder batch" in finding.suggestion and "32 -> 8" in finding.suggestion
    assert "bucket" not in finding.suggestion


def test_dropping_the_remainder_removes_the_recompile(remainder, tmp_path):
    _, planted = remainder
    run_dir = _epochs(tmp_path, rows=4 * BATCH + 8, drop_remainder=True)  # the advice applied
    assert _compiles(run_dir) == 0 < _compiles(planted)
    report = jaxdiag.report(run_dir)
    assert not [f for f in report.findings if f.kind == "recompile"]

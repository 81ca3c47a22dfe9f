"""``jaxdiag.capture``: a window of annotated steps, and what happens at its edges."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.errors import ConfigError

f = jax.jit(lambda x: jnp.tanh(x @ x).sum())


def test_window_captures_exactly_the_steps_asked_for(tmp_path):
    x = jnp.ones((32, 32))
    with jaxdiag.capture(tmp_path, skip=2, take=3, run="w") as cap:
        for _ in range(7):
            with cap.step(tokens=64):
                float(f(x))
    frames = jaxdiag.load(tmp_path)
    assert frames.step_source == "annotation"
    assert sorted(frames.steps["step"].unique()) == [2, 3, 4]
    assert cap.step_num == 7


def test_window_past_the_end_of_training_warns_and_writes_nothing(tmp_path):
    with pytest.warns(RuntimeWarning, match="never opened"):
        with jaxdiag.capture(tmp_path, skip=50, take=5) as cap:
            for _ in range(3):
                with cap.step():
                    pass
    assert cap.run_dir is None
    assert not (tmp_path / "plugins").exists()


def test_window_cut_short_keeps_the_steps_it_has(tmp_path):
    with jaxdiag.capture(tmp_path, skip=1, take=10, run="short") as cap:
        for _ in range(4):
            with cap.step(samples=8):
                float(f(jnp.ones((16, 16))))
    assert cap.run_dir is not None
    frames = jaxdiag.load(cap.run_dir)
    assert sorted(frames.steps["step"].unique()) == [1, 2, 3]


def test_exception_in_a_captured_step_closes_the_trace(tmp_path):
    cap = jaxdiag.capture(tmp_path, skip=0, take=5, run="err")
    with pytest.raises(ZeroDivisionError):
        for i in range(5):
            with cap.step():
                float(f(jnp.ones((8, 8))))
                if i == 2:
                    1 / 0
    assert cap.run_dir is not None and list(cap.run_dir.glob("*.xplane.pb"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cap.close()  # closing again is harmless


def test_empty_window_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="empty or negative"):
        jaxdiag.capture(tmp_path, skip=3, take=0)


def _executions(run_dir, module: str) -> int:
    """Executions of ``module`` in the trace: distinct XLA:CPU ``run_id`` stats on its ops (ProfileData alone)."""
    from jax.profiler import ProfileData

    runs = set()
    for path in run_dir.glob("*.xplane.pb"):
        for plane in ProfileData.from_file(str(path)).planes:
            for line in plane.lines:
                for event in line.events:
                    stats = dict(event.stats)
                    if stats.get("hlo_module") == module and "run_id" in stats:
                        runs.add(stats["run_id"])
    return len(runs)


def test_window_of_a_loop_that_never_reads_holds_the_device_work_of_every_step(tmp_path):
    @jax.jit
    def heavy(w, x):
        for _ in range(3):
            x = jnp.tanh(x @ w)
        return w + 1e-3 * x.mean(), x

    w, x = jnp.full((512, 512), 1e-3), jnp.ones((512, 512))
    w, x = jax.block_until_ready(heavy(w, x))
    with jaxdiag.capture(tmp_path, skip=0, take=6, run="noread") as cap:
        for _ in range(6):
            with cap.step():
                w, x = heavy(w, x)  # never read: the host runs ahead of the device
    # Each of the 6 queued executions ran before the trace stopped (before the fix: 2 of them).
    assert _executions(cap.run_dir, "jit_heavy") == 6

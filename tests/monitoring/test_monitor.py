"""``jaxdiag.monitor`` on real CPU training loops: the stream, and capture windows only where planted."""

from __future__ import annotations

import json
from pathlib import Path
import time

import jax
import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.errors import ConfigError
from jaxdiag.monitoring.stream import read_stream

SLOW_STEP = 200
RECOMPILE_STEP = 350


def _loop(mon, steps, slow_step=None, recompile_step=None, sleep_s=1.0):
    @jax.jit
    def train_step(w, x):
        return w - 0.01 * x.T @ (x @ w)

    w = jnp.ones((16, 16))
    for i in range(steps):
        rows = 8 if recompile_step is None or i < recompile_step else 12  # one new shape, kept: one recompile
        x = jnp.ones((rows, 16))
        if i == slow_step:
            time.sleep(sleep_s)  # the planted slow step: its data arrives late
        with mon.step():
            w = train_step(w, x)
            float(w[0, 0])
    return w


def _lines(mon):
    lines, bad = read_stream(mon.stream_path)
    assert bad == 0
    return lines


def test_a_long_loop_captures_exactly_the_slow_step_and_the_recompile(tmp_path):
    # min_slow_ms: a loaded machine stretches a 1 ms step to a few hundred now and then; the planted one is 1 s.
    with jaxdiag.monitor(tmp_path, min_slow_ms=600, capture_steps=4, hang_after_s=None) as mon:
        _loop(mon, 500, slow_step=SLOW_STEP, recompile_step=RECOMPILE_STEP)
    lines = _lines(mon)
    steps = [line for line in lines if "event" not in line]
    assert [s["step"] for s in steps] == list(range(500))
    assert steps[SLOW_STEP]["gap_ms"] >= 1000  # the sleep came before the step began
    assert steps[RECOMPILE_STEP].get("recompile") is True
    assert "train_step" in steps[RECOMPILE_STEP]["compiles"]

    windows = [line for line in lines if line.get("event") == "window"]
    assert [(w["first_step"], w["last_step"]) for w in windows] == [
        (SLOW_STEP + 1, SLOW_STEP + 4),
        (RECOMPILE_STEP + 1, RECOMPILE_STEP + 4),
    ]
    slow, recompile = (w["reason"] for w in windows)
    assert slow.startswith(f"slow step {SLOW_STEP}: ")
    assert "before the step began" in slow
    assert recompile.startswith(f"recompile after warm-up at step {RECOMPILE_STEP}: `train_step` recompiled")
    assert "x shape axis 0 changed 8 -> 12" in recompile
    assert all(
        s.get("window") is None
        for s in steps
        if not SLOW_STEP < s["step"] <= SLOW_STEP + 4 and not RECOMPILE_STEP < s["step"] <= RECOMPILE_STEP + 4
    )

    for window, reason in zip(windows, (slow, recompile)):
        run_dir = window["run_dir"]
        saved = json.loads(
            (tmp_path / "windows" / "plugins" / "profile" / run_dir.rsplit("/", 1)[-1] / "report.json").read_text()
        )
        assert f"captured because: {reason}" in saved["notes"]
        assert [s["step"] for s in saved["steps"]] == list(range(window["first_step"], window["last_step"] + 1))
        fresh = jaxdiag.report(run_dir)  # jaxdiag report on the window says why it was captured
        assert f"captured because: {reason}" in fresh.notes
    device = [line for line in lines if line.get("event") == "device_time"]
    assert len(device) == 2 and all(float(v) > 0 for d in device for v in d["device_ms"].values())


def test_windows_beyond_the_count_are_dropped_oldest_first(tmp_path):
    with jaxdiag.monitor(
        tmp_path, every=10, warmup_steps=1, capture_steps=2, max_windows=2, reports=False, hang_after_s=None
    ) as mon:
        _loop(mon, 50)
    lines = _lines(mon)
    windows = [line for line in lines if line.get("event") == "window"]
    assert [w["first_step"] for w in windows] == [10, 20, 30, 40]
    assert all(w["reason"].startswith("scheduled capture (every 10 steps)") for w in windows)
    dropped = [line["run_dir"] for line in lines if line.get("event") == "window_dropped"]
    assert dropped == [windows[0]["run_dir"], windows[1]["run_dir"]]
    left = sorted(p.name for p in (tmp_path / "windows" / "plugins" / "profile").iterdir())
    assert left == [w["run_dir"].rsplit("/", 1)[-1] for w in windows[2:]]


def test_steps_marked_by_jaxdiag_step_and_cap_step_are_timed(tmp_path):
    @jaxdiag.step
    def train_step(w):
        return w * 0.5

    w = jnp.ones(4)
    with jaxdiag.monitor(tmp_path / "a", hang_after_s=None, flush_every=3) as mon:
        for _ in range(7):
            w = train_step(w)
    steps = [line for line in _lines(mon) if "event" not in line]
    assert [s["step"] for s in steps] == list(range(7))
    assert all("gap_ms" in s for s in steps)

    with jaxdiag.monitor(tmp_path / "b", hang_after_s=None) as mon, jaxdiag.capture(tmp_path / "c", skip=100) as cap:
        for _ in range(5):
            with cap.step():
                w = train_step(w)
    steps = [line for line in _lines(mon) if "event" not in line]
    # cap.step() and the decorated call inside it both mark each step: the outer mark is the one timed
    assert [s["step"] for s in steps] == list(range(5))


def test_bad_settings_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="slow_factor"):
        jaxdiag.monitor(tmp_path, slow_factor=0.5)
    with pytest.raises(ConfigError, match="capture_steps"):
        jaxdiag.monitor(tmp_path, capture_steps=0)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot write"):
        jaxdiag.monitor(tmp_path / "file" / "sub").start()


def test_a_stalled_step_is_written_down_with_where_it_waits(tmp_path):
    with jaxdiag.monitor(tmp_path, hang_after_s=1.0, reports=False) as mon:
        for i in range(4):
            with mon.step():
                if i == 2:
                    time.sleep(3.0)  # STALL: no step ends for longer than the deadline
    line = next(n for n, text in enumerate(open(__file__).read().splitlines(), 1) if "# STALL:" in text)
    verdict = json.loads(next(tmp_path.glob("hang-*-p0.json")).read_text())
    assert verdict["not_arrived"] == [] and verdict["stalled_s"] >= 1.0
    assert (
        f"waits in step 2 at {__file__}:{line} (test_a_stalled_step_is_written_down_with_where_it_waits)"
        in verdict["message"]
    )
    stacks = next(tmp_path.glob("hang-*-p0.txt")).read_text()
    assert f'File "{__file__}", line {line}' in stacks  # faulthandler's dump of the main thread
    assert [e["event"] for e in _lines(mon) if e.get("event") == "hang"] == ["hang"]  # once per stall
    assert [s["step"] for s in _lines(mon) if "event" not in s] == [0, 1, 2, 3]  # and the run went on


def test_a_window_due_while_the_program_profiles_is_skipped_and_said(tmp_path):
    with jaxdiag.monitor(tmp_path / "mon", every=5, warmup_steps=1, reports=False, hang_after_s=None) as mon:
        with jaxdiag.profile(tmp_path / "own"):  # the program's own capture has the profiler
            _loop(mon, 8)
    lines = _lines(mon)
    assert [e["step"] for e in lines if e.get("event") == "window_skipped"] == [5]
    assert not [e for e in lines if e.get("event") == "window"]


def test_nothing_of_jaxdiag_runs_on_a_jit_cache_hit_while_monitoring(tmp_path):
    import sys

    f = jax.jit(lambda v: v * 2 + 1)
    x = jnp.ones(8)
    called: list[str] = []

    def profiler(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_filename)

    with jaxdiag.monitor(tmp_path, hang_after_s=None) as mon:
        with mon.step():
            f(x).block_until_ready()  # compiles, recorded
        sys.setprofile(profiler)
        try:
            for _ in range(10):
                f(x)  # cache hits: JAX's C++ dispatch alone
        finally:
            sys.setprofile(None)
    package = str(Path(jaxdiag.__file__).parent)
    assert not [name for name in called if name.startswith(package)]

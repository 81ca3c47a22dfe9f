"""``jaxdiag monitor LOGDIR``: goodput of a real monitored loop; damaged and hostile streams."""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp

import jaxdiag
from jaxdiag.cli.app import main
from jaxdiag.monitoring.goodput import summarize

EVAL_S = 0.5


def _run(logdir):
    @jax.jit
    def train_step(w, x):
        return w - 0.01 * x.T @ (x @ w)

    w = jnp.ones((16, 16))
    with jaxdiag.monitor(logdir, warmup_steps=5, min_slow_ms=10_000, reports=False, hang_after_s=None) as mon:
        time.sleep(0.2)  # set-up before the first step: idle
        for i in range(40):
            if i == 20:
                time.sleep(EVAL_S)  # an evaluation between steps
            x = jnp.ones((8 if i < 30 else 4, 16))  # a new shape at step 30: a recompile after warm-up
            with mon.step():
                w = train_step(w, x)
                float(w[0, 0])
    return mon


def test_goodput_books_the_evaluation_the_recompile_and_the_idle_time(tmp_path, capsys):
    _run(tmp_path)
    (p,) = summarize(tmp_path)["processes"]
    seconds = p["seconds"]
    assert p["steps"] == 40 and not p["running"]
    assert EVAL_S <= seconds["between steps"] < EVAL_S + 0.2  # the evaluation, and nothing ordinary
    assert seconds["recompiles after warm-up"] > 0 and [r["step"] for r in p["recompiles"]] == [30]
    assert p["recompiles"][0]["functions"] == ["train_step"]
    assert seconds["compile"] > 0  # step 0's first compile
    assert seconds["idle"] >= 0.2
    assert abs(sum(seconds.values()) - p["span_s"]) < 1e-6  # the lines tile the run
    assert 0 < p["goodput"] < 1

    assert main(["monitor", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recompiles after warm-up" in out and "recompile after warm-up at step 30: train_step" in out
    assert main(["monitor", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["processes"][0]["steps"] == 40
    page = tmp_path / "m.html"
    assert main(["monitor", str(tmp_path), "--html", str(page)]) == 0
    text = page.read_text()
    assert "jd-monitor-steps" in text and "Where the time went" in text


def test_bad_folders_and_streams_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["monitor", str(tmp_path / "missing")]) == 2
    assert main(["monitor", str(tmp_path)]) == 2  # a folder with no stream
    (tmp_path / "metrics-h-p0.jsonl").write_bytes(b"\x00\xff garbage\n[1, 2]\n")
    assert main(["monitor", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "Traceback" not in err and "not a jaxdiag metrics stream" in err


def test_a_torn_line_is_skipped_and_hostile_strings_are_escaped(tmp_path, capsys):
    evil = "\x1b[31mred</p><script>alert(1)</script>"
    lines = [
        {"event": "start", "t": 0.0, "host": evil, "process": 0},
        {"step": 0, "t": 1.0, "wall_ms": 5.0, "gap_ms": 1.0},
        {"event": "window", "window": 1, "reason": evil, "first_step": 0, "last_step": 0, "run_dir": evil},
        {"event": "stop", "t": 1.0},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines) + '{"step": 1, "wal'
    (tmp_path / "metrics-h-p0.jsonl").write_text(text)
    assert main(["monitor", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31mred" in out and "1 unreadable line(s) skipped" in out
    page = tmp_path / "m.html"
    assert main(["monitor", str(tmp_path), "--html", str(page)]) == 0
    body = page.read_text()
    assert "<script>alert(1)" not in body and "&lt;script&gt;alert(1)" in body


def test_odd_values_in_a_stream_never_raise(tmp_path, capsys):
    odd = [None, True, "x", [1], {"a": 1}, -1, 1e308, 10**30, "\x1b[2J"]
    lines = []
    for i, value in enumerate(odd):
        lines += [
            {"event": "start", "t": value, "host": value, "process": value, "slow_factor": value},
            {"step": i, "t": value, "wall_ms": 1.0, "gap_ms": value, "compile_ms": value, "compiles": value},
            {"step": 100 + i, "wall_ms": 2.0, "recompile": value, "recompiled": value},
            {
                "event": "window",
                "window": value,
                "reason": value,
                "first_step": value,
                "last_step": value,
                "run_dir": value,
            },
            {"event": "device_time", "device_ms": value},
            {"event": "straggler", "message": value},
            {"event": "hang", "message": value, "stalled_s": value},
        ]
    path = tmp_path / "metrics-h-p0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 5, "wall_ms": 1e999}\n')
    for args in ([], ["--json"], ["--html", str(tmp_path / "m.html")]):
        assert main(["monitor", str(tmp_path), *args]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "\x1b[2J" not in captured.out.split("{", 1)[0]


def test_a_fifo_named_like_a_stream_is_refused_without_waiting(tmp_path, capsys):
    import os

    os.mkfifo(tmp_path / "metrics-h-p0.jsonl")
    assert main(["monitor", str(tmp_path)]) == 2
    assert "not a regular file" in capsys.readouterr().err

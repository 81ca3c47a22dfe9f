"""Names with brackets, rich markup and terminal escapes, from a real capture, shown as written by every command.

A real CPU program runs under ``jax.profiler`` with ``TraceAnnotation``s and a
``jaxdiag.jit`` function, sharded over two forced CPU devices (the sharding
section leaves single-device programs out), named with rich markup (``[link=…]``, ``[bold]``), an
ordinary bracketed path (``load [/data/shard-00001.tfrecord]``, which rich
rejected with ``MarkupError``) and raw escapes (OSC 8 links, clear-screen, a C1
CSI). ``report``, ``compiles``, ``sharding``, ``check``, ``diff``, ``baseline``
and ``open --no-start`` on it, with colour forced on, must exit as usual, show
each name as written, and write no escape sequence but SGR colours, on a
terminal (a pseudo-terminal: where rich writes colours and links).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

#: Annotation names: each also a host-wait cause in the report.
NAMES = (
    "load [/data/shard-00001.tfrecord]",
    "[link=http://evil.example/]click[/link]",
    "[bold]loud[/bold] [red]",
    "osc \x1b]8;;http://evil.example/\x07here\x1b]8;;\x07",
    "cls \x1b[2J\x1b[H",
    "c1 \x9b31mred \x07bell",
    "trailing backslash \\",
)
#: The jitted function's name (compile log, report, compiles, sharding).
FUNCTION = "step_[link=http://evil.example/]fn[/link]_\x1b[2J"
WAIT_S = 300

_CAPTURE = r"""
import json, sys, time
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec
import jaxdiag

names, function, logdir = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
def step(x):
    return jnp.tanh(x @ x.T).sum()
step.__name__ = step.__qualname__ = function
f = jaxdiag.jit(step, analysis=True)
rows = NamedSharding(jax.make_mesh((2,), ("data",), axis_types=(AxisType.Auto,)), PartitionSpec("data"))
f(jax.device_put(jnp.ones((32, 32)), rows)).block_until_ready()
jax.profiler.start_trace(logdir)
for i in range(4):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        for name in names:
            with jax.profiler.TraceAnnotation(name):
                time.sleep(0.004)
        f(jax.device_put(jnp.ones((32 if i < 2 else 48, 32)), rows)).block_until_ready()
jax.profiler.stop_trace()
"""

#: Any escape sequence but SGR (colour) ones; any C1 control; BEL.
_NOT_SGR = re.compile(r"\x1b(?!\[[0-9;]*m)|[\x80-\x9f\x07]")
_SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("hostile")
    env = {
        **os.environ,
        "JAXDIAG_LOG_DIR": str(logdir),
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    done = subprocess.run(
        [sys.executable, "-c", _CAPTURE, json.dumps(NAMES), json.dumps(FUNCTION), str(logdir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(logdir.glob("*.jsonl")) and list(logdir.glob("plugins/profile/*/*.xplane.pb"))
    return logdir


def jaxdiag(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``jaxdiag ARGS`` with stdout and stderr on a pseudo-terminal 400 columns wide, as a user sees it."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxdiag", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "400"},
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"jaxdiag {args} printed nothing more within {WAIT_S} s"
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the terminal's other end closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        status = proc.wait(timeout=WAIT_S)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)
    out = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return subprocess.CompletedProcess(proc.args, status, out, "")


def to_file(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jaxdiag", *args], capture_output=True, text=True, timeout=WAIT_S)


def safe(text: str) -> str:
    """``text`` with its SGR colours removed, after checking it holds no other escape or control."""
    bad = _NOT_SGR.search(text)
    assert bad is None, repr(text[max(0, bad.start() - 80) : bad.end() + 80])
    return _SGR.sub("", text)


def shown(name: str) -> str:
    """How a name is shown: control characters as ``\\xNN``."""
    from jaxdiag.render.terminal_text import plain

    return plain(name)


def test_report(capture: Path) -> None:
    done = jaxdiag("report", str(capture), "--width", "400")
    assert done.returncode == 0, done.stderr
    out = safe(done.stdout)
    for name in NAMES:
        assert shown(name) in out, name
    assert shown(FUNCTION) in out


def test_report_html_and_json_round_trip(capture: Path, tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    assert to_file("report", str(capture), "--json", "-o", str(saved)).returncode == 0
    causes = {c["cause"] for c in json.loads(saved.read_text())["host_waits"]["by_cause"]}
    assert set(NAMES) <= causes  # the names are kept as written in the JSON
    done = jaxdiag("report", str(saved), "--width", "400")
    assert done.returncode == 0, done.stderr
    out = safe(done.stdout)
    assert all(shown(name) in out for name in NAMES)


def test_compiles_and_sharding(capture: Path) -> None:
    for command in (["compiles", str(capture)], ["sharding", str(capture)]):
        done = jaxdiag(*command, "--width", "400")
        assert done.returncode == 0, (command, done.stderr)
        out = safe(done.stdout + done.stderr)
        assert shown(FUNCTION) in out, (command, out[:2000])


def test_baseline_check_diff(capture: Path, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    done = jaxdiag("baseline", str(capture), "-o", str(baseline))
    assert done.returncode == 0, done.stderr
    safe(done.stdout + done.stderr)
    done = jaxdiag("check", str(capture), "--baseline", str(baseline), "--width", "400")
    assert done.returncode in (0, 1), done.stderr
    safe(done.stdout + done.stderr)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert to_file("report", str(capture), "--json", "-o", str(a)).returncode == 0
    slower = json.loads(a.read_text())
    for cause in slower["host_waits"]["by_cause"]:
        cause["ms"] = (cause.get("ms") or 0) * 3 + 5
    b.write_text(json.dumps(slower))
    done = jaxdiag("diff", str(a), str(b), "--width", "400")
    assert done.returncode == 0, done.stderr
    out = safe(done.stdout + done.stderr)
    assert any(shown(name) in out for name in NAMES), out[:3000]


def test_open_prints_the_names_as_written(capture: Path) -> None:
    done = jaxdiag("open", str(capture), "--finding", "1", "--no-start")
    assert done.returncode == 0, done.stderr
    safe(done.stdout + done.stderr)

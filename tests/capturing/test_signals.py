"""A capture window ended by a signal: SIGTERM writes what was captured; SIGKILL leaves a folder that says so.

The program is a real training loop under ``jaxdiag.capture`` in a child process,
signalled by the parent once a few steps ran inside the window.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxdiag.cli.app import main

REPO = Path(__file__).resolve().parents[2]

LOOP = """
    import signal, sys, time
    import jax, jax.numpy as jnp
    import jaxdiag
    if sys.argv[2] == "handler":
        def previous(signum, frame):
            print("PREVIOUS HANDLER RAN", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, previous)
    step = jax.jit(lambda w, x: w - 0.01 * jnp.tanh(x @ w).mean())
    w, x = jnp.eye(64), jnp.ones((32, 64))
    with jaxdiag.capture(sys.argv[1], skip=1, take=1000) as cap:
        for n in range(100000):
            with cap.step(tokens=32):
                w = step(w, x).block_until_ready()
            if n == 5:
                print("IN THE WINDOW", flush=True)
            time.sleep(0.005)
"""


def _signalled(logdir: Path, sig: int, mode: str = "default") -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(LOOP), str(logdir), mode],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the loop is in the window (or the child ends)
        assert "IN THE WINDOW" in line, (line, proc.stderr.read() if proc.stderr else "")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, line + out, err)


def _report(logdir: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", str(logdir), "--json"])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no POSIX signals here")
def test_sigterm_in_the_window_writes_the_trace_then_ends_as_before(tmp_path: Path) -> None:
    done = _signalled(tmp_path, signal.SIGTERM)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]  # the default action still ends it
    code, out, err = _report(tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert len(report["steps"]) >= 5 and all(s.get("tokens") == 32 for s in report["steps"])


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no POSIX signals here")
def test_sigterm_goes_on_to_the_programs_own_handler(tmp_path: Path) -> None:
    done = _signalled(tmp_path, signal.SIGTERM, mode="handler")
    assert done.returncode == 7 and "PREVIOUS HANDLER RAN" in done.stdout, done.stdout + done.stderr[-2000:]
    code, out, err = _report(tmp_path)
    assert code == 0 and len(json.loads(out)["steps"]) >= 5, err


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no POSIX signals here")
def test_a_folder_left_by_sigkill_says_the_capture_was_killed(tmp_path: Path) -> None:
    done = _signalled(tmp_path, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL
    code, out, err = _report(tmp_path)
    assert code == 2 and err.count("\n") == 1, err
    assert "a capture started here" in err and "wrote no trace" in err and "SIGKILL" in err, err

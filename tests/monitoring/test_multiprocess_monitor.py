"""``jaxdiag.monitor`` across real ``jax.distributed`` CPU processes: a straggler named, a hang explained.

Every process is started with a timeout and killed in a ``finally``: no test here can hang the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from multihost import PRELUDE, free_port

from jaxdiag.monitoring.monitor import HANG_EXIT_STATUS
from jaxdiag.monitoring.stream import read_stream

WORKER = PRELUDE + textwrap.dedent(
    """
    import time
    import numpy as np
    from jax.experimental import multihost_utils
    import jaxdiag

    mode = sys.argv[5]

    @jax.jit
    def train_step(x):
        return (x @ x).sum()

    with jaxdiag.monitor(out, min_slow_ms=1000, peer_every=5, interval_s=0.05, hang_after_s=4.0, exit_on_hang=True, reports=False) as mon:
        for i in range(150 if mode == "slow" else 60):
            if mode == "slow" and pid == 1 and i == 30:
                time.sleep(1.5)  # one slow step on one process: every process captures the same steps
            if mode == "straggler" and pid == 1:
                time.sleep(0.03)  # its input pipeline is slower, every step
            if mode == "hang" and pid == 1 and i == 12:
                time.sleep(300)  # HANG LINE: stops before the collective of step 12
            with mon.step():
                if mode == "slow":
                    # Steps of 5 ms at least, as training steps are: a window opens four of the monitor's
                    # 50 ms intervals ahead, in steps (``peers._lead``): 100 to 200 steps of 1 to 2 ms,
                    # past the loop's end, where the window would never open.
                    time.sleep(0.005)
                loss = train_step(np.ones((32, 32), np.float32) * i)
                float(np.asarray(multihost_utils.process_allgather(loss)).sum())  # COLLECTIVE LINE
    jax.distributed.shutdown()
    """
)


def _run(
    tmp_path: Path, mode: str, n: int = 2, timeout_s: float = 240, worker: str = WORKER, runner: tuple[str, ...] = ()
) -> list[tuple[int, str]]:
    """Run ``worker`` in ``n`` processes; each one's exit status and output (killed past ``timeout_s``)."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    port = str(free_port())
    procs = []
    try:
        for i in range(n):
            procs.append(
                subprocess.Popen(
                    [sys.executable, *runner, str(script), str(i), port, str(n), str(tmp_path / "mon"), mode],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outs = [p.communicate(timeout=timeout_s)[0] for p in procs]
        return [(p.returncode, out) for p, out in zip(procs, outs)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(WORKER.splitlines(), 1) if marker in text)


def _events(tmp_path: Path, process: int, kind: str) -> list[dict]:
    (path,) = (tmp_path / "mon").glob(f"metrics-*-p{process}.jsonl")
    lines, _ = read_stream(path)
    return [line for line in lines if line.get("event") == kind]


def test_a_chronically_slower_process_is_named(tmp_path):
    results = _run(tmp_path, "straggler")
    outputs = "\n-----\n".join(out for _, out in results)
    assert [status for status, _ in results] == [0, 0], outputs
    for process in (0, 1):
        named = _events(tmp_path, process, "straggler")
        assert [e["process"] for e in named] == [1], outputs  # process 1, and no other
        (event,) = named
        assert "before entering it (data loading or other host work)" in event["message"]
        assert event["gap_ms"] >= 25
    assert "process 1 (host " in outputs and "is a chronic straggler" in outputs


def test_a_process_that_stops_before_a_collective_is_named_by_the_others_watchdog(tmp_path):
    results = _run(tmp_path, "hang")
    outputs = "\n-----\n".join(out for _, out in results)
    assert results[0][0] == HANG_EXIT_STATUS, outputs
    verdict = json.loads(next((tmp_path / "mon").glob("hang-*-p0.json")).read_text())
    assert verdict["not_arrived"] == [1], verdict["message"]
    assert verdict["stalled_s"] >= 4.0
    message = verdict["message"]
    assert "process 1 (host " in message and "did not arrive: its last step ended was 11" in message
    assert "it has not entered step 12 as the others have" in message
    assert f"worker.py:{_line('HANG LINE')} (<module>)" in message  # where process 1 is, as it told
    assert f"process 0 (host {verdict['host']}) waits in step 12 at " in message
    assert f"worker.py:{_line('COLLECTIVE LINE')} (<module>)" in message  # where process 0 waits
    stacks = next((tmp_path / "mon").glob("hang-*-p0.txt")).read_text()
    assert "Thread" in stacks and "worker.py" in stacks  # faulthandler's dump of every thread
    assert [e["not_arrived"] for e in _events(tmp_path, 0, "hang")] == [[1]]


def test_a_slow_step_on_one_process_makes_every_process_capture_the_same_steps(tmp_path):
    results = _run(tmp_path, "slow")
    outputs = "\n-----\n".join(out for _, out in results)
    assert [status for status, _ in results] == [0, 0], outputs
    windows = [_events(tmp_path, p, "window") for p in (0, 1)]
    assert len(windows[0]) == 1, outputs
    assert [(w["first_step"], w["last_step"], w["run_dir"]) for w in windows[0]] == [
        (w["first_step"], w["last_step"], w["run_dir"]) for w in windows[1]
    ]
    (window,) = windows[0]
    assert window["first_step"] > 30 and "late" not in window["reason"]
    assert window["reason"].startswith("slow step 30: ")  # both saw it; process 0 decided one window
    run = Path(window["run_dir"])
    assert sorted(p.name.rsplit("-", 1)[-1] for p in run.glob("*.xplane.pb")) == ["p0.xplane.pb", "p1.xplane.pb"]


UNCHANGED = PRELUDE + textwrap.dedent(
    """
    import numpy as np
    from jax.experimental import multihost_utils

    @jax.jit
    def train_step(x):
        return (x @ x).sum()

    for i in range(30):
        loss = train_step(np.ones((32, 32), np.float32) * i)
        float(np.asarray(multihost_utils.process_allgather(loss)).sum())
    jax.distributed.shutdown()
    """
)


def test_run_monitor_on_processes_that_initialize_distributed_themselves(tmp_path):
    runner = ("-m", "jaxdiag", "run", "--no-summary", "--monitor", str(tmp_path / "mon"))
    results = _run(tmp_path, "plain", worker=UNCHANGED, runner=runner)
    outputs = "\n-----\n".join(out for _, out in results)
    assert [status for status, _ in results] == [0, 0], outputs
    assert "jaxdiag.monitor" not in outputs  # the script's own shutdown is no lost store
    for process in (0, 1):  # one stream each, named by the index the script's initialize gave
        (path,) = (tmp_path / "mon").glob(f"metrics-*-p{process}.jsonl")
        lines, _ = read_stream(path)
        (start,) = [line for line in lines if line.get("event") == "start"]
        assert (start["process"], start["processes"]) == (process, 2)
        assert [line["step"] for line in lines if "event" not in line] == list(range(30))

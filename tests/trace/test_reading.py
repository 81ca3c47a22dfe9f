"""Reading with worker processes (or a Dask cluster) gives exactly what reading in one process gives.

Workers are forked only from a single-threaded process, and the test process
runs jax's and numpy's threads, so each case runs in a fresh interpreter that
reads with workers and pickles the frames back for comparison.
"""

from __future__ import annotations

import ast
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from jaxdiag import processes
from jaxdiag.errors import TraceFormatError
from jaxdiag.trace import reading, wire
from jaxdiag.trace.load import load
from tests.process_state import left_running
from xspace_builders import (
    GPU_COMPUTE_STREAM,
    H100_STATS,
    Kernel,
    XSpaceBuilder,
    gpu_xspace,
    host_plane,
    tpu_xspace,
    write_run,
)

ROOT = Path(__file__).resolve().parents[2]
FRAME_FIELDS = ("events", "devices", "steps", "step_source", "hosts", "files", "skipped", "meta", "notes")


def _two_gpu_hosts(tmp_path: Path) -> Path:
    """Two hosts of two GPUs each, with steps, Python frames and a runtime line: planes of every kind."""
    files = {}
    for h in range(2):
        kernels = [
            Kernel(d, f"fusion_{i}", 1_000 + i * 700 + h, 500, program_id=3) for d in range(2) for i in range(40)
        ]
        nccl = [
            Kernel(d, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30_000 + d, 2_000, op="all-reduce.1") for d in range(2)
        ]
        files[f"host{h}"] = gpu_xspace(
            devices=2,
            kernels=kernels,
            nccl=nccl,
            steps=[(0, 0, 20_000), (1, 20_000, 40_000)],
            host_annotations=[("load_batch", 100, 900)],
            python_frames=300,
            memcpy=[(0, 35_000, 400)],
        )
    return write_run(tmp_path / "two_hosts", files)


def _with_worker(
    tmp_path: Path,
    path: Path,
    setup: str = "",
    method: str = "fork",
    then: str = "",
    workers: int = 2,
    every_process: str = "",
) -> dict | str:
    """``path`` read with workers started by ``method`` in a fresh interpreter (``setup`` before, ``then``
    once the workers run): its frames, or the error it raised. ``every_process`` runs at the start of
    that interpreter and of every one it starts, as a ``sitecustomize`` module: workers that forkserver
    and spawn start run their own interpreter, which nothing set in the first one reaches.

    Only a process's first read can fork: pandas then starts numpy's thread.
    """
    script = textwrap.dedent(
        """
        import os, pickle, sys
        from jaxdiag.trace import reading
        from jaxdiag.trace.load import start_load
        %s
        pending = start_load(sys.argv[2], parallel=True, workers=%d, start_method=%r)
        assert pending._reading.workers > 0, "no worker was started"
        %s
        try:
            frames = pending.result()
            out = {k: getattr(frames, k) for k in %r}
        except Exception as exc:
            out = f"{type(exc).__name__}: {exc}"
        pickle.dump(out, open(sys.argv[1], "wb"))
        """
    ) % (textwrap.dedent(setup), workers, method, textwrap.dedent(then), FRAME_FIELDS)
    out = tmp_path / "out.pkl"
    env = dict(os.environ)
    if every_process:
        site = tmp_path / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(textwrap.dedent(every_process))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", script, str(out), str(path)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return pickle.loads(out.read_bytes())


def _assert_same(got: dict, path: Path) -> None:
    want = load(path, parallel=False)
    for field in FRAME_FIELDS:
        mine, theirs = got[field], getattr(want, field)
        if hasattr(theirs, "equals"):
            assert mine.equals(theirs) and list(mine.dtypes) == list(theirs.dtypes), field
            for column in theirs.columns:
                if str(theirs[column].dtype) == "category":
                    assert list(mine[column].cat.categories) == list(theirs[column].cat.categories), column
        else:
            assert mine == theirs, field


def _tpu_host(tmp_path: Path) -> Path:
    """A TPU host: ops joined to their module runs within a plane, device steps, two host threads."""
    ops = [(d, f"%fusion.{i} = f32[8]{{0}} fusion(%p{i})", 10 + 40 * i, 30) for d in range(2) for i in range(30)]
    modules = [(d, "jit_step", 7, 0, 1_300) for d in range(2)]
    steps = [(d, s, 650 * s, 650 * (s + 1)) for d in range(2) for s in range(2)]
    return write_run(
        tmp_path / "tpu",
        {
            "tpu0": tpu_xspace(
                devices=2, ops=ops, modules=modules, steps=steps, host_steps=[(0, 0, 650), (1, 650, 1_300)]
            )
        },
    )


def _many_threads(tmp_path: Path, hosts: int = 1) -> Path:
    """GPU hosts whose host plane the two processes share thread by thread: a main thread with
    enough Python frames to be a task of its own, a runtime thread, and a second thread named python3."""
    files = {}
    for h in range(hosts):
        builder = XSpaceBuilder().plane("/device:GPU:0", H100_STATS)
        builder.line(GPU_COMPUTE_STREAM, [Kernel(0, f"fusion_{i}", 1_000 + 300 * i, 200).event() for i in range(50)])
        host_plane(
            builder,
            steps=[(0, 0, 10_000), (1, 10_000, 20_000)],
            python_frames=40_000,
            runtime=[("backend_compile", 500 + 1_000 * i, 800) for i in range(20)],
        )
        builder.line("python3", [("load_batch", 12_000, 3_000), ("np.asarray(jax.Array)", 16_000, 500)])
        files[f"host{h}"] = builder.serialize()
    return write_run(tmp_path / f"threads{hosts}", files)


@pytest.mark.parametrize("which", ["cpu", "two_gpu_hosts", "tpu", "many_threads"])
def test_worker_reads_what_one_process_reads(which: str, cpu_trace_dir, tmp_path: Path) -> None:
    path = {
        "cpu": lambda: cpu_trace_dir.logdir,
        "two_gpu_hosts": lambda: _two_gpu_hosts(tmp_path),
        "tpu": lambda: _tpu_host(tmp_path),
        "many_threads": lambda: _many_threads(tmp_path),
    }[which]()
    _assert_same(_with_worker(tmp_path, path), path)


@pytest.mark.parametrize("name", ["h100_transformer", "h100_mlp"])
def test_worker_reads_the_h100_traces_as_one_process_does(name: str, shared_fixtures: Path, tmp_path: Path) -> None:
    _assert_same(_with_worker(tmp_path, shared_fixtures / name), shared_fixtures / name)


def test_a_worker_that_dies_leaves_its_planes_to_this_process(tmp_path: Path) -> None:
    run = _two_gpu_hosts(tmp_path)
    dies = """
        parent, read_units = os.getpid(), reading.read_units

        def dies_in_the_worker(*args, **kwargs):
            if os.getpid() != parent:
                os._exit(3)
            return read_units(*args, **kwargs)

        reading.read_units = dies_in_the_worker
    """
    _assert_same(_with_worker(tmp_path, run, dies), run)


def test_many_hosts_are_read_plane_by_plane_and_read_what_one_process_reads(tmp_path: Path) -> None:
    """With files enough for every process (four, one worker), a host plane is one task, not a task per
    thread, each of which would parse its metadata again."""
    keep_units = "open(sys.argv[1] + '.units', 'w').write(repr([t.units for t in pending._reading._tasks]))"
    out = tmp_path / "out.pkl.units"
    for hosts, by_thread in ((4, False), (1, True)):  # one file: its host plane by thread
        run = _many_threads(tmp_path, hosts)
        _assert_same(_with_worker(tmp_path, run, then=keep_units, workers=1), run)
        lines = [line for task in ast.literal_eval(out.read_text()) for _, line in task]
        assert lines and any(line >= 0 for line in lines) == by_thread


@pytest.mark.parametrize("method", reading.METHODS)
def test_workers_started_any_way_read_what_one_process_reads(method: str, tmp_path: Path) -> None:
    run = _two_gpu_hosts(tmp_path)
    _assert_same(_with_worker(tmp_path, run, method=method), run)


#: Once the workers run: SIGKILL one as soon as it has mapped the trace itself (it is reading a task then;
#: a forked worker also holds the mapping it inherited, so it must show one more than this process).
KILL_WHILE_READING = """
    import multiprocessing, signal, time
    worker = multiprocessing.active_children()[0].pid
    with open("/proc/self/maps") as maps:
        inherited = maps.read().count(".xplane.pb") if %r == "fork" else 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with open(f"/proc/{worker}/maps") as maps:
            if maps.read().count(".xplane.pb") > inherited:
                break
    else:
        raise SystemExit("the worker never mapped the trace")
    os.kill(worker, signal.SIGKILL)
"""
#: Once the workers run: stop them all (SIGSTOP), so that none ever answers.
STOP_THE_WORKERS = """
    import multiprocessing, signal
    for child in multiprocessing.active_children():
        os.kill(child.pid, signal.SIGSTOP)
"""


#: In every process: a worker (a process that multiprocessing started) that has mapped the trace holds it and
#: waits while its parent lives, to be killed while reading (its task takes a few milliseconds, less than the
#: parent takes to begin looking). The parent never calls a worker stuck, so nothing reads a held worker's tasks
#: again: without the kill the read would wait past the subprocess's timeout, however the workers were started,
#: and the held workers end with the subprocess.
HOLD_THE_MAPPING = """
    import multiprocessing, time
    from jaxdiag.trace import reading
    mapped = reading._map
    def mapped_and_held(path):
        data = mapped(path)
        parent = multiprocessing.parent_process()
        while parent is not None and parent.is_alive():
            time.sleep(0.05)
        return data
    reading._map = mapped_and_held
"""
NEVER_STUCK = "reading.STUCK_AFTER_S = 3600.0"


@pytest.mark.parametrize("method", reading.METHODS)
def test_a_worker_killed_while_reading_leaves_its_planes_to_this_process(method: str, tmp_path: Path) -> None:
    run = _many_threads(tmp_path)
    got = _with_worker(
        tmp_path, run, NEVER_STUCK, method, then=KILL_WHILE_READING % method, workers=1, every_process=HOLD_THE_MAPPING
    )
    _assert_same(got, run)


@pytest.mark.parametrize("method", reading.METHODS)
def test_stuck_workers_are_killed_and_their_planes_read_here(method: str, tmp_path: Path) -> None:
    run = _many_threads(tmp_path)
    patient = "reading.STUCK_AFTER_S = 0.5"
    _assert_same(_with_worker(tmp_path, run, patient, method=method, then=STOP_THE_WORKERS, workers=1), run)


def test_many_small_planes_make_few_tasks(tmp_path: Path) -> None:
    """64,000 empty device planes: each submitted task used to carry every plane's record (quadratic)."""
    planes = []
    for ordinal in range(64_000):
        name = f"/device:GPU:{ordinal}".encode()
        payload = b"\x12" + bytes([len(name)]) + name
        planes.append(b"\x0a" + bytes([len(payload)]) + payload)
    run = write_run(tmp_path / "planes", {"host0": b"".join(planes)})
    files = sorted(run.glob("*.xplane.pb"))
    r = reading.start(files, "xplane", parallel=True, workers=2, method="forkserver")
    assert 0 < len(r._tasks) <= 4 and r.workers > 0
    got = r.finish()
    want = reading.read_file(files[0], "xplane")
    assert len(got) == 1 and not isinstance(got[0], TraceFormatError)
    assert repr(got[0].devices) == repr(want.devices) and len(want.devices) == 64_000  # repr: NaN facts compare


def test_a_plane_the_parser_rejects_reads_as_without_a_worker(tmp_path: Path) -> None:
    good = gpu_xspace(devices=2, kernels=[Kernel(d, "fusion_1", 1_000, 500) for d in range(2)], python_frames=50)
    planes = wire.plane_records(good, "x")
    gpu = next(p for p in planes if p.name == "/device:GPU:1")
    payload = b"\x12\x0e/device:GPU:1\x1a\x05ab"  # its name, then a line record cut short
    bad = good[: gpu.start] + b"\x0a" + bytes([len(payload)]) + payload + good[gpu.end :]
    run = write_run(tmp_path / "run", {"bad": bad, "good": good})
    alone = write_run(tmp_path / "alone", {"bad": bad})
    got = _with_worker(tmp_path, run)
    _assert_same(got, run)
    assert got["skipped"] and "protobuf parser rejected it" in got["skipped"][0][1]
    with pytest.raises(TraceFormatError) as serial:
        load(alone, parallel=False)
    assert _with_worker(tmp_path, alone) == f"TraceFormatError: {serial.value}"


def test_an_abandoned_reading_stops_its_workers(tmp_path: Path) -> None:
    """Workers stopped (SIGSTOP) as soon as they start never finish their tasks nor take the pool's
    order to exit: only the reading's kill ends them, when it is dropped unfinished."""
    files = sorted(_many_threads(tmp_path).glob("*.xplane.pb"))
    # Whether each worker still runs is asked of the kernel (``/proc/PID/stat``: absent or a zombie is gone),
    # not of its ``Process``: the pool's own thread reaps the workers it sees die, and a ``Process`` asked
    # while that thread reaps it answers "alive" (``waitpid`` fails with ECHILD, which ``poll`` reads as
    # "not started yet"). That race failed an earlier form of this test twice under load, the workers gone.
    script = textwrap.dedent(
        """
        import gc, multiprocessing, os, signal, sys
        from pathlib import Path
        from jaxdiag.trace import reading
        from tests.process_state import left_running

        r = reading.start([Path(f) for f in sys.argv[1:]], "xplane", parallel=True, workers=2)
        workers = [w.pid for w in multiprocessing.active_children()]
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        unfinished = sum(not f.done() for f in r._futures)
        del r
        gc.collect()
        print(f"{len(workers)} workers, {unfinished} tasks unfinished, alive {left_running(workers)}")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, files)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    words = done.stdout.split()
    assert words[:2] == ["2", "workers,"] and int(words[2]) > 0, done.stdout + done.stderr[-2000:]
    assert done.stdout.strip().endswith("alive []"), done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize("method", reading.METHODS)
def test_workers_end_with_the_process_that_started_them(method: str, tmp_path: Path) -> None:
    """A process killed outright (SIGKILL, the OOM killer) while its workers read: they end too, where the
    pool's workers would wait for tasks for ever on pipes they hold both ends of."""
    files = sorted(_many_threads(tmp_path, hosts=2).glob("*.xplane.pb"))
    pids = tmp_path / "pids"
    script = (
        textwrap.dedent(
            """
        import multiprocessing, os, signal, sys
        from pathlib import Path
        from jaxdiag.trace import reading

        reading.STUCK_AFTER_S = 3600.0
        r = reading.start([Path(f) for f in sys.argv[2:]], "xplane", parallel=True, workers=2, method=%r)
        workers = [w.pid for w in multiprocessing.active_children() if w.name.startswith("SpawnProcess") or
                   w.name.startswith("ForkProcess") or w.name.startswith("ForkServerProcess")]
        Path(sys.argv[1]).write_text(" ".join(map(str, workers)))
        os.kill(os.getpid(), signal.SIGKILL)
        """
        )
        % method
    )
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:  # a file, not a pipe: workers left behind would hold a pipe open
        done = subprocess.run(
            [sys.executable, "-c", script, str(pids), *map(str, files)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=300,
        )
    assert done.returncode == -signal.SIGKILL, errors.read_text()[-2000:]
    workers = [int(p) for p in pids.read_text().split()]
    assert workers
    assert not left_running(workers)


def test_no_worker_while_another_thread_runs(tmp_path: Path) -> None:
    files = sorted(_two_gpu_hosts(tmp_path).glob("*.xplane.pb"))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not processes.fork_is_safe()
        pending = reading.start(files, "xplane", parallel=True)
        assert pending.workers == 0
        outcomes = pending.finish()
    finally:
        stop.set()
        thread.join()
    assert [o.strings("name") for o in outcomes] == [reading.read_file(f, "xplane").strings("name") for f in files]


@pytest.mark.parametrize("trouble", ["no process", "too little work"])
def test_reading_here_when_no_worker_can_start(trouble: str, tmp_path: Path) -> None:
    files = sorted(_two_gpu_hosts(tmp_path).glob("*.xplane.pb"))
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from jaxdiag.trace import reading

        def no_process():
            raise OSError(11, "Resource temporarily unavailable")

        if sys.argv[1] == "no process":
            os.fork = no_process
            r = reading.start([Path(f) for f in sys.argv[2:]], "xplane", parallel=True)
        else:
            r = reading.start([Path(f) for f in sys.argv[2:]], "xplane")  # a small run: not worth a worker
        assert r.workers == 0 and not r._tasks
        print([len(o) for o in r.finish()])
        """
    )
    done = subprocess.run([sys.executable, "-c", script, trouble, *map(str, files)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([len(reading.read_file(f, "xplane")) for f in files])


def test_packed_hosts_make_the_table_unpacked_hosts_make(tmp_path: Path) -> None:
    """A pod's hosts are packed (codes into their own values) as they arrive; the table is the same."""
    import copy

    from jaxdiag.trace.load import _pack, events_frame

    files = sorted(_two_gpu_hosts(tmp_path).glob("*.xplane.pb"))
    parts = [reading.read_file(f, "xplane") for f in files]
    plain = events_frame(parts)
    packed = events_frame([_pack(copy.deepcopy(p)) for p in parts])
    one_packed = events_frame([_pack(copy.deepcopy(parts[0])), parts[1]])
    for table in (packed, one_packed):
        assert table.equals(plain) and list(table.dtypes) == list(plain.dtypes)
        for column in plain.columns:
            if str(plain[column].dtype) == "category":
                assert list(table[column].cat.categories) == list(plain[column].cat.categories), column
    alone = events_frame(parts[:1])
    assert events_frame([_pack(copy.deepcopy(parts[0]))]).equals(alone)

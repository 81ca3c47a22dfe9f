"""Report speed: ``jaxdiag report --json`` against XProf's own ``overview_page`` conversion.

Both run end to end as fresh processes (interpreter start, imports, reading,
analysis, output) on a fresh copy of the same ``.xplane.pb`` (XProf caches its
op stats beside the file, so each of its runs gets a new copy), interleaved,
``--repeat`` times each after one round that is not counted (it warms the file
cache and writes both sides' bytecode, as an installed package has it). The
figure is the ratio of the median wall times (goal <= 0.35); the ratios of the best wall
and of CPU time (``wait4``'s rusage: each process with its children, so our
worker counts) are printed beside it, with the peak RSS (goal: at most half of
XProf's) and the load average, since other work on the machine takes cores
away from one side or the other. Then the cost in process on the same trace:
CPU time of ``report()`` in one process, best of seven, per event read (goal
<= 120 ns).

Then the cost against trace size: real CPU captures made here with 1x, 4x and
16x the steps of a loop that also runs Python code under the Python tracer
(most events of a default capture are its frames), each reported end to end
(best wall of three) and in process (CPU time of load and analyses in one
process, best of three). The marginal cost per event between sizes should stay
flat: the cost is linear in the number of events.

Usage:
  python benchmarks/report_speed.py [TRACE.xplane.pb] [--repeat 5] [--no-scaling]

Without a trace argument it uses ../shared/fixtures/h100_transformer when present.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "fixtures" / "h100_transformer"
#: Both sides run with their bytecode cached, as an installed package has it (a machine that sets
#: PYTHONDONTWRITEBYTECODE would otherwise compile an editable checkout's modules on every run).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV.update(TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3")

XPROF_SNIPPET = textwrap.dedent(
    """
    import sys
    from xprof.convert import raw_to_tool_data
    out, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "overview_page", {})
    assert out, "xprof produced nothing"
    """
)


def _run(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of one child process and its children."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed ({status}): {' '.join(cmd)}\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0


def _ours(path: Path) -> list[str]:
    return [sys.executable, "-m", "jaxdiag", "report", str(path), "--json", "-o", os.devnull]


def find_xplane(path: Path) -> Path:
    """``path`` if a file, else the last ``.xplane.pb`` under it."""
    if path.is_file():
        return path
    files = sorted(path.rglob("*.xplane.pb"))
    if not files:
        raise SystemExit(f"{path}: no .xplane.pb file")
    return files[-1]


def _fresh_copy(trace: Path, tmp: str) -> Path:
    copy = Path(tmp) / "run" / trace.name
    copy.parent.mkdir()
    shutil.copy(trace, copy)
    return copy


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} cores"


def compare_with_xprof(trace: Path, repeat: int) -> float:
    """Print the comparison; return the ratio of best wall times."""
    theirs, ours = [], []
    print(f"trace: {trace} ({trace.stat().st_size / 1e6:.1f} MB); {_load()}")
    for _ in range(repeat + 1):  # the first round warms the file cache and writes bytecode; it is not counted
        for runs, command in ((theirs, lambda c: [sys.executable, "-c", XPROF_SNIPPET, str(c)]), (ours, _ours)):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(_run(command(_fresh_copy(trace, tmp))))
    del theirs[0], ours[0]
    for name, runs in (("xprof overview_page", theirs), ("jaxdiag report --json", ours)):
        wall, cpu = [r[0] for r in runs], [r[1] for r in runs]
        print(
            f"{name:>22}, end to end: wall best {min(wall):.3f} s, median {statistics.median(wall):.3f} s; "
            f"cpu best {min(cpu):.3f} s; peak RSS {max(r[2] for r in runs):.0f} MB  ({repeat} runs)"
        )
    ratio = min(r[0] for r in ours) / min(r[0] for r in theirs)
    medians = statistics.median(r[0] for r in ours) / statistics.median(r[0] for r in theirs)
    cpu = min(r[1] for r in ours) / min(r[1] for r in theirs)
    memory = max(r[2] for r in ours) / max(r[2] for r in theirs)
    print(
        f"ratio jaxdiag/xprof: {medians:.2f} median wall (goal <= 0.35); {ratio:.2f} best wall; {cpu:.2f} best cpu; "
        f"{memory:.2f} peak RSS (goal <= 0.5)"
    )
    print(f"after: {_load()}")
    return ratio


CAPTURE_SNIPPET = textwrap.dedent(
    """
    import sys, jax, jax.numpy as jnp
    steps, logdir = int(sys.argv[1]), sys.argv[2]

    @jax.jit
    def step(w, x):
        for _ in range(20):
            x = jnp.tanh(x @ w) + 0.1
        return w - 1e-3 * x.mean(), x

    def tokenize(text):  # host-side Python, as a data pipeline runs: frames for the Python tracer
        return [hash(word) % 1000 for word in text.split()]

    w = jnp.ones((64, 64)); x = jnp.ones((32, 64))
    step(w, x)[0].block_until_ready()
    jax.profiler.start_trace(logdir)
    for i in range(steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            with jax.profiler.TraceAnnotation("load_batch"):
                batch = [tokenize("a few words of text") for _ in range(200)]
            w, x = step(w, x)
            float(w[0, 0])
    jax.profiler.stop_trace()
    """
)

IN_PROCESS_SNIPPET = textwrap.dedent(
    """
    import sys, time
    import numpy  # its thread keeps every read in this one process, so the three runs read alike
    from jaxdiag.reporting.build import report
    best = float("inf")
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):  # CPU time of this process, whatever else runs
        t0 = time.process_time()
        r = report(sys.argv[1])
        best = min(best, time.process_time() - t0)
    print(best, len(r.frames.events), r.frames.meta.get("python_frames", 0))
    """
)


def in_process(trace: Path, runs: int = 7) -> None:
    """Print the in-process cost of ``report()`` on ``trace`` per event read (goal <= 120 ns): CPU time of one
    process, the best of ``runs``."""
    out = subprocess.run(
        [sys.executable, "-c", IN_PROCESS_SNIPPET, str(trace), str(runs)],
        check=True,
        capture_output=True,
        text=True,
        env=ENV,
    ).stdout.split()
    seconds, events = float(out[0]), int(out[1]) + int(out[2])
    print(
        f"in process, report(): {seconds * 1e3:.1f} ms for {events:,} events read, "
        f"{seconds / events * 1e9:.0f} ns per event (goal <= 120; CPU time, best of {runs})"
    )


def scaling(base_steps: int = 25) -> None:
    """Print end-to-end and in-process cost at 1x, 4x and 16x the steps, and the marginal cost per event."""
    print(f"\nscaling on CPU captures made now ({base_steps} steps x 1, 4, 16); {_load()}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for factor in (1, 4, 16):
            logdir = Path(tmp) / f"x{factor}"
            subprocess.run(
                [sys.executable, "-c", CAPTURE_SNIPPET, str(base_steps * factor), str(logdir)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=ENV,
            )
            end_to_end = min(_run(_ours(logdir)) for _ in range(3))
            out = subprocess.run(
                [sys.executable, "-c", IN_PROCESS_SNIPPET, str(logdir)],
                check=True,
                capture_output=True,
                text=True,
                env=ENV,
            ).stdout.split()
            in_process, events, frames = float(out[0]), int(out[1]), int(out[2])
            rows.append((factor, events + frames, end_to_end[0], end_to_end[1], in_process))
    print(f"  {'':>4} {'events read':>12} {'end to end':>11} {'(cpu)':>8} {'in process':>11} {'marginal':>16}")
    print(f"  {'':>4} {'':>12} {'wall':>11} {'':>8} {'cpu':>11}")
    previous = None
    for factor, n, wall, cpu, inproc in rows:
        marginal = "" if previous is None else f"{(inproc - previous[1]) / (n - previous[0]) * 1e9:8.0f} ns/event"
        print(f"  {factor:>3}x {n:>12,} {wall:>9.3f} s {cpu:>6.3f} s {inproc * 1e3:>8.1f} ms {marginal:>16}")
        previous = (n, inproc)
    print(
        "  events read: every event in the files, Python-tracer frames included (they are skipped, not kept);"
        "\n  marginal: extra in-process time per extra event from the size above; flat means linear."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-scaling", action="store_true")
    args = parser.parse_args()
    trace = args.trace or (DEFAULT_TRACE if DEFAULT_TRACE.exists() else None)
    if trace is None:
        print("no trace given and ../shared/fixtures is absent: skipping the XProf comparison")
    else:
        compare_with_xprof(find_xplane(trace), args.repeat)
        in_process(find_xplane(trace))
    if not args.no_scaling:
        scaling()


if __name__ == "__main__":
    main()

"""Reading a pod's capture: 1, 4, 16 and 64 host files with 1, 2 and all cores.

Each case is a run folder of N host files, each a link to the same real H100
capture under its own host name (``host000.xplane.pb``, ...): every file is
read and parsed on its own, as a pod's files are. Each case loads the run
(``jaxdiag.trace.load.load``: read, merge into one events table, find steps)
in a fresh process using 1, 2 or every core (this process and ``cores - 1``
workers), best of ``--repeat``, and prints:

- wall seconds, and seconds per million events (flat when the cost is linear
  in the number of events; falling with cores);
- the peak memory of the process that holds the merged frames, and of the
  largest worker; and the memory per host beyond one host's, which says how
  the merged frames grow (their string columns are categoricals, shared by all
  hosts; numbers cost the same per event on every host).

Usage:
  python benchmarks/pod_scaling.py [TRACE.xplane.pb] [--hosts 1,4,16,64] [--repeat 1]

Without a trace it uses ../shared/fixtures/h100_mlp when present. Figures from
a machine others are using are noisy: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "fixtures" / "h100_mlp"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3", PYTHONPATH=str(ROOT))

CASE = """
import json, resource, sys, time
t0 = time.perf_counter()
from jaxdiag.trace.load import load
cores = int(sys.argv[2])  # this process reads too: cores - 1 workers beside it
frames = load(sys.argv[1], parallel=cores > 1, workers=max(cores - 1, 1))
wall = time.perf_counter() - t0
print(json.dumps({"wall": wall, "events": len(frames.events), "hosts": len(frames.hosts),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "frames_mb": frames.events.memory_usage(deep=False).sum() / 2**20}))
"""


def _trace(arg: str | None) -> Path:
    path = Path(arg) if arg else DEFAULT_TRACE
    if path.is_dir():
        found = sorted(path.rglob("*.xplane.pb"))
        if not found:
            raise SystemExit(f"no .xplane.pb under {path}")
        path = found[0]
    if not path.is_file():
        raise SystemExit(f"no trace at {path}: give one as the first argument")
    return path


def _pod(trace: Path, hosts: int, root: Path) -> Path:
    run = root / f"pod{hosts}" / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    for h in range(hosts):
        (run / f"host{h:03d}.xplane.pb").symlink_to(trace)
    return run


def _case(run: Path, workers: int, repeat: int) -> dict[str, float]:
    best: dict[str, float] | None = None
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, "-c", CASE, str(run), str(workers)], capture_output=True, text=True, env=ENV
        )
        if done.returncode != 0:
            raise SystemExit(f"case failed: {run} with {workers} workers\n{done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if best is None or got["wall"] < best["wall"]:
            best = got
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--hosts", default="1,4,16,64")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    trace = _trace(args.trace)
    cores = os.cpu_count() or 1
    counts = [int(h) for h in args.hosts.split(",")]
    core_counts = sorted({1, min(2, cores), cores})
    print(
        f"trace: {trace} ({trace.stat().st_size / 2**20:.1f} MB) per host; {cores} cores; "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )
    print(
        f"{'hosts':>5} {'cores':>5} {'events':>11} {'wall s':>8} {'s/M events':>10} {'peak MB':>8} "
        f"{'worker MB':>9} {'frames MB':>9}"
    )
    results: dict[tuple[int, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for hosts in counts:
            run = _pod(trace, hosts, Path(tmp))
            for workers in core_counts:
                r = _case(run, workers, args.repeat)
                results[(hosts, workers)] = r
                print(
                    f"{hosts:>5} {workers:>5} {int(r['events']):>11,} {r['wall']:>8.2f} "
                    f"{r['wall'] / max(r['events'], 1) * 1e6:>10.3f} {r['rss_mb']:>8.0f} "
                    f"{r['worker_rss_mb']:>9.0f} {r['frames_mb']:>9.1f}",
                    flush=True,
                )
    one = results.get((counts[0], core_counts[0]))
    last = results.get((counts[-1], core_counts[0]))
    if one and last and counts[-1] > counts[0]:
        per_host = (last["rss_mb"] - one["rss_mb"]) / (counts[-1] - counts[0])
        print(
            f"memory: {one['rss_mb']:.0f} MB for {counts[0]} host(s), {last['rss_mb']:.0f} MB for {counts[-1]}: "
            f"{per_host:.1f} MB per further host ({last['rss_mb'] / one['rss_mb']:.1f}x for "
            f"{counts[-1] // counts[0]}x the hosts); frames {last['frames_mb'] / max(one['frames_mb'], 1e-9):.1f}x"
        )
    print(f"load average {os.getloadavg()[0]:.2f} at end ({time.strftime('%H:%M:%S')})")


if __name__ == "__main__":
    main()

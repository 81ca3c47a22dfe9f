"""Start-up of ``jaxdiag report --json``: CPU time from process start to each stage, and import times.

Each run is a fresh ``python -m jaxdiag report TRACE --json -o /dev/null`` whose
stages are timed from inside (``time.process_time``, which counts from the start
of the process and only this process: the reading worker's time is its own). The
stages: ``main`` (the command starts), ``fork`` (the reading pool's worker forks),
``imports`` (``reporting.build._import_analyses`` begins and ends: pandas and
every analysis), ``read`` (the loaded trace is handed to the analyses),
``analyses`` (the report is built) and ``exit``. Wall times from ``main`` are
printed beside them, but they depend on what else the machine runs; CPU times do not.

Then ``-X importtime`` (self and cumulative microseconds, median of the runs) for
the modules named with ``--module``. Modules imported with ``importlib.import_module``
(the analyses) bypass ``-X importtime``: their children show at the top level.

Usage:
  python benchmarks/report_startup.py [TRACE] [--repeat 7] [--module jaxdiag.cli.report_cmd ...]

Without a trace argument it uses ../shared/fixtures/h100_transformer when present.
Run it from the checkout to measure (``python -m`` puts the working folder first
on the path), and unset PYTHONDONTWRITEBYTECODE so that its bytecode is cached as
an installed package's is.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from report_speed import DEFAULT_TRACE, find_xplane  # a script beside this one

MODULES = (
    "jaxdiag.cli.app",
    "jaxdiag.cli.report_cmd",
    "jaxdiag.cli.commands",
    "typer",
    "pydantic",
    "jaxdiag.trace.load",
    "jaxdiag.reporting.build",
    "pandas",
)
STAGES = ("main", "fork", "imports_start", "imports_end", "read", "analyses", "exit")

#: Runs the command with its stages timed: wraps the functions that begin and end them.
TIMED = textwrap.dedent(
    """
    import atexit, importlib.abc, importlib.machinery, os, runpy, sys, time

    marks, pid, out = {}, os.getpid(), sys.argv.pop(1)

    def mark(name):
        if os.getpid() == pid:
            marks.setdefault(name, (time.process_time(), time.perf_counter()))

    mark("main")
    fork = os.fork

    def forked():  # the reading pool's worker (multiprocessing forks it); not a child the reader probes with
        if sys._getframe(1).f_globals.get("__name__") == "multiprocessing.popen_fork":
            mark("fork")
        return fork()

    os.fork = forked

    def timed(module, name, before, after):
        inner = getattr(module, name)
        def wrapper(*args, **kwargs):
            mark(before)
            result = inner(*args, **kwargs)
            mark(after)
            return result
        setattr(module, name, wrapper)

    class Timed(importlib.abc.MetaPathFinder):
        # Wraps the stages of reporting.build when the command imports it, where it would without this.

        def find_spec(self, name, path, target=None):
            if name != "jaxdiag.reporting.build":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                timed(module, "_import_analyses", "imports_start", "imports_end")
                timed(module, "build_report", "read", "analyses")

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Timed())

    def written():
        mark("exit")
        t0 = marks["main"][1]
        with open(out, "w") as f:
            f.write(" ".join(f"{k}={c * 1e3:.2f}/{(w - t0) * 1e3:.2f}" for k, (c, w) in marks.items()))

    atexit.register(written)
    sys.argv[0] = "jaxdiag"
    runpy.run_module("jaxdiag", run_name="__main__", alter_sys=True)
    """
)


def stages(trace: Path, repeat: int) -> None:
    """Median CPU (and wall) milliseconds from process start to each stage."""
    runs: list[dict[str, tuple[float, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "marks"
        for _ in range(repeat):
            cmd = [sys.executable, "-c", TIMED, str(out), "report", str(trace), "--json", "-o", os.devnull]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            pairs = re.findall(r"(\w+)=([\d.]+)/([\d.]+)", out.read_text())
            runs.append({k: (float(c), float(w)) for k, c, w in pairs})
    print(f"stages of `jaxdiag report --json` ({repeat} runs; ms from process start, median):")
    print(f"  {'stage':14s} {'cpu':>8s} {'wall from main':>15s}")
    for stage in STAGES:
        got = [r[stage] for r in runs if stage in r]
        if got:
            cpu, wall = statistics.median(c for c, _ in got), statistics.median(w for _, w in got)
            print(f"  {stage:14s} {cpu:8.1f} {wall:15.1f}")
    spans = [r["imports_end"][0] - r["imports_start"][0] for r in runs if "imports_end" in r]
    if spans:
        print(f"  _import_analyses itself: {statistics.median(spans):.1f} ms cpu")


def import_times(trace: Path, repeat: int, modules: tuple[str, ...]) -> None:
    """Median self and cumulative microseconds of ``modules`` in ``-X importtime``."""
    seen: dict[str, list[tuple[int, int]]] = {m: [] for m in modules}
    for _ in range(repeat):
        cmd = [sys.executable, "-X", "importtime", "-m", "jaxdiag", "report", str(trace), "--json", "-o", os.devnull]
        err = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
        found: set[str] = set()
        for line in err.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| \s*(\S+)$", line)
            if m and m.group(3) in seen and m.group(3) not in found:  # a forked worker may print it again
                found.add(m.group(3))
                seen[m.group(3)].append((int(m.group(1)), int(m.group(2))))
    print(f"-X importtime ({repeat} runs; us, median; '-' not imported):")
    for name, got in seen.items():
        if got:
            print(
                f"  {name:28s} self {statistics.median(s for s, _ in got):7.0f}  cumulative {statistics.median(c for _, c in got):7.0f}"
            )
        else:
            print(f"  {name:28s} -")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--module", action="append", help="a module for the import-time table (repeatable)")
    args = parser.parse_args()
    if not args.trace.exists():
        raise SystemExit(f"{args.trace}: no such trace (give one, or see ../shared/fixtures)")
    trace = find_xplane(args.trace)
    print(f"trace: {trace}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    stages(trace, args.repeat)
    import_times(trace, args.repeat, tuple(args.module or MODULES))


if __name__ == "__main__":
    main()

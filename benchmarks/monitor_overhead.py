"""Cost of ``jaxdiag.monitor`` on a training loop of about 10 ms steps, against the same loop without it.

One jitted step (a matmul chain sized at start-up to take about ``--step-ms`` on this
machine) runs in batches of ``--steps`` steps, each step waited for, alternating
between the loop as written and the same loop under a monitor (off on, on off,
...). One monitor runs through each case (its first step, which opens the stream, is
not timed); the batches without it run the loop as written, unmarked, so what is
timed is what each step pays for the monitor (its marks, the stream, the capture
decision) and for the threads beside it. No capture is
triggered (``min_slow_ms`` is set out of reach): a capture window costs what the
profiler costs, for its few steps. Two ways of marking steps are timed: the
loop's own ``mon.step()`` block, and the call wrapper ``jaxdiag run --monitor``
puts around the dominant jitted function of a script. The figure is the median,
over the pairs of adjacent batches, of the ratio of their per-step times
(on / off); the goal is at most 1.01. On a loaded machine the step time itself
swings by more than the goal from batch to batch, so the script also times what
the monitor adds per step directly: the same two ways of marking around a step
that does no device work, in alternating batches of ``--empty-steps``; that
figure, in microseconds, over a 10 ms step is the overhead the noise hides. A control
(the loop against itself, paired the same way) shows how far apart two batches are
with nothing changed: the noise floor of the ratios in this run. See
``README.md`` for the method.

Run: ``python benchmarks/monitor_overhead.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

import jaxdiag
from jaxdiag.monitoring.calls import TimedCall

GOAL = 1.01


def make_step(step_ms: float) -> tuple[Callable[[Any], Any], Any]:
    """A jitted step and its input, the matmul size chosen so that a step takes about ``step_ms``."""

    def body(w):
        for _ in range(4):
            w = jnp.tanh(w @ w) * 0.5
        return w

    step = jax.jit(body)
    size = 64
    while True:
        w = jnp.ones((size, size), jnp.float32) / size
        step(w).block_until_ready()
        took = float("inf")
        for _ in range(7):  # the fastest of a few: a loaded machine only ever adds time
            start = time.perf_counter()
            step(w).block_until_ready()
            took = min(took, (time.perf_counter() - start) * 1e3)
        if took >= step_ms or size >= 4096:
            return step, w
        size = int(size * 1.25)


def timed(run: Callable[[int], None], steps: int) -> float:
    start = time.perf_counter()
    run(steps)
    return (time.perf_counter() - start) / steps


def added_per_step(logdir: str, batches: int, steps: int) -> dict[str, float]:
    """Microseconds the monitor adds to a step that does nothing, per way of marking (median of paired batches)."""

    def nothing(x: Any) -> Any:
        return x

    def loop(n: int) -> None:
        for _ in range(n):
            nothing(1)

    out = {}
    for name in ("mon.step() marks", "call wrapper"):
        diffs = []
        for i in range(batches):
            times = {}
            for monitored in (False, True) if i % 2 == 0 else (True, False):
                if not monitored:
                    times[False] = timed(loop, steps)
                    continue
                mon = jaxdiag.monitor(logdir, min_slow_ms=1e9, reports=False).start()
                try:
                    if name == "call wrapper":
                        call = TimedCall(nothing, mon, "nothing")

                        def run(n: int, call: Any = call) -> None:
                            for _ in range(n):
                                call(1)

                    else:

                        def run(n: int, mon: Any = mon) -> None:
                            for _ in range(n):
                                with mon.step():
                                    nothing(1)

                    run(1)  # the first step opens the stream: not timed
                    times[True] = timed(run, steps)
                finally:
                    mon.stop()
            diffs.append((times[True] - times[False]) * 1e6)
        out[name] = statistics.median(diffs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--empty-steps", type=int, default=2000)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="20 pairs of batches")
    args = parser.parse_args(argv)
    batches = 20 if args.quick else args.batches
    step, w = make_step(args.step_ms)
    logdir = tempfile.mkdtemp(prefix="jaxdiag-monitor-bench-")

    def plain(n: int) -> None:
        for _ in range(n):
            step(w).block_until_ready()

    def marked(mon: Any) -> Callable[[int], None]:
        def run(n: int) -> None:
            for _ in range(n):
                with mon.step():
                    step(w).block_until_ready()

        return run

    def wrapped(mon: Any) -> Callable[[int], None]:
        call = TimedCall(step, mon, "body")

        def run(n: int) -> None:
            for _ in range(n):
                call(w).block_until_ready()

        return run

    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; {batches} pairs of {args.steps}-step batches")
    worst = 0.0
    a, b = [], []
    for i in range(batches):  # the loop against itself: how far apart two batches are with nothing changed
        for first in (True, False) if i % 2 == 0 else (False, True):
            (a if first else b).append(timed(plain, args.steps))
    print(
        f"control, the loop against itself: median of paired batches {statistics.median(y / x for x, y in zip(a, b)):.4f}"
    )
    try:
        for name, make in (("mon.step() marks", marked), ("call wrapper (jaxdiag run --monitor)", wrapped)):
            off, on = [], []
            mon = jaxdiag.monitor(logdir, min_slow_ms=1e9, reports=False).start()
            try:
                monitored_loop = make(mon)
                monitored_loop(args.steps)  # the first step opens the stream: not timed
                for i in range(batches):
                    for monitored in (False, True) if i % 2 == 0 else (True, False):
                        if monitored:
                            on.append(timed(monitored_loop, args.steps))
                        else:
                            off.append(timed(plain, args.steps))
            finally:
                mon.stop()
            ratio = statistics.median(b / a for a, b in zip(off, on))
            worst = max(worst, ratio)
            print(
                f"{name}:\n"
                f"  without  median {statistics.median(off) * 1e3:7.3f} ms/step, min {min(off) * 1e3:7.3f}\n"
                f"  monitor  median {statistics.median(on) * 1e3:7.3f} ms/step, min {min(on) * 1e3:7.3f}\n"
                f"  ratio: median of paired batches {ratio:.4f}, of minima {min(on) / min(off):.4f}"
            )
        added = added_per_step(logdir, batches, args.empty_steps)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    for name, us in added.items():
        print(f"added per step, {name}: {us:.2f} us = {us / (args.step_ms * 1e3):.3%} of a {args.step_ms:g} ms step")
    print(f"worst ratio {worst:.4f} (goal <= {GOAL})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

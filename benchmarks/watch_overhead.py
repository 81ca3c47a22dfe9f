"""Per-call cost of a plain ``jax.jit`` function on cache hits, ``jaxdiag.watch`` on against off.

The same warmed-up jitted functions are timed in alternating batches within one
process, the switch flipped between batches (off on, on off, ...), each batch
``--calls`` calls. The figure is the median, over the ``--batches`` pairs of
adjacent batches, of the ratio of their per-call times (on / off); the ratio of
the fastest batches is shown beside it. The goal is a ratio of at most 1.02.
This follows ``jit_overhead.py``; see ``README.md`` for the method.

Run: ``python benchmarks/watch_overhead.py`` (``--quick`` for a short CI run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import jaxdiag

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jit_overhead import time_batch  # noqa: E402  (the same batch timer for both benchmarks)

GOAL = 1.02


def body(x, y, *, scale, n):
    return (x + y) * scale + n


def make_cases() -> dict[str, Callable[[], Any]]:
    """One call of a plain ``jax.jit`` function per case."""
    x, y = jnp.ones(8), jnp.ones(8)
    tiny = jax.jit(lambda v: v + 1)
    kw = jax.jit(body, static_argnames="n")
    return {
        "one array argument": lambda: tiny(x),
        "two arrays, a keyword and a static argument": lambda: kw(x, y, scale=2.0, n=3),
    }


def measure(call: Callable[[], Any], batches: int, calls: int) -> tuple[list[float], list[float]]:
    """Per-call seconds with watch off and on, batch by batch, the two alternating in pairs."""
    with jaxdiag.watch():  # compiled, and recorded, once
        for _ in range(calls):
            jax.block_until_ready(call())
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(batches):
        for on in (False, True) if i % 2 == 0 else (True, False):
            jaxdiag.watch(on)
            times[on].append(time_batch(call, calls))
    jaxdiag.watch(False)
    return times[False], times[True]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="100 batches of 50 calls")
    args = parser.parse_args(argv)
    batches, calls = (100, 50) if args.quick else (args.batches, args.calls)

    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; {batches} batches x {calls} calls, alternating")
    worst = 0.0
    for name, call in make_cases().items():
        off, on = measure(call, batches, calls)
        ratio = statistics.median(b / a for a, b in zip(off, on))
        worst = max(worst, ratio)
        print(
            f"{name}:\n"
            f"  watch off  median {statistics.median(off) * 1e6:7.2f} us/call, min {min(off) * 1e6:7.2f}\n"
            f"  watch on   median {statistics.median(on) * 1e6:7.2f} us/call, min {min(on) * 1e6:7.2f}\n"
            f"  ratio: median of paired batches {ratio:.3f}, of minima {min(on) / min(off):.3f}"
        )
    records = [r for r in jaxdiag.compiles().itertuples() if r.origin == "watch"]
    print(f"compiles recorded by watch: {len(records)} (each case once, at warm-up)")
    print(f"worst ratio {worst:.3f} (goal <= {GOAL})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

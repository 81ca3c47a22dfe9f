"""Per-call cost of ``jaxdiag.jit`` against ``jax.jit`` on cache hits.

Both jitted functions are warmed up, then timed in alternating batches within
one process (A B, B A, ...), each batch ``--calls`` calls of the same tiny
function. The figure is the median, over the ``--batches`` pairs of adjacent
batches, of the ratio of their per-call times; the ratio of the fastest batches
is shown beside it. The goal is a ratio of at most 1.02.

Run: ``python benchmarks/jit_overhead.py`` (``--quick`` for a short CI run).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import jaxdiag

GOAL = 1.02


def body(x, y, *, scale, n):
    return (x + y) * scale + n


def make_cases() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """For each case, a call through ``jax.jit`` and the same call through ``jaxdiag.jit``."""
    x, y = jnp.ones(8), jnp.ones(8)

    def tiny(v):
        return v + 1

    def tiny_copy(v):  # a separate function object, so the two jits share no cache entry
        return v + 1

    plain, ours = jax.jit(tiny), jaxdiag.jit(tiny_copy)
    plain_kw = jax.jit(body, static_argnames="n")
    ours_kw = jaxdiag.jit(lambda x, y, *, scale, n: body(x, y, scale=scale, n=n), static_argnames="n")
    return {
        "one array argument": (lambda: plain(x), lambda: ours(x)),
        "two arrays, a keyword and a static argument": (
            lambda: plain_kw(x, y, scale=2.0, n=3),
            lambda: ours_kw(x, y, scale=2.0, n=3),
        ),
    }


def time_batch(call: Callable[[], Any], calls: int) -> float:
    """Seconds per call over one batch of ``calls`` calls (waiting for the last result)."""
    start = time.perf_counter()
    for _ in range(calls):
        out = call()
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def measure(
    plain: Callable[[], Any], ours: Callable[[], Any], batches: int, calls: int
) -> tuple[list[float], list[float]]:
    """Per-call seconds of each variant, batch by batch, the two alternating in pairs."""
    for call in (plain, ours):  # compile and warm both
        for _ in range(calls):
            jax.block_until_ready(call())
    times: dict[str, list[float]] = {"plain": [], "ours": []}
    for i in range(batches):
        order = (("plain", plain), ("ours", ours)) if i % 2 == 0 else (("ours", ours), ("plain", plain))
        for name, call in order:
            times[name].append(time_batch(call, calls))
    return times["plain"], times["ours"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="100 batches of 50 calls")
    args = parser.parse_args(argv)
    batches, calls = (100, 50) if args.quick else (args.batches, args.calls)

    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; {batches} batches x {calls} calls, alternating")
    worst = 0.0
    for name, (plain, ours) in make_cases().items():
        p, o = measure(plain, ours, batches, calls)
        # Each pair ran back to back: its ratio cancels load that changes slower than a
        # pair; the median over pairs drops the pairs a burst of load hit on one side.
        ratio = statistics.median(b / a for a, b in zip(p, o))
        worst = max(worst, ratio)
        print(
            f"{name}:\n"
            f"  jax.jit      median {statistics.median(p) * 1e6:7.2f} us/call, min {min(p) * 1e6:7.2f}\n"
            f"  jaxdiag.jit  median {statistics.median(o) * 1e6:7.2f} us/call, min {min(o) * 1e6:7.2f}\n"
            f"  ratio: median of paired batches {ratio:.3f}, of minima {min(o) / min(p):.3f}"
        )
    print(f"worst ratio {worst:.3f} (goal <= {GOAL})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

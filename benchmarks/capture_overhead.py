"""Capture overhead: a training loop with and without ``@jaxdiag.step``.

Three variants of the same loop, each with its own freshly compiled step:
  plain     ``jax.jit`` train step
  decorated ``@jaxdiag.step`` with no logdir (numbering and token counting only)
  capturing ``@jaxdiag.step`` with a logdir, every timed step inside the capture window

Each variant runs ``--steps`` steps per round (each step waits for its loss,
as real loops that log do); rounds of the three alternate, and the figure is the
median over rounds of the per-step time ratio against ``plain`` in the same round.
Capture-on includes the profiler's own cost (device and host tracers, Python
tracer off), which is what a user pays inside the window.

Usage:
  python benchmarks/capture_overhead.py [--steps 50] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp

import jaxdiag


def loss_fn(w, x):
    h = jnp.tanh(x @ w)
    return jnp.mean(h * h)


def step_fn(w, x):
    loss, g = jax.value_and_grad(loss_fn)(w, x)
    return w - 1e-3 * g, loss


def run(step, steps: int, w, x) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        w, loss = step(w, x)
        float(loss)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    w, x = jnp.ones((256, 256)) * 0.01, jnp.ones((128, 256))
    with tempfile.TemporaryDirectory() as logdir:
        total = args.rounds * (args.steps + 1) + 1
        variants = {
            "plain": jax.jit(step_fn),
            "decorated": jaxdiag.step(step_fn, tokens=lambda w, x: x.shape[0]),
            "capturing": jaxdiag.step(step_fn, tokens=lambda w, x: x.shape[0], logdir=logdir, profile_steps=(1, total)),
        }
        for step in variants.values():  # compile, and open the capture window
            run(step, 1, w, x)
        ratios: dict[str, list[float]] = {"decorated": [], "capturing": []}
        per_step: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            times = {name: run(step, args.steps, w, x) for name, step in variants.items()}
            for name, t in times.items():
                per_step[name].append(t)
            for name in ratios:
                ratios[name].append(times[name] / times["plain"])
        variants["capturing"].close()
    for name, ts in per_step.items():
        print(f"{name:>10}: median {statistics.median(ts) * 1e3:7.3f} ms/step")
    for name, rs in ratios.items():
        print(f"{name:>10} / plain: median ratio {statistics.median(rs):.3f}  (min {min(rs):.3f}, max {max(rs):.3f})")


if __name__ == "__main__":
    main()

"""A small training run on CPU with planted problems, captured with jax.profiler.

Run it, then read the diagnosis:

    python examples/train_cpu.py /tmp/jaxdiag-demo
    jaxdiag report /tmp/jaxdiag-demo

Planted, so that the report has something to find:
  * ``load_batch`` sleeps 15 ms every third step: an input-pipeline stall;
  * the batch grows from 32 to 48 rows at step 6: a shape recompile of ``train_step``;
  * ``lr`` turns from a Python float into a ``jnp.float32`` at step 9: a weak-type recompile;
  * ``tiny_ops`` runs 200 unrolled scalar updates: a small-op soup;
  * ``float(loss)`` every step: a device-to-host sync.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdiag

STEPS = 14
TOKENS_PER_ROW = 1  # one sample per row


def init(key, sizes=(64, 256, 256, 10)):
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(k, (m, n)) / np.sqrt(m), jnp.zeros((n,))) for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    ]


def loss_fn(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    logits = x @ w + b
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def train_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree.map(lambda p, g: p - lr * g, params, grads)
    return params, loss


@jaxdiag.jit
def tiny_ops(buf):
    for i in range(200):
        buf = buf.at[i % buf.shape[0]].add(1.0) * 0.999
    return buf


def batch(rng, rows):
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    y = rng.integers(0, 10, rows)
    return jnp.asarray(x), jnp.asarray(y)


def main(logdir: str) -> None:
    jaxdiag.configure(log_dir=logdir)  # every compile of the run, for `jaxdiag compiles`
    # One decorator: jit (recording every compile), number and annotate the steps,
    # capture steps 1-14 (step 0 compiles), and count samples per step.
    step = jaxdiag.step(
        train_step, samples=lambda params, x, y, lr: x.shape[0], logdir=logdir, profile_steps=(1, STEPS)
    )
    rng = np.random.default_rng(0)
    params = init(jax.random.PRNGKey(0))
    buf = jnp.zeros((16,))
    for i in range(STEPS):
        rows = 32 if i < 6 else 48
        lr = 0.01 if i < 9 else jnp.float32(0.01)
        with jax.profiler.TraceAnnotation("load_batch"):
            if i % 3 == 0:
                time.sleep(0.015)
            x, y = batch(rng, rows)
        params, loss = step(params, x, y, lr)
        buf = tiny_ops(buf)
        loss_value = float(loss)
    print(f"trained {STEPS} steps, last loss {loss_value:.3f}; trace in {step.run_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/jaxdiag-demo")

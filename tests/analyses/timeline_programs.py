"""Small training programs with the patterns real ones have, each captured with ``jax.profiler``.

Run as ``python -m tests.analyses.timeline_programs OUT [PATTERN ...]``: each pattern
writes its capture under ``OUT/PATTERN``. Every program compiles its step before the
trace (the remainder batch compiles once more inside it) and never reads a value in
its training loop unless the pattern says so; the trace stops after the device is done.

- ``no_read``: a loop that never reads a value (the host runs ahead of the device).
- ``eval_between``: two epochs, an evaluation (another program, read back) after each.
- ``remainder``: an epoch whose last batch is smaller (one more compile, same function).
- ``scan``: a model whose layers run under ``lax.scan``.
- ``nnx``: a Flax NNX model trained with ``nnx.jit`` and optax.
- ``annotated_no_read``: ``no_read`` with each step in a ``StepTraceAnnotation``.
- ``annotated_eval_between``: annotated steps that never read (the host runs far ahead), two
  epochs, an evaluation of three batches read back once after each (queued behind the steps).
- ``annotated_eager_lr``: annotated steps that never read, each computing its learning rate
  eagerly (two small programs a step, a conversion and a multiply), with warm-up steps the host
  never waited for still queued when the trace begins.
- ``annotated_eager_lr_loading``: ``annotated_eager_lr`` whose loop loads each batch (half a
  millisecond on the host) before the step's mark, with four warm-up steps still queued: the warm-up's
  learning-rate programs run in a few early steps' loading time, the steps' own after the loop, so by
  time those programs look like work between steps.
- ``captured_eager_lr``: the same loop under ``jaxdiag.capture`` after six warm-up steps, the
  steps marked by ``cap.step()`` (the capture waits for the device at its end).
- ``setup_then_eval``: ``eval_between`` whose parameters are rescaled by another program, twice,
  inside the trace before the loop (work before step 0).
- ``read_recompile``: reads the loss every step; one batch of a new size mid-run recompiles
  the step with nothing in flight.
- ``eager_eval_no_read``: ``no_read`` in two epochs with an eager (unjitted) evaluation after
  each: its ops compile once per new shape, in the first epoch only.
- ``jitted_eval_no_read``: the same with the evaluation under one ``jax.jit`` (one program to compile).
- ``fresh_jit_eval_no_read``: the same, jitted anew each epoch: it compiles at every evaluation.
- ``optimizer_init``: zeros for four differently shaped parameters made eagerly before step 0.
- ``first_step_eager``: profiled from the start, as a script is: data made eagerly, a look at a few
  rows, then a loop that reads the loss every step and takes each batch by indexing the data with
  NumPy (an eager gather), so the step and the batch's gather first compile in step 0.
- ``first_step_remainder``: ``first_step_eager`` whose last batch is smaller: the gather and the step
  compile once more in the last step.
"""

from __future__ import annotations

import sys
from pathlib import Path

STEPS = 12


def _mlp_step():
    import jax
    import jax.numpy as jnp

    def loss_fn(params, x, y):
        h = jnp.tanh(x @ params["w1"])
        return jnp.mean((h @ params["w2"] - y) ** 2)

    @jax.jit
    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    def init(width: int = 384):
        k1, k2 = jax.random.split(jax.random.PRNGKey(0))
        return {"w1": jax.random.normal(k1, (256, width)) * 0.05, "w2": jax.random.normal(k2, (width, 64)) * 0.05}

    return train_step, loss_fn, init


def _batches(n: int, rows: int = 256):
    import jax

    keys = jax.random.split(jax.random.PRNGKey(1), n)
    xs = [jax.random.normal(k, (rows, 256)) for k in keys]
    ys = [jax.random.normal(k, (rows, 64)) for k in keys]
    jax.block_until_ready((xs, ys))
    return xs, ys


def no_read(logdir: str) -> None:
    import jax

    train_step, _loss, init = _mlp_step()
    params = init()
    xs, ys = _batches(STEPS)
    jax.block_until_ready(train_step(params, xs[0], ys[0]))
    jax.profiler.start_trace(logdir)
    for i in range(STEPS):
        params, _ = train_step(params, xs[i], ys[i])
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def eval_between(logdir: str) -> None:
    import jax
    import jax.numpy as jnp

    train_step, loss_fn, init = _mlp_step()

    @jax.jit
    def accuracy(params, x, y):
        # Deliberately heavier than a step: many batches at once.
        h = jnp.tanh(jnp.einsum("bnd,dw->bnw", x, params["w1"]))
        return jnp.mean(jnp.abs(jnp.einsum("bnw,wo->bno", h, params["w2"]) - y) < 1.0)

    params = init()
    xs, ys = _batches(STEPS)
    ex, ey = jax.numpy.stack(xs[:8]), jax.numpy.stack(ys[:8])
    jax.block_until_ready(train_step(params, xs[0], ys[0]))
    float(accuracy(params, ex, ey))
    jax.profiler.start_trace(logdir)
    half = STEPS // 2
    for epoch in range(2):
        for i in range(epoch * half, (epoch + 1) * half):
            params, loss = train_step(params, xs[i], ys[i])
        if epoch == 0:
            float(accuracy(params, ex, ey))
            float(accuracy(params, ex, ey))
    float(accuracy(params, ex, ey))
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def remainder(logdir: str) -> None:
    import jax

    train_step, _loss, init = _mlp_step()
    params = init()
    xs, ys = _batches(STEPS)
    xs[-1], ys[-1] = xs[-1][:100], ys[-1][:100]  # the epoch's remainder batch
    jax.block_until_ready(train_step(params, xs[0], ys[0]))
    jax.profiler.start_trace(logdir)
    for i in range(STEPS):
        params, loss = train_step(params, xs[i], ys[i])
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def scan(logdir: str) -> None:
    import jax
    import jax.numpy as jnp

    def forward(layers, x):
        def layer(h, w):
            return jnp.tanh(h @ w), None

        h, _ = jax.lax.scan(layer, x, layers)
        return h

    @jax.jit
    def train_step(layers, x, y):
        loss, grads = jax.value_and_grad(lambda ls: jnp.mean((forward(ls, x) - y) ** 2))(layers)
        return layers - 0.01 * grads, loss

    layers = jax.random.normal(jax.random.PRNGKey(0), (6, 192, 192)) * 0.05
    keys = jax.random.split(jax.random.PRNGKey(1), STEPS)
    xs = [jax.random.normal(k, (256, 192)) for k in keys]
    jax.block_until_ready(xs)
    jax.block_until_ready(train_step(layers, xs[0], xs[0]))
    jax.profiler.start_trace(logdir)
    for i in range(STEPS):
        layers, loss = train_step(layers, xs[i], xs[i])
    jax.block_until_ready(layers)
    jax.profiler.stop_trace()


def nnx(logdir: str) -> None:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx as fnnx

    class Model(fnnx.Module):
        def __init__(self, rngs):
            self.a = fnnx.Linear(256, 384, rngs=rngs)
            self.b = fnnx.Linear(384, 64, rngs=rngs)

        def __call__(self, x):
            return self.b(jax.nn.relu(self.a(x)))

    model = Model(fnnx.Rngs(0))
    optimizer = fnnx.Optimizer(model, optax.adam(1e-3), wrt=fnnx.Param)

    @fnnx.jit
    def train_step(model, optimizer, x, y):
        def loss_fn(m):
            return jnp.mean((m(x) - y) ** 2)

        loss, grads = fnnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    xs, ys = _batches(STEPS)
    jax.block_until_ready(train_step(model, optimizer, xs[0], ys[0]))
    jax.profiler.start_trace(logdir)
    for i in range(STEPS):
        train_step(model, optimizer, xs[i], ys[i])
    jax.block_until_ready(fnnx.state(model))
    jax.profiler.stop_trace()


def annotated_no_read(logdir: str) -> None:
    import jax

    train_step, _loss, init = _mlp_step()
    params = init()
    xs, ys = _batches(STEPS)
    jax.block_until_ready(train_step(params, xs[0], ys[0]))
    jax.profiler.start_trace(logdir)
    for i in range(STEPS):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            params, _ = train_step(params, xs[i], ys[i])
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def annotated_eval_between(logdir: str) -> None:
    import jax

    train_step, _loss, init = _mlp_step()

    @jax.jit
    def accuracy(params, x, y):
        return ((jax.numpy.tanh(x @ params["w1"]) @ params["w2"] - y) ** 2 < 1.0).mean()

    params = init()
    xs, ys = _batches(STEPS)
    jax.block_until_ready(train_step(params, xs[0], ys[0]))
    float(accuracy(params, xs[0], ys[0]))
    jax.profiler.start_trace(logdir)
    half = STEPS // 2
    for epoch in range(2):
        for i in range(epoch * half, (epoch + 1) * half):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params, _ = train_step(params, xs[i], ys[i])
        jax.device_get([accuracy(params, xs[j], ys[j]) for j in range(3)])  # queued behind the steps
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def _eager_lr_step():
    import jax

    _step, loss_fn, init = _mlp_step()

    @jax.jit
    def train_step(params, x, y, lr):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return train_step, init


def annotated_eager_lr(logdir: str) -> None:
    _annotated_eager_lr(logdir, warm_up=8, loading_s=0.0)


def annotated_eager_lr_loading(logdir: str) -> None:
    _annotated_eager_lr(logdir, warm_up=4, loading_s=0.0005)


def _annotated_eager_lr(logdir: str, warm_up: int, loading_s: float) -> None:
    import time

    import jax
    import jax.numpy as jnp

    train_step, init = _eager_lr_step()
    params = init(width=1024)
    xs, ys = _batches(STEPS)
    jax.block_until_ready(train_step(params, xs[0], ys[0], jnp.float32(0.01) * 0.99))
    for i in range(warm_up):  # a warm-up the host never waits for: still queued when the trace begins
        params, _ = train_step(params, xs[i], ys[i], jnp.float32(0.01) * 0.99**i)
    jax.profiler.start_trace(logdir)
    for i in range(STEPS):
        if loading_s:
            time.sleep(loading_s)  # loading the batch, before the step's mark
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            lr = jnp.float32(0.01) * 0.99**i  # eager: two programs of JAX's own, every step
            params, _ = train_step(params, xs[i], ys[i], lr)
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def captured_eager_lr(logdir: str) -> None:
    import jax
    import jax.numpy as jnp

    import jaxdiag

    train_step, init = _eager_lr_step()
    params = init(width=1024)
    xs, ys = _batches(STEPS)
    jax.block_until_ready(train_step(params, xs[0], ys[0], jnp.float32(0.01) * 0.99))
    with jaxdiag.capture(logdir, skip=6, take=STEPS - 6) as cap:  # the usual "after warm-up" window
        for i in range(STEPS):
            with cap.step():
                lr = jnp.float32(0.01) * 0.99**i  # eager: two programs of JAX's own, every step
                params, _ = train_step(params, xs[i], ys[i], lr)
    jax.block_until_ready(params)


def setup_then_eval(logdir: str) -> None:
    import jax

    train_step, _loss, init = _mlp_step()

    @jax.jit
    def accuracy(params, x, y):  # many batches at once: a few milliseconds
        h = jax.numpy.tanh(jax.numpy.einsum("bnd,dw->bnw", x, params["w1"]))
        return jax.numpy.mean(jax.numpy.abs(jax.numpy.einsum("bnw,wo->bno", h, params["w2"]) - y) < 1.0)

    @jax.jit
    def rescale(params):
        return jax.tree.map(lambda p: p * 0.999 + 0.001 * jax.numpy.tanh(p), params)

    params = init()
    xs, ys = _batches(STEPS)
    ex, ey = jax.numpy.stack(xs[:8]), jax.numpy.stack(ys[:8])
    jax.block_until_ready((train_step(params, xs[0], ys[0]), rescale(params)))
    float(accuracy(params, ex, ey))
    jax.profiler.start_trace(logdir)
    params = rescale(rescale(params))  # set-up, not read: queued before the loop
    for i in range(STEPS):
        params, _ = train_step(params, xs[i], ys[i])
        if i == STEPS // 2 - 1:
            float(accuracy(params, ex, ey))
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def read_recompile(logdir: str) -> None:
    import jax

    train_step, _loss, init = _mlp_step()
    params = init()
    xs, ys = _batches(STEPS)
    xs[RECOMPILE_AT], ys[RECOMPILE_AT] = xs[RECOMPILE_AT][:96], ys[RECOMPILE_AT][:96]  # one new shape mid-run
    jax.block_until_ready(train_step(params, xs[0], ys[0]))
    jax.profiler.start_trace(logdir)
    for i in range(STEPS):
        params, loss = train_step(params, xs[i], ys[i])
        float(loss)  # read every step: nothing is in flight when the new shape compiles
    jax.profiler.stop_trace()


def _metrics(params, x, y):
    """An evaluation's few figures, as evaluation code computes them: about a dozen operations."""
    import jax.numpy as jnp

    out = jnp.tanh(x @ params["w1"]) @ params["w2"]
    err = jnp.abs(out - y)
    return jnp.mean(err), jnp.mean(err < 1.0), jnp.max(err), jnp.sum(out**2)


def _eval_each_epoch(logdir: str, evaluation) -> None:
    """Two epochs of steps that never read, then ``evaluation(epoch)(params, x, y)``, read back."""
    import jax

    train_step, _loss, init = _mlp_step()
    params = init()
    xs, ys = _batches(STEPS)
    ex, ey = xs[0][:72], ys[0][:72]  # an evaluation batch of its own size
    jax.block_until_ready(train_step(params, xs[0], ys[0]))
    jax.profiler.start_trace(logdir)
    half = STEPS // 2
    for epoch in range(2):
        for i in range(epoch * half, (epoch + 1) * half):
            params, _ = train_step(params, xs[i], ys[i])
        [float(m) for m in evaluation(epoch)(params, ex, ey)]
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def eager_eval_no_read(logdir: str) -> None:
    # Eager evaluation, not jitted: each op compiles once per new shape, in the first epoch only.
    _eval_each_epoch(logdir, lambda epoch: _metrics)


def jitted_eval_no_read(logdir: str) -> None:
    """``eager_eval_no_read`` with the advice of its work-between-steps finding applied: the evaluation
    under one ``jax.jit``, which compiles one program for its shape where the eager code compiled one per op."""
    import jax

    evaluate = jax.jit(_metrics)
    _eval_each_epoch(logdir, lambda epoch: evaluate)


def fresh_jit_eval_no_read(logdir: str) -> None:
    """The evaluation jitted anew each epoch (a new function object): it compiles again at every evaluation."""
    import jax

    _eval_each_epoch(logdir, lambda epoch: jax.jit(lambda p, x, y: _metrics(p, x, y)))


def optimizer_init(logdir: str) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    @jax.jit
    def train_step(params, moments, x):
        grads = jax.grad(lambda p: jnp.mean(jnp.tanh(x @ p["a"]) @ p["b"] + p["c"].sum() + p["d"].sum()))(params)
        moments = jax.tree.map(lambda m, g: 0.9 * m + g, moments, grads)
        return jax.tree.map(lambda p, m: p - 0.01 * m, params, moments), moments

    shapes = {"a": (256, 320), "b": (320, 48), "c": (48,), "d": (7, 9)}
    params = {k: jnp.asarray(np.full(s, 0.01, np.float32)) for k, s in shapes.items()}
    xs, _ys = _batches(STEPS)
    warm = {k: jnp.asarray(np.zeros(s, np.float32)) for k, s in shapes.items()}  # no compile of zeros yet
    jax.block_until_ready(train_step(params, warm, xs[0]))
    jax.profiler.start_trace(logdir)
    moments = jax.tree.map(jnp.zeros_like, params)  # an optimizer's init: zeros of each shape, compiled once each
    for i in range(STEPS):
        params, moments = train_step(params, moments, xs[i])
    jax.block_until_ready(params)
    jax.profiler.stop_trace()


def _first_step_eager(logdir: str, last_rows: int) -> None:
    import jax
    import numpy as np

    train_step, _loss, init = _mlp_step()
    rows = 64
    jax.profiler.start_trace(logdir)  # before anything compiles
    key = jax.random.PRNGKey(2)
    data_x, data_y = jax.random.normal(key, (STEPS * rows, 256)), jax.random.normal(key, (STEPS * rows, 64))
    params = init()
    float(data_x[np.arange(5)].sum())  # a look at a few rows: a gather of another shape
    for i in range(STEPS):
        batch = np.arange(i * rows, i * rows + (last_rows if i == STEPS - 1 else rows))
        params, loss = train_step(params, data_x[batch], data_y[batch])
        float(loss)
    jax.profiler.stop_trace()


def first_step_eager(logdir: str) -> None:
    _first_step_eager(logdir, 64)


def first_step_remainder(logdir: str) -> None:
    _first_step_eager(logdir, 40)


#: The step at which ``read_recompile`` compiles a new shape.
RECOMPILE_AT = 6

#: The programs whose steps are inferred from executions.
PATTERNS = {f.__name__: f for f in (no_read, eval_between, remainder, scan, nnx)}
ANNOTATED = {
    f.__name__: f
    for f in (
        annotated_no_read,
        annotated_eval_between,
        annotated_eager_lr,
        annotated_eager_lr_loading,
        captured_eager_lr,
    )
}
#: Programs with work before the first step.
SETUP = {f.__name__: f for f in (setup_then_eval,)}
#: Programs that compile inside the capture outside the steady loop, or mid-run with nothing in flight.
COMPILING = {
    f.__name__: f
    for f in (
        read_recompile,
        eager_eval_no_read,
        jitted_eval_no_read,
        fresh_jit_eval_no_read,
        optimizer_init,
        first_step_eager,
        first_step_remainder,
    )
}


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    every = {**PATTERNS, **ANNOTATED, **SETUP, **COMPILING}
    for name in argv[1:] or list(every):
        every[name](str(out / name))


if __name__ == "__main__":
    main(sys.argv[1:])

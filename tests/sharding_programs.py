"""Real sharded JAX programs on the 8 forced CPU devices, with what each should show.

Each scenario runs ``jaxdiag.jit`` functions on a real mesh and returns the compile
records they produced (as dicts). Results are cached per session: the sharding,
analysis and CLI tests read the same records.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

MESH_2X4 = ((2, 4), ("data", "model"))


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Records of one scenario, and the function whose records matter."""

    records: tuple[dict[str, Any], ...]
    function: str


def mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    import jax
    from jax.sharding import AxisType

    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))


def put(x: Any, m: Any, *spec: Any) -> Any:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.device_put(x, NamedSharding(m, PartitionSpec(*spec)))


def _mlp_loss(params: Any, x: Any) -> Any:
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"]) ** 2)


def _run(fn: Any, *calls: tuple[Any, ...]) -> tuple[dict[str, Any], ...]:
    import jax

    from jaxdiag.recording import compile_log

    with compile_log.collecting() as got:
        for args in calls:
            jax.block_until_ready(fn(*args))
    return tuple(r.to_dict() for r in got.records)


@functools.lru_cache(maxsize=None)
def data_parallel() -> Scenario:
    """Batch sharded over 8 devices, parameters replicated: gradients all-reduced over ``data``."""
    import jax
    import jax.numpy as jnp

    import jaxdiag.recording.wrapper as w

    m = mesh((8,), ("data",))

    @w.jit
    def dp_step(params, x):
        loss, grads = jax.value_and_grad(_mlp_loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    params = {"w1": put(jnp.ones((64, 128)), m), "w2": put(jnp.ones((128, 32)), m)}
    x = put(jnp.ones((256, 64)), m, "data")
    return Scenario(_run(dp_step, (params, x)), "dp_step")


@functools.lru_cache(maxsize=None)
def tensor_parallel() -> Scenario:
    """Megatron MLP on a 2x4 mesh: column- then row-parallel weights, batch over ``data``."""
    import jax
    import jax.numpy as jnp

    import jaxdiag.recording.wrapper as w

    m = mesh(*MESH_2X4)

    @w.jit
    def tp_step(params, x):
        grads = jax.grad(_mlp_loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w1": put(jnp.ones((64, 256)), m, None, "model"), "w2": put(jnp.ones((256, 64)), m, "model", None)}
    x = put(jnp.ones((64, 64)), m, "data", None)
    return Scenario(_run(tp_step, (params, x)), "tp_step")


@functools.lru_cache(maxsize=None)
def bad_spec() -> Scenario:
    """A weight split by rows over ``model`` while its input is split by batch over ``data``:
    the compiler all-gathers the whole 1 MiB weight over ``model`` on every call."""
    import jax.numpy as jnp

    import jaxdiag.recording.wrapper as w

    m = mesh(*MESH_2X4)

    @w.jit
    def bad_step(params, x):
        return jnp.tanh(x @ params["w"]).sum(axis=1)

    params = {"w": put(jnp.ones((512, 512)), m, "model", None)}
    x = put(jnp.ones((2048, 512)), m, "data", None)
    return Scenario(_run(bad_step, (params, x), (params, x)), "bad_step")


@functools.lru_cache(maxsize=None)
def sharding_change() -> Scenario:
    """The same function called with its batch split over ``data``, then over ``model``: a recompile."""
    import jax.numpy as jnp

    import jaxdiag.recording.wrapper as w

    m = mesh(*MESH_2X4)

    @w.jit
    def moved(w_, x):
        return x @ w_

    wt = put(jnp.ones((64, 64)), m)
    return Scenario(
        _run(moved, (wt, put(jnp.ones((64, 64)), m, "data")), (wt, put(jnp.ones((64, 64)), m, "model"))), "moved"
    )


@dataclasses.dataclass(frozen=True)
class Capture:
    """A real CPU capture of the bad-spec and data-parallel steps, with the compile log beside it."""

    logdir: Path
    steps: int = 3


def capture(logdir: Path) -> Capture:
    """Profile 3 steps of ``bad_step`` and ``dp_step``; the compile log goes into ``logdir``."""
    import jax
    import jax.numpy as jnp

    import jaxdiag.recording.wrapper as w
    from jaxdiag.recording import compile_log

    m2, m8 = mesh(*MESH_2X4), mesh((8,), ("data",))

    @w.jit
    def bad_step(params, x):
        return jnp.tanh(x @ params["w"]).sum(axis=1)

    @w.jit
    def dp_step(params, x):
        loss, grads = jax.value_and_grad(_mlp_loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    bad_args = ({"w": put(jnp.ones((512, 512)), m2, "model", None)}, put(jnp.ones((2048, 512)), m2, "data", None))
    dp_params = {"w1": put(jnp.ones((64, 128)), m8), "w2": put(jnp.ones((128, 32)), m8)}
    x = put(jnp.ones((256, 64)), m8, "data")
    previous = compile_log.LOG.sink
    compile_log.configure(log_dir=logdir)
    try:
        jax.block_until_ready(bad_step(*bad_args))
        jax.block_until_ready(dp_step(dp_params, x))
        jax.profiler.start_trace(str(logdir))
        try:
            for i in range(3):
                with jax.profiler.StepTraceAnnotation("train", step_num=i):
                    jax.block_until_ready(bad_step(*bad_args))
                    dp_params, _ = dp_step(dp_params, x)
                    jax.block_until_ready(dp_params)
        finally:
            jax.profiler.stop_trace()
    finally:
        with compile_log.LOG._lock:
            compile_log.LOG.sink = previous
    time.sleep(0)  # the profiler has flushed once stop_trace returns
    return Capture(logdir)

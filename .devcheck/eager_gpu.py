"""Eager optimizer update vs one jit, on the GPU, captured with jax.profiler alone."""
import os, sys, time
import jax, jax.numpy as jnp
out = sys.argv[1]
print(jax.__version__, jax.devices())

def loss(params, x):
    for w, b in params:
        x = jnp.tanh(x @ w + b)
    return jnp.mean(x**2)

def update(params, mom, grads):
    mom = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, mom, grads)
    return jax.tree_util.tree_map(lambda p, m: p - 0.01 * m, params, mom), mom

gradient = jax.jit(jax.value_and_grad(loss))
def eager_step(params, mom, x):
    value, grads = gradient(params, x)
    return (value, *update(params, mom, grads))
@jax.jit
def fused_step(params, mom, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return (value, *update(params, mom, grads))

for name, step in (("eager", eager_step), ("fused", fused_step)):
    key = jax.random.key(0)
    params = [(jax.random.normal(jax.random.fold_in(key, i), (256, 256)) / 16, jnp.zeros(256)) for i in range(6)]
    mom = jax.tree_util.tree_map(jnp.zeros_like, params)
    x = jnp.ones((64, 256))
    for _ in range(3):
        value, params, mom = step(params, mom, x); float(value)
    jax.profiler.start_trace(os.path.join(out, name))
    t = time.perf_counter()
    for i in range(12):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            value, params, mom = step(params, mom, x)
            float(value)
    print(name, "ms/step", (time.perf_counter() - t) / 12 * 1000)
    jax.profiler.stop_trace()

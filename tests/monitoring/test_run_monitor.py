"""``jaxdiag run --monitor DIR script.py``: a script with no changes gets its steps timed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from jaxdiag.monitoring.stream import read_stream, stream_files

SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp

    def loss(w, x):
        return ((x @ w) ** 2).mean()

    @jax.jit
    def evaluate(w):  # compiled first, and cheaper than the train step: not the step
        return w.sum()

    train_step = jax.jit(lambda w, x: w - 0.01 * jax.grad(loss)(w, x))
    w = jnp.ones((32, 32))
    print("eval", float(evaluate(w)))
    for i in range(25):
        w = train_step(w, jnp.ones((8, 32)))
        if i % 10 == 0:
            evaluate(w)
    print("done", float(w[0, 0]))
    """
)


def test_a_script_without_marks_is_timed_by_its_train_step_calls(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "run", "--monitor", str(tmp_path / "mon"), "--no-summary", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "done" in out.stdout
    (path,) = stream_files(tmp_path / "mon")
    lines, bad = read_stream(path)
    steps = [line for line in lines if "event" not in line]
    assert bad == 0
    assert [s["step"] for s in steps] == list(range(25))  # one per train_step call, evaluate's calls not counted
    assert "<lambda>" in steps[0]["compiles"]


EQUINOX = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, equinox as eqx

    class Model(eqx.Module):
        w: jax.Array

    @eqx.filter_jit
    def train_step(model, x):
        return eqx.tree_at(lambda m: m.w, model, model.w - 0.01 * (x.T @ (x @ model.w)))

    model = Model(jnp.ones((8, 8)))
    for i in range(12):
        model = train_step(model, jnp.ones((4, 8)))
    """
)

NNX = textwrap.dedent(
    """
    import jax.numpy as jnp
    from flax import nnx

    model = nnx.Linear(8, 8, rngs=nnx.Rngs(0))

    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    for i in range(12):
        train_step(model, jnp.ones((4, 8)))
    """
)


@pytest.mark.parametrize("source", [EQUINOX, NNX], ids=["eqx.filter_jit", "nnx.jit"])
def test_library_jitted_train_steps_are_found_through_their_wrappers(tmp_path, source):
    script = tmp_path / "train.py"
    script.write_text(source)
    out = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "run", "--monitor", str(tmp_path / "mon"), "--no-summary", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "cannot be timed" not in out.stderr
    (path,) = stream_files(tmp_path / "mon")
    steps = [line for line in read_stream(path)[0] if "event" not in line]
    assert [s["step"] for s in steps] == list(range(12))

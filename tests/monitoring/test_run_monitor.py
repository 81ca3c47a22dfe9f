"""``jaxdiag run --monitor DIR script.py``: a script with no changes gets its steps timed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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

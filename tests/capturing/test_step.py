"""``@jaxdiag.step``: one decorator gives numbered, annotated, captured steps with tokens."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdiag
from jaxdiag.capturing.sidecar import read_sidecars
from jaxdiag.recording import compile_log


def make_step(logdir, **kw):
    @jaxdiag.step(tokens=lambda w, batch: batch.size, logdir=logdir, profile_steps=(1, 4), donate_argnums=0, **kw)
    def train_step(w, batch):
        loss = jnp.mean((batch @ w) ** 2)
        return w - 0.01 * jax.grad(lambda w: jnp.mean((batch @ w) ** 2))(w), loss

    return train_step


def test_decorator_numbers_annotates_and_counts_tokens(tmp_path):
    compile_log.clear()  # other tests here compile the same make_step.<locals>.train_step
    train_step = make_step(tmp_path)
    w = jnp.ones((16, 16))
    for i in range(6):
        w, loss = train_step(w, jnp.ones((4 if i < 2 else 8, 16)))
        float(loss)
    assert train_step.step_num == 6
    run_dir = train_step.run_dir
    assert run_dir is not None
    facts = read_sidecars(run_dir)
    assert facts.tokens_per_step() == {1: 64.0, 2: 128.0, 3: 128.0}
    # the shape change at step 2 recompiled inside the window: its record is in the sidecar, after
    # the first compile (step 0, before the window), which the sidecar carries marked as such
    assert [
        (r["compile_index"], r.get("before_capture", False)) for r in facts.compile_log if r["function"] == "train_step"
    ] == [(1, True), (2, False)]
    frames = jaxdiag.load(run_dir)
    assert sorted(frames.steps["step"].unique()) == [1, 2, 3]


def test_decorated_step_keeps_jit_semantics(tmp_path):
    train_step = make_step(tmp_path / "logs")
    w = jnp.ones((16, 16))
    batch = jnp.ones((4, 16))
    expected = jax.jit(train_step.__wrapped__)(jnp.ones((16, 16)), batch)
    got = train_step(w, batch)
    np.testing.assert_allclose(got[0], expected[0])
    assert train_step.__name__ == "train_step"
    assert "stablehlo" in train_step.lower(jnp.ones((16, 16)), batch).as_text()
    with pytest.warns(RuntimeWarning, match="window starting at step 1 never opened"):
        train_step.close()


def test_exception_in_the_step_propagates_and_closes_the_capture(tmp_path):
    @jaxdiag.step(logdir=tmp_path, profile_steps=(0, 5))
    def bad_step(x):
        return x @ jnp.ones((3, 3))  # shape error once x is not (n, 3)

    bad_step(jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="dot_general requires contracting dimensions"):
        bad_step(jnp.ones((2, 4)))
    assert bad_step.run_dir is not None and list(bad_step.run_dir.glob("*.xplane.pb"))


def test_without_logdir_nothing_is_profiled(tmp_path):
    @jaxdiag.step(tokens=10)
    def plain(x):
        return x + 1

    assert float(plain(jnp.float32(1))) == 2.0
    assert plain.run_dir is None and plain.step_num == 1

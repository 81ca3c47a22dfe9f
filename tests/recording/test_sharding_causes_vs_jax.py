"""Sharding recompiles side by side with JAX's own explainer, and each advice applied.

Every case runs a real sharded program on the 8 forced CPU devices with
``jax_explain_cache_misses`` and ``jax_log_compiles`` on and ``jaxdiag.watch()``
recording, asserts what JAX's log says (so the comparison is real), that jaxdiag names
the planted cause (and no cause that was not planted), what ``jaxdiag compiles`` prints
for it, and that the advice, applied to the program, leaves one compile.
``JAXDIAG_SHARDING_SIDE_BY_SIDE=path`` writes the table (case | JAX says | jaxdiag says).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag.cli.app import main
from jaxdiag.recording import compile_log
from jaxdiag.recording.advice import advise
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, CompileRecord
from tests.recording import test_causes_vs_jax as side_by_side
from tests.recording.test_causes_vs_jax import _jax_summary, _Log
from tests.jax_release import jax_before

jax_explainer = side_by_side.jax_explainer  # the same fixture: JAX's explainer on, its log captured

_TABLE: list[tuple[str, str, str]] = []


def mesh_2x4(axis_type: AxisType = AxisType.Auto) -> jax.sharding.Mesh:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(axis_type, axis_type))


def user_records(program: Callable[[], None]) -> list[CompileRecord]:
    with jaxdiag.watch() as watched:
        program()
    return [r for r in watched.records if r.origin != JAX_INTERNAL_ORIGIN]


def of(records: list[CompileRecord], name: str) -> list[CompileRecord]:
    return [r for r in records if r.function == name]


def claimed(records: list[CompileRecord]) -> set[str]:
    return {c.what for r in records if r.explanation for c in r.explanation.changes}


def compiles_json(records: list[CompileRecord], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    """What ``jaxdiag compiles --json`` says of these records, read back from a log file."""
    log = tmp_path / "compiles.jsonl"
    log.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    capsys.readouterr()
    assert main(["compiles", str(log), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# --- in_shardings inside a pytree of several entries ---------------------------------


def new_train_step() -> Callable:
    """A new function object each time: JAX's caches hold none of its compiles."""

    def _train_step(params, batch):
        return {k: v * batch["x"].sum() + batch["y"].sum() for k, v in params.items()}

    return _train_step


def _step_inputs(mesh):
    s = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    params = {"a": jnp.ones((8, 8)), "b": jnp.ones((8, 8)), "c": jnp.ones((8, 8))}
    batch = {"x": jnp.ones((8, 8)), "y": jnp.ones((8,))}
    params_spec = {"a": s(), "b": s(None, "model"), "c": s()}
    return (
        params,
        batch,
        (params_spec, {"x": s("data"), "y": s()}),
        (params_spec, {"x": s(("data", "model")), "y": s()}),
    )


def test_in_shardings_leaf_change_is_named_with_both_specs(
    jax_explainer: _Log, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mesh = mesh_2x4()
    params, batch, train_spec, eval_spec = _step_inputs(mesh)

    def planted():
        step = new_train_step()
        jax.block_until_ready(jax.jit(step, in_shardings=train_spec)(params, batch))
        jax.block_until_ready(jax.jit(step, in_shardings=eval_spec)(params, batch))

    records = of(user_records(planted), "_train_step")
    assert [r.compile_index for r in records] == [1, 1]  # two jit objects: two histories
    (change,) = records[1].explanation.changes
    assert (change.what, change.path, change.old.split(" on ")[0], change.new.split(" on ")[0]) == (
        "jit_options",
        "in_shardings[1]['x']",
        "P('data',)",
        "P(('data', 'model'),)",
    )
    summary = records[1].explanation.summary
    assert "first compile of another jit object" in summary
    assert "in_shardings[1]['x']: P('data',) -> P(('data', 'model'),) (on mesh(data=2, model=4))" in summary
    assert claimed(records) == {"jit_options"}
    # JAX compiles the second jit object without a cache-miss explanation.
    messages = "\n".join(jax_explainer.messages)
    assert len(re.findall(r"Compiling jit\(_train_step\)", messages)) == 2
    # ``jaxdiag compiles`` gives the record's cause.
    out = compiles_json(records, tmp_path, capsys)
    (row,) = out["functions"]
    assert [c["label"] for c in row["causes"]] == ["jit option in_shardings[1]['x'] (another jit object)"]
    assert row["records"][1]["explanation"]["summary"] == summary
    texts = {}
    for width in (80, 200):  # the cause reads whole at both widths; at 80 the advice goes below the table
        assert main(["compiles", str(tmp_path / "compiles.jsonl"), "--width", str(width)]) == 0
        text = texts[width] = capsys.readouterr().out
        assert "does not expose" not in text and "in_shardings[1]['x']" in text
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width
        header = next(line for line in text.splitlines() if "causes" in line)
        assert ("advice" in header) == (width == 200) and ("\nAdvice\n" in text) == (width == 80)
    below = " ".join(texts[80].split("\nAdvice\n")[-1].split())  # the advice of the 80-column table
    assert "(in_shardings[1]['x']: P('data',), P(('data', 'model'),) (on mesh(data=2, model=4)))" in below
    # The advice, applied: one jit object, called everywhere, compiles once.
    (advice,) = [a for a in advise(records) if a.kind == "jit_options"]
    assert "one jax.jit of the function" in advice.suggestion

    def fixed():
        step = jax.jit(new_train_step(), in_shardings=train_spec)
        jax.block_until_ready(step(params, batch))
        jax.block_until_ready(step(params, batch))

    assert len(of(user_records(fixed), "_train_step")) == 1
    _TABLE.append(("in_shardings leaf in a pytree (two jit objects)", _jax_summary(jax_explainer.messages), summary))


def test_out_shardings_change_is_named(jax_explainer: _Log) -> None:
    mesh = mesh_2x4()

    def scale(x):
        return x * 2

    def planted():
        x = jnp.ones((8, 8))
        jax.jit(scale, out_shardings=NamedSharding(mesh, P("data", None)))(x)
        jax.jit(scale, out_shardings=NamedSharding(mesh, P(None, "model")))(x)

    records = of(user_records(planted), "scale")
    (change,) = records[1].explanation.changes
    assert (change.path, change.what) == ("out_shardings", "jit_options")
    assert "P('data', None) -> P(None, 'model')" in records[1].explanation.summary
    _TABLE.append(
        ("out_shardings (two jit objects)", _jax_summary(jax_explainer.messages), records[1].explanation.summary)
    )


def test_jaxdiag_jit_objects_with_other_in_shardings_are_two_histories() -> None:
    mesh = mesh_2x4()
    params, batch, train_spec, eval_spec = _step_inputs(mesh)
    with compile_log.collecting() as got:
        step = new_train_step()
        jaxdiag.jit(step, in_shardings=train_spec)(params, batch)
        jaxdiag.jit(step, in_shardings=eval_spec)(params, batch)
    records = of(list(got.records), "_train_step")
    assert [r.compile_index for r in records] == [1, 1]
    assert records[1].jit_leaves["in_shardings[1]['x']"].startswith("P(('data', 'model'),)")
    assert "in_shardings[1]['x']: P('data',) -> P(('data', 'model'),)" in records[1].explanation.summary


# --- equivalent specs ----------------------------------------------------------------


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=["Auto", "Explicit"])
def test_equivalent_specs_are_no_change(axis_type: AxisType, jax_explainer: _Log) -> None:
    mesh = mesh_2x4(axis_type)
    s = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731

    def matmul(w, x):
        return x @ w

    def planted():
        f = jax.jit(matmul)
        f(jax.device_put(jnp.ones((8, 8)), s()), jax.device_put(jnp.ones((8, 8)), s("model", None)))
        # Equivalent for rank 2: JAX hits the same cache entry.
        f(jax.device_put(jnp.ones((8, 8)), s(None, None)), jax.device_put(jnp.ones((8, 8)), s("model")))
        # The one real change: a new batch size, with the equivalent specs.
        f(jax.device_put(jnp.ones((8, 8)), s(None, None)), jax.device_put(jnp.ones((16, 8)), s("model")))

    records = of(user_records(planted), "matmul")
    messages = "\n".join(jax_explainer.messages)
    assert len(re.findall(r"Compiling jit\(matmul\)", messages)) == len(records) == 2
    assert claimed(records) == {"shape"}, records[1].explanation.summary
    assert "sharding changed" not in records[1].explanation.summary
    assert [a.kind for a in advise(records)] == ["shape"]
    _TABLE.append(
        (
            f"P() vs P(None, None), P('model', None) vs P('model',) ({axis_type.name})",
            _jax_summary(jax_explainer.messages),
            records[1].explanation.summary,
        )
    )


# --- a committed input's sharding: a real change, kept ---------------------------------


def test_committed_sharding_change_and_its_advice_applied(jax_explainer: _Log) -> None:
    mesh = mesh_2x4()
    w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P()))

    def new_moved():
        def moved(w_, x):
            return x @ w_

        return moved

    def planted():
        f = jax.jit(new_moved())
        f(w, jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("data"))))
        f(w, jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("model"))))

    records = of(user_records(planted), "moved")
    assert claimed(records) == {"sharding"}
    summary = records[1].explanation.summary
    assert "x sharding changed P('data',) on mesh(data=2, model=4) -> P('model',) on mesh(data=2, model=4)" in summary
    (advice,) = advise(records)
    assert advice.kind == "sharding" and "jax.device_put(x, sharding) once" in advice.suggestion
    placed = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("data")))

    def fixed():
        f = jax.jit(new_moved())
        f(w, placed)
        f(w, placed)

    assert len(of(user_records(fixed), "moved")) == 1
    _TABLE.append(("committed input resharded", _jax_summary(jax_explainer.messages), summary))


# --- NumPy parameters at the first call, committed ones after -----------------------------


def test_numpy_parameters_then_the_committed_arrays_the_update_returns(jax_explainer: _Log) -> None:
    """Data parallelism as a training loop writes it: the parameters start as NumPy arrays, the batch is put
    on the mesh. The update's outputs are committed to the mesh, so the second call compiles again; the
    record names the parameters' commitment (their shardings cannot tell: NumPy arrays have none)."""
    mesh = mesh_2x4()
    batch = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("data")))

    def new_update():
        def update(params, x):
            return {k: v - 1e-3 * x.T @ (x @ v) for k, v in params.items()}  # reduced over the batch

        return update

    def planted():
        step = jax.jit(new_update())
        params = {"w1": np.ones((8, 8), np.float32), "w2": np.ones((8, 8), np.float32)}
        for _ in range(3):
            params = step(params, batch)

    records = of(user_records(planted), "update")
    assert [r.compile_index for r in records] == [1, 2]  # the third call hit the cache
    messages = "\n".join(jax_explainer.messages)
    assert len(re.findall(r"Compiling jit\(update\)", messages)) == 2  # JAX's own log: two compiles
    assert claimed(records) == {"committed"}
    assert {c.path for c in records[1].explanation.changes} == {"args[0]['w1']", "args[0]['w2']"}
    summary = records[1].explanation.summary
    assert "params['w1'], params['w2'] changed from uncommitted (a NumPy array" in summary
    (advice,) = advise(records)
    assert advice.kind == "committed" and "jax.device_put(x, sharding)" in advice.suggestion
    assert "with the sharding the later calls pass (P() on mesh(data=2, model=4))" in advice.suggestion
    assert advice.message.startswith("update: params['w1'], params['w2'] arrived both uncommitted")

    def fixed():  # the advice applied: the parameters put on the mesh before the first call
        step = jax.jit(new_update())
        params = {"w1": np.ones((8, 8), np.float32), "w2": np.ones((8, 8), np.float32)}
        params = jax.device_put(params, NamedSharding(mesh, P()))
        for _ in range(3):
            params = step(params, batch)

    assert len(of(user_records(fixed), "update")) == 1
    _TABLE.append(("NumPy parameters, then committed", _jax_summary(jax_explainer.messages), summary))


def test_numpy_and_an_uncommitted_jnp_array_share_a_compile() -> None:
    """The other side of the rule: JAX places both at the call, alike, and compiles once."""

    def doubled(x):
        return x * 2

    def both():
        f = jax.jit(doubled)
        f(np.ones((4, 4), np.float32))
        f(jnp.ones((4, 4)))

    (record,) = of(user_records(both), "doubled")
    assert record.args[0].committed is False


# --- a call outside the mesh context ---------------------------------------------------


def test_call_outside_set_mesh_gets_advice_that_works(jax_explainer: _Log) -> None:
    if jax_before(0, 9):
        pytest.skip("JAX 0.8 names no config states, so the mesh in context is not seen to change (README)")
    mesh = mesh_2x4(AxisType.Explicit)

    def new_evaluate():
        def evaluate(x):
            return jnp.tanh(x).sum()

        return evaluate

    x = jnp.ones((8, 8))

    def planted():
        f = jax.jit(new_evaluate())
        with jax.set_mesh(mesh):
            f(x)
        f(x)  # the evaluation, outside the mesh

    records = of(user_records(planted), "evaluate")
    summary = records[1].explanation.summary
    assert "the mesh in context changed" in summary
    assert re.search(r"Tracing context doesn't match|mesh", "\n".join(jax_explainer.messages))
    (advice,) = advise(records)
    assert advice.kind == "mesh_context"
    assert "jax.config.update" not in advice.suggestion
    assert "inside one `with jax.set_mesh(mesh):`" in advice.suggestion

    def fixed():  # as the advice says: every call inside the mesh
        f = jax.jit(new_evaluate())
        with jax.set_mesh(mesh):
            f(x)
        with jax.set_mesh(mesh):
            f(x)

    assert len(of(user_records(fixed), "evaluate")) == 1
    _TABLE.append(("call outside jax.set_mesh", _jax_summary(jax_explainer.messages), summary))


@pytest.fixture(scope="module", autouse=True)
def side_by_side_table():
    yield
    path = os.environ.get("JAXDIAG_SHARDING_SIDE_BY_SIDE")
    if path and _TABLE:
        with open(path, "w") as out:
            out.write("| case | JAX says | jaxdiag says |\n|---|---|---|\n")
            for row in _TABLE:
                out.write("| " + " | ".join(c.replace("|", "/") for c in row) + " |\n")


# --- an NNX model under FSDP: one name for each parameter everywhere ----------------------


def test_nnx_fsdp_names_are_the_users_everywhere(jax_explainer: _Log) -> None:
    from flax import nnx

    from jaxdiag.analyses.sharding import analyze_records

    mesh = jax.make_mesh((4,), ("fsdp",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])

    class MLP(nnx.Module):
        def __init__(self) -> None:
            self.w1 = nnx.Param(jnp.ones((64, 128)))
            self.w2 = nnx.Param(jnp.ones((128, 8)))

        def __call__(self, x):
            return jnp.tanh(x @ self.w1) @ self.w2

    def place(model, spec):
        for name in ("w1", "w2"):
            var = getattr(model, name)
            var.value = jax.device_put(var.value, NamedSharding(mesh, spec))

    model = MLP()
    x = jax.device_put(jnp.ones((32, 64)), NamedSharding(mesh, P("fsdp")))
    y = jax.device_put(jnp.ones((32, 8)), NamedSharding(mesh, P("fsdp")))

    def planted():
        @nnx.jit
        def train_step(model, x, y):
            loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
            nnx.update(model, jax.tree.map(lambda p, g: p - 0.1 * g, nnx.state(model, nnx.Param), grads))
            return loss

        place(model, P("fsdp", None))
        train_step(model, x, y)
        place(model, P(None, "fsdp"))  # the planted change: both weights resharded
        train_step(model, x, y)

    records = of(user_records(planted), "train_step")
    assert [a.label for a in records[0].args] == ["model.w1", "model.w2", "x", "y"]
    summary = records[1].explanation.summary
    assert claimed(records) == {"sharding"}
    assert "model.w1 sharding changed P('fsdp', None) on mesh(fsdp=4) -> P(None, 'fsdp') on mesh(fsdp=4)" in summary
    names = {"model.w1", "model.w2", "x", "y"}
    for rec in records:
        facts = rec.sharding
        assert [leaf["name"] for leaf in facts["inputs"]] == ["model.w1", "model.w2", "x", "y"]
        assert {a for c in facts["collectives"] for a in c.get("arrays") or () if not a.startswith("out[")} <= names
        # Newer XLA names a gather of an argument by the argument's path: the user's name there too.
        assert not any("states[" in (c.get("op_name") or "") for c in facts["collectives"])
    found = analyze_records([r.to_dict() for r in records])
    (recompile,) = [f for f in found.findings if f.kind == "sharding_recompile"]
    assert set(recompile.evidence["arrays"]) == {"model.w1", "model.w2"}
    for f in found.findings:
        assert "states[" not in f.message and ".value" not in f.message, f.message
    _TABLE.append(("NNX model under FSDP, weights resharded", _jax_summary(jax_explainer.messages), summary))


def test_equinox_fsdp_names_are_the_users_everywhere() -> None:
    import equinox as eqx

    mesh = jax.make_mesh((4,), ("fsdp",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])
    put = lambda a, *s: jax.device_put(a, NamedSharding(mesh, P(*s)))  # noqa: E731

    class MLP(eqx.Module):
        w1: jax.Array
        w2: jax.Array

        def __call__(self, x):
            return jnp.tanh(x @ self.w1) @ self.w2

    @eqx.filter_jit
    def train_step(model, x, y):
        loss, grads = eqx.filter_value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        return jax.tree.map(lambda p, g: p - 0.1 * g, model, grads), loss

    model = MLP(put(jnp.ones((64, 128)), "fsdp"), put(jnp.ones((128, 8)), "fsdp"))
    (record,) = of(
        user_records(lambda: train_step(model, put(jnp.ones((32, 64)), "fsdp"), put(jnp.ones((32, 8))))), "train_step"
    )
    assert [a.label for a in record.args] == ["model.w1", "model.w2", "x", "y"]
    assert [leaf["name"] for leaf in record.sharding["inputs"]] == ["model.w1", "model.w2", "x", "y"]
    moved = {a for c in record.sharding["collectives"] for a in c.get("arrays") or () if not a.startswith("out[")}
    assert moved and moved <= {"model.w1", "model.w2", "x", "y"}

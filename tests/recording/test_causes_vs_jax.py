"""Side by side with JAX's own explainer: each planted recompile, both explainers on.

Every case runs its program once, with ``jax_explain_cache_misses`` and
``jax_log_compiles`` on (JAX's log captured by a handler) and ``jaxdiag.watch()``
recording in the same process. Each asserts that jaxdiag names the planted change
(as precisely as JAX or more), what JAX's log says of it (so that the comparison
is real, not remembered), and that no record claims a cause the case did not
plant. ``JAXDIAG_SIDE_BY_SIDE=path`` writes the table (case | JAX says | jaxdiag
says) as Markdown.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import re
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag.jax_internals import transforms
from jaxdiag.recording import compile_log
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN

_TABLE: list[tuple[str, str, str]] = []


@dataclasses.dataclass(frozen=True)
class Case:
    """One planted recompile.

    Attributes:
      plant: the program; runs with both explainers on.
      whats: the kinds of change jaxdiag must name (``Change.what``) on the recompile.
      says: text jaxdiag's sentence must hold.
      jax_says: a regex JAX's log must match (what JAX's explainer or compile log says).
      allowed: every change any record of the case may claim (default: ``whats``).
      internals: record JAX's own helpers too (``watch(jax_internals=True)``).
    """

    name: str
    plant: Callable[[], None]
    whats: tuple[str, ...]
    says: str
    jax_says: str
    allowed: tuple[str, ...] = ()
    internals: bool = False


class _Log(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def jax_explainer():
    """JAX's explainer and compile log on, its messages captured; both restored after."""
    log, logger = _Log(), logging.getLogger("jax")
    level = logger.level
    before = (jax.config.jax_explain_cache_misses, jax.config.jax_log_compiles)
    logger.addHandler(log)
    logger.setLevel(logging.DEBUG)
    jax.config.update("jax_explain_cache_misses", True)
    jax.config.update("jax_log_compiles", True)
    try:
        yield log
    finally:
        jax.config.update("jax_explain_cache_misses", before[0])
        jax.config.update("jax_log_compiles", before[1])
        logger.removeHandler(log)
        logger.setLevel(level)


def mesh_8(axis_type: AxisType) -> jax.sharding.Mesh:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return jax.make_mesh((8,), ("x",), axis_types=(axis_type,))


# --- the planted programs ---------------------------------------------------------------


def plant_shape():
    f = jax.jit(lambda x: x * 2)
    f(jnp.ones((8, 4)))
    f(jnp.ones((8, 5)))


def plant_dtype():
    f = jax.jit(lambda x: x * 2)
    f(jnp.ones(4, jnp.float32))
    f(jnp.ones(4, jnp.int32))


def plant_weak_type():
    f = jax.jit(lambda x, lr: x * lr)
    f(jnp.ones(4), 0.1)
    f(jnp.ones(4), jnp.float32(0.1))


def plant_static():
    f = jax.jit(lambda x, n: x**n, static_argnums=1)
    f(jnp.ones(4), 2)
    f(jnp.ones(4), 3)


def plant_dict_key():
    f = jax.jit(lambda p: sum(p.values()))
    f({"w": jnp.ones(2)})
    f({"w": jnp.ones(2), "b": jnp.ones(2)})


def plant_sharding_auto():
    mesh = mesh_8(AxisType.Auto)
    f = jax.jit(lambda x: x * 2)
    f(jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("x", None))))
    f(jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(None, "x"))))


def plant_sharding_explicit():
    mesh = mesh_8(AxisType.Explicit)
    f = jax.jit(lambda x: x * 2)
    f(jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("x", None))))
    f(jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(None, "x"))))


def plant_closure():
    for i in range(2):

        def add(v, i=i):
            return v + i

        jax.jit(add)(jnp.ones(2))


class Block(nnx.Module):
    def __init__(self, act: str) -> None:
        self.w = nnx.Param(jnp.ones(3))
        self.act = act

    def __call__(self, x):
        return jnp.tanh(x * self.w) if self.act == "tanh" else jax.nn.relu(x * self.w)


def plant_nnx_static():
    @nnx.jit
    def forward(block, x):
        return block(x)

    block = Block("tanh")
    forward(block, jnp.ones(3))
    block.act = "relu"
    forward(block, jnp.ones(3))


class Dense(eqx.Module):
    w: jax.Array
    act: str = eqx.field(static=True)


def plant_eqx_static():
    @eqx.filter_jit
    def forward(layer, x):
        return layer.w * x

    forward(Dense(jnp.ones(3), "tanh"), jnp.ones(3))
    forward(Dense(jnp.ones(3), "relu"), jnp.ones(3))


def plant_vmap_batch():
    def per_example(w, x):
        return jnp.sum(w * x)

    f = jax.jit(per_example)
    w = jnp.ones(16)
    jax.vmap(f, in_axes=(None, 0))(w, jnp.ones((32, 16)))
    jax.vmap(f, in_axes=(None, 0))(w, jnp.ones((48, 16)))


def plant_grad():
    def loss(w, x):
        return jnp.sum(jnp.sin(w * x))

    jax.grad(jax.jit(loss))(jnp.ones(3), jnp.ones(3))


def plant_jit_options():
    def update(params, grads):
        return params - grads

    jax.jit(update)(jnp.ones(3), jnp.ones(3))
    jax.jit(update, donate_argnums=0)(jnp.ones(3), jnp.ones(3))


def plant_precision():
    f = jax.jit(lambda a, b: a @ b)
    x = jnp.ones((4, 4))
    f(x, x)
    with jax.default_matmul_precision("highest"):
        f(x, x)


def plant_x64():
    f = jax.jit(lambda a: a + 1)
    f(jnp.ones(3, jnp.int32))
    jax.config.update("jax_enable_x64", True)
    try:
        f(jnp.ones(3, jnp.int32))
    finally:
        jax.config.update("jax_enable_x64", False)


def plant_mesh_context():
    mesh = mesh_8(AxisType.Explicit)
    f = jax.jit(lambda x: x + 1)
    x = jnp.ones(8)  # made outside the mesh: its sharding is the same both times
    f(x)
    with jax.set_mesh(mesh):
        f(x)


def plant_tuple_to_list():
    f = jax.jit(lambda pair: pair[0] + pair[1])
    x = jnp.ones(2)
    f((x, x))
    f([x, x])


Pair = collections.namedtuple("Pair", "a b")


def plant_namedtuple_to_tuple():
    f = jax.jit(lambda pair: pair[0] + pair[1])
    x = jnp.ones(2)
    f(Pair(x, x))
    f((x, x))


def plant_named_batch():
    def train_step(params, batch):
        return params * batch["ids"].sum()

    f = jax.jit(train_step)
    f(jnp.float32(1.0), {"ids": jnp.ones((4, 128))})
    f(jnp.float32(1.0), {"ids": jnp.ones((4, 136))})


def plant_eager_op(sizes: tuple[int, int, int] = (23, 24, 25)):  # sizes no other test uses
    x = jnp.ones(sizes[0])
    labels = jnp.ones(sizes[2], jnp.int32)
    for batch in (x, jnp.ones(sizes[1])):
        _ = batch * 2  # eager multiply on a new shape: the planted recompile
    _ = labels * 2  # another line: compared with nothing


CASES = [
    Case(
        "shape", plant_shape, ("shape",), "x shape axis 1 changed 4 -> 5", r"at x, now f32\[8,5\] and before f32\[8,4\]"
    ),
    Case(
        "dtype", plant_dtype, ("dtype",), "x dtype changed float32 -> int32", r"at x, now i32\[4\] and before f32\[4\]"
    ),
    Case(
        "weak type",
        plant_weak_type,
        ("weak_type",),
        "lr changed from a Python scalar to a typed array",
        r"at lr, now f32\[\]\{weak_type=False\} and before f32\[\]\{weak_type=True\}",
    ),
    Case(
        "static value", plant_static, ("static",), "static n changed 2 -> 3", r"different value of static args|static"
    ),
    Case("dict key", plant_dict_key, ("structure",), "p['b'] appeared", r"different input pytree"),
    Case(
        "sharding, Auto mesh",
        plant_sharding_auto,
        ("sharding",),
        "x sharding changed P('x', None) on mesh(x=8) -> P(None, 'x') on mesh(x=8)",
        r"Compiling jit\(<lambda>\)",
    ),
    Case(
        "sharding, Explicit mesh",
        plant_sharding_explicit,
        ("sharding",),
        "x sharding changed P('x', None) on mesh(x=8; Explicit) -> P(None, 'x') on mesh(x=8; Explicit)",
        r"at x, now f32\[8,16\]\(x, None\)|different input types",
    ),
    Case(
        "new closure",
        plant_closure,
        ("function",),
        "a new function object or closure",
        r"seen another function defined on the same line",
    ),
    Case(
        "nnx static field",
        plant_nnx_static,
        ("static",),
        "static block.act changed 'tanh' -> 'relu'",
        r"different input pytree|TRACING CACHE MISS",
    ),
    Case(
        "eqx static field",
        plant_eqx_static,
        ("static",),
        "static layer.act changed 'tanh' -> 'relu'",
        r"Compiling jit\(forward\)",
    ),  # JAX's explainer is silent: equinox keys its own cache
    Case(
        "vmap batch 32 -> 48",
        plant_vmap_batch,
        ("shape",),
        "per_example under jax.vmap: x shape axis 0 (the vmapped batch axis) changed 32 -> 48",
        r"float32\[48,16\]",
    ),
    Case(
        "grad: forward and backward",
        plant_grad,
        ("transform",),
        "loss: first compile of its backward pass",
        r"Compiling jit\(loss\)",
    ),
    Case(
        "jit options",
        plant_jit_options,
        ("jit_options",),
        "jit option donate_argnums differs (default -> (0,))",
        r"Compiling jit\(update\)",
    ),
    Case(
        "default_matmul_precision",
        plant_precision,
        ("config",),
        "jax config jax_default_matmul_precision changed None -> highest",
        r"jax_default_matmul_precision differs: now highest and before None",
    ),
    Case(
        "enable_x64",
        plant_x64,
        ("config",),
        "jax config jax_enable_x64 changed False -> True",
        r"jax_enable_x64 differs: now True and before False",
    ),
    Case(
        "mesh context",
        plant_mesh_context,
        ("config",),
        "the mesh in context changed",
        r"Tracing context doesn't match|mesh",
    ),
    Case(
        "tuple -> list",
        plant_tuple_to_list,
        ("container",),
        "pair changed container type tuple -> list (same leaves)",
        r"now <class 'list'> and before <class 'tuple'>",
    ),
    Case(
        "namedtuple -> tuple",
        plant_namedtuple_to_tuple,
        ("container",),
        "pair changed container type namedtuple Pair -> tuple (same leaves)",
        r"different input pytree",
    ),
    Case(
        "parameter names",
        plant_named_batch,
        ("shape",),
        "batch['ids'] shape axis 1 changed 128 -> 136",
        r"at batch\['ids'\], now f32\[4,136\] and before f32\[4,128\]",
    ),
    Case(
        "eager op on a new shape",
        plant_eager_op,
        ("shape",),
        "eager multiply on a new shape at ",
        r"Compiling jit\(multiply\)",
        internals=True,
    ),
]


def _jax_summary(messages: list[str]) -> str:
    """JAX's explanation of the last recompile, or its compile log line, in one line."""
    misses = [m for m in messages if "TRACING CACHE MISS" in m and "never seen function" not in m]
    if misses:
        lines = [ln.strip() for ln in misses[-1].splitlines()[1:]]
        return " ".join(ln for ln in lines if ln and not ln.startswith("for ") and "closest" not in ln)
    seen = [m for m in messages if "never seen function" in m and "same line" in m]
    if seen:
        return "never seen function; seen another function defined on the same line"
    compiles = [m.splitlines()[0] for m in messages if m.startswith("Compiling ")]
    return f"(no cache-miss explanation) log: {compiles[-1][:160]}" if compiles else "(nothing)"


#: JAX 0.9 on names its config states (``config.trace_context_names``); older JAX, whose own
#: explainer gives only positions in a tuple, leaves jaxdiag to say the cause is unknown.
CONFIG_NAMES = transforms.config_state() is not None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_jaxdiag_names_the_planted_change(case: Case, jax_explainer: _Log) -> None:
    if "config" in case.whats and not CONFIG_NAMES:
        pytest.skip("this JAX does not name its config states: test_config_change_is_unknown_without_names")
    with jaxdiag.watch(jax_internals=case.internals) as watched:
        case.plant()
    records = [r for r in watched.records if r.origin != JAX_INTERNAL_ORIGIN or case.internals]
    explained = [r for r in records if r.explanation is not None and r.explanation.changes]
    ours = [r for r in explained if any(c.what in case.whats for c in r.explanation.changes)]
    assert ours, [r.explanation for r in records]
    summary = ours[-1].explanation.summary
    assert case.says in summary, summary
    # JAX's log says what the table says it says.
    assert re.search(case.jax_says, "\n".join(jax_explainer.messages)), jax_explainer.messages[-5:]
    # No record claims a cause that was not planted.
    allowed = set(case.allowed or case.whats)
    claimed = {c.what for r in records if r.explanation for c in r.explanation.changes}
    assert claimed <= allowed, (claimed, [r.explanation.summary for r in explained])
    _TABLE.append((case.name, _jax_summary(jax_explainer.messages), summary))


@pytest.mark.skipif(CONFIG_NAMES, reason="this JAX names its config states: the change is named")
def test_config_change_is_unknown_without_names() -> None:
    with jaxdiag.watch() as watched:
        plant_precision()
    again = [r for r in watched.records if r.origin != JAX_INTERNAL_ORIGIN][-1]
    assert again.explanation is not None and not again.explanation.changes
    assert "cause unknown" in again.explanation.summary and "not compared" in again.explanation.summary


def test_eager_op_is_compared_only_with_calls_from_its_own_line() -> None:
    with jaxdiag.watch() as watched:
        plant_eager_op((13, 14, 15))  # sizes no other test uses: JAX's caches are per process
    muls = [r for r in watched.records if r.function == "multiply"]
    lines = {r.call_site for r in muls}
    assert len(lines) == 2  # the loop's line and the labels' line
    loop, labels = (
        sorted((r for r in muls if r.call_site == site), key=lambda r: r.compile_index)
        for site in sorted(lines, key=lambda s: int(s.rsplit(":", 2)[1]))  # file:line:column
    )
    assert [r.compile_index for r in loop] == [1, 2] and loop[1].explanation.compared_to == 1
    assert [r.compile_index for r in labels] == [1] and labels[0].explanation is None
    assert all(r.call_function == "plant_eager_op" for r in muls)


def test_late_watch_says_first_compile_seen_and_names_the_change(jax_explainer: _Log) -> None:
    f = jax.jit(lambda x: x + 3)
    f(jnp.ones(2))
    with jaxdiag.watch(jax_internals=False) as watched:
        f(jnp.ones(3))
    (rec,) = watched.records
    assert rec.compile_index == 1 and rec.earlier_unseen == 1
    summary = compile_log.cause(rec)
    assert summary.startswith(
        "first compile seen (JAX already held 1 trace(s) of this function from "
        "before recording started); against the closest of them: x shape axis "
        "0 changed 2 -> 3"
    ), summary
    assert rec.explanation.changes[0].what == "shape" and rec.explanation.compared_to is None
    assert re.search(r"at x, now f32\[3\] and before f32\[2\]", "\n".join(jax_explainer.messages))
    _TABLE.append(("late watch", _jax_summary(jax_explainer.messages), summary))
    h = jax.jit(lambda x: x + 5)
    h(jnp.ones(2))
    h(jax.device_put(jnp.ones(2), jax.devices()[-1]))  # lowered again, no new trace
    with jaxdiag.watch(jax_internals=False) as watched:
        h(jnp.ones(7))
    assert compile_log.cause(watched.records[0]).startswith("first compile seen (JAX already held 1")
    g = jax.jit(lambda x: x + 4)
    with jaxdiag.watch(jax_internals=False) as watched:
        g(jnp.ones(2))
    (rec,) = watched.records
    assert rec.earlier_unseen == 0 and compile_log.cause(rec) == "first compile"


def test_grad_compiles_are_each_a_record(jax_explainer: _Log) -> None:
    with jaxdiag.watch(jax_internals=False) as watched:
        plant_grad()
    compiled = [m for m in jax_explainer.messages if m.startswith("Compiling jit(loss)")]
    ours = [r for r in watched.records if r.function == "loss"]
    assert len(ours) == len(compiled) == 2
    assert [r.transform for r in ours] == ["grad-forward", "grad-backward"]


@pytest.fixture(scope="module", autouse=True)
def side_by_side_table():
    yield
    path = os.environ.get("JAXDIAG_SIDE_BY_SIDE")
    if path and _TABLE:
        with open(path, "w") as out:
            out.write("| case | JAX says | jaxdiag says |\n|---|---|---|\n")
            for row in _TABLE:
                out.write("| " + " | ".join(c.replace("|", "/") for c in row) + " |\n")


def test_two_eager_ops_on_one_line_are_compared_each_with_its_own() -> None:
    def load(rows: int):
        x, y = jnp.ones((rows, 7)), jnp.ones(rows, jnp.int32)
        return x * 2, y * 2  # two eager multiplies on one line

    with jaxdiag.watch() as watched:
        for rows in (37, 37, 41):  # sizes no other test uses
            load(rows)
    muls = [r for r in watched.records if r.function == "multiply" and r.call_function == "load"]
    # a first compile here of a shape JAX already held from another test is told apart (earlier_unseen)
    again = [r for r in muls if r.explanation is not None and r.explanation.changes and not r.earlier_unseen]
    assert len({r.call_site for r in muls}) == 2 and len(again) == 2
    for r in again:  # each compared with the earlier call of the same multiply: rows 37 -> 41
        (change,) = r.explanation.changes
        assert (change.what, change.old, change.new) == ("shape", "37", "41"), r.explanation.summary

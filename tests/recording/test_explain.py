"""explain(): which earlier signature a recompile is diffed against, and what it says."""

from __future__ import annotations

import dataclasses

import pytest

from jaxdiag.recording.explain import MAX_CANDIDATES, explain, path_parts
from jaxdiag.recording.records import ArgSignature, Change, CompileRecord

A = ArgSignature
TOK = A("args[2]", shape=(8, 129), dtype="int32", weak_type=False)
SCALE = A("kwargs['scale']", shape=(), dtype="float32", weak_type=True)
STATIC = A("args[1]", kind="static", value="3")


def rec(index: int, *args: ArgSignature, name: str = "train_step", **kw) -> CompileRecord:
    kw.setdefault("function_id", 1)
    return CompileRecord(name, f"mod.{name}", "mod.py:1", "mod.py:9", index, float(index), args=args, **kw)


def leaf(base: ArgSignature, **changes) -> ArgSignature:
    return dataclasses.replace(base, **changes)


@dataclasses.dataclass
class TC:
    name: str
    old: tuple[ArgSignature, ...]
    new: tuple[ArgSignature, ...]
    changes: tuple[Change, ...]
    summary: str


CASES = [
    TC(
        "shape axis",
        (TOK,),
        (leaf(TOK, shape=(8, 193)),),
        (Change("args[2]", "shape", "129", "193", axis=1),),
        "train_step: args[2] shape axis 1 changed 129 -> 193",
    ),
    TC(
        "two axes",
        (TOK,),
        (leaf(TOK, shape=(16, 193)),),
        (Change("args[2]", "shape", "8", "16", axis=0), Change("args[2]", "shape", "129", "193", axis=1)),
        "train_step: args[2] shape axis 0 changed 8 -> 16; args[2] shape axis 1 changed 129 -> 193",
    ),
    TC(
        "rank",
        (TOK,),
        (leaf(TOK, shape=(8, 129, 1)),),
        (Change("args[2]", "shape", "(8,129)", "(8,129,1)"),),
        "train_step: args[2] shape changed (8,129) -> (8,129,1)",
    ),
    TC(
        "dtype",
        (TOK,),
        (leaf(TOK, dtype="bfloat16"),),
        (Change("args[2]", "dtype", "int32", "bfloat16"),),
        "train_step: args[2] dtype changed int32 -> bfloat16",
    ),
    TC(
        "weak to strong",
        (SCALE,),
        (leaf(SCALE, weak_type=False),),
        (Change("kwargs['scale']", "weak_type", "True", "False", of_shape="()"),),
        "train_step: kwargs['scale'] changed from a Python scalar to a typed array (weak_type True -> False)",
    ),
    TC(
        "strong to weak",
        (leaf(SCALE, weak_type=False),),
        (SCALE,),
        (Change("kwargs['scale']", "weak_type", "False", "True", of_shape="()"),),
        "train_step: kwargs['scale'] changed from a typed array to a Python scalar (weak_type False -> True)",
    ),
    TC(
        "static",
        (STATIC,),
        (leaf(STATIC, value="4"),),
        (Change("args[1]", "static", "3", "4"),),
        "train_step: static args[1] changed 3 -> 4",
    ),
    TC(
        "sharding",
        (leaf(TOK, sharding="P('x', None)"),),
        (leaf(TOK, sharding="P(None, 'x')"),),
        (Change("args[2]", "sharding", "P('x', None)", "P(None, 'x')"),),
        "train_step: args[2] sharding changed P('x', None) -> P(None, 'x')",
    ),
    TC(
        "memory kind",
        (leaf(TOK, memory_kind="device"),),
        (leaf(TOK, memory_kind="pinned_host"),),
        (Change("args[2]", "memory_kind", "device", "pinned_host"),),
        "train_step: args[2] memory kind changed device -> pinned_host",
    ),
    TC(
        "unknown sharding is no change",
        (leaf(TOK, sharding=None),),
        (leaf(TOK, sharding="P('x')"),),
        (),
        "train_step: cause unknown: traced again with the same argument signature",
    ),
    TC(
        "leaf appeared",
        (TOK,),
        (TOK, SCALE),
        (Change("kwargs['scale']", "structure", None, "float32[]{weak}"),),
        "train_step: kwargs['scale'] appeared (float32[]{weak})",
    ),
    TC(
        "subtree appeared, named by its root",
        (A("args[0]['a']", shape=(2,), dtype="float32"),),
        (
            A("args[0]['a']", shape=(2,), dtype="float32"),
            A("args[0]['b']['w']", shape=(2,), dtype="float32"),
            A("args[0]['b']['b']", shape=(2,), dtype="float32"),
        ),
        (Change("args[0]['b']", "structure", None, "2 leaves"),),
        "train_step: args[0]['b'] appeared (2 leaves)",
    ),
    TC(
        "leaf disappeared",
        (TOK, SCALE),
        (TOK,),
        (Change("kwargs['scale']", "structure", "float32[]{weak}", None),),
        "train_step: kwargs['scale'] disappeared (was float32[]{weak})",
    ),
    TC(
        "array became static",
        (leaf(STATIC, kind="array", value=None, shape=(), dtype="int32"),),
        (STATIC,),
        (Change("args[1]", "structure", "int32[]", "static 3"),),
        "train_step: args[1] changed int32[] -> static 3",
    ),
    TC(
        "a NumPy input, then a committed array",
        (leaf(TOK, committed=False),),
        (leaf(TOK, sharding="SingleDeviceSharding(cpu:0)", committed=True),),
        (Change("args[2]", "committed", "False", "True"),),
        "train_step: args[2] changed from uncommitted (a NumPy array or Python number, or an array JAX placed "
        "on its default device) to committed to its devices (placed with jax.device_put, or output by a "
        "program on such inputs)",
    ),
    TC(
        "a sharding change is named once, not as a commitment too",
        (leaf(TOK, sharding="SingleDeviceSharding(cpu:0)", committed=False),),
        (leaf(TOK, sharding="P('x',) on mesh(x=8)", committed=True),),
        (Change("args[2]", "sharding", "SingleDeviceSharding(cpu:0)", "P('x',) on mesh(x=8)"),),
        "train_step: args[2] sharding changed SingleDeviceSharding(cpu:0) -> P('x',) on mesh(x=8)",
    ),
    TC(
        "commitment unknown on one side (a tracer)",
        (leaf(TOK, committed=None),),
        (leaf(TOK, committed=True),),
        (),
        "",
    ),
]


@pytest.mark.parametrize("tc", CASES, ids=[c.name for c in CASES])
def test_single_change(tc: TC) -> None:
    old, new = rec(1, *tc.old), rec(2, *tc.new)
    got = explain([old], new)
    assert got is not None
    assert got.changes == tc.changes
    assert got.summary.startswith(tc.summary)
    assert got.compared_to == 1


def test_none_without_an_earlier_record_of_the_function() -> None:
    assert explain([], rec(1, TOK)) is None
    assert explain([rec(1, TOK, name="other")], rec(1, TOK)) is None


def test_container_change_with_same_leaves() -> None:
    old = rec(1, TOK, in_tree="PyTreeDef(((*,), {}))")
    new = rec(2, TOK, in_tree="PyTreeDef(([*], {}))")
    got = explain([old], new)
    assert got.changes == (Change("", "structure", "PyTreeDef(((*,), {}))", "PyTreeDef(([*], {}))"),)
    assert "argument structure changed" in got.summary


def test_same_qualname_defined_elsewhere_is_another_function() -> None:
    lam = dict(name="<lambda>")
    first = dataclasses.replace(rec(1, TOK, **lam), source="mod.py:3")
    second = dataclasses.replace(rec(1, TOK, **lam), source="mod.py:4")
    assert explain([first], second) is None


def test_new_function_object() -> None:
    got = explain([rec(1, TOK, function_id=10)], rec(2, TOK, function_id=11))
    assert got.changes == (Change("", "function", "10", "11"),)
    assert "new function object or closure" in got.summary


@pytest.mark.parametrize(
    "traced, lowered, words",
    [
        (True, True, ["cause unknown", "traced again", "config states", "not compared", "clear_caches"]),
        (False, True, ["cause unknown", "lowered again", "committed inputs", "clear_caches"]),
    ],
)
def test_same_signature_gives_reasons(traced: bool, lowered: bool, words: list[str]) -> None:
    got = explain([rec(1, TOK)], rec(2, TOK, traced=traced, lowered=lowered))
    assert got.changes == () and got.compared_to == 1
    for w in words:
        assert w in got.summary


def test_closest_is_fewest_changes_not_kind_priority() -> None:
    # JAX's trap: a sharding change explained against an unrelated shape key.
    a = rec(1, leaf(TOK, sharding="P('x')"))
    b = rec(2, leaf(TOK, shape=(8, 193), sharding="P('x')"))
    new = rec(3, leaf(TOK, sharding="P(None, 'x')"))
    got = explain([a, b], new)
    assert got.compared_to == 1
    assert got.changes == (Change("args[2]", "sharding", "P('x')", "P(None, 'x')"),)


def test_tie_goes_to_most_recent() -> None:
    a = rec(1, leaf(TOK, shape=(8, 100)))
    b = rec(2, leaf(TOK, shape=(8, 200)))
    got = explain([a, b], rec(3, leaf(TOK, shape=(8, 300))))
    assert got.compared_to == 2
    assert got.changes == (Change("args[2]", "shape", "200", "300", axis=1),)


def test_fewer_axes_breaks_a_tie_in_fields() -> None:
    a = rec(1, leaf(TOK, shape=(8, 193)))
    b = rec(2, leaf(TOK, shape=(16, 193)))
    got = explain([a, b], rec(3, leaf(TOK, shape=(8, 64))))
    assert got.compared_to == 1 and [c.axis for c in got.changes] == [1]


def test_other_functions_in_history_are_ignored() -> None:
    history = [rec(1, TOK), rec(1, leaf(TOK, shape=(8, 193)), name="eval_step")]
    got = explain(history, rec(2, leaf(TOK, shape=(8, 193))))
    assert got.compared_to == 1 and got.changes[0].new == "193"


def test_only_the_last_signatures_are_searched() -> None:
    exact = rec(1, TOK)
    later = [rec(i, leaf(TOK, shape=(8, 1000 + i))) for i in range(2, MAX_CANDIDATES + 2)]
    got = explain([exact, *later], rec(99, TOK))
    # The identical signature is older than the window, so a shape change is reported.
    assert got.compared_to != 1 and got.changes[0].what == "shape"
    assert explain([exact, *later[1:]], rec(99, TOK)).compared_to == 1


def test_summary_names_three_changes_then_counts() -> None:
    old = rec(1, *(A(f"args[{i}]", shape=(1,), dtype="float32") for i in range(5)))
    new = rec(2, *(A(f"args[{i}]", shape=(2,), dtype="float32") for i in range(5)))
    got = explain([old], new)
    assert len(got.changes) == 5
    assert got.summary.count("changed 1 -> 2") == 3 and "; and 2 more; called at mod.py:9" in got.summary


def test_leaves_that_changed_commitment_alike_are_one_phrase() -> None:
    """A model's parameters arrive as NumPy arrays once, then as the committed arrays the update returns:
    one phrase names them, with the other changes beside it."""
    params = [A(f"args[0][{i}]", shape=(4, 8), dtype="float32", label=f"params[{i}]") for i in range(5)]
    batch = A("args[1]", shape=(4, 32), dtype="float32", label="batch", committed=False)
    old = rec(1, *(leaf(p, committed=False) for p in params), batch)
    new = rec(2, *(leaf(p, committed=True) for p in params), leaf(batch, shape=(4, 8)))
    got = explain([old], new)
    assert [c.what for c in got.changes] == ["committed"] * 5 + ["shape"]
    assert got.summary == (
        "train_step: params[0], params[1], params[2] and 2 more changed from uncommitted (a NumPy array or Python "
        "number, or an array JAX placed on its default device) to committed to its devices (placed with "
        "jax.device_put, or output by a program on such inputs); batch shape axis 1 changed 32 -> 8; "
        "called at mod.py:9"
    )


def test_unhashable_fields_fall_back_to_comparing_by_path() -> None:
    a = rec(1, A("args[0]", shape=[8, 129], dtype="int32"), A("args[1]", shape=(2,), dtype="float32"))
    b = rec(2, A("args[0]", shape=[8, 129], dtype="int32"), A("args[1]", shape=(3,), dtype="float32"))
    new = rec(3, A("args[0]", shape=[8, 129], dtype="int32"), A("args[1]", shape=(2,), dtype="bfloat16"))
    got = explain([a, b], new)
    assert got.compared_to == 1 and got.changes == (Change("args[1]", "dtype", "float32", "bfloat16"),)


def test_path_parts() -> None:
    assert path_parts("args[0]['layers'][2].w") == ["args", "[0]", "['layers']", "[2]", ".w"]
    assert path_parts("kwargs['a]b']") == ["kwargs", "['a]b']"]
    assert path_parts("tok") == ["tok"]


# --- end to end: each cause planted with real jaxdiag.jit calls ---------------------

# Runs in a child process: the 8-device CPU mesh needs XLA_FLAGS before jax is imported.
PLANT = r"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
from functools import partial
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jaxdiag

jaxdiag.configure(log_dir=sys.argv[1])

@jaxdiag.jit
def train_step(params, x, tok, scale):
    return (params["w"] * x).sum() + tok.sum() * scale

p, x = {"w": jnp.ones((4,))}, jnp.ones((4,))
train_step(p, x, jnp.ones((8, 129), jnp.int32), 1.0)
train_step(p, x, jnp.ones((8, 193), jnp.int32), 1.0)
xb = x.astype(jnp.bfloat16)
train_step(p, xb, jnp.ones((8, 193), jnp.int32), 1.0)
train_step(p, xb, jnp.ones((8, 193), jnp.int32), jnp.float32(1.0))
train_step({"w": jnp.ones((4,)), "b": jnp.ones(())}, xb, jnp.ones((8, 193), jnp.int32), jnp.float32(1.0))

@partial(jaxdiag.jit, static_argnums=1)
def power(x, n):
    return x ** n
power(x, 2)
power(x, 3)

mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
@jaxdiag.jit
def sharded(a):
    return a * 2
a = jnp.ones((8, 16))
sharded(jax.device_put(a, NamedSharding(mesh, P("x", None))))
sharded(jax.device_put(a, NamedSharding(mesh, P(None, "x"))))

for i in range(2):
    def closure(v):
        return v + i
    jaxdiag.jit(closure)(x)

jax.clear_caches()
power(x, 2)
"""


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[CompileRecord]]:
    import subprocess
    import sys

    from jaxdiag.recording.log_reader import read_compile_log

    folder = tmp_path_factory.mktemp("plant")
    done = subprocess.run([sys.executable, "-c", PLANT, str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    by_function: dict[str, list[CompileRecord]] = {}
    for r in read_compile_log(folder).records:
        by_function.setdefault(r.function, []).append(r)
    return by_function


@pytest.mark.parametrize(
    "function, index, change, summary",
    [
        (
            "train_step",
            2,
            Change("args[2]", "shape", "129", "193", axis=1),
            "train_step: tok shape axis 1 changed 129 -> 193; called at ",
        ),
        (
            "train_step",
            3,
            Change("args[1]", "dtype", "float32", "bfloat16"),
            "train_step: x dtype changed float32 -> bfloat16; called at ",
        ),
        (
            "train_step",
            4,
            Change("args[3]", "weak_type", "True", "False", of_shape="()"),
            "train_step: scale changed from a Python scalar to a typed array (weak_type True -> False)",
        ),
        (
            "train_step",
            5,
            Change("args[0]['b']", "structure", None, "float32[]"),
            "train_step: params['b'] appeared (float32[])",
        ),
        ("power", 2, Change("args[1]", "static", "2", "3"), "power: static n changed 2 -> 3"),
        ("closure", 2, None, "closure: a new function object or closure"),
        ("power", 3, None, "power: cause unknown: traced again with the same argument signature"),
    ],
    ids=["shape", "dtype", "weak_type", "structure", "static", "closure", "same signature"],
)
def test_planted_cause_is_named(planted, function: str, index: int, change: Change | None, summary: str) -> None:
    record = planted[function][index - 1]
    assert record.compile_index == index
    exp = record.explanation
    assert exp is not None and exp.summary.startswith(summary), exp
    if change is not None:
        (got,) = exp.changes
        assert dataclasses.replace(got, label=None) == change
    elif function == "closure":
        assert [c.what for c in exp.changes] == ["function"]
    else:
        assert exp.changes == () and exp.compared_to == 1


def test_planted_sharding_change_is_named(planted) -> None:
    exp = planted["sharded"][1].explanation
    (change,) = exp.changes
    assert (change.path, change.what) == ("args[0]", "sharding")
    # The spec's repr differs across jax versions (P(...) or PartitionSpec(...)).
    assert "('x', None)" in change.old and "(None, 'x')" in change.new and "x=8" in change.new
    assert exp.summary.startswith(f"sharded: a sharding changed {change.old} -> {change.new}; called at ")

"""Sharding facts in the usual flow: compile during warm-up, capture a window of steps after it.

The step function compiles at step 0, before ``jaxdiag.capture(skip=2)`` opens its
window, so no compile happens in the window. The report must still know the program
that ran there: its mesh and specs (the sharding section), which function and array
each collective on the timeline serves, and the replicated table with the time of the
all-reduce that sums its gradient. The truth is read from the trace with jaxlib's
``ProfileData`` alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax._src.lib import _profile_data
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxdiag
from jaxdiag.capturing.sidecar import BEFORE_CAPTURE, read_sidecars
from jaxdiag.config import DEFAULT_THRESHOLDS
from jaxdiag.recording import compile_log
from jaxdiag.reporting.build import report

TABLE_BYTES = 512 * 256 * 4
SMALL = DEFAULT_THRESHOLDS.replace(replicated_param_bytes=256 * 1024)  # the table, not the 16 KiB weight


@pytest.fixture(autouse=True)
def fresh_compile_log():
    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=None)
    yield
    compile_log.clear()
    compile_log.configure(log_dir=None, analysis=None)


def mesh_4() -> jax.sharding.Mesh:
    if jax.device_count() < 4:
        pytest.skip("needs 4 devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    return jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])


def step_function():
    """A new function object each call: JAX's caches hold none of its compiles."""

    def train_step(params, ids, y):
        def loss_fn(p):
            h = p["table"][ids].mean(axis=1) @ p["w"]
            return jnp.mean((h - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda a, b: a - 0.1 * b, params, grads), loss

    return train_step


def run(logdir: Path, step, steps: int = 5, skip: int = 2) -> Path:
    """Data-parallel training with a replicated embedding table; steps ``skip``.. captured."""
    mesh = mesh_4()
    put = lambda x, *s: jax.device_put(x, NamedSharding(mesh, P(*s)))  # noqa: E731
    params = {"table": put(jnp.full((512, 256), 0.01, jnp.float32)), "w": put(jnp.full((256, 16), 0.01, jnp.float32))}
    ids, y = put(jnp.zeros((64, 8), jnp.int32), "data"), put(jnp.ones((64, 16)), "data")
    with jaxdiag.capture(logdir, skip=skip, take=steps - skip, run="r") as cap:
        for _ in range(steps):
            with cap.step(samples=64):
                params, loss = step(params, ids, y)
                jax.block_until_ready(loss)
    assert cap.run_dir is not None
    return cap.run_dir


def all_reduce_ms_per_device(run_dir: Path) -> tuple[str, float]:
    """The step's all-reduce op and its time per device, from the trace with ``ProfileData`` alone."""
    (path,) = run_dir.glob("*.xplane.pb")
    ops: dict[str, float] = {}
    devices: set[int] = set()
    for plane in _profile_data.ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if "device_ordinal" in stats and stats.get("hlo_module") == "jit_train_step":
                    devices.add(int(stats["device_ordinal"]))
                    if str(stats.get("hlo_op", "")).startswith("all-reduce"):
                        ops[stats["hlo_op"]] = ops.get(stats["hlo_op"], 0.0) + event.duration_ns / 1e6
    (op,) = ops
    return op, ops[op] / len(devices)


def check_report(run_dir: Path) -> dict:
    rep = report(run_dir, thresholds=SMALL).to_dict()
    sharding = rep["sharding"]
    (fn,) = [f for f in sharding["functions"] if f["function"] == "train_step"]
    assert fn["mesh"]["axis_names"] == ["data"] and fn["mesh"]["axis_sizes"] == [4]
    # Every collective on the timeline is attributed to its function and arrays.
    op, truth_ms = all_reduce_ms_per_device(run_dir)
    (row,) = sharding["timeline"]
    assert (row["op"], row["function"], row["origin"], row["mesh_axes"]) == (op, "train_step", "reduction", ["data"])
    assert set(row["arrays"]) == {"params['table']", "params['w']"}
    assert row["total_ms"] == pytest.approx(truth_ms, abs=2e-3)
    # The replicated table, costed by its share of that all-reduce and ranked by it.
    findings = rep["findings"]
    (rank,) = [i for i, f in enumerate(findings) if f["kind"] == "replicated_param"]
    found = findings[rank]
    share = TABLE_BYTES / (TABLE_BYTES + 256 * 16 * 4)
    assert found["time_lost_ms"] == pytest.approx(truth_ms * share, abs=2e-3)
    assert found["evidence"]["arrays"] == {"params['table']": TABLE_BYTES}
    assert found["evidence"]["collectives"][op]["share"] == pytest.approx(share, abs=1e-4)
    assert f"all-reduce {op} over mesh axis 'data'" in found["message"]
    assert [f["time_lost_ms"] for f in findings] == sorted((f["time_lost_ms"] for f in findings), reverse=True)
    # No compile ran in the window: the warm-up compile is no recompile of the window.
    assert [c for c in rep["recompiles"] if c["function"] == "train_step"] == []
    flops_source = rep["throughput"]["mfu_basis"]["flops_source"]
    assert "capture with jaxdiag.profile" not in flops_source and "analysis=True" in flops_source
    return rep


def test_jaxdiag_jit_compiled_before_the_window(tmp_path: Path) -> None:
    run_dir = run(tmp_path, jaxdiag.jit(step_function()))
    facts = read_sidecars(run_dir)
    (carried,) = [r for r in facts.compile_log if r["function"] == "train_step"]
    assert carried[BEFORE_CAPTURE] is True and carried["sharding"]["mesh"]["axis_sizes"] == [4]
    check_report(run_dir)


def test_watch_around_warm_up_and_window(tmp_path: Path) -> None:
    with jaxdiag.watch():
        run_dir = run(tmp_path, jax.jit(step_function()))
    check_report(run_dir)


def test_compile_log_beside_the_trace_adds_to_the_sidecar(tmp_path: Path) -> None:
    """A compile only the log file still holds (memory was cleared) joins the sidecar's records, once each."""
    compile_log.configure(log_dir=tmp_path)
    step = jaxdiag.jit(step_function())
    mesh = mesh_4()
    other = jaxdiag.jit(lambda x: x * 2)
    jax.block_until_ready(other(jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("data")))))
    compile_log.clear()  # memory forgets `other`; the file beside the trace keeps it
    run_dir = run(tmp_path, step)
    in_sidecar = {r["function"] for r in read_sidecars(run_dir).compile_log}
    assert "train_step" in in_sidecar and "<lambda>" not in in_sidecar
    rep = check_report(run_dir)
    functions = {f["function"]: f["compiles"] for f in rep["sharding"]["functions"]}
    assert functions == {"train_step": [1], "<lambda>": [1]}  # each compile once, from whichever holds it
    lines = [json.loads(x) for x in next(tmp_path.glob("compiles*.jsonl")).read_text().splitlines()]
    assert {r["function"] for r in lines} >= {"train_step", "<lambda>"}


@pytest.mark.parametrize("damage", ["jit_options", "spec"])
def test_a_hand_edited_sidecar_record_is_left_out_and_the_report_still_prints(tmp_path: Path, damage: str) -> None:
    """A record whose text field, or a PartitionSpec entry, became a list (found by fuzzing: the report's
    terminal table and the join of sidecar and log hashed them, and failed with a traceback)."""
    from jaxdiag.render import terminal

    run_dir = run(tmp_path, jaxdiag.jit(step_function()))
    (side,) = run_dir.glob("jaxdiag-*.json")
    doc = json.loads(side.read_text())
    (record,) = [r for r in doc["compile_log"] if r["function"] == "train_step"]
    if damage == "jit_options":
        record["jit_options"] = [[]]
    else:
        record["sharding"]["inputs"][0]["spec"] = [[[]]]
    side.write_text(json.dumps(doc))
    rep = report(run_dir, thresholds=SMALL)
    assert "train_step" not in {f.function for f in rep.sharding.functions}  # the damaged record, left out
    assert "Per step (ms)" in terminal.render(rep, width=160)


def test_replicated_table_advice_applied_shards_it(tmp_path: Path) -> None:
    """The replicated-parameter advice, applied (the table split over the mesh axis it names), leaves
    a quarter of the table on each device and no finding."""
    import re

    from jaxdiag.analyses.sharding import analyze_records

    mesh = mesh_4()

    def findings(table_spec: P):
        put = lambda x, *s: jax.device_put(x, NamedSharding(mesh, P(*s)))  # noqa: E731
        params = {
            "table": jax.device_put(jnp.full((512, 256), 0.01, jnp.float32), NamedSharding(mesh, table_spec)),
            "w": put(jnp.full((256, 16), 0.01, jnp.float32)),
        }
        with compile_log.collecting() as got:
            jax.block_until_ready(
                jaxdiag.jit(step_function())(
                    params, put(jnp.zeros((64, 8), jnp.int32), "data"), put(jnp.ones((64, 16)), "data")
                )
            )
        result = analyze_records([r.to_dict() for r in got.records], SMALL)
        (fn,) = result.functions
        return [f for f in result.findings if f.kind == "replicated_param"], fn.facts.input_named("params['table']")

    (found,), table = findings(P())
    assert table.bytes_per_device == TABLE_BYTES
    spec = re.search(r"e\.g\. (P\([^)]*\))", found.suggestion).group(1)
    assert spec == "P('data', None)"
    after, table = findings(P("data", None))
    assert after == [] and table.bytes_per_device == TABLE_BYTES // 4


FOUR_DEVICES = """
import sys
from pathlib import Path
import jaxdiag, jax
assert jax.device_count() == 4, jax.device_count()
from tests.reporting import test_sharding_usual_flow as flow
run_dir = flow.run(Path(sys.argv[1]), jaxdiag.jit(flow.step_function()))
flow.check_report(run_dir)
print("ok", run_dir)
"""


@pytest.mark.slow
def test_usual_flow_in_a_process_with_4_devices(tmp_path: Path) -> None:
    """The same checks in a process that has exactly 4 devices (the mesh is all of them)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", FOUR_DEVICES, str(tmp_path)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "ok " in done.stdout, done.stderr[-3000:]

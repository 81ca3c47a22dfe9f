"""The README's third command: the CPU example's report names its planted problems, no flags."""

from __future__ import annotations

import re

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdiag.cli.app import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_cpu.py"


@pytest.fixture(scope="module")
def demo_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, str(EXAMPLE), str(logdir)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 14 steps" in done.stdout
    return logdir


def test_example_report_names_the_planted_problems(demo_logdir, capsys):
    assert main(["report", str(demo_logdir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    steps = {s["step"]: s for s in report["steps"]}
    assert sorted(steps) == list(range(1, 14))  # step 0 compiled outside the window
    # recompiles at the planted steps, with the changed argument named
    train = {r["step"]: r for r in report["recompiles"] if r["function"] == "train_step"}
    assert set(train) == {6, 9}
    assert "x shape axis 0 changed 32 -> 48" in train[6]["cause"]  # x: the parameter at args[1]
    assert "weak_type True -> False" in train[9]["cause"]
    # the input stall every third step, attributed to its annotation
    causes = {c["cause"]: c["ms"] for c in report["host_waits"]["by_cause"]}
    assert causes["load_batch"] > 3 * 15 * 0.6  # four 15 ms sleeps; on a loaded machine device work overlaps some
    # ... booked to the iterations that slept (3, 6, 9, 12), not to the steps before them
    loading = {
        s["step"]: next((c["ms"] for c in s["by_cause"] if c["cause"] == "load_batch"), 0.0)
        for s in report["host_waits"]["by_step"]
    }
    assert sorted(sorted(loading, key=lambda s: -loading[s])[:4]) == [3, 6, 9, 12]
    # ... and the eager conversions of step 6's bigger batch compile in step 6
    assert {r["step"] for r in report["recompiles"] if r.get("origin") == "jax-internal"} <= {6}
    # samples per step from the sidecar: 32 rows, then 48
    assert steps[1]["tokens"] == 32 and steps[7]["tokens"] == 48
    assert report["throughput"]["steady_tokens_per_s"] > 0
    # the small-op soup
    assert any(t["module"] == "jit_tiny_ops" for t in report["small_ops"]["top"])
    kinds = [f["kind"] for f in report["findings"][:3]]
    assert kinds[0] == "recompile" and "host_wait" in kinds
    # one finding for train_step's two recompiles, naming both steps
    (train_finding,) = [f for f in report["findings"] if f["evidence"].get("function") == "train_step"]
    assert train_finding["message"].startswith("`train_step` recompiled 2 times, at steps 6 and 9:")
    (stall,) = [f for f in report["findings"] if f["evidence"].get("cause") == "load_batch"]
    # (a loaded machine can make one more load slow enough to be listed beside the planted ones, anywhere)
    listed = re.search(r"at steps ([^;(]+)", stall["message"])
    assert listed, stall["message"]
    named = {int(n) for n in re.findall(r"\d+", listed.group(1))}
    assert {3, 6, 9, 12} <= named and len(named) <= 5, stall["message"]
    assert report["throughput"]["count_unit"] == "samples"


def test_compile_log_of_the_example(demo_logdir, capsys):
    assert main(["compiles", str(demo_logdir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = json.dumps(data)
    assert "train_step" in names and "tiny_ops" in names


_TWO_FUNCTIONS = """
import sys, jax, jax.numpy as jnp, jaxdiag

@jax.jit
def step(w, x):
    return w - 1e-3 * jnp.tanh(x @ w).mean()

@jax.jit
def metric(w):
    return jnp.abs(w).mean()

w, x = jnp.ones((64, 64)), jnp.ones((32, 64))
with jaxdiag.profile(sys.argv[1], run="two"):
    for _ in range(4):
        w = step(w, x)
        float(metric(w))
"""


def test_the_report_is_the_same_whatever_the_hash_seed(tmp_path):
    """Python orders sets of strings by a hash seeded per process: the report must not carry that order
    (``mfu_basis.flops_by_function`` once did). A capture of two functions with compile records, four
    seeds, one JSON."""
    import os

    subprocess.run([sys.executable, "-c", _TWO_FUNCTIONS, str(tmp_path)], check=True, timeout=300)
    outputs = set()
    for seed in ("1", "2", "3", "4"):
        done = subprocess.run(
            [sys.executable, "-m", "jaxdiag", "report", str(tmp_path), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.add(done.stdout)
    assert len(outputs) == 1
    flops = json.loads(outputs.pop())["throughput"]["mfu_basis"]["flops_by_function"]
    assert len(flops) >= 2 and list(flops) == sorted(flops)

"""``jaxdiag compiles`` on a long run's compile log: time and peak memory.

A long run (or many runs appended to one folder) leaves a compile log of a
million records. This makes one from real records: it runs a small program whose
functions recompile for the usual reasons (a batch axis that changes, a Python
scalar turned into an array, a static argument, a new dtype) under
``jaxdiag.jit`` with ``JAXDIAG_LOG_DIR`` set, then repeats those records up to
``--records`` lines, each round as a restart of the program appended to the same
log: later times, a new process id, compile indices as written (they count per
process) and the explanations ``jaxdiag.jit`` wrote. It then runs
``jaxdiag compiles LOG`` in a child process and prints the wall time and the
child's peak resident memory (``ru_maxrss``), and the same for a tenth of the
log, the anchor: reading should grow linearly with the records.

Usage:
  python benchmarks/compiles_log_speed.py [--records 1000000] [--record-bytes 2950] [--json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = r"""
import functools, sys
import jax, jax.numpy as jnp
import jaxdiag

@jaxdiag.jit
def train_step(w, x, y, lr):
    loss = lambda w: jnp.mean((x @ w - y) ** 2)
    return w - lr * jax.grad(loss)(w)

@functools.partial(jaxdiag.jit, static_argnames=("mode",))
def evaluate(w, x, mode):
    out = x @ w
    return jnp.mean(out) if mode == "mean" else jnp.max(out)

@jaxdiag.jit
def normalize(batch):
    return {k: (v - v.mean()) / (v.std() + 1e-6) for k, v in batch.items()}

@jaxdiag.jit
def update(params, opt, x, y):
    def loss(p):
        h = jnp.tanh(x @ p["dense1"]["w"] + p["dense1"]["b"])
        return jnp.mean((h @ p["dense2"]["w"] + p["dense2"]["b"] - y) ** 2)
    g = jax.grad(loss)(params)
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["mu"], g)
    nu = jax.tree.map(lambda v, g: 0.99 * v + 0.01 * g * g, opt["nu"], g)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, mu, nu)
    return params, {"mu": mu, "nu": nu, "count": opt["count"] + 1}

w = jnp.zeros((16, 4))
params = {"dense1": {"w": jnp.zeros((16, 32)), "b": jnp.zeros(32)}, "dense2": {"w": jnp.zeros((32, 4)), "b": jnp.zeros(4)}}
opt = {"mu": params, "nu": params, "count": jnp.zeros((), jnp.int32)}
for batch in (32, 48, 32, 17, 64, 48):
    x, y = jnp.ones((batch, 16)), jnp.ones((batch, 4))
    w = train_step(w, x, y, 0.1)
    w = train_step(w, x, y, jnp.float32(0.1))
    w = train_step(w.astype(jnp.bfloat16), x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), 0.1).astype(jnp.float32)
    for mode in ("mean", "max"):
        evaluate(w, x, mode)
    normalize({"a": x, "b": y})
    normalize({"a": x, "b": y, "c": x[:, :2]})
    params, opt = update(params, opt, x, y)
"""


def real_records(folder: Path) -> list[str]:
    """The lines of the compile log the program above writes."""
    env = {**os.environ, "JAXDIAG_LOG_DIR": str(folder), "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True)
    lines = [line for f in sorted(folder.glob("compiles*.jsonl")) for line in f.read_text().splitlines() if line]
    if not lines:
        raise SystemExit("the program wrote no compile record")
    return lines


def padded(record: dict, record_bytes: int) -> dict:
    """``record`` with more argument leaves (as an optimizer's moments of its arguments) until
    its line is at least ``record_bytes`` long: a larger model's records."""
    args = list(record.get("args") or [])
    extra: list[dict] = []
    while args and len(json.dumps({**record, "args": args + extra})) < record_bytes:
        leaf = dict(args[len(extra) % len(args)])
        leaf["path"] += f".moment{len(extra)}"
        extra.append(leaf)
    return {**record, "args": args + extra}


def write_log(path: Path, lines: list[str], records: int, record_bytes: int = 0) -> int:
    """Repeat ``lines`` up to ``records`` lines, each round a restart: later in time, a new pid."""
    base = [padded(json.loads(line), record_bytes) for line in lines]
    t0 = min(r["time_unix"] for r in base)
    span = max(r["time_unix"] for r in base) - t0 + 1.0
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        round_ = 0
        while written < records:
            for r in base:
                if written >= records:
                    break
                r2 = dict(r)
                r2["time_unix"] = r["time_unix"] + round_ * span
                r2["pid"] = 100_000 + round_
                f.write(json.dumps(r2) + "\n")
                written += 1
            round_ += 1
    return path.stat().st_size


def measure(log: Path, json_out: bool = False) -> tuple[float, float]:
    """Wall seconds and peak resident MB of ``jaxdiag compiles LOG`` (or ``--json``) in a fresh child."""
    how = "'--json'" if json_out else "'--width', '120'"
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        f"p = subprocess.run([sys.executable, '-m', 'jaxdiag', 'compiles', sys.argv[1], {how}],"
        " stdout=subprocess.DEVNULL)\n"
        "wall = time.perf_counter() - t\n"
        "print(p.returncode, wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, check=True)
    status, wall, rss_kb = out.stdout.split()
    if status != "0":
        raise SystemExit(f"jaxdiag compiles {log} exited with status {status}")
    return float(wall), float(rss_kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, default=None, help="write the logs here and keep them")
    parser.add_argument(
        "--record-bytes", type=int, default=0, help="pad each record's arguments to at least this many bytes"
    )
    parser.add_argument("--json", action="store_true", help="time --json as well")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        lines = real_records(root / "real")
        print(f"{len(lines)} real records from jaxdiag.jit, {sum(map(len, lines)) / len(lines):,.0f} bytes each")
        for records in (args.records // 10, args.records):
            log = root / f"compiles-{records}.jsonl"
            size = write_log(log, lines, records, args.record_bytes)
            for json_out in (False, True) if args.json else (False,):
                wall, rss = measure(log, json_out)
                print(
                    f"{records:>9,} records  {size / records:6,.0f} B each  {size / 2**20:8,.0f} MiB"
                    f"  {'--json' if json_out else 'table '}  {wall:7.1f} s  peak RSS {rss:7,.0f} MiB"
                )
            if args.keep is None:
                log.unlink()


if __name__ == "__main__":
    main()

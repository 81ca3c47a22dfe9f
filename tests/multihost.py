"""Start real ``jax.distributed`` CPU processes on this machine, each running one script."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Sequence

#: What every process runs first: gloo collectives, then ``jax.distributed`` with its number.
PRELUDE = """
import sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid, port, n, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
jax.distributed.initialize(f"localhost:{port}", num_processes=n, process_id=pid)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_processes(script: str, n: int, out: Path, extra: Sequence[str] = ()) -> list[str]:
    """Run ``script`` (after ``PRELUDE``) in ``n`` processes; their outputs, once all have exited with 0."""
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PRELUDE + script, str(i), port, str(n), str(out), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(n)
    ]
    outputs = [p.communicate()[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * n, "\n-----\n".join(outputs)
    return outputs

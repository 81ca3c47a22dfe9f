"""Two ``jax.distributed`` processes capture into one run folder, one host file and sidecar each."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

from jaxdiag.capturing.sidecar import read_sidecars

WORKER = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    pid, port, logdir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid)
    import jax.numpy as jnp
    import jaxdiag
    with jaxdiag.capture(logdir, skip=0, take=2) as cap:
        for i in range(3):
            with cap.step(tokens=100 + pid):
                float(jnp.ones((8, 8)).sum())
    jax.distributed.shutdown()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_each_process_writes_its_own_host_file_and_sidecar(tmp_path):
    port = str(_free_port())
    env_cmd = [sys.executable, "-c", WORKER]
    procs = [
        subprocess.Popen(
            [*env_cmd, str(i), port, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    runs = list((tmp_path / "plugins" / "profile").iterdir())
    assert len(runs) == 1, runs  # both processes agreed on one run folder
    run = runs[0]
    hosts = sorted(p.name for p in run.glob("*.xplane.pb"))
    assert len(hosts) == 2 and hosts[0].endswith("-p0.xplane.pb") and hosts[1].endswith("-p1.xplane.pb")
    facts = read_sidecars(run)
    assert facts.tokens_per_step() == {0: 201.0, 1: 201.0}  # tokens of both processes
    assert sorted(p["process_index"] for p in facts.processes) == [0, 1]

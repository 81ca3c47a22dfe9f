"""Reading on a Dask ``distributed`` cluster gives the report the local path gives, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxdiag.trace.contract import READER_VARIABLE
from xspace_builders import Kernel, gpu_xspace, write_run

distributed = pytest.importorskip("distributed")


@pytest.fixture(autouse=True)
def trace_backend(monkeypatch: pytest.MonkeyPatch) -> str:
    """The cluster's workers start once for the module, with the loader's own backend: this process reads
    with it too (both backends are compared by the other tests of reading)."""
    monkeypatch.delenv(READER_VARIABLE, raising=False)
    return "default"


@pytest.fixture(scope="module")
def cluster():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as local,
        distributed.Client(local) as client,
    ):
        yield local, client


def _pod(tmp_path: Path, hosts: int) -> Path:
    """``hosts`` GPU hosts that differ in their kernels' times, with steps and an all-reduce each."""
    files = {}
    for h in range(hosts):
        kernels = [
            Kernel(d, f"fusion_{i}", 1_000 + i * 700 + 37 * h, 500 + h, program_id=3)
            for d in range(2)
            for i in range(30)
        ]
        nccl = [
            Kernel(d, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 25_000 + 50 * h + d, 2_000, op="all-reduce.1")
            for d in range(2)
        ]
        files[f"host{h}"] = gpu_xspace(
            devices=2,
            kernels=kernels,
            nccl=nccl,
            steps=[(0, 0, 20_000), (1, 20_000, 40_000)],
            host_annotations=[("load_batch", 100, 900 + 300 * h)],
        )
    return write_run(tmp_path / "pod", files)


def test_a_report_read_on_the_cluster_is_the_local_report(cluster, tmp_path: Path) -> None:
    import jaxdiag

    local, client = cluster
    run = _pod(tmp_path, 4)
    here = jaxdiag.report(run).to_json()
    assert jaxdiag.report(run, scheduler=client).to_json() == here  # a Client passed in Python
    assert jaxdiag.report(run, scheduler=local.scheduler_address).to_json() == here  # an address


def test_the_h100_trace_on_the_cluster(cluster, shared_fixtures: Path) -> None:
    import jaxdiag

    _, client = cluster
    run = shared_fixtures / "h100_mlp"
    assert jaxdiag.report(run, scheduler=client).to_json() == jaxdiag.report(run).to_json()


def test_the_command_reads_on_the_cluster(cluster, tmp_path: Path) -> None:
    import subprocess
    import sys

    local, _ = cluster
    run = _pod(tmp_path, 2)
    cmd = [sys.executable, "-m", "jaxdiag", "report", str(run), "--json"]
    here = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    there = subprocess.run([*cmd, "--scheduler", local.scheduler_address], capture_output=True, text=True)
    assert there.returncode == 0, there.stderr[-2000:]
    assert there.stdout == here


def test_a_file_the_workers_cannot_read_is_skipped_and_named(cluster, tmp_path: Path) -> None:
    import jaxdiag

    _, client = cluster
    run = _pod(tmp_path, 2)
    (run / "host1.xplane.pb").write_bytes(b"\x0a\x05trunc")
    report = jaxdiag.report(run, scheduler=client)
    assert [Path(s["file"]).name for s in report.source["skipped"]] == ["host1.xplane.pb"]
    assert report.to_json() == jaxdiag.report(run).to_json()


def test_an_unreachable_scheduler_is_one_line_and_status_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    from multihost import free_port

    run = _pod(tmp_path, 1)
    done = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "report", str(run), "--scheduler", f"tcp://127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "cannot reach the Dask scheduler" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_reading_a_run_here_imports_neither_jax_nor_dask(tmp_path: Path) -> None:
    import subprocess
    import sys

    run = _pod(tmp_path, 2)
    script = (
        "import sys; from jaxdiag.cli.app import main; rc = main(['report', sys.argv[1], '--json']); "
        "assert not {'jax', 'dask', 'distributed'} & set(sys.modules), sorted({'jax', 'dask', 'distributed'} "
        "& set(sys.modules)); sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", script, str(run)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

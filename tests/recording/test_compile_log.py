"""The compile log: ring buffer, JSONL file, the DataFrame view, and failure handling."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import jax.numpy as jnp
import pytest

import jaxdiag
from jaxdiag.errors import CompileLogError, ConfigError, JaxdiagWarning
from jaxdiag.recording import compile_log
from jaxdiag.recording.log_reader import read_compile_log
from jaxdiag.recording.records import CompileRecord

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_jsonl_file_has_one_record_per_line_flushed_as_written(tmp_path):
    path = compile_log.configure(log_dir=tmp_path / "logs")
    assert path == tmp_path / "logs" / f"compiles-{socket.gethostname()}-{os.getpid()}.jsonl"
    f = jaxdiag.jit(lambda x: x * 2)
    f(jnp.ones(2))
    f(jnp.ones(3))
    lines = path.read_text().splitlines()  # read while the process still runs: flushed
    assert len(lines) == 2
    on_disk = [CompileRecord.from_dict(json.loads(line)) for line in lines]
    assert on_disk == compile_log.records()
    assert read_compile_log(path).records == tuple(compile_log.records())


def test_unwritable_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    with pytest.raises(CompileLogError, match=r"file\.txt/logs.*not writable"):
        compile_log.configure(log_dir=blocker / "logs")


def test_write_failure_later_warns_once_and_keeps_recording(tmp_path):
    folder = tmp_path / "logs"
    compile_log.configure(log_dir=folder)
    f = jaxdiag.jit(lambda x: x + 1)
    f(jnp.ones(1))
    shutil.rmtree(folder)
    folder.write_text("now a file")  # the folder cannot come back by accident
    with pytest.warns(JaxdiagWarning, match="could not write the compile log"):
        f(jnp.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = f(jnp.ones(3))
    assert out.tolist() == [2.0, 2.0, 2.0]
    assert [r.compile_index for r in compile_log.records()] == [1, 2, 3]


def test_threads_tracing_at_once_lose_no_line(tmp_path):
    path = compile_log.configure(log_dir=tmp_path)
    funs = [jaxdiag.jit(lambda x, k=k: x * k) for k in range(4)]
    barrier = threading.Barrier(4)

    def work(k):
        barrier.wait()
        for n in (1, 2, 3):
            funs[k](jnp.ones(n))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 12 == len(compile_log.records())
    assert all(json.loads(line)["schema"] == "jaxdiag.compile/1" for line in lines)


def test_ring_buffer_keeps_the_newest_and_counts_go_on():
    compile_log.configure(max_records=2)
    try:
        f = jaxdiag.jit(lambda x: x)
        for n in (1, 2, 3):
            f(jnp.ones(n))
        assert [r.compile_index for r in compile_log.records()] == [2, 3]
    finally:
        compile_log.configure(max_records=10_000)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_records_must_be_positive(bad):
    with pytest.raises(ConfigError, match="max_records"):
        compile_log.configure(max_records=bad)


def test_compiles_dataframe_one_row_per_record():
    @jaxdiag.jit
    def train_step(x):
        return x.sum()

    @jaxdiag.jit
    def eval_step(x):
        return x.mean()

    train_step(jnp.ones(2))
    train_step(jnp.ones(5))
    eval_step(jnp.ones(2))
    df = jaxdiag.compiles()
    assert list(df.columns[:8]) == [
        "function",
        "compile_index",
        "compile_s",
        "trace_s",
        "lower_s",
        "backend_compile_s",
        "cause",
        "call_site",
    ]
    assert df["function"].tolist() == ["train_step", "train_step", "eval_step"]
    assert df["compile_index"].tolist() == [1, 2, 1]
    assert df["cause"].iloc[0] == "first compile"
    assert "axis 0" in df["cause"].iloc[1] and "2 -> 5" in df["cause"].iloc[1]
    assert (df["compile_s"] > 0).all() and (df["n_args"] == 1).all()
    assert df["record"].iloc[2]["function"] == "eval_step"
    assert str(df["time"].dtype).startswith("datetime64")
    assert jaxdiag.compiles("train_step")["compile_index"].tolist() == [1, 2]
    assert jaxdiag.compiles(eval_step)["function"].tolist() == ["eval_step"]
    assert jaxdiag.compiles(eval_step.__wrapped__)["function"].tolist() == ["eval_step"]


def test_empty_log_gives_an_empty_table_with_the_columns():
    df = jaxdiag.compiles()
    assert len(df) == 0 and "backend_compile_s" in df.columns


def test_clear_forgets_records_and_restarts_counts():
    f = jaxdiag.jit(lambda x: x)
    f(jnp.ones(1))
    compile_log.clear()
    assert compile_log.records() == []
    f(jnp.ones(2))
    assert [r.compile_index for r in compile_log.records()] == [1]


def test_env_log_dir_and_a_crash_leave_every_record_readable(tmp_path):
    proc = run_python(
        """
        import os
        import jax.numpy as jnp
        import jaxdiag
        f = jaxdiag.jit(lambda x: x + 1)
        for n in (1, 2, 3):
            f(jnp.ones(n))
        os._exit(3)  # no interpreter shutdown, no flush at exit
    """,
        env={"JAXDIAG_LOG_DIR": str(tmp_path)},
    )
    assert proc.returncode == 3, proc.stderr
    (path,) = tmp_path.glob("compiles-*.jsonl")
    assert [r.compile_index for r in read_compile_log(path).records] == [1, 2, 3]


def test_env_log_dir_unwritable_warns_once_and_runs_the_function(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")  # a folder below a file can never be made, even as root
    proc = run_python(
        """
        import warnings
        import jax.numpy as jnp
        import jaxdiag
        warnings.simplefilter("always")
        f = jaxdiag.jit(lambda x: x * 2)
        g = jaxdiag.jit(lambda x: x + 1)
        print("RESULT", float(f(jnp.float32(3))), float(g(jnp.float32(3))), len(jaxdiag.compiles()))
    """,
        env={"JAXDIAG_LOG_DIR": str(blocker / "logs")},
    )
    assert proc.returncode == 0, proc.stderr
    assert "RESULT 6.0 4.0 2" in proc.stdout, proc.stdout + proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "JaxdiagWarning" in line]
    assert len(warned) == 1 and "JAXDIAG_LOG_DIR: compile log folder" in warned[0], proc.stderr
    assert "file.txt/logs" in warned[0] and "kept in memory" in warned[0]


def test_env_analysis_turns_on_cost_and_memory():
    proc = run_python(
        """
        import jax.numpy as jnp
        import jaxdiag
        jaxdiag.jit(lambda x: x @ x)(jnp.ones((4, 4)))
        (r,) = jaxdiag.compiles()["record"]
        print(r["cost"]["flops"], r["memory"]["argument_bytes"])
    """,
        env={"JAXDIAG_COMPILE_ANALYSIS": "1"},
    )
    assert proc.stdout.split() == ["128.0", "64"], proc.stderr


def test_compile_log_module_does_not_import_jax():
    proc = run_python("""
        import sys
        import jaxdiag.recording.compile_log
        import jaxdiag.recording.budget
        print(sorted(m for m in ("jax", "pandas") if m in sys.modules))
    """)
    assert proc.stdout.strip() == "[]", proc.stderr


#: The program of the full-disk tests: record 1 fits, record 2 meets a full disk, then space returns.
_FULL_DISK = """
    import os, resource, signal, sys, warnings
    import jax.numpy as jnp
    import jaxdiag
    from jaxdiag.recording.log_reader import read_compile_log
    how, folder = sys.argv[1], sys.argv[2]
    path = jaxdiag.configure(log_dir=folder)
    f = jaxdiag.jit(lambda x: x + 1)
    f(jnp.ones(1))
    filler = os.path.join(folder, "filler")
    if how == "file size limit":  # the kernel refuses bytes past the limit, as a full disk does
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 100, hard))
    else:  # fill the small filesystem, leaving room for part of a record
        with open(filler, "wb", buffering=0) as fill:
            try:
                while True:
                    fill.write(b"x" * 512)
            except OSError:
                pass
    with warnings.catch_warnings(record=True) as caught:  # records until one meets the full disk
        warnings.simplefilter("always")
        for n in range(2, 40):
            assert float(f(jnp.ones(n))[0]) == 2.0  # the function runs all the same
            if caught:
                break
    if how == "file size limit":
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    else:
        os.remove(filler)
    f(jnp.ones(n + 1))
    f(jnp.ones(n + 2))
    log = read_compile_log(path)
    kept = [r.compile_index for r in log.records]
    print("FAILED", n, "WARNED", len(caught), "KEPT", kept == [*range(1, n), n + 1, n + 2], kept)
    print("SKIPPED", len(log.skipped_lines))
"""


def _mounted_tmpfs(where: Path) -> bool:
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("how", ["file size limit", "small tmpfs"])
def test_after_a_full_disk_the_next_record_is_kept(tmp_path, how: str) -> None:
    folder = tmp_path / "small"
    if how == "small tmpfs" and not _mounted_tmpfs(folder):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_FULL_DISK), how, str(folder)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
    finally:
        if how == "small tmpfs":
            subprocess.run(["umount", str(folder)], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    # Warned once; the record that met the full disk is not in the file, and nothing of it is
    # left to spoil the records written once space returned.
    assert "WARNED 1 KEPT True" in proc.stdout and "SKIPPED 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]

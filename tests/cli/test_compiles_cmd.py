"""``jaxdiag compiles``: table, JSON, function filter, warnings and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdiag.cli.app import main
from jaxdiag.recording.records import ArgSignature, CompileRecord

A = ArgSignature


def rec(index: int, length: int, name: str = "train_step") -> CompileRecord:
    return CompileRecord(
        name,
        f"mod.{name}",
        "mod.py:1",
        "mod.py:9",
        index,
        float(index),
        args=(A("args[0]", shape=(8, length), dtype="int32", weak_type=False),),
        backend_compile_s=0.5,
        function_id=3,
    )


@pytest.fixture()
def log_file(tmp_path: Path) -> Path:
    records = [rec(i, n) for i, n in enumerate((129, 193, 257, 321), start=1)] + [rec(1, 4, name="eval_step")]
    path = tmp_path / "compiles.jsonl"
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records) + "{not json\n")
    return path


def test_table(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compiles", str(log_file), "--width", "200"]) == 0
    out, err = capsys.readouterr()
    assert "5 compile(s) of 2 function(s)" in out
    assert "3x args[0] shape axis 1" in out and "pad args[0] axis 1 up to buckets" in out
    assert err.strip().splitlines() == [
        f"jaxdiag: warning: skipped 1 corrupt or unknown line(s) in {log_file} (first: {log_file}:6: not valid JSON)"
    ]


def test_json_and_function_filter(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compiles", str(log_file), "--json", "--function", "mod.train_step"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == "jaxdiag.compiles/1"
    assert [f["function"] for f in d["functions"]] == ["train_step"]
    assert d["totals"]["compiles"] == 4 and d["advice"][0]["evidence"]["actual_compiles"] == 4
    assert main(["compiles", str(log_file), "--json", "--function", "eval_step"]) == 0
    assert [f["function"] for f in json.loads(capsys.readouterr().out)["functions"]] == ["eval_step"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/missing.jsonl"], "no such file or folder"),
        (["{tmp}"], "no compile log"),
        (
            ["{log}", "--function", "nope"],
            "no compiles of function 'nope'; functions in the log: eval_step, train_step",
        ),
    ],
    ids=["missing", "empty folder", "unknown function"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, log_file: Path, capsys, args, message) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["compiles", *(a.format(tmp=empty, log=log_file) for a in args)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("jaxdiag: error: ") and message in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_console_script_runs_without_importing_jax(log_file: Path) -> None:
    script = Path(sys.executable).with_name("jaxdiag")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "jaxdiag"]
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run([*command, "compiles", str(log_file)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "train_step" in done.stdout
    imported = {ln.split("|")[-1].strip() for ln in done.stderr.splitlines() if ln.startswith("import time:")}
    assert "jaxdiag.render.compiles_table" in imported  # the import log is really there
    assert not imported & {"jax", "jaxlib", "pandas", "numpy"}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ``jaxdiag.profile`` capture in which ``grow`` compiles for 3 batch sizes; no JSONL log is written."""
    import jax.numpy as jnp

    import jaxdiag

    @jax_jit_once
    def grow(x):
        return (x * 2).sum()

    logdir = tmp_path_factory.mktemp("profiled")
    with jaxdiag.profile(logdir):
        for rows in (4, 5, 6, 6):
            grow(jnp.ones((rows, 3))).block_until_ready()
    return logdir


def jax_jit_once(fn):
    import jax

    return jax.jit(fn)


def test_a_capture_folder_gives_the_compile_records_of_its_sidecar(profiled: Path, capsys) -> None:
    assert not list(profiled.rglob("*.jsonl"))  # the records are only in the sidecar
    run_dir = next((profiled / "plugins" / "profile").iterdir())
    for where in (profiled, run_dir):
        assert main(["compiles", str(where), "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        grow = next(f for f in data["functions"] if f["function"] == "grow")
        assert (grow["compiles"], grow["recompiles"]) == (3, 2)
        assert [c["label"] for c in grow["causes"]] == ["x shape axis 0"]  # named as the parameter is
        assert [Path(f).name for f in data["files"]] == [p.name for p in run_dir.glob("jaxdiag-*.json")]


def test_a_log_in_the_run_folder_and_its_sidecar_count_each_compile_once(
    profiled: Path, tmp_path: Path, capsys
) -> None:
    import shutil

    copy = tmp_path / "capture"
    shutil.copytree(profiled, copy)
    run_dir = next((copy / "plugins" / "profile").iterdir())
    from jaxdiag.capturing.sidecar import read_sidecars

    records = read_sidecars(run_dir).compile_log
    (run_dir / "compiles-host.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["compiles", str(copy), "--json"]) == 0
    once = json.loads(capsys.readouterr().out)
    assert main(["compiles", str(profiled), "--json"]) == 0
    assert once["functions"] == json.loads(capsys.readouterr().out)["functions"]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x1f\x8b\x08\x00\x00", "gzip-compressed; expected a compile log (JSONL text): decompress it first"),
        (b'{"a": 1}\n\x00\x01', "binary data (a NUL byte at offset 9); expected a compile log (JSONL text)"),
    ],
)
def test_compressed_or_binary_logs_are_named(tmp_path: Path, capsys, content: bytes, message: str) -> None:
    path = tmp_path / "compiles.jsonl"
    path.write_bytes(content)
    assert main(["compiles", str(path)]) == 2
    assert capsys.readouterr().err == f"jaxdiag: error: {path}: {message}\n"

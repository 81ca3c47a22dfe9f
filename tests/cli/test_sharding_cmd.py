"""``jaxdiag sharding``: compile logs of real sharded programs, a real capture, a saved report, bad input."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdiag.cli.app import main
from tests import sharding_programs as programs


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compile log holding the data-parallel, tensor-parallel, bad-spec and sharding-change compiles."""
    records = [
        r
        for s in (programs.data_parallel(), programs.tensor_parallel(), programs.bad_spec(), programs.sharding_change())
        for r in s.records
    ]
    path = tmp_path_factory.mktemp("sharding_log") / "compiles.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> programs.Capture:
    return programs.capture(tmp_path_factory.mktemp("sharding_cli_capture"))


def test_table_per_function(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sharding", str(log_file), "--width", "220"]) == 0
    out = capsys.readouterr().out
    for fn in ("dp_step", "tp_step", "bad_step", "moved"):
        assert f"\n{fn} (jit_{fn}" in "\n" + out
    assert "mesh(data=2, model=4) of cpu" in out and "mesh(data=8) of cpu" in out
    assert "P('model', None)" in out and "params['w']" in out
    assert "resharding" in out and "reduction" in out
    assert "bad_step gathers params['w']" in out and "moved compiled again" in out


def test_json_and_function_filter(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sharding", str(log_file), "--json", "--function", "bad_step"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == "jaxdiag.sharding/1"
    (fn,) = d["functions"]
    (c,) = fn["collectives"]
    assert (fn["function"], c["kind"], c["mesh_axes"], c["arrays"], c["origin"]) == (
        "bad_step",
        "all-gather",
        ["model"],
        ["params['w']"],
        "resharding",
    )
    assert fn["comm_bytes_per_call"] == 512 * 512 * 4
    assert [f["kind"] for f in d["findings"]] == ["implicit_resharding"]


def test_replicated_threshold_option(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sharding", str(log_file), "--json", "--function", "dp_step", "--replicated-param-mb", "0.02"]) == 0
    (f,) = json.loads(capsys.readouterr().out)["findings"]
    assert f["kind"] == "replicated_param" and "params['w1']" in f["evidence"]["arrays"]


def test_capture_joins_timeline_and_saved_report(
    capture: programs.Capture, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sharding", str(capture.logdir), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = {r["function"]: r for r in d["timeline"]}
    assert rows["bad_step"]["arrays"] == ["params['w']"] and rows["bad_step"]["mesh_axes"] == ["model"]
    assert rows["dp_step"]["mesh_axes"] == ["data"] and rows["dp_step"]["total_ms"] > 0
    saved = tmp_path / "report.json"
    assert main(["report", str(capture.logdir), "--json", "-o", str(saved)]) == 0
    capsys.readouterr()
    assert main(["sharding", str(saved), "--width", "200"]) == 0
    out = capsys.readouterr().out
    # the op, then its function (the module jit_bad_step is the function's own, so not repeated)
    assert "Collectives on the timeline" in out and re.search(r"all-gather[.\d]* +│ bad_step ", out)
    assert main(["report", str(capture.logdir), "--width", "200"]) == 0  # the report's own section
    out = capsys.readouterr().out
    assert "Sharding (jaxdiag sharding shows every array's spec)" in out
    assert "bad_step (jit_bad_step, compile " in out and "params['w']" in out


def test_capture_without_facts_says_how_to_record_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cpu_trace_dir
) -> None:
    assert main(["sharding", str(cpu_trace_dir.logdir)]) == 0
    assert "no sharding facts in" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/missing"], "no such file or folder; give a compile log"),
        (["{tmp}"], "neither a capture nor a compile log"),
        (["{log}", "--function", "nope"], "no sharding facts for function 'nope'; functions with facts: bad_step"),
        (["{log}", "--replicated-param-mb", "-1"], "--replicated-param-mb must be positive"),
        (["{bad}"], "no valid compile record"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    args: list[str], message: str, log_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.jsonl").write_text("not json\n")
    argv = [a.format(tmp=tmp_path / "empty", log=log_file, bad=tmp_path / "bad.jsonl") for a in args]
    (tmp_path / "empty").mkdir()
    assert main(["sharding", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_subprocess_smoke_without_jax(log_file: Path) -> None:
    code = (
        "import sys; from jaxdiag.cli.app import main; rc = main(['sharding', sys.argv[1], '--json']); "
        "assert 'jax' not in sys.modules, 'reading a log imported jax'; sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(log_file)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["functions"]


def test_each_distinct_compile_is_shown_latest_first_without_a_capture(log_file: Path, capsys) -> None:
    assert main(["sharding", str(log_file), "--function", "moved", "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)["functions"]
    assert [(f["compiles"], f["steady"], f["steady_by"]) for f in moved] == [
        ([2], True, "latest compile"),
        ([1], False, "latest compile"),
    ]
    assert main(["sharding", str(log_file), "--function", "moved", "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert out.index("moved (jit_moved, compile 2) latest: which compile ran most is unknown (no capture)") < out.index(
        "moved (jit_moved, compile 1) another compile"
    )


def test_settings_reach_the_replicated_parameter_finding(log_file: Path, tmp_path: Path, capsys) -> None:
    assert main(["sharding", str(log_file), "--json"]) == 0
    default = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "replicated_param"]
    assert main(["sharding", str(log_file), "--json", "--set", "replicated_param_bytes=1KiB"]) == 0
    small = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "replicated_param"]
    assert len(small) > len(default)
    (tmp_path / "pyproject.toml").write_text('[tool.jaxdiag]\nreplicated_param_bytes = "1KiB"\n')
    assert main(["sharding", str(log_file), "--json", "--config", str(tmp_path / "pyproject.toml")]) == 0
    assert len([f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "replicated_param"]) == len(
        small
    )

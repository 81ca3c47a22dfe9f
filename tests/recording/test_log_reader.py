"""read_compile_log(): files and folders, skipped lines, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdiag.errors import CompileLogError
from jaxdiag.recording.log_reader import read_compile_log
from jaxdiag.recording.records import ArgSignature, Change, CompileRecord, Explanation


def rec(index: int, t: float, name: str = "train_step") -> CompileRecord:
    exp = None if index == 1 else Explanation("shape", (Change("args[0]", "shape", "1", "2", axis=0),), 1)
    return CompileRecord(
        name,
        f"mod.{name}",
        "mod.py:1",
        "mod.py:9",
        index,
        t,
        trace_s=0.1,
        lower_s=0.2,
        backend_compile_s=0.3,
        args=(ArgSignature("args[0]", shape=(index,), dtype="float32", weak_type=False),),
        in_tree="PyTreeDef(((*,), {}))",
        function_id=42,
        explanation=exp,
        pid=1,
    )


def line(r: CompileRecord) -> str:
    return json.dumps(r.to_dict()) + "\n"


def test_round_trip_of_one_file(tmp_path: Path) -> None:
    records = [rec(1, 10.0), rec(2, 11.0), rec(1, 12.0, name="eval_step")]
    path = tmp_path / "compiles.jsonl"
    path.write_text("".join(line(r) for r in records))
    log = read_compile_log(path)
    assert log.records == tuple(records)
    assert log.files == (str(path),) and log.skipped_lines == ()


BAD_LINES = [
    ("not json", "{oops\n", "not valid JSON"),
    ("json list", "[1, 2]\n", "a JSON list"),
    ("other record", json.dumps({"event": "step", "n": 1}) + "\n", "'function' missing"),
    (
        "other schema",
        json.dumps({**rec(1, 1.0).to_dict(), "schema": "jaxdiag.compile/2"}) + "\n",
        "is not jaxdiag.compile/1",
    ),
    ("bad index", json.dumps({**rec(1, 1.0).to_dict(), "compile_index": "1"}) + "\n", "'compile_index'"),
    ("bad time", json.dumps({**rec(1, 1.0).to_dict(), "time_unix": None}) + "\n", "'time_unix'"),
    ("bad duration", json.dumps({**rec(1, 1.0).to_dict(), "trace_s": "slow"}) + "\n", "'trace_s'"),
    ("bad shape", json.dumps({**rec(1, 1.0).to_dict(), "args": [{"path": "x", "shape": ["a"]}]}) + "\n", "'shape'"),
    ("bad explanation", json.dumps({**rec(2, 1.0).to_dict(), "explanation": "why"}) + "\n", "'explanation'"),
    (
        "bad change",
        json.dumps({**rec(2, 1.0).to_dict(), "explanation": {"changes": ["x"]}}) + "\n",
        "not a compile record",
    ),
]


@pytest.mark.parametrize("name, bad, reason", BAD_LINES, ids=[b[0] for b in BAD_LINES])
def test_bad_lines_are_skipped_and_named(tmp_path: Path, name: str, bad: str, reason: str) -> None:
    path = tmp_path / "compiles.jsonl"
    path.write_text(line(rec(1, 1.0)) + bad + "\n" + line(rec(2, 2.0)))
    log = read_compile_log(path)
    assert [r.compile_index for r in log.records] == [1, 2]
    assert len(log.skipped_lines) == 1
    file, number, why = log.skipped_lines[0]
    assert (file, number) == (str(path), 2) and reason in why


def test_partial_last_line_from_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "compiles.jsonl"
    path.write_text(line(rec(1, 1.0)) + line(rec(2, 2.0))[:40])
    log = read_compile_log(path)
    assert len(log.records) == 1 and log.skipped_lines == ((str(path), 2, "partial last line"),)


def test_newer_minor_schema_and_unknown_fields_are_read(tmp_path: Path) -> None:
    d = {**rec(1, 1.0).to_dict(), "schema": "jaxdiag.compile/1.3", "new_field": {"x": 1}}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(d) + "\n")
    assert read_compile_log(path).records == (rec(1, 1.0),)


def test_program_id_round_trips_and_older_records_without_it_load(tmp_path: Path) -> None:
    import dataclasses

    with_id = dataclasses.replace(rec(2, 2.0), program_id=17)
    older = {k: v for k, v in rec(1, 1.0).to_dict().items() if k != "program_id"}
    bad = {**rec(3, 3.0).to_dict(), "program_id": "17"}
    path = tmp_path / "compiles.jsonl"
    path.write_text(json.dumps(older) + "\n" + line(with_id) + json.dumps(bad) + "\n")
    log = read_compile_log(path)
    assert [(r.compile_index, r.program_id) for r in log.records] == [(1, None), (2, 17)]
    ((_, number, why),) = log.skipped_lines
    assert number == 3 and "'program_id' is not an integer" in why


def test_folder_is_read_recursively_and_merged_by_time(tmp_path: Path) -> None:
    (tmp_path / "host0").mkdir()
    (tmp_path / "host1").mkdir()
    (tmp_path / "host0" / "compiles-100.jsonl").write_text(line(rec(1, 1.0)) + line(rec(2, 3.0)))
    (tmp_path / "host1" / "compiles-200.jsonl").write_text(line(rec(1, 2.0, name="b")))
    (tmp_path / "notes.jsonl").write_text('{"not": "a record"}\n')  # ignored: compiles*.jsonl exist
    log = read_compile_log(tmp_path)
    assert [r.time_unix for r in log.records] == [1.0, 2.0, 3.0]
    assert len(log.files) == 2 and log.skipped_lines == ()


def test_folder_without_compiles_files_reads_any_jsonl(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_text(line(rec(1, 1.0)))
    assert len(read_compile_log(str(tmp_path)).records) == 1


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: d / "missing.jsonl", "no such file or folder"),
        (lambda d: d, "no compile log (no *.jsonl file)"),
        (lambda d: _write(d / "empty.jsonl", ""), "no valid compile record"),
        (lambda d: _write(d / "bad.jsonl", "{}\n[]\n"), "first problem: line 1"),
    ],
    ids=["missing", "empty folder", "empty file", "no valid record"],
)
def test_errors_name_the_path_and_the_problem(tmp_path: Path, setup, message: str) -> None:
    path = setup(tmp_path)
    with pytest.raises(CompileLogError) as err:
        read_compile_log(path)
    text = str(err.value)
    assert str(path) in text and message in text and "\n" not in text


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_reading_imports_neither_jax_nor_pandas(tmp_path: Path) -> None:
    path = tmp_path / "compiles.jsonl"
    path.write_text(line(rec(1, 1.0)))
    code = (
        "import sys; from jaxdiag.recording.log_reader import read_compile_log; "
        f"read_compile_log({str(path)!r}); "
        "bad = sorted(m for m in ('jax', 'jaxlib', 'pandas', 'numpy') if m in sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

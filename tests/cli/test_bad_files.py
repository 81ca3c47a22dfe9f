"""A non-UTF-8 or gzip-compressed ``.json`` given to each command: exit 2, one line naming the file and the problem."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from report_builders import make_report

from jaxdiag.cli.app import main

BAD = {
    "latin1.json": (
        b'{"schema_version": "1.2", "source": "caf\xe9"}',
        "not UTF-8 text (byte 0xe9 at offset 40 of 43 bytes)",
    ),
    "packed.json": (gzip.compress(b'{"schema_version": "1.2"}', mtime=0), "gzip-compressed (45 bytes)"),
    "empty.json": (b"", "the file is empty (0 bytes)"),
    "cut.json": (b'{"schema_version": "1.2", "steps": [', "truncated JSON: the file ends after 36 bytes"),
}
COMMANDS = [
    ["check", "{bad}"],
    ["check", "{good}", "--baseline", "{bad}"],
    ["baseline", "{bad}", "-o", "{tmp}/b.json"],
    ["diff", "{bad}", "{good}"],
    ["diff", "{good}", "{bad}"],
    ["sharding", "{bad}"],
    ["report", "{bad}"],
    ["compiles", "{bad}"],
]


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]).replace("{", "").replace("}", ""))
def test_one_line_and_exit_2(tmp_path: Path, capsys, monkeypatch, name: str, command: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    data, problem = BAD[name]
    bad = tmp_path / name
    bad.write_bytes(data)
    good = tmp_path / "good.json"
    steps = [{"step": i, "wall_ms": 10.0, "tokens": 10.0} for i in range(4)]
    make_report(steps=steps, recompiles=[], findings=()).save(good)
    args = [a.format(bad=bad, good=good, tmp=tmp_path) for a in command]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"jaxdiag: error: {bad}: "), err
    if command[0] == "report":
        assert "expected a saved report" in err  # `report` reads a .json as a saved report
    elif command[0] == "compiles":
        assert "compile" in err
    else:
        assert problem in err, err
    assert not (tmp_path / "b.json").exists()


def test_a_saved_report_with_a_section_of_the_wrong_kind_is_named(tmp_path: Path, capsys) -> None:
    good = json.loads(make_report(findings=()).to_json())
    good["throughput"]["per_step"] = [{"step": "3", "period_ms": 1.0}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(good))
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"jaxdiag: error: {path}: not a jaxdiag report: throughput.per_step[0].step: a string, not a whole number\n"
    )


def test_a_baseline_whose_devices_are_not_a_list_still_compares(tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.json"
    make_report(
        steps=[{"step": i, "wall_ms": 10.0, "tokens": 10.0} for i in range(4)], recompiles=[], findings=()
    ).save(good)
    base = tmp_path / "base.json"
    assert main(["baseline", str(good), "-o", str(base)]) == 0
    data = json.loads(base.read_text())
    data["source"]["devices"] = True  # hand-edited: found by fuzzing, once a TypeError
    base.write_text(json.dumps(data))
    assert main(["check", str(good), "--baseline", str(base)]) in (0, 1, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_a_key_holding_a_newline_is_shown_on_the_one_error_line(tmp_path: Path, capsys) -> None:
    """Found by fuzzing: a key of a saved report is part of the message, and its newline had split it in two."""
    good = json.loads(make_report(findings=()).to_json())
    good["source"]["meta"] = {"a\nb": 1.8446744073709556e19}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(good))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "source.meta.a\\nb: 1.8446744073709556e+19 is out of range" in err, err

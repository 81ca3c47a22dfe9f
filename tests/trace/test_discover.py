"""Finding the run and its host files from every path a user may give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jaxdiag.errors import TraceFormatError
from jaxdiag.trace.discover import discover, host_name
from xspace_builders import Kernel, gpu_xspace, write_run

DATA = gpu_xspace(kernels=[Kernel(0, "fusion_1", 0, 10)])
OLD, NEW = "2026_01_01_10_00_00", "2026_01_02_09_00_00"


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Two runs; the newer one has two hosts."""
    write_run(tmp_path, {"host0": DATA}, run=OLD)
    write_run(tmp_path, {"host1": DATA, "host0": DATA}, run=NEW)
    return tmp_path


@pytest.mark.parametrize("relative", ["", "plugins", "plugins/profile", f"plugins/profile/{NEW}"])
def test_every_folder_level_finds_the_newest_run(logdir: Path, relative: str) -> None:
    found = discover(logdir / relative)
    assert found.run == NEW
    assert [f.name for f in found.files] == ["host0.xplane.pb", "host1.xplane.pb"]
    assert found.kind == "xplane"


def test_a_single_file_is_its_own_run(logdir: Path) -> None:
    file = logdir / "plugins" / "profile" / OLD / "host0.xplane.pb"
    found = discover(file)
    assert found.files == (file,) and found.run_dir == file.parent and found.run == OLD


def test_run_and_host_select(logdir: Path) -> None:
    assert discover(logdir, run=OLD).files[0].parent.name == OLD
    assert discover(logdir).runs == (OLD, NEW)
    assert [f.name for f in discover(logdir, host="host1").files] == ["host1.xplane.pb"]


def test_name_orders_runs_before_mtime(tmp_path: Path) -> None:
    newer_name = write_run(tmp_path, {"h": DATA}, run="2026_03_01_00_00_00")
    older_name = write_run(tmp_path, {"h": DATA}, run="2026_02_01_00_00_00")
    os.utime(newer_name, (1_000, 1_000))  # the newest name is older on disk
    assert older_name.stat().st_mtime > newer_name.stat().st_mtime
    assert discover(tmp_path).run == "2026_03_01_00_00_00"


def test_runs_without_trace_files_are_passed_over(logdir: Path) -> None:
    (logdir / "plugins" / "profile" / "2027_01_01_00_00_00").mkdir()
    assert discover(logdir).run == NEW


def test_json_only_run(tmp_path: Path) -> None:
    run = tmp_path / "plugins" / "profile" / OLD
    run.mkdir(parents=True)
    (run / "vm.trace.json.gz").write_bytes(b"")
    found = discover(tmp_path)
    assert found.kind == "json" and [host_name(f) for f in found.files] == ["vm"]


def test_xplane_is_preferred_over_json(tmp_path: Path) -> None:
    run = write_run(tmp_path, {"vm": DATA})
    (run / "vm.trace.json.gz").write_bytes(b"")
    assert discover(tmp_path).kind == "xplane"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p / "missing", "no such file or folder"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "empty folder"),
        (lambda p: (p / "notes.txt").write_text("x") and p, "no trace files"),
        (lambda p: (p / "notes.txt").write_text("x") and p / "notes.txt", "not a trace file"),
    ],
    ids=["missing", "empty", "no-trace-files", "wrong-file"],
)
def test_bad_paths_name_the_path_and_problem(tmp_path: Path, setup, message: str) -> None:
    path = setup(tmp_path)
    with pytest.raises(TraceFormatError, match=message) as info:
        discover(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unknown_run_lists_the_available_ones(logdir: Path) -> None:
    with pytest.raises(TraceFormatError, match=f"no run named 'nope'; available runs: {OLD}, {NEW}"):
        discover(logdir, run="nope")


def test_unknown_host_lists_the_available_ones(logdir: Path) -> None:
    with pytest.raises(TraceFormatError, match="no host named 'h9'; available hosts: host0, host1"):
        discover(logdir, host="h9")


def test_host_name_strips_trace_suffixes() -> None:
    assert host_name(Path("a/gpu0.xplane.pb")) == "gpu0"
    assert host_name(Path("a/vm.trace.json.gz")) == "vm"


def test_unreadable_folder_is_a_trace_format_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        # Root reads folders whatever their permissions; then the folder is readable.
        expected = "cannot read" if os.geteuid() != 0 else "empty folder"
        with pytest.raises(TraceFormatError, match=expected):
            discover(locked)
    finally:
        locked.chmod(0o700)


def test_a_path_the_system_refuses_is_a_trace_format_error(tmp_path: Path) -> None:
    """The same ``cannot read`` as a locked folder, for root too (the name is over NAME_MAX)."""
    with pytest.raises(TraceFormatError, match=r"cannot read \(File name too long\)"):
        discover(tmp_path / ("x" * 300))

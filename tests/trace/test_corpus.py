"""Real captures made by others, on every platform (``tests/corpus/PROVENANCE.md`` says where each is from).

Each test asserts facts the capture holds (devices, steps, collectives by kind,
modules, host offload copies) as XProf shows them, and runs the full
``jaxdiag report --json`` on it as a user would. Captures of programs that are
not JAX, and files that are not traces, must give one line and exit status 2.

The corpus is looked for in ``$JAXDIAG_CORPUS``, then ``tests/corpus/``, then
``../shared/corpus`` beside the checkout; without it these tests skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jaxdiag
from jaxdiag.analyses.device_work import device_ops
from jaxdiag.trace.chip_steps import chip_steps

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = ROOT / "tests" / "corpus" / "PROVENANCE.md"


def _checksums() -> dict[str, str]:
    """``file -> sha256`` from the table in PROVENANCE.md."""
    rows = re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", PROVENANCE.read_text(), flags=re.M)
    return dict(rows)


CHECKSUMS = _checksums()


def _corpus() -> Path | None:
    candidates = [os.environ.get("JAXDIAG_CORPUS"), ROOT / "tests" / "corpus", ROOT.parent / "shared" / "corpus"]
    for folder in candidates:
        if folder and all((Path(folder) / name).is_file() for name in CHECKSUMS):
            return Path(folder)
    return None


CORPUS = _corpus()
needs_corpus = pytest.mark.skipif(
    CORPUS is None, reason="the trace corpus is not here (see tests/corpus/PROVENANCE.md)"
)


def corpus_file(name: str) -> Path:
    assert CORPUS is not None
    return CORPUS / name


def report_json(path: Path) -> dict:
    """``jaxdiag report --json PATH`` as a user runs it, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "report", "--json", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def test_provenance_lists_every_corpus_file_with_its_checksum() -> None:
    assert len(CHECKSUMS) == 7


@needs_corpus
@pytest.mark.parametrize("name", sorted(CHECKSUMS))
def test_corpus_files_are_the_ones_provenance_describes(name: str) -> None:
    assert hashlib.sha256(corpus_file(name).read_bytes()).hexdigest() == CHECKSUMS[name]


# --- TPU v6e, 4 chips: psum all-reduces and host offload copies (XProf's test data) -----------------------
@pytest.fixture(scope="module")
def tpu_v6e():
    if CORPUS is None:
        pytest.skip("the trace corpus is not here")
    return jaxdiag.load(corpus_file("tpu_v6e_4chip.xplane.pb"))


def test_tpu_v6e_devices_and_modules(tpu_v6e) -> None:
    devices = tpu_v6e.devices
    assert devices["plane"].tolist() == [f"/device:TPU:{i}" for i in range(4)]
    assert set(devices["platform"]) == {"tpu"} and set(devices["device_name"]) == {"TPU v6 Lite"}
    assert set(devices["peak_flops"]) == {918e12}
    ev = tpu_v6e.events
    runs = ev.loc[ev["line_kind"] == "xla_modules"].groupby(["device", "hlo_module"], observed=True).size()
    assert {d: runs[d]["jit_f"] for d in range(4)} == {d: 100 for d in range(4)}
    assert {d: runs[d]["jit__psum"] for d in range(4)} == {d: 3 for d in range(4)}
    assert set(runs[0].index) == {"jit_f", "jit__psum", "jit_convert_element_type", "jit_broadcast_in_dim"}
    ops = ev.loc[ev["category"] == "device"]
    assert (ops["program_id"] >= -1).all() and (ops.loc[ops["line_kind"] == "xla_ops", "program_id"] >= 0).all()


def test_tpu_v6e_collectives_by_kind(tpu_v6e) -> None:
    ops = device_ops(tpu_v6e)
    coll = ops.loc[ops["op_kind"] == "collective"]
    assert coll.groupby(["device", "collective", "hlo_module"], observed=True).size().to_dict() == {
        (d, "all-reduce", "jit__psum"): 3 for d in range(4)
    }
    assert set(coll["name"]) == {"all-reduce"}  # the short name, from the whole HLO text


def test_tpu_v6e_host_offload_copies_and_async_ops(tpu_v6e) -> None:
    ops = device_ops(tpu_v6e)
    copies = ops.loc[ops["op_kind"] == "memcpy"]
    # 100 runs of jit_f, each moving 6 buffers to or from host memory (S(5)), a start and a done each.
    assert copies.groupby("device").size().to_dict() == {d: 1200 for d in range(4)}
    assert set(copies["name"].str.replace(r"\.\d+$", "", regex=True)) == {"copy-start", "copy-done"}
    assert set(copies["line"]) == {"XLA Ops"} and set(copies["hlo_module"]) == {"jit_f"}
    ev = tpu_v6e.events
    assert ev.loc[ev["line_kind"] == "async_ops"].groupby("device").size().to_dict() == {0: 600}
    assert not ops["line_kind"].isin(["async_ops", "markers"]).any()


def test_tpu_v6e_steps_per_chip(tpu_v6e) -> None:
    assert tpu_v6e.step_source == "module" and len(tpu_v6e.steps) == 100
    assert set(tpu_v6e.steps["step_name"]) == {"jit_f"}
    table = chip_steps(tpu_v6e)
    assert table.groupby("device").size().to_dict() == {d: 100 for d in range(4)}
    median_ms = (table["end_ns"] - table["start_ns"]).groupby(table["device"]).median() / 1e6
    assert median_ms.between(780, 790).all()  # the four chips keep step: 784 ms each


def test_tpu_v6e_report(tpu_v6e) -> None:
    report = report_json(corpus_file("tpu_v6e_4chip.xplane.pb"))
    assert [d["device_name"] for d in report["source"]["devices"]] == ["TPU v6 Lite"] * 4
    assert len(report["steps"]) == 100
    # Steps inferred from executions of jit_f (its XLA Modules spans); the steady steps keep the
    # chips' 784 ms pace.
    assert report["throughput"]["steady_steps_per_s"] == pytest.approx(1.275, abs=0.01)
    assert report["throughput"]["steady_from"] == "device executions of jit_f"
    wall_s = sum(s["wall_ms"] for s in report["steps"]) / 1e3
    assert report["throughput"]["steps_per_s"] == pytest.approx(100 / wall_s, rel=1e-3)
    modules = {m["module"] for m in report["device_time"]["by_module"]}
    assert "jit_f" in modules
    # The psum runs three times (12 all-reduces over 4 chips) before the first run of jit_f: work
    # before the loop, a row of its own rather than part of step 0, and no finding of a cost.
    (before,) = report["between_steps"]["rows"]
    assert (before["after_step"], before["before_step"]) == (-1, 0)
    assert {"function": "_psum", "executions": 3} in before["programs"]
    first = report["steps"][0]
    assert first["collective_ms"] == 0 and first["compile_ms"] == pytest.approx(214.05, abs=0.1)
    # f's compile runs inside the first dispatch of f, whose execution is step 0 (the host ran 4 s ahead).
    assert [(r["function"], r["step"]) for r in report["recompiles"] if r["function"] == "f"] == [("f", 0)]
    assert report["collectives"]["by_kind"] == []  # the collective figures count time inside steps
    (outside,) = [f for f in report["findings"] if f["kind"] == "collectives_outside_steps"]
    assert "12 all-reduce op(s) over 4 device(s)" in outside["message"]
    assert not [f for f in report["findings"] if f["kind"] == "between_steps"]


# --- AMD ROCm: MI300X and gfx950 captures of JAX programs (TraceLens test data) ----------------------------
@needs_corpus
@pytest.mark.parametrize(
    ("name", "ops_per_device", "module", "steps"),
    [
        ("rocm_mi300x_8gpu_conv.xplane.pb", {0: 60} | {d: 25 for d in range(1, 8)}, "jit_forward_3d_conv", 5),
        ("rocm_mi300x_8gpu_conv_legacy.xplane.pb", {0: 53, 7: 25}, "jit_forward_3d_conv", 5),
        ("rocm_gfx950_te_fused_attn.xplane.pb", {0: 150}, "jit_loss_fn", 1),
    ],
)
def test_rocm_captures(name: str, ops_per_device: dict[int, int], module: str, steps: int) -> None:
    frames = jaxdiag.load(corpus_file(name))
    devices = frames.devices
    assert devices["plane"].tolist() == [f"/device:GPU:{i}" for i in range(8)]
    assert set(devices["vendor"]) == {"AMD"} and set(devices["platform"]) == {"gpu"}
    ops = device_ops(frames)
    assert ops.groupby("device").size().to_dict() == ops_per_device
    assert set(ops["hlo_module"]) - {""} == {module} and not (ops["op_kind"] == "collective").any()
    assert frames.step_source == "module" and len(frames.steps) == steps
    report = report_json(corpus_file(name))
    assert len(report["source"]["devices"]) == 8 and len(report["steps"]) == steps
    assert report["collectives"]["by_kind"] == []


@needs_corpus
def test_rocm_mi300x_device_facts_and_kernels() -> None:
    frames = jaxdiag.load(corpus_file("rocm_mi300x_8gpu_conv.xplane.pb"))
    assert set(frames.devices["core_count"]) == {304.0}  # MI300X compute units
    assert set(frames.devices["device_name"]) == {"AMD GPU (gfx 9.4)"}  # ROCm names no device; gfx942
    assert set(frames.devices["memory_bytes"]) == {206141652992.0}
    ops = device_ops(frames)
    assert {"loop_transpose_fusion.kd", "Im3d2Col.kd"} <= set(ops["name"])
    # ROCm's blit kernels are copies, not compute: 35 of them on GPU 0, on streams of kind "Kernel".
    copies = ops.loc[ops["op_kind"] == "memcpy"]
    assert set(copies["name"]) == {"__amd_rocclr_copyBuffer.kd"}
    assert copies.groupby("device").size().to_dict() == {0: 35}


@needs_corpus
def test_rocm_gfx950_reads_its_unknown_plane_as_a_note() -> None:
    frames = jaxdiag.load(corpus_file("rocm_gfx950_te_fused_attn.xplane.pb"))
    assert any("planes not read: /device:CUSTOM:Megascale Trace" in n for n in frames.notes)
    # Only GPU 0's plane has device facts; the others name just their vendor.
    assert frames.devices["device_name"].tolist() == ["AMD GPU (gfx 9.5)"] + ["AMD GPU"] * 7
    assert any("FmhaF" in n for n in device_ops(frames)["name"])  # the fused attention kernel


# --- not JAX, not a trace: one line, exit 2 ---------------------------------------------------------------
@needs_corpus
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pytorch_h100_bert.trace.json.gz", "not a jax.profiler trace (a PyTorch profiler trace)"),
        ("chrome_demo.trace.json.gz", "not a jax.profiler trace: none of its processes ('pid 22630')"),
        ("xprof_overview_page.xplane.pb", "not an XSpace"),
    ],
)
@pytest.mark.parametrize("command", [["report"], ["report", "--json"]])
def test_captures_that_are_not_jax_traces_give_one_line(name: str, message: str, command: list[str]) -> None:
    path = corpus_file(name)
    done = subprocess.run(
        [sys.executable, "-m", "jaxdiag", *command, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and message in lines[0], done.stderr


@needs_corpus
@pytest.mark.parametrize("name", [n for n in sorted(CHECKSUMS) if n.startswith(("tpu_", "rocm_"))])
def test_reading_in_two_processes_gives_the_same_frames(name: str) -> None:
    import pandas as pd

    alone = jaxdiag.load(corpus_file(name), parallel=False)
    shared = jaxdiag.load(corpus_file(name), parallel=True)
    pd.testing.assert_frame_equal(alone.events, shared.events)
    pd.testing.assert_frame_equal(alone.devices, shared.devices)
    assert alone.notes == shared.notes


@needs_corpus
@pytest.mark.parametrize("name", [n for n in sorted(CHECKSUMS) if n.startswith(("tpu_", "rocm_"))])
def test_terminal_report_names_the_devices(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jaxdiag", "report", str(corpus_file(name))],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "120"},
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    header = done.stdout.splitlines()[1]
    assert re.search(r"devices: (4 \(TPU v6 Lite\)|8 \(AMD GPU)", header), header

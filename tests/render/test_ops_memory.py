"""Top ops, MFU's basis, memory and finding places in every renderer; XProf only where asked for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def matmul_report(matmul_capture):
    from jaxdiag.reporting.build import report

    return report(matmul_capture.run_dir)


def test_terminal_sections(matmul_report):
    from jaxdiag.render import terminal

    text = terminal.render(matmul_report, width=160)
    assert "Top ops" in text and "op1" in text and "FLOPs, bytes and bound with --deep" in text
    assert "MFU unknown" in text and "cost_analysis()" in text and "no peak FLOP/s for cpu" in text
    assert "Memory per device" in text and "3.0 MiB" in text  # 2 MiB of arguments + 1 MiB of output


def test_json_round_trip_keeps_the_sections(matmul_report, tmp_path):
    from jaxdiag.reporting.model import SCHEMA_VERSION, Report

    assert SCHEMA_VERSION == "1.6"
    path = tmp_path / "r.json"
    matmul_report.save(path)
    again = Report.open(path)
    assert again.top_ops.rows[0].id == "op1" and again.memory.compiles
    assert json.loads(path.read_text())["throughput"]["mfu_basis"]["flops_source"].startswith("compile records")


def test_html_places_findings_and_anchors_rows(cpu_trace_dir):
    from jaxdiag.render import figures, html
    from jaxdiag.reporting.build import report

    r = report(cpu_trace_dir.run_dir)
    page = html.render(r)
    assert "<th>where</th>" in page and f"jaxdiag open {r.source['run_dir']} --finding 1" in page
    assert "id='jd-op1'" in page and "top ops: op" in page  # the small-op finding names its rows
    assert "Top ops by device time" in page
    fig = figures.roofline(r)
    assert "--deep" in fig.layout.annotations[0].text  # no FLOPs without --deep: says so, draws nothing


def test_report_does_not_import_xprof_unless_deep(cpu_trace_dir):
    """``jaxdiag report`` and ``jaxdiag open --no-start`` never load XProf; ``--deep`` does."""

    def imported(*args: str) -> set[str]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "jaxdiag", *args], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return {
            line.rsplit("|", 1)[-1].strip().split(".")[0]
            for line in done.stderr.splitlines()
            if line.startswith("import time:")
        }

    assert "xprof" not in imported("report", str(cpu_trace_dir.logdir), "--json")
    assert "xprof" not in imported("open", str(cpu_trace_dir.logdir), "--step", "1", "--no-start")
    assert "xprof" in imported("report", str(cpu_trace_dir.logdir), "--json", "--deep")

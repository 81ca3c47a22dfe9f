"""A saved report renders as the report built from its trace: terminal text, JSON, HTML and figure data."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jaxdiag
from jaxdiag.cli.app import main
from jaxdiag.render import figures, html, json_out, terminal
from jaxdiag.render.notebook import dashboard
from jaxdiag.reporting.model import Report


@pytest.fixture(scope="module", params=["cpu", "h100_transformer", "h100_mlp"])
def built(request, cpu_trace_dir) -> Report:
    """A report built from a trace: a CPU capture made here, and the real H100 traces when present."""
    if request.param == "cpu":
        return jaxdiag.report(cpu_trace_dir.logdir)
    path = request.getfixturevalue("shared_fixtures") / request.param
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return jaxdiag.report(path)


@pytest.fixture(scope="module")
def saved(built, tmp_path_factory) -> Report:
    path = tmp_path_factory.mktemp("saved") / "report.json"
    built.save(path)
    return Report.open(path)


def data(fig) -> dict:
    """A figure's data and layout, as the page or notebook receives them."""
    return json.loads(fig.to_json())


def test_the_saved_report_is_the_report(built, saved):
    assert saved.frames is None and built.frames is not None
    assert saved == built
    assert json_out.render(saved) == json_out.render(built)


def test_terminal_text_is_the_same(built, saved):
    assert terminal.render(saved, width=140) == terminal.render(built, width=140)


def test_every_figure_holds_the_same_data(built, saved):
    ours, theirs = figures.all_figures(saved), figures.all_figures(built)
    assert list(ours) == list(theirs)
    for name in ours:
        assert data(ours[name]) == data(theirs[name]), name
    timeline = theirs["step_timeline"]
    assert timeline.data, "the timeline of the default step draws events"
    assert not any(a.text.startswith("no data") for a in timeline.layout.annotations)


def test_html_page_is_the_same(built, saved):
    assert html.render(saved) == html.render(built)


def test_dashboard_is_the_same(built, saved):
    ours, theirs = dashboard(saved), dashboard(built)
    assert ours.choices() == theirs.choices()
    for a, b in ((ours.run_figures(), theirs.run_figures()), (ours.selection_figures(), theirs.selection_figures())):
        assert {k: data(f) for k, f in a.items()} == {k: data(f) for k, f in b.items()}


def test_a_device_picked_in_the_dashboard_draws_the_same(built, saved):
    planes = dashboard(built).choices()["device"]
    assert planes
    host = built.source["hosts"][0]
    ours = dashboard(saved, host=host, devices=planes[:1]).selection_figures()["step_timeline"]
    theirs = dashboard(built, host=host, devices=planes[:1]).selection_figures()["step_timeline"]
    assert data(ours) == data(theirs)
    groups = [t["name"] for t in data(ours)["data"]]
    assert "host annotations" in groups and len(groups) <= 2


def test_cli_renders_a_saved_report(cpu_trace_dir, tmp_path, capsys):
    saved_json, from_trace, from_saved = tmp_path / "r.json", tmp_path / "a.html", tmp_path / "b.html"
    assert main(["report", str(cpu_trace_dir.logdir), "--json", "-o", str(saved_json), "--html", str(from_trace)]) == 0
    text = tmp_path / "b.txt"
    assert main(["report", str(saved_json), "--html", str(from_saved), "--width", "120", "-o", str(text)]) == 0
    assert text.read_text() == terminal.render(Report.open(saved_json), width=120)
    assert capsys.readouterr().err.endswith(f"jaxdiag: wrote the HTML report to {from_saved}\n")
    assert from_saved.read_text() == from_trace.read_text()
    assert main(["report", str(saved_json), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(saved_json.read_text())


def test_cli_refuses_trace_options_with_a_saved_report(cpu_trace_dir, tmp_path, capsys):
    saved_json = tmp_path / "r.json"
    jaxdiag.report(cpu_trace_dir.logdir).save(saved_json)
    assert main(["report", str(saved_json), "--steps", "1:3", "--small-op-us", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(saved_json) in err[0]
    assert re.search(r"--steps.*--small-op-us.*only apply to a trace", err[0])
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": "1.3", "steps": [')
    assert main(["report", str(broken)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(broken) in err[0] and "expected a saved report" in err[0]


def test_rendering_a_saved_report_imports_neither_jax_nor_the_trace_reader(cpu_trace_dir, tmp_path):
    saved_json = tmp_path / "r.json"
    jaxdiag.report(cpu_trace_dir.logdir).save(saved_json)
    code = (
        "import sys; from jaxdiag.cli.app import main; rc = main(['report', sys.argv[1], '--html', sys.argv[2]]); "
        "loaded = [m for m in ('jax', 'jaxlib', 'jaxdiag.trace.load', 'jaxdiag.analyses.device_work') "
        "if m in sys.modules]; assert not loaded, loaded; sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(saved_json), str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"jaxdiag: wrote the HTML report to {tmp_path / 'r.html'}\n"
    assert (tmp_path / "r.html").stat().st_size > 0

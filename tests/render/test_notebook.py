"""The Jupyter dashboard: the same figures for a chosen step, pickers with ipywidgets, static without."""

from __future__ import annotations

import sys

import pytest

import jaxdiag
from jaxdiag.render.notebook import Dashboard, dashboard, run_figure_names

PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture(scope="module")
def cpu_report(cpu_trace_dir):
    return jaxdiag.report(cpu_trace_dir.logdir, tokens_per_step=64)


def titles(outputs) -> list[str]:
    return [o["data"][PLOTLY]["layout"]["title"]["text"] for o in outputs]


def test_selection_figures_follow_the_chosen_step(cpu_report, cpu_trace_dir):
    step = cpu_trace_dir.sleep_steps[0]
    dash = dashboard(cpu_report, step=step)
    figs = dash.selection_figures()
    assert figs["step_timeline"].layout.title.text.startswith(f"Step {step} timeline")
    assert figs["step_host_waits"].layout.title.text == f"Host waits by cause, step {step}"
    other = dash.select(step=0)
    assert other is not dash and dash.step == step and other.step == 0
    assert list(dash.run_figures()) == run_figure_names()
    assert "step_timeline" not in run_figure_names() and "sharding_collectives" in run_figure_names()


def test_choices_list_steps_hosts_and_devices(cpu_report):
    choices = Dashboard(cpu_report).choices()
    assert choices["step"] == [s.step for s in cpu_report.steps]
    assert choices["host"] == list(cpu_report.frames.hosts)
    assert choices["device"] == list(dict.fromkeys(cpu_report.frames.devices["plane"]))
    assert choices["default_step"][0] in choices["step"]
    saved = jaxdiag.Report.from_dict(cpu_report.to_dict())  # no frames: hosts and devices from the source
    assert Dashboard(saved).choices()["host"] == cpu_report.source["hosts"]


def test_static_view_without_ipywidgets(cpu_report, monkeypatch):
    import IPython.display

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets now raises ImportError
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    dash = dashboard(cpu_report)
    assert dash.widget() is None
    dash._ipython_display_()
    html_parts = [o for o in shown if isinstance(o, IPython.display.HTML)]
    figures = [o for o in shown if hasattr(o, "to_plotly_json")]
    assert "Findings, by time lost" in html_parts[0].data
    assert any("install ipywidgets" in h.data for h in html_parts)
    assert len(figures) == len(run_figure_names()) + 2


def test_pickers_redraw_the_step_figures(cpu_report, cpu_trace_dir):
    pytest.importorskip("ipywidgets")
    view = dashboard(cpu_report).widget()
    step, device = view.pickers["step"], view.pickers["device"]
    assert step.value == view.current.step
    assert len(view.box.children[1].outputs) == len(run_figure_names())
    step.value = cpu_trace_dir.recompile_step
    assert titles(view.selected.outputs)[0].startswith(f"Step {cpu_trace_dir.recompile_step} timeline")
    plane = device.options[1]
    device.value = plane
    assert view.current.devices == (plane,)
    device.value = device.options[0]  # all devices
    assert view.current.devices is None

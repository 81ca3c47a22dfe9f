"""The HTML report: one self-contained page, findings first, every figure inlined, input escaped."""

from __future__ import annotations

from html.parser import HTMLParser
import json
import re
import subprocess
import sys

import pytest

import jaxdiag
from jaxdiag.cli.app import main
from jaxdiag.render import html
from report_builders import make_report

from tests.render import FIGURES


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each script."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


@pytest.fixture(scope="module")
def cpu_page(cpu_trace_dir) -> str:
    return html.render(jaxdiag.report(cpu_trace_dir.logdir, tokens_per_step=64))


def test_page_embeds_plotly_once_and_every_figure(cpu_page):
    import plotly.offline

    js = plotly.offline.get_plotlyjs()
    assert cpu_page.startswith("<!DOCTYPE html>")
    assert cpu_page.count(js[:400]) == 1
    tags = parse(cpu_page)
    assert sum(len(s) > len(js) * 0.99 for s in tags.scripts) == 1
    divs = [a["id"] for t, a in tags.tags if t == "div" and "plotly-graph-div" in (a.get("class") or "")]
    assert divs == [f"jd-{name}" for name in FIGURES]
    for name in FIGURES:  # each figure is drawn by its own call with its data inline
        assert re.search(rf'Plotly\.newPlot\(\s*"jd-{name}",\s*\[', cpu_page)


def test_page_needs_no_network(cpu_page):
    tags = parse(cpu_page)
    for tag, attrs in tags.tags:
        assert tag not in ("link", "iframe", "img"), tag
        for key in ("src", "href"):
            assert not attrs.get(key), (tag, attrs)  # nothing is loaded, not even from disk
    style = cpu_page[cpu_page.index("<style>") : cpu_page.index("</style>")]
    assert "url(" not in style and "@import" not in style
    assert "cdn.plot.ly/plotly" not in cpu_page.split("<body>", 1)[1]


def test_findings_come_before_the_figures(cpu_page):
    findings = cpu_page.index("Findings, by time lost")
    first_figure = cpu_page.index("jd-step_breakdown")
    tables = cpu_page.index("<summary>Tables</summary>")
    assert findings < first_figure < tables
    assert cpu_page.index("`train_step` recompiled once") < first_figure


def test_figure_json_is_escaped_in_the_page():
    evil = "</script><script>alert(1)</script>"
    report = make_report(
        notes=(evil,),
        small_ops={
            "threshold_us": 10.0,
            "count": 3,
            "top": [{"name": evil, "module": "m", "count": 3, "total_ms": 1.0}],
        },
        recompiles=[{"function": evil, "step": 1, "compile_ms": 5.0, "cause": evil}],
    )
    page = html.render(report)
    assert "<script>alert" not in page
    tags = parse(page)
    assert sum(t == "script" for t, _ in tags.tags) == page.count("</script>")
    recompiles = next(s for s in tags.scripts if '"jd-recompile_timeline"' in s)
    data = json.loads(recompiles[recompiles.index("[{") : recompiles.index("}],") + 2])
    # The text survives: escaped for plotly's HTML (which draws it as written), then for the page.
    assert data[0]["customdata"] == [evil.replace("<", "&lt;").replace(">", "&gt;")]


def test_empty_report_renders_no_data_figures():
    empty = make_report(
        steps=[], recompiles=[], host_waits={}, small_ops={}, collectives={}, throughput={}, findings=(), notes=()
    )
    page = html.render(empty)
    assert "No findings: nothing measurable was lost." in page
    assert page.count("no data: ") == len(FIGURES)


def test_report_of_an_older_schema_says_what_it_lacks(cpu_trace_dir):
    data = jaxdiag.report(cpu_trace_dir.logdir).to_dict()
    data.update(schema_version="1.2")
    for key in ("timeline", "op_durations"):
        del data[key]
    page = html.render(jaxdiag.Report.from_dict(data))
    assert "the report keeps no events (saved with schema 1.2, before reports kept timeline)" in page
    assert "Findings, by time lost" in page


def test_notebook_summary_stays_light(cpu_trace_dir):
    report = jaxdiag.report(cpu_trace_dir.logdir)
    fragment = report._repr_html_()
    assert "<script" not in fragment
    assert "Findings, by time lost" in fragment and "Per step (ms)" in fragment
    assert len(fragment) < 50_000
    assert html.render_summary_html(report, full=True).count("<table") > fragment.count("<table")


def test_cli_writes_the_html_report(cpu_trace_dir, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(cpu_trace_dir.logdir), "--html", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "jd-step_timeline" in page
    assert capsys.readouterr().out == f"jaxdiag: wrote the HTML report to {out}\n"  # where, not the tables too
    assert main(["report", str(cpu_trace_dir.logdir), "--html", str(tmp_path / "missing" / "r.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_renderers_import_plotly_only_when_drawing():
    code = (
        "import sys\n"
        "import jaxdiag.render.html, jaxdiag.render.figures, jaxdiag.render.notebook, jaxdiag.render.timeline\n"
        "import jaxdiag.cli.report_cmd\n"
        "print(sorted(m for m in ('plotly', 'jax', 'ipywidgets', 'IPython') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

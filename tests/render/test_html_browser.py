"""The HTML report in a real browser: headless Chromium draws every chart and logs no script error.

Needs Chromium (Debian package ``chromium``). Outside CI the tests skip without it;
with ``CI`` set they fail, since CI is where the report must be seen to draw.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import jaxdiag
from jaxdiag.render import html

from tests.render import FIGURES

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=20000",
    "--dump-dom",
)


@pytest.fixture(scope="module")
def browser() -> str:
    for name in _BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("CI is set but Chromium is not installed: .ci/run must `apt-get install -y chromium`")
    pytest.skip(
        "Chromium is not installed (Debian: `apt-get install chromium`): the HTML report is not checked in a browser"
    )


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A page after load: its DOM, and what its scripts wrote to the console."""

    dom: str
    console: tuple[str, ...]

    def figure(self, name: str) -> str:
        """The DOM of one figure, up to the next figure."""
        start = self.dom.index(f'id="jd-{name}"')
        following = [self.dom.find(f'id="jd-{other}"', start + 1) for other in FIGURES]
        return self.dom[start : min([i for i in following if i > 0], default=len(self.dom))]

    def error_banner(self) -> str:
        match = re.search(r'<div id="jd-errors"([^>]*)>([^<]*)', self.dom)
        assert match, "the page lost its error banner"
        return "" if "hidden" in match.group(1) else match.group(2)


def load(browser: str, page: Path, profile: Path) -> Loaded:
    run = subprocess.run(
        [browser, *_FLAGS, f"--user-data-dir={profile}", page.as_uri()], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return Loaded(run.stdout, tuple(line for line in run.stderr.splitlines() if ":CONSOLE" in line))


@pytest.fixture(scope="module")
def page(cpu_trace_dir, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(html.render(jaxdiag.report(cpu_trace_dir.logdir, tokens_per_step=64)))
    return path


def test_every_chart_draws_without_script_errors(browser, page, tmp_path):
    loaded = load(browser, page, tmp_path / "profile")
    assert not loaded.console, "\n".join(loaded.console)
    assert loaded.error_banner() == ""
    assert loaded.dom.count('class="plot-container plotly"') == len(FIGURES)
    for name in FIGURES:
        assert 'class="main-svg"' in loaded.figure(name), f"{name} did not draw"
    # The data drew, not just the axes: bars on the timeline and breakdown, a message where there is none.
    assert loaded.figure("step_timeline").count('class="point"') > 10
    assert loaded.figure("step_breakdown").count('class="point"') >= 6
    assert "no data: no collectives in this capture" in loaded.figure("collective_overlap")
    assert "Findings, by time lost" in loaded.dom


def test_a_failing_script_is_seen(browser, page, tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace("</body>", "<script>throw new Error('boom-4711')</script></body>"))
    loaded = load(browser, broken, tmp_path / "profile")
    assert any("boom-4711" in line for line in loaded.console)
    assert "boom-4711" in loaded.error_banner()


def test_hostile_names_run_no_script(browser, cpu_trace_dir, tmp_path):
    """Every string of a saved report set to markup that would run a script: the page shows it and runs none."""
    import json

    from jaxdiag.errors import JaxdiagError
    from jaxdiag.reporting.model import Report

    ran = "document.body.dataset.jdRan=1"
    payload = f"<script>{ran}</script><img src=x onerror='{ran}'><svg onload='{ran}'>"
    d = json.loads(jaxdiag.report(cpu_trace_dir.logdir, tokens_per_step=64).to_json())

    def strings(node):
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(value, str):
                before, node[key] = value, payload
                try:
                    Report.from_dict(d)
                except JaxdiagError:  # a field reading refuses (an enum): left as it was
                    node[key] = before
            elif isinstance(value, (dict, list)):
                strings(value)

    strings(d)
    with pytest.raises(JaxdiagError):  # text where a typed section holds a number is refused, never shown
        Report.from_dict({**d, "collectives": {**d["collectives"], "exposed_ms": payload}})
    page = tmp_path / "hostile.html"
    page.write_text(html.render(Report.from_dict(d)))
    loaded = load(browser, page, tmp_path / "profile")
    assert "data-jd-ran" not in loaded.dom
    assert loaded.dom.count("&lt;script&gt;document.body.dataset.jdRan=1") > 10

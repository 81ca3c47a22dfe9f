"""Every field of a saved report, made hostile one at a time, is shown as text: HTML and terminal.

A saved report is a file anyone can hand over. Each string and number field of
two reports (the saved one in ``tests/reporting/data`` and one built from the
session's real CPU capture) is replaced, one field at a time, by markup: the
report is either refused when read (one line) or rendered with that markup
shown as text. Numbers get the HTML payload too: the renderers format them, and
one that fell back to ``str`` without escaping ran a script in the page.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from jaxdiag.errors import JaxdiagError
from jaxdiag.render import html, terminal
from jaxdiag.render.terminal_text import esc, plain, safe_console
from jaxdiag.reporting.model import Report

SAVED = Path(__file__).resolve().parents[1] / "reporting" / "data" / "report-1.2.json"
#: Any escape sequence but SGR (colour) ones, any C1 control, BEL.
_NOT_SGR = re.compile(r"\x1b(?!\[[0-9;]*m)|[\x80-\x9f\x07]")


def _html_payload(i: int) -> str:
    return f"<script>jd{i}()</script><img src=x onerror=jd{i}()>\"'><jdtag{i}>"


def _terminal_payload(i: int) -> str:
    return (
        f"jd{i} [link=http://evil.example/{i}]click[/link] [bold]B[/bold] load [/data/shard-{i}.tfrecord] "
        f"\x1b]8;;http://evil.example/\x07osc\x1b]8;;\x07 \x1b[2J\x1b[H \x9b31m \u202eevil \\"
    )


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path, value


def _with(d: dict[str, Any], path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    out = copy.deepcopy(d)
    node: Any = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = new
    return out


@pytest.fixture(scope="module", params=["saved", "cpu_capture"])
def report_dict(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "saved":
        return dict(json.loads(SAVED.read_text()))
    from jaxdiag.reporting.build import report

    cpu = request.getfixturevalue("cpu_trace_dir")
    return dict(json.loads(report(cpu.run_dir, tokens_per_step=64).to_json()))


def _open(d: dict[str, Any]) -> Report | None:
    """The report, or ``None`` where reading refuses it (with one line: a ``JaxdiagError``)."""
    try:
        return Report.from_dict(d)
    except JaxdiagError:
        return None


def _hostile(d: dict[str, Any], payload: Any, numbers: bool) -> tuple[Report, int]:
    """``d`` with every string field (and number field, if ``numbers``) that reading accepts changed, one payload each.

    Each field is first tried alone: one whose change reading refuses (an enum, a
    schema number) is left as it was; the rest are changed together.
    """
    accepted = []
    for i, (path, value) in enumerate(_leaves(d)):
        kinds = (str, int, float) if numbers else (str,)
        if isinstance(value, kinds) and not isinstance(value, bool) and _open(_with(d, path, payload(i))) is not None:
            accepted.append((i, path))
    hostile = copy.deepcopy(d)
    for i, path in accepted:
        node: Any = hostile
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = payload(i)
    report = _open(hostile)
    assert report is not None
    return report, len(accepted)


def test_html_every_string_and_number_field(report_dict: dict[str, Any]) -> None:
    report, changed = _hostile(report_dict, _html_payload, numbers=True)
    assert changed > 150, changed  # typed sections refuse text in their number fields: those stay numbers
    page = html.render_summary_html(report, full=True)
    assert not re.search(r"<script>jd\d|<img src=x onerror=jd\d|<jdtag\d", page)
    # The payloads are on the page, as text (text in a typed section's number field is refused, not shown).
    assert page.count("&lt;script&gt;jd") > 40


def test_html_full_page_every_string_field(report_dict: dict[str, Any]) -> None:
    """The whole page, charts included (a number that is no number is refused there: ``cli.report_cmd``)."""
    report, changed = _hostile(report_dict, _html_payload, numbers=False)
    assert changed > 50, changed
    page = html.render(report)
    assert not re.search(r"<script>jd\d|<img src=x onerror=jd\d|<jdtag\d", page)
    assert page.count("&lt;script&gt;jd") > 20


def test_terminal_every_string_field(report_dict: dict[str, Any]) -> None:
    report, changed = _hostile(report_dict, _terminal_payload, numbers=False)
    assert changed > 50, changed
    text = terminal.render(report, width=4000, color=True)
    bad = _NOT_SGR.search(text)
    assert bad is None, repr(text[max(0, bad.start() - 60) : bad.end() + 60])
    seen = re.sub(r"\x1b\[[0-9;]*m", "", text)
    shown = [i for i in range(len(list(_leaves(report_dict)))) if f"jd{i} [" in seen]
    assert len(shown) > 20, shown
    for i in shown:  # as written, markup and all
        assert plain(_terminal_payload(i)) in seen, i


def test_esc_and_plain() -> None:
    assert plain("a\x1b[2Jb\x9bc\u202ed\n\te\x00") == "a\\x1b[2Jb\\x9bc\\u202ed\n\te\\x00"
    assert esc("load [/data/shard-00001.tfrecord]") == "load \\[/data/shard-00001.tfrecord]"
    assert esc("ends with \\") == "ends with \\\\"


@pytest.mark.parametrize(
    "raw",
    [
        "load [/data/shard-00001.tfrecord]",
        "[link=http://evil.example/]click[/link]",
        "\x1b]8;;http://evil.example/\x07osc\x1b]8;;\x07",
        "\x1b[2J\x1b[H cleared",
        "[/]",
        "[@click=app.bell]x[/]",
    ],
)
def test_the_console_shows_what_a_renderer_forgot_to_escape(raw: str) -> None:
    """``safe_console`` is the second line: a value printed into markup without ``esc`` still only shows."""
    import io

    buf = io.StringIO()
    console = safe_console(file=buf, width=400, force_terminal=True, color_system="truecolor", highlight=False)
    console.print(f"[bold]name:[/bold] {raw}")
    out = buf.getvalue()
    assert _NOT_SGR.search(out) is None, repr(out)
    assert re.sub(r"\x1b\[[0-9;]*m", "", out).strip() == f"name: {plain(raw)}"


def test_charts_draw_names_as_text(report_dict: dict[str, Any]) -> None:
    """Plotly draws chart text as HTML of its own: a name with ``<a href>`` or ``<b>`` must not become a link or bold."""
    from jaxdiag.render.figures import all_figures

    payload = "<a href='http://evil.example/'>link</a><b>bold</b>"
    report, changed = _hostile(report_dict, lambda i: f"jd{i}{payload}", numbers=False)
    strings: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            strings.append(node)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    for fig in all_figures(report).values():
        walk(fig.to_dict())
    assert not [s for s in strings if "<a href" in s or "<b>bold" in s]
    assert [s for s in strings if "&lt;a href=" in s]  # the names are drawn, as text


def test_terminal_between_steps_rows_as_written(report_dict: dict[str, Any]) -> None:
    """A saved report's ``between_steps`` row (the captures here have none) is shown as written; text where its
    type holds a step number is refused when the report is read, never shown."""
    d = copy.deepcopy(report_dict)
    program = {"function": _terminal_payload(1), "executions": 2}
    row = {"host": _terminal_payload(2), "after_step": 3, "before_step": 4, "ms": 1.5, "programs": [program]}
    d["between_steps"] = {"total_ms": 1.5, "rows": [row]}
    report = _open(d)
    assert report is not None
    text = terminal.render(report, width=4000, color=True)
    bad = _NOT_SGR.search(text)
    assert bad is None, repr(text[max(0, bad.start() - 60) : bad.end() + 60])
    seen = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert plain(_terminal_payload(1)) in seen and "between steps 3 and 4" in seen
    d["between_steps"]["rows"][0]["after_step"] = _terminal_payload(3)
    assert _open(d) is None

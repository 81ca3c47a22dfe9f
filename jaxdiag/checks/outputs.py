"""Write check results and diffs for people and CI: a rich table, markdown, JUnit XML.

Formatting only: every figure comes from a ``CheckResult`` or ``ReportDiff``.
JUnit XML has one ``testcase`` per check (a ``failure`` for a failed one, ``skipped``
for one that could not be judged), so CI systems list each check as a test.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxdiag.errors import JaxdiagError
from jaxdiag.render.terminal import text_console

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.checks.compare import CheckOutcome, CheckResult
    from jaxdiag.checks.diff import ReportDiff

#: Environment variable GitHub Actions sets to the job summary file.
ENV_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
_STATUS_STYLE = {"pass": "green", "FAIL": "bold red", "skip": "yellow"}
_MAX_STEPS = 40
_MAX_CHANGES = 15


def render_table(result: "CheckResult", *, width: int | None = None, color: bool = False) -> str:
    """The checks as a rich table, with the verdict and any notes beneath."""
    from rich.table import Table

    console, buf = text_console(width, color)
    t = Table(title="jaxdiag check", title_justify="left", show_edge=False)
    for col, just in (
        ("check", "left"),
        ("status", "left"),
        ("observed", "right"),
        ("limit", "right"),
        ("baseline", "right"),
        ("detail", "left"),
    ):
        t.add_column(col, justify=just, overflow="fold")
    for o in result.outcomes:
        style = _STATUS_STYLE[o.status]
        t.add_row(
            escape(o.name),
            f"[{style}]{o.status}[/{style}]",
            _value(o, o.observed),
            _value(o, o.limit),
            _value(o, o.expected),
            escape(o.message),
        )
    console.print(t)
    for note in result.notes:
        console.print(f"[yellow]note: {escape(note)}[/yellow]")
    console.print(escape(_verdict(result)))
    return buf.getvalue()


def escape(text: object) -> str:
    """``text`` safe for the terminal (``render.terminal_text.esc``): names and messages come from files."""
    from jaxdiag.render.terminal_text import esc

    return esc(text)


def render_markdown(result: "CheckResult") -> str:
    """The checks as a GitHub-flavoured markdown table."""
    icon = {"pass": ":white_check_mark:", "FAIL": ":x:", "skip": ":warning:"}
    lines = [
        "### jaxdiag check",
        "",
        "| check | status | observed | limit | baseline | detail |",
        "|---|---|---:|---:|---:|---|",
    ]
    for o in result.outcomes:
        lines.append(
            f"| `{o.name}` | {icon[o.status]} {o.status} | {_value(o, o.observed)} | {_value(o, o.limit)} | "
            f"{_value(o, o.expected)} | {_md(o.message)} |"
        )
    lines.append("")
    lines += [f"> note: {_md(n)}" for n in result.notes]
    lines += ["", f"**{_verdict(result)}**", ""]
    return "\n".join(lines)


def write_step_summary(markdown: str) -> Path | None:
    """Append ``markdown`` to the file named by ``$GITHUB_STEP_SUMMARY``; the path, or ``None`` when unset."""
    name = os.environ.get(ENV_STEP_SUMMARY, "").strip()
    if not name:
        return None
    path = Path(name)
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    except OSError as exc:
        raise JaxdiagError(f"{ENV_STEP_SUMMARY}={name}: cannot append ({exc.strerror or exc})") from None
    return path


def render_junit(result: "CheckResult", suite: str = "jaxdiag.check") -> str:
    """JUnit XML: one ``testcase`` per check."""
    failures = sum(1 for o in result.outcomes if not o.passed)
    skipped = sum(1 for o in result.outcomes if o.skipped)
    root = ET.Element("testsuites", name="jaxdiag", tests=str(len(result.outcomes)), failures=str(failures))
    ts = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(result.outcomes)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time="0",
    )
    for o in result.outcomes:
        case = ET.SubElement(ts, "testcase", classname=suite, name=o.name, time="0")
        if o.skipped:
            ET.SubElement(case, "skipped", message=o.message)
        elif not o.passed:
            failure = ET.SubElement(case, "failure", message=o.message, type="regression")
            failure.text = _junit_detail(o)
        else:
            ET.SubElement(case, "system-out").text = o.message
    if result.notes:
        ET.SubElement(ts, "system-out").text = "\n".join(result.notes)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render_diff(d: "ReportDiff", *, width: int | None = None, color: bool = False) -> str:
    """A diff as rich tables: summary, changed modules and ops, host waits, recompiles, steps."""
    from rich.table import Table

    console, buf = text_console(width, color)
    console.print(f"[bold]jaxdiag diff[/bold]  A: {escape(d.a_source)}  B: {escape(d.b_source)}")
    t = Table(title="Steady state", title_justify="left", show_edge=False)
    for col, just in (("figure", "left"), ("A", "right"), ("B", "right"), ("change", "right")):
        t.add_column(col, justify=just)
    for f in d.summary:
        change = "" if f.change is None else f"{f.change:+.1%}"
        t.add_row(escape(f.name), _figure(f.a, f.unit), _figure(f.b, f.unit), change)
    console.print(t)
    for title, rows in (
        ("Slower (ms per step)", d.slower),
        ("Faster (ms per step)", d.faster),
        ("Host waits by cause (ms per step)", d.host_waits),
    ):
        if rows:
            ct = Table(title=title, title_justify="left", show_edge=False)
            for col, just in (("kind", "left"), ("name", "left"), ("A", "right"), ("B", "right"), ("delta", "right")):
                ct.add_column(col, justify=just, overflow="fold")
            for c in rows[:_MAX_CHANGES]:
                ct.add_row(escape(c.kind), escape(c.name), f"{c.a_ms:.3f}", f"{c.b_ms:.3f}", f"{c.delta_ms:+.3f}")
            console.print(ct)
    for title, recs in (("New recompiles in B", d.new_recompiles), ("Recompiles gone from B", d.gone_recompiles)):
        if recs:
            console.print(f"[bold]{title}[/bold]")
            for r in recs:
                console.print(f"  {escape(r.describe())}")
    st = Table(title="Steps (wall / device busy / host wait / compile, ms)", title_justify="left", show_edge=False)
    for col in ("step", "A", "B", "wall change"):
        st.add_column(col, justify="right")
    for p in d.steps[:_MAX_STEPS]:
        change = ""
        if p.a and p.b and p.a.get("wall_ms") and p.b.get("wall_ms") is not None:
            change = f"{(p.b['wall_ms'] - p.a['wall_ms']) / p.a['wall_ms']:+.1%}"
        st.add_row(str(p.step), _step(p.a), _step(p.b), change)
    console.print(st)
    if len(d.steps) > _MAX_STEPS:
        console.print(f"... {len(d.steps) - _MAX_STEPS} more steps in --json")
    for note in d.notes:
        console.print(f"[yellow]note: {escape(note)}[/yellow]")
    return buf.getvalue()


def _verdict(result: "CheckResult") -> str:
    n = len(result.outcomes)
    failed = [o.name for o in result.failures]
    skipped = sum(1 for o in result.outcomes if o.skipped)
    tail = f", {skipped} skipped" if skipped else ""
    if failed:
        return f"FAILED: {len(failed)} of {n} checks ({', '.join(failed)}){tail}"
    return f"passed: {n - skipped} of {n} checks{tail}"


def _value(o: "CheckOutcome", v: float | None) -> str:
    return _figure(v, o.unit)


def _figure(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "share":
        return f"{v:.1%}"
    if unit == "count":
        return f"{v:g}"
    if unit == "ms":
        return f"{v:.3f} ms"
    if unit == "steps/s":
        return f"{v:,.2f} steps/s"
    return f"{v:,.0f} {unit}".strip()


def _step(s: Any) -> str:
    if not s:
        return "—"
    parts = [s.get(k) for k in ("wall_ms", "device_busy_ms", "host_wait_ms", "compile_ms")]
    return " / ".join("—" if v is None else f"{v:.2f}" for v in parts)


def _md(text: str) -> str:
    """``text`` as markdown that shows it: the markdown medium's one escape (tags, links, emphasis, table bars)."""
    import html

    from jaxdiag.render.terminal_text import plain

    shown = html.escape(plain(text), quote=False).replace("\n", " ")
    return re.sub(r"([\\`*_\[\]|~!])", r"\\\1", shown)


def _junit_detail(o: "CheckOutcome") -> str:
    return (
        f"{o.message}\nobserved: {_value(o, o.observed)}\nlimit: {_value(o, o.limit)}\n"
        f"baseline: {_value(o, o.expected)}"
    )

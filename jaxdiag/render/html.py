"""Render a ``Report`` as one self-contained HTML page: findings first, then the figures.

The page opens with no network: plotly's JavaScript is embedded once, every figure
(``render.figures``) is inlined as JSON, and nothing is fetched. A chart that fails
to draw says so on the page. ``render_summary_html`` is the light, script-free
fragment that Jupyter's ``Report._repr_html_`` shows.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from jaxdiag.trace.versions import versions_text

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.straggler_section import HostStep, StragglersSection
    from jaxdiag.analyses.throughput_section import Throughput
    from jaxdiag.reporting.model import Report

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;max-width:1400px}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table.jd{border-collapse:collapse;font-size:13px;margin:6px 0}
table.jd th,table.jd td{border-bottom:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
table.jd td.n{text-align:right;font-variant-numeric:tabular-nums}
.critical{color:#b42318;font-weight:600}.warning{color:#9a6700}.info{color:#0969da}
.meta{color:#57606a;font-size:13px}
.jd-figure{margin:12px 0 24px;border:1px solid #d0d7de;border-radius:6px;padding:4px}
.jd-errors{background:#fff1f0;border:1px solid #b42318;color:#b42318;padding:8px;border-radius:6px}
details>summary{cursor:pointer;font-weight:600;margin-top:16px}
"""

#: Collects script errors and shows them on the page, so a chart that did not draw
#: is not mistaken for a chart with nothing in it.
_ERROR_HOOK = """<script>
window.jdErrors=[];
function jdShowErrors(){var b=document.getElementById("jd-errors");if(!b||!window.jdErrors.length)return;
b.hidden=false;b.textContent="Some charts could not be drawn: "+window.jdErrors.join("; ");}
window.addEventListener("error",function(e){window.jdErrors.push(String(e.message||e));jdShowErrors();});
document.addEventListener("DOMContentLoaded",jdShowErrors);
</script>"""

#: Plotly options: no logo, no cloud link, resize with the window.
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}}


def render(report: "Report") -> str:
    """The full page: summary and findings, the figures, then the detail tables."""
    import plotly.offline

    from jaxdiag.render.figures import all_figures

    figures = "".join(
        f"<div class='jd-figure'>{fig.to_html(full_html=False, include_plotlyjs=False, div_id=f'jd-{name}', config=PLOTLY_CONFIG)}</div>"
        for name, fig in all_figures(report).items()
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>jaxdiag report</title>"
        f"<style>{_CSS}</style>{_ERROR_HOOK}"
        f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head><body>"
        "<div id='jd-errors' class='jd-errors' hidden></div>"
        f"{_summary(report)}<h2>Charts</h2>{figures}"
        f"<details><summary>Tables</summary>{_steps_table(report)}{_details(report)}</details>"
        "</body></html>\n"
    )


def render_summary_html(report: "Report", full: bool = False) -> str:
    """Findings and step figures as an HTML fragment, no scripts; ``full`` adds each analysis's table."""
    return _summary(report) + _steps_table(report) + (_details(report) if full else "")


def _summary(report: "Report") -> str:
    src = report.source
    parts = [
        "<h1>jaxdiag report</h1>",
        f"<p class='meta'>{_e(src.get('run_dir'))} · hosts: {_e(', '.join(src.get('hosts', [])))}"
        f" · devices: {len(src.get('devices') or [])} · steps from: {_e(_steps_from(src))}"
        + (f" · made by: {_e(made_by)}" if (made_by := versions_text(src.get("versions") or {})) else "")
        + "</p>",
        _throughput(report.throughput),
    ]
    if report.notes:  # what the capture lacks qualifies every finding: before them
        parts.append("<ul class='meta'>" + "".join(f"<li>{_e(n)}</li>" for n in report.notes) + "</ul>")
    parts.append("<h2>Findings, by time lost</h2>")
    findings = [f for f in report.findings if f.kind != "loader" or f.time_lost_ms > 0]
    if findings:
        from jaxdiag.render.ops_memory_html import place_html

        parts.append(
            _table(
                ("#", "severity", "lost ms", "what happened", "what to change", "where"),
                (
                    [
                        str(i),
                        f"<span class='{f.severity.value}'>{f.severity.value}</span>",
                        _num(f.time_lost_ms),
                        _e(f.message),
                        _e(f.suggestion),
                        place_html(report, f, i),
                    ]
                    for i, f in enumerate(findings, 1)
                ),
                numeric=(0, 2),
                escape=False,
            )
        )
    else:
        parts.append("<p>No findings: nothing measurable was lost.</p>")
    return "".join(parts)


_STEP_COLUMNS = (
    "step",
    "wall_ms",
    "device_busy_ms",
    "host_wait_ms",
    "compile_ms",
    "collective_ms",
    "exposed_collective_ms",
    "tokens",
)


def _steps_table(report: "Report") -> str:
    if not report.steps:
        return ""
    header = tuple(report.throughput.unit if c == "tokens" else c for c in _STEP_COLUMNS)
    return "<h2>Per step (ms)</h2>" + _table(
        header, ([_num(getattr(s, c)) for c in _STEP_COLUMNS] for s in report.steps), numeric=range(len(_STEP_COLUMNS))
    )


def hosts_table(report: "Report") -> str:
    """With several hosts: wall ms per host and step (late to / waited in collectives), and who set each step."""
    from jaxdiag.analyses.straggler_section import WARMUP_NOTE

    section: StragglersSection = report.section("stragglers")
    rows = section.per_host_step
    if not rows:
        return ""
    al = section.alignment
    aligned = (
        f"clocks aligned on {_num(al.shared_collectives)} shared collectives, to within {_num(al.residual_ms)} ms"
        if al is not None and al.aligned
        else _e((al.note if al else "") or "clocks not aligned")
    )
    hosts = section.hosts or sorted({r.host for r in rows})
    by = {(r.host, r.step): r for r in rows}
    set_by = {r.step: r.host for r in section.step_set_by}

    def cell(r: HostStep | None) -> str:
        if r is None:
            return "—"
        extra = [f"late {_num(r.late_ms)}" if r.late_ms else "", f"waited {_num(r.waited_ms)}" if r.waited_ms else ""]
        return _num(r.wall_ms) + "".join(f" ({e})" for e in extra if e)

    steps = sorted({r.step for r in rows})
    if section.warmup_steps:
        aligned += ". " + _e(WARMUP_NOTE.format(", ".join(str(s) for s in section.warmup_steps)))
    return f"<h2>Per host and step (ms)</h2><p class='meta'>{aligned}</p>" + _table(
        ("step", *hosts, "step time set by"),
        ([_num(s), *(cell(by.get((h, s))) for h in hosts), _e(set_by.get(s, "—"))] for s in steps),
        numeric=range(len(hosts) + 1),
        escape=False,
    )


def _details(report: "Report") -> str:
    """Each section's table (``render.registry``), in order."""
    from jaxdiag.render.registry import renderers

    return "".join(table(report) for _section, table in renderers("html"))


def recompiles_table(report: "Report") -> str:
    if not report.recompiles:
        return ""
    return "<h2>Compiles on the timeline</h2>" + _table(
        ("function", "step", "compile ms", "cause"),
        ([_e(r.function), _num(r.step), _num(r.compile_ms), _e(r.cause or "—")] for r in report.recompiles),
        numeric=(1, 2),
        escape=False,
    )


def host_waits_table(report: "Report") -> str:
    hw = report.host_waits
    if not hw.by_cause:
        return ""
    return f"<h2>Host waits: {_num(hw.total_ms)} ms</h2>" + _table(
        ("cause", "ms"), ([_e(c.cause), _num(c.ms)] for c in hw.by_cause), numeric=(1,), escape=False
    )


def small_ops_table(report: "Report") -> str:
    so = report.small_ops
    if not so.top:
        return ""
    return f"<h2>Small ops (&lt; {_num(so.threshold_us)} µs): {_num(so.count)} ops</h2>" + _table(
        ("op", "module", "count", "total ms"),
        ([_e(r.name), _e(r.module), _num(r.count), _num(r.total_ms)] for r in so.top),
        numeric=(2, 3),
        escape=False,
    )


def collectives_table(report: "Report") -> str:
    co = report.collectives
    if not co.by_kind:
        return ""
    return f"<h2>Collectives: {_num(co.exposed_ms)} ms exposed</h2>" + _table(
        ("kind", "count", "total ms", "exposed ms", "overlap"),
        (
            [_e(k.kind), _num(k.count), _num(k.total_ms), _num(k.exposed_ms), _num(k.overlap_fraction)]
            for k in co.by_kind
        ),
        numeric=(1, 2, 3, 4),
        escape=False,
    )


def _throughput(tp: "Throughput") -> str:
    unit = tp.unit
    items = [
        (label, getattr(tp, key))
        for key, label in (
            ("steps_per_s", "steps/s"),
            ("steady_steps_per_s", "steady steps/s"),
            ("tokens_per_s", f"{unit}/s"),
            ("steady_tokens_per_s", f"steady {unit}/s"),
            ("mfu", "MFU"),
        )
    ]
    shown = [f"{label}: <b>{_num(v)}</b>" for label, v in items if v is not None]
    return f"<p>{' · '.join(shown)}</p>" if shown else ""


def _table(
    header: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = (), escape: bool = True
) -> str:
    num = set(numeric)
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = _e(cell) if escape else str(cell)
            cells.append(f"<td class='n'>{text}</td>" if i in num else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='jd'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return _e(value)
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _steps_from(source: dict[str, Any]) -> str:
    from jaxdiag.reporting.model import steps_from

    return steps_from(source)

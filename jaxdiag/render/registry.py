"""What shows each report section: its terminal printer, its HTML table and the figures that draw it.

The report's own registry (``reporting.sections``) says what a section is and what fills it;
how it is shown belongs to this layer, so the report model names no renderer. Renderers are
named as ``"module:function"`` and imported only when used:

- ``terminal``: ``fn(report, console)`` prints the section with rich;
- ``html``: ``fn(report) -> str``, the section's table for the HTML report;
- ``figures``: names of ``render.figures`` builders ``fn(report) -> Figure``.

Sections are shown in the order of ``reporting.sections.SECTIONS``; a section without a line
here is shown by none (``tests/render/test_registry.py`` checks that every name is a section).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdiag.reporting.sections import SECTIONS, resolve


@dataclasses.dataclass(frozen=True)
class SectionViews:
    """How one section is shown (``None`` / ``()``: not in that form)."""

    terminal: str | None = None
    html: str | None = None
    figures: tuple[str, ...] = ()


_T, _H, _O, _OH = (
    "jaxdiag.render.terminal",
    "jaxdiag.render.html",
    "jaxdiag.render.ops_memory",
    "jaxdiag.render.ops_memory_html",
)

#: Section name -> how it is shown.
VIEWS: dict[str, SectionViews] = {
    "steps": SectionViews(terminal=f"{_T}:_steps", figures=("step_breakdown",)),
    "between_steps": SectionViews(terminal=f"{_T}:_between_steps"),
    "timeline": SectionViews(figures=("step_timeline",)),
    "recompiles": SectionViews(
        terminal=f"{_T}:_recompiles", html=f"{_H}:recompiles_table", figures=("recompile_timeline",)
    ),
    "host_waits": SectionViews(
        terminal=f"{_T}:_host_waits", html=f"{_H}:host_waits_table", figures=("host_wait_waterfall",)
    ),
    "throughput": SectionViews(figures=("throughput",)),
    "small_ops": SectionViews(
        terminal=f"{_T}:_small_ops", html=f"{_H}:small_ops_table", figures=("small_op_histogram",)
    ),
    "collectives": SectionViews(
        terminal=f"{_T}:_collectives", html=f"{_H}:collectives_table", figures=("collective_overlap",)
    ),
    "sharding": SectionViews(terminal=f"{_T}:_sharding", figures=("sharding_collectives", "sharding_layouts")),
    "top_ops": SectionViews(terminal=f"{_O}:terminal_top_ops", html=f"{_OH}:html_top_ops", figures=("roofline",)),
    "memory": SectionViews(terminal=f"{_O}:terminal_memory", html=f"{_OH}:html_memory"),
    "stragglers": SectionViews(terminal=f"{_T}:_stragglers", html=f"{_H}:hosts_table"),
}


def views(name: str) -> SectionViews:
    """How the section called ``name`` is shown (by nothing, if it has no line)."""
    return VIEWS.get(name, SectionViews())


def renderers(kind: str) -> list[tuple[str, Any]]:
    """``(section name, renderer)`` for every section with a renderer of ``kind`` (``terminal`` or ``html``), in order."""
    refs = ((s.name, getattr(views(s.name), kind)) for s in SECTIONS)
    return [(name, resolve(ref)) for name, ref in refs if ref]


def figure_names() -> list[str]:
    """Every figure builder's name, in the order of the sections they draw."""
    return [name for s in SECTIONS for name in views(s.name).figures]

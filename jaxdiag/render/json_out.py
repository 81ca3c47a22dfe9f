"""Render a ``Report`` as the versioned JSON contract (``docs/report-schema.md``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.reporting.model import Report


def render(report: "Report") -> str:
    """The report as indented JSON text, NaN written as ``null``."""
    return report.to_json() + "\n"

"""The report's ``capture`` section as a type: whether the capture is whole, and the notes on what it lacks.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class CaptureNote:
    """One way the capture is not whole."""

    kind: str = described(
        "`device_work_missing` (the trace ended before the devices ran work the host launched: `evidence.steps`, "
        "`evidence.functions`), `events_dropped` (the profiler's dropped-event stats), `hosts_missing` (the "
        "sidecars name more processes than host files were read) or `short_window` (fewer than two steps, or none "
        "marked)"
    )
    message: str = described("what the trace lacks, and which figures it makes wrong", "")
    change: str = described("what to change in the capture", "")
    evidence: dict[str, Any] = described("the facts behind it", factory=dict)

    @property
    def text(self) -> str:
        """The note as one line: what is missing, then what to change."""
        return f"{self.message} {self.change}"


@dataclasses.dataclass(frozen=True)
class CaptureSection:
    """The report's ``capture`` section (1.4).

    Whether the capture is whole, before any figure is read. Each note's text is also the first
    of `notes`.
    """

    whole: bool = described("no notes", True)
    notes: tuple[CaptureNote, ...] = ()

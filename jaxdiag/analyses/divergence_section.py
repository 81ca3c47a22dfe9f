"""The report's ``divergence`` section as a type: functions compiled differently on some processes.

Its own module, importing nothing heavy, so that rendering a saved report loads no analysis.
"""

from __future__ import annotations

import dataclasses

from jaxdiag.analyses.base import described


@dataclasses.dataclass(frozen=True)
class Divergence:
    """One function compiled differently on some processes."""

    function: str
    compile_index: int | None = described("`null`: the number of compiles differs", None)
    processes: tuple[int, ...] = described("those that differ", ())
    others: tuple[int, ...] = ()
    step: int | None = described("`null` when unknown", None)
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class DivergenceSection:
    """The report's ``divergence`` section (1.3).

    With compile records of several processes (`{}` otherwise). Finding: `compile_divergence`.
    """

    processes: tuple[int, ...] = described(only_with="processes", default=())
    divergences: tuple[Divergence, ...] = described(only_with="processes", default=())

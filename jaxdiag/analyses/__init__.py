"""Analyses: each a pure function of ``TraceFrames`` returning a typed result.

``ANALYSES`` lists them in report order, name -> ``analyze``; ``run_all`` runs
every one. Each analysis module is imported on first use, so that importing
``jaxdiag.analyses.base`` (as the report model does) pulls in neither numpy nor
pandas; the analyses themselves use numpy and pandas, never jax.
"""

from __future__ import annotations

import importlib
from typing import Iterator, Mapping

from jaxdiag.analyses.base import Analysis, AnalysisInputs, AnalysisResult

#: Report section -> the module (in this package) whose ``analyze`` fills it, in report order.
_MODULES = {
    "capture": "completeness",
    "steps": "step_breakdown",
    "between_steps": "between_steps",
    "host_waits": "host_waits",
    "recompiles": "recompiles",
    "small_ops": "small_ops",
    "collectives": "collectives",
    "throughput": "throughput",
    "device_time": "device_time",
    "sharding": "sharding",
    "top_ops": "top_ops",
    "memory": "memory",
    "stragglers": "stragglers",
    "divergence": "divergence",
}


class _Registry(Mapping[str, Analysis]):
    """A read-only name -> ``analyze`` mapping that imports each module when first asked."""

    def __getitem__(self, name: str) -> Analysis:
        return importlib.import_module(f"{__name__}.{_MODULES[name]}").analyze

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULES)

    def __len__(self) -> int:
        return len(_MODULES)

    def __repr__(self) -> str:
        return f"ANALYSES({', '.join(_MODULES)})"


#: Every analysis, in the order reports show them.
ANALYSES: Mapping[str, Analysis] = _Registry()

__all__ = ["ANALYSES", "run_all"]


def run_all(inputs: AnalysisInputs) -> dict[str, AnalysisResult]:
    """Run every registered analysis on ``inputs``, in registry order.

    They share their intermediate results (compile spans, device ops, step
    windows), so each is computed once per call (see ``shared``).
    """
    from jaxdiag.analyses.shared import scope

    with scope(inputs.frames):
        return {name: analyze(inputs) for name, analyze in ANALYSES.items()}

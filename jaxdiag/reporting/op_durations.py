"""The ``op_durations`` section: a histogram of device compute-op durations, kept in the report.

The small-op histogram needs every op's duration; a report keeps only the bins
(a few dozen numbers), on a log scale with an edge on the small-op threshold, so
that the bars drawn in red hold exactly the ops counted as small, from the trace
and from a saved report alike.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.analyses.base import AnalysisInputs

#: Histogram bins per factor of ten in duration.
BINS_PER_DECADE = 8


def build(inputs: "AnalysisInputs", sections: Mapping[str, Any]) -> dict[str, Any]:
    """Bins of the durations (µs) of the device compute ops in the report's steps."""
    import numpy as np

    from jaxdiag.analyses.device_work import device_ops, is_compute
    from jaxdiag.trace import frames as F

    threshold = float(inputs.thresholds.small_op_us)
    empty = {"threshold_us": threshold, "bins_per_decade": BINS_PER_DECADE, "edges_us": [], "counts": []}
    ops = device_ops(inputs.frames)
    keep = is_compute(inputs.frames, ops)
    steps = {s.step for s in sections.get("steps") or ()}
    if steps:
        keep = keep & ops[F.STEP].isin(steps).to_numpy()
    if not keep.any():
        return empty
    durations_us = ops[F.DUR_NS].to_numpy(dtype=np.float64)[keep] / 1e3
    edges, counts = histogram(durations_us, threshold or 1.0, BINS_PER_DECADE)
    return {**empty, "edges_us": edges, "counts": counts}


def histogram(durations_us: Any, anchor_us: float, bins_per_decade: int) -> tuple[list[float], list[int]]:
    """Log-spaced bin edges through ``anchor_us`` covering every duration, and the count in each bin."""
    import numpy as np

    d = np.clip(np.asarray(durations_us, dtype=np.float64), 1e-3, None)
    k = np.log10(d / anchor_us) * bins_per_decade
    edges = anchor_us * 10 ** (np.arange(math.floor(k.min()), math.floor(k.max()) + 2) / bins_per_decade)
    counts, edges = np.histogram(d, bins=edges)
    return [float(e) for e in edges], [int(c) for c in counts]


def check(section: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` unless the bins can be drawn: one more edge than counts, edges rising and positive."""
    edges, counts = section.get("edges_us") or [], section.get("counts") or []
    if not isinstance(edges, list) or not isinstance(counts, list):
        raise ValueError("edges_us and counts must be arrays")
    if counts and len(edges) != len(counts) + 1:
        raise ValueError(f"{len(edges)} edges for {len(counts)} bins")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in [*edges, *counts]):
        raise ValueError("edges_us and counts must be numbers")
    if any(b <= a for a, b in zip(edges, edges[1:])) or (edges and edges[0] <= 0):
        raise ValueError("edges_us must be positive and rising")

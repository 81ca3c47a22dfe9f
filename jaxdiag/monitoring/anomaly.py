"""When a step is slow: longer than a factor times the rolling median of recent steady steps.

The median is recomputed every few steps from a bounded history (a sort of at
most ``window`` numbers), so a step pays a comparison and an append.
"""

from __future__ import annotations

import collections
from typing import Any


class SlowSteps:
    """Rolling median of steady steps, and the test ``wall_ms > factor x median``.

    Args:
      factor: how many times the median a step must take to be slow.
      window: how many recent steady steps the median is taken over.
      min_history: steps needed before any step is called slow.
      refresh: recompute the median every this many added steps.
      min_excess_ms: a slow step also exceeds the median by at least this much, so
        that a blip of a sub-millisecond step (a busy machine) is not called slow.
    """

    def __init__(
        self, factor: float, window: int = 50, min_history: int = 10, refresh: int = 5, min_excess_ms: float = 0.0
    ) -> None:
        self.factor = float(factor)
        self.min_excess_ms = float(min_excess_ms)
        self.history: collections.deque[float] = collections.deque(maxlen=max(3, int(window)))
        self.min_history = max(1, int(min_history))
        self.refresh = max(1, int(refresh))
        self.median_ms: float | None = None
        self._added = 0

    def add(self, wall_ms: float) -> None:
        self.history.append(wall_ms)
        self._added += 1
        if self._added % self.refresh == 0 or (self.median_ms is None and len(self.history) >= self.min_history):
            if len(self.history) < self.min_history:
                return
            values = sorted(self.history)
            mid = len(values) // 2
            self.median_ms = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    def is_slow(self, wall_ms: float) -> bool:
        median = self.median_ms
        return median is not None and wall_ms > self.factor * median and wall_ms - median >= self.min_excess_ms


def is_recompile(record: Any) -> bool:
    """A compile of one of the program's functions after its first (JAX's own helpers aside)."""
    return record.compile_index > 1 and record.origin != "jax-internal"


def recompile_reason(n: int, records: list[Any]) -> str:
    parts = []
    for r in records[:3]:
        cause = r.explanation.summary if r.explanation is not None else "cause unknown"
        parts.append(f"`{r.function}` recompiled (compile {r.compile_index}, {r.compile_s * 1e3:.0f} ms): {cause}")
    return f"recompile after warm-up at step {n}: " + "; ".join(parts)


def slow_reason(n: int, wall_ms: float, gap_ms: float | None, slow: SlowSteps) -> str:
    median = slow.median_ms or 0.0
    text = f"slow step {n}: {wall_ms:.1f} ms, {wall_ms / median:.1f}x the rolling median {median:.2f} ms"
    if gap_ms is not None:
        text += (
            f"; {gap_ms:.1f} ms of it before the step began (data loading or work between steps), "
            f"{wall_ms - gap_ms:.1f} ms in the step"
        )
    return text

"""``jax.distributed``'s key-value client, for the run-time host check."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def distributed_state() -> Any:
    """``jax._src.distributed.global_state``: the holder of ``jax.distributed``'s client."""
    try:
        from jax._src import distributed

        state = distributed.global_state
    except Exception:
        return None
    return state if hasattr(state, "client") else None


def distributed_client() -> Any:
    """The ``jax.distributed`` key-value client of this process, or ``None`` (not initialized, or no such state)."""
    state = distributed_state()
    return getattr(state, "client", None) if state is not None else None

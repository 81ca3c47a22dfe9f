"""The installed JAX's release, for the few tests whose expectation differs by release (each says why)."""

from __future__ import annotations


def jax_before(*release: int) -> bool:
    """Whether the installed JAX is older than ``release`` (``jax_before(0, 9)``: 0.8.x and earlier)."""
    import jax

    return tuple(int(p) for p in jax.__version__.split(".")[: len(release)]) < release

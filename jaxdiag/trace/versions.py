"""Which JAX made a capture, and whether jaxdiag was tested with it.

JAX 0.9.1 and later write ``jax_version``, ``jaxlib_version`` and one
``<platform>_version`` stat per platform (``cpu_version``, ``gpu_version``, and on
CUDA ``cuda_version``, ``cuda_runtime_version``, ``cuda_driver_version``) on the
``/host:metadata`` plane of every XSpace; the reader keeps that plane's stats in
``TraceFrames.meta``. Older captures have none, and then nothing is said.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

#: The JAX releases the test suite runs on (``.ci/run``): at least the first, below the second.
#: ``pyproject.toml``'s ``jax`` range says the same (``tests/trace/test_versions.py`` checks).
TESTED_JAX = ("0.8.0", "0.13")

_VERSION_STAT = re.compile(r"^([a-z][a-z0-9_]*)_version$")


def capture_versions(meta: Mapping[str, Any]) -> dict[str, str]:
    """``{"jax": ..., "jaxlib": ..., "<platform>": ...}`` from the metadata stats; empty when the capture has none.

    JAX and jaxlib come first, then the platforms in name order.
    """
    found = {}
    for key, value in meta.items():
        match = _VERSION_STAT.match(str(key))
        if match and isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            found[match[1]] = str(value)
    first = {k: found.pop(k) for k in ("jax", "jaxlib") if k in found}
    return {**first, **dict(sorted(found.items()))}


def untested_jax(versions: Mapping[str, str]) -> str | None:
    """A warning when the capture's JAX lies outside ``TESTED_JAX`` (``None``: inside, or unknown)."""
    jax = versions.get("jax")
    parsed = _release(jax) if jax else None
    low, high = _release(TESTED_JAX[0]) or (), _release(TESTED_JAX[1]) or ()
    if parsed is None or low <= parsed < high:
        return None
    return (
        f"this trace was made by JAX {jax}, outside the releases jaxdiag is tested with "
        f"({TESTED_JAX[0]} up to but not including {TESTED_JAX[1]}): JAX may have changed what it writes, so "
        "read the findings with care"
    )


def _release(text: str) -> tuple[int, ...] | None:
    """The leading numbers of a version (``"0.12.0.1"`` -> ``(0, 12, 0, 1)``, ``"0.9.1.dev2026"`` -> ``(0, 9, 1)``)."""
    match = re.match(r"^(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(part) for part in match[1].split(".")) if match else None


def versions_text(versions: Mapping[str, Any]) -> str:
    """``"jax 0.11.2 · jaxlib 0.11.2 · cpu · gpu cuda 13000"``, for a report's header (``""``: none known).

    The names are kept as written (a saved report may come from anywhere): escaping them is the renderer's job
    (``render.terminal_text.esc``, ``html.escape``), where a control character is shown as ``\\x1b``, never dropped.
    """
    parts = []
    for key, value in versions.items():
        key, value = str(key), str(value)
        parts.append(key if value == key else f"{key} {value}")
    return " · ".join(parts)

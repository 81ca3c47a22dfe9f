"""``CheckThresholds``: what ``jaxdiag check`` allows, from defaults, ``pyproject.toml`` and flags.

Later sources win: the defaults, then the ``[tool.jaxdiag.check]`` table of the
nearest ``pyproject.toml`` (searched upward from the working folder), then
command-line flags. Shares and regressions are fractions; wherever one is read
from text it may be written ``"5%"`` or ``0.05``. ``"off"`` (or ``false``) turns
a check off. The thresholds are part of ``jaxdiag.config.Settings`` (its
``check`` field), where each is documented; this module is the checks' door to them.

Reading ``pyproject.toml`` needs ``tomllib`` (Python 3.11+) or the ``tomli``
package; on Python 3.10 without ``tomli`` the file is skipped with a warning
rather than half-parsed, and flags still apply.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from jaxdiag.config import (
    DEFAULT_CHECK_THRESHOLDS,
    CheckThresholds,
    find_pyproject,
    load_settings,
    parse_check,
    parse_fraction,
)
from jaxdiag.errors import ConfigError

__all__ = [
    "CheckThresholds",
    "DEFAULT_CHECK_THRESHOLDS",
    "find_pyproject",
    "load_thresholds",
    "parse",
    "parse_fraction",
]

#: The table read from ``pyproject.toml``.
TABLE = ("tool", "jaxdiag", "check")


def parse(name: str, value: Any) -> Any:
    """``value`` as the threshold ``name`` takes it; ``ConfigError`` naming the threshold otherwise."""
    return parse_check(name, value)


def load_thresholds(
    flags: Mapping[str, Any] | None = None,
    *,
    pyproject: str | Path | None = None,
    search_from: str | Path | None = None,
) -> tuple[CheckThresholds, Path | None]:
    """Thresholds from the defaults, the pyproject table, then ``flags`` (``None`` values ignored).

    Args:
      flags: threshold name -> value as given on the command line.
      pyproject: read this file instead of searching for one.
      search_from: where to start searching for ``pyproject.toml``.

    Returns:
      The thresholds, and the ``pyproject.toml`` whose table was read (or ``None``).

    Raises:
      ConfigError: an unknown key or a bad value, naming the file or flag.
    """
    settings, used = load_settings(pyproject=pyproject, search_from=search_from)
    thresholds = settings.check
    for name, value in (flags or {}).items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if name not in {f.name for f in dataclasses.fields(CheckThresholds)}:
            raise ConfigError(f"unknown flag {flag}")
        try:
            thresholds = thresholds.replace(**{name: value})
        except ConfigError as exc:
            raise ConfigError(f"{flag}: {str(exc).split(': ', 1)[-1]}") from None
    return thresholds, used

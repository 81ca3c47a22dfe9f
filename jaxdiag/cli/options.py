"""Checks and parsers that several commands share: positive numbers, step lists, ``--set``.

Each raises ``ConfigError`` naming the flag, which the CLI prints as one line
with exit status 2.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from jaxdiag.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from jaxdiag.config import Settings

SET_HELP = (
    "Change a setting: NAME=VALUE, e.g. small_op_us=5 or check.step_time_regression=10%; "
    "repeat for more (see docs/settings.md)."
)
CONFIG_HELP = "pyproject.toml whose [tool.jaxdiag] tables to read (default: the nearest one)."


def positive(flag: str, value: float | None) -> float | None:
    """``value`` when it is a finite number above 0 (or ``None``); ``ConfigError`` otherwise."""
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{flag} must be a positive number, got {value:g}")
    return value


def check_width(value: int | None) -> int | None:
    """A ``--width`` of at least 20 columns (or ``None``); ``ConfigError`` otherwise: a table needs room."""
    if value is not None and value < 20:
        raise ConfigError(f"--width must be at least 20 columns, got {value}")
    return value


def parse_steps(spec: str | None) -> list[int] | None:
    """``'3:10'`` -> 3..9, ``'2,5'`` -> [2, 5], ``'4'`` -> [4]; ``ConfigError`` otherwise."""
    if spec is None or not spec.strip():
        return None
    try:
        if ":" in spec:
            lo, hi = spec.split(":", 1)
            start = int(lo) if lo.strip() else 0
            stop = int(hi)
            if stop <= start or start < 0:
                raise ValueError
            return list(range(start, stop))
        steps = [int(s) for s in spec.split(",") if s.strip()]
        if not steps or min(steps) < 0:
            raise ValueError
        return steps
    except ValueError:
        raise ConfigError(f"--steps {spec!r} is not a step list: use '3:10' (end exclusive), '2,5,7' or '4'") from None


def describe_steps(numbers: Iterable[int]) -> str:
    """Step numbers as runs: ``[0, 1, 2, 3, 7, 9, 10]`` -> ``"0-3, 7, 9-10"``."""
    nums = sorted(set(int(n) for n in numbers))
    runs: list[list[int]] = []
    for n in nums:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def check_steps_found(spec: str | None, wanted: Sequence[int] | None, captured: Iterable[int], path: Path) -> None:
    """``ConfigError`` when ``--steps`` named steps and none of them is in the capture."""
    if wanted is None:
        return
    have = {int(n) for n in captured if int(n) >= 0}
    if have.isdisjoint(wanted):
        raise ConfigError(f"--steps {spec}: no such step in {path}; the capture has steps {describe_steps(have)}")


def settings_from(
    assignments: Sequence[str] | None,
    *,
    config: Path | None = None,
    search_from: Path | None = None,
    **flags: object,
) -> "Settings":
    """Settings from the defaults, ``[tool.jaxdiag]`` of pyproject.toml, ``--set`` and the named flags.

    ``flags`` are setting name -> value given by a command's own options; ``None``
    values are left out. Later sources win.
    """
    from jaxdiag.config import load_settings, parse_assignment

    changes: dict[str, object] = {}
    for text in assignments or ():
        name, value = parse_assignment(text)
        changes[name] = value
    changes.update((k, v) for k, v in flags.items() if v is not None)
    settings, _ = load_settings(changes, pyproject=config, search_from=search_from, source="--set")
    return settings

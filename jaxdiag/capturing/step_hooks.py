"""Who is told when a numbered step begins and ends (``@jaxdiag.step`` and ``cap.step()``).

``jaxdiag.monitor`` times the steps the program already marks, rather than asking
for a second mark. A listener is an object with ``step_begin(n)`` and
``step_end(n)``, each also given the object that marks the step; with none registered a step pays one truthiness test of a list.
Listeners must not raise (a failure is swallowed: instrumentation never breaks
the user's step).
"""

from __future__ import annotations

from typing import Any

#: The registered listeners; read without a lock (a list read is atomic in CPython).
LISTENERS: list[Any] = []


def add_listener(listener: Any) -> None:
    """Tell ``listener`` of every marked step from now on."""
    if listener not in LISTENERS:
        LISTENERS.append(listener)


def remove_listener(listener: Any) -> None:
    if listener in LISTENERS:
        LISTENERS.remove(listener)


def began(n: int, source: Any) -> None:
    for listener in tuple(LISTENERS):
        try:
            listener.step_begin(n, source)
        except Exception:  # noqa: BLE001 - never the user's exception
            pass


def ended(n: int, source: Any) -> None:
    for listener in tuple(LISTENERS):
        try:
            listener.step_end(n, source)
        except Exception:  # noqa: BLE001
            pass

"""A Python thread's events by what encloses them: the runtime's, a framework's, or the program's own.

``host_plane`` reads a thread of the host plane (events by start, an enclosing event
first) into categories: an XLA:CPU op is ``device``; inside an event of the runtime
or of a framework (``PjitFunction(f)``), or named as the runtime's, ``runtime``; a
framework span, an event with a step number, or one without C++ source or flow
stats is the program's ``annotation`` (a ``TraceAnnotation``); the rest, the
runtime's own TraceMes, ``runtime``. An annotation with a step number and a name of
neither kind marks a step.

A thread can hold a hundred thousand events, so the rule runs in C (``_xline.nest``)
where the module was built, and otherwise in ``_nest``, its twin here; both are
tested against each other (``tests/trace/test_nesting.py``).
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Sequence

#: The categories, in the order ``_xline.nest`` numbers them.
LABELS = ("device", "runtime", "annotation")


def categorize(
    starts: Sequence[float],
    durs: Sequence[float],
    names: list[str],
    kind_of: Callable[[str], int],
    ops: list[bool] | None,
    steps: list[list[Any]],
    sources: list[list[Any]],
) -> tuple[list[str], list[int]]:
    """Each event's category, and the positions of the events that mark steps.

    ``kind_of``: a name's kind (1 the runtime's, 2 a framework span, 0 neither), asked once per
    distinct name; ``ops``: which events are XLA:CPU ops (``None``: none); ``steps`` and
    ``sources``: stat columns (``None`` where an event has none) of step numbers, and of C++
    source or flow stats.
    """
    from jaxdiag.trace.contract import line_decoder

    decoder = line_decoder()
    if decoder is not None:
        (codes,), distinct = decoder.codes([names])
    else:
        numbers: dict[str, int] = {}
        codes = array("i", [numbers.setdefault(name, len(numbers)) for name in names]).tobytes()
        distinct = list(numbers)
    kinds = bytes(kind_of(name) for name in distinct)
    nest = _nest if decoder is None else decoder.nest
    return nest(
        starts if isinstance(starts, array) else array("d", starts),
        durs if isinstance(durs, array) else array("d", durs),
        codes,
        kinds,
        None if ops is None else bytes(ops),
        steps,
        sources,
        LABELS,
    )


def _nest(
    starts: "array[float]",
    durs: "array[float]",
    codes: bytes,
    kinds: bytes,
    ops: bytes | None,
    steps: list[list[Any]],
    sources: list[list[Any]],
    labels: tuple[str, str, str],
) -> tuple[list[str], list[int]]:
    """``_xline.nest`` in Python: the events' starts and durations, each name's number (``codes``, int32 bytes)
    and each number's kind (``kinds``), which are XLA:CPU ops (bytes, 1 an op; ``None``: none), stat columns."""
    open_spans: list[tuple[float, bool]] = []  # (end, inside the runtime or a framework)
    categories: list[str] = []
    marks: list[int] = []
    for i, (start, dur, code) in enumerate(zip(starts, durs, memoryview(codes).cast("i"))):
        while open_spans and open_spans[-1][0] <= start:
            open_spans.pop()
        opaque = bool(open_spans) and open_spans[-1][1]
        kind = kinds[code]
        if ops is not None and ops[i]:
            category = 0
        elif opaque or kind == 1:
            category = 1
        else:
            step = any(column[i] is not None for column in steps)
            if kind == 2 or step or not any(column[i] is not None for column in sources):
                category = 2
                if step and not kind:
                    marks.append(i)
            else:
                category = 1  # C++ source or flow stats: the runtime's own TraceMe
        categories.append(labels[category])
        open_spans.append((start + dur, opaque or category != 2 or kind == 2))
    return categories, marks

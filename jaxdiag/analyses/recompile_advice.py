"""What to change for a recompile: one tip per kind of change the compile log names, and the texts of
the one-off findings.

Split from ``recompile_findings`` (which groups the compiles and says what each group cost) so that
the advice, which tests apply to programs, reads in one place.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from jaxdiag.recording.records import Change

ADVICE_BY_CHANGE = {
    "shape": "Pad the varying axis to a few fixed sizes (buckets) so that each size compiles once{detail}.",
    "weak_type": (
        "Pass consistently typed values: a Python scalar (weakly typed) and a jnp array of the same "
        "dtype compile separately; convert once, e.g. `jnp.float32(x)`, or make it a static argument."
    ),
    "weak_array": (
        "Give the array its dtype where it is made (`jnp.full(shape, 0.1, dtype=jnp.float32)`, or "
        "`jnp.float32(x)` once): an array made from a Python scalar is weakly typed, and the typed array an "
        "update returns compiles the function again."
    ),
    "dtype": "Cast the argument to one dtype before the call (e.g. `x.astype(jnp.float32)`).",
    "static": (
        "A static argument changed value; each value compiles anew. Pass it as a traced array "
        "instead, or limit it to a few values."
    ),
    "sharding": "Give the argument the same sharding every call (`jax.device_put(x, sharding)` with one `NamedSharding`).",
    "committed": (
        "Put the argument on its devices before the first call, with the sharding the later calls pass "
        "(`jax.device_put(x, sharding)`): a NumPy array and the committed array an update returns compile "
        "separately."
    ),
    "memory_kind": "Keep the argument in the same memory kind (device vs pinned host) every call.",
    "structure": "Keep the argument's pytree structure fixed (same keys, no `None` that comes and goes).",
    "function": "A new function object (a closure or lambda made per call) is a new cache entry; create the jitted function once, outside the loop.",
    "context": "A jax config option or mesh context changed between calls; set it once, before the first call.",
}
EAGER = (
    "Eager jnp code outside jit compiles one of JAX's helpers for each new shape and dtype it sees: "
    "make the inputs with NumPy and convert them once (`jnp.asarray` of a fixed shape), move the "
    "code inside the jitted step, or keep its shapes and dtypes fixed."
)
EAGER_ONCE = (
    "Each of these compiled once: a one-time cost, not a shape that varies in the loop. To spare even that, "
    "move the code into a jitted function (the step, or an evaluation's own), or make its inputs with NumPy."
)
GENERIC = (
    "Find what changed between calls: wrap the function with `jaxdiag.jit` (or set "
    "`jax_explain_cache_misses`) to log the reason. Common causes: varying shapes (pad to buckets), "
    "Python scalars vs arrays (weak types), changing static arguments, new closures per call."
)


#: For a recompile whose earlier compile came before recording began (``records.unseen_cause``).
UNSEEN = (
    "Its earlier compile came before recording began, so the compile log has no call to compare this one with: "
    "start recording before the function's first call (`jaxdiag.watch(True)` at the top of the script, or "
    "`jaxdiag run script.py`) and capture again; the log then names what changed."
)


def suggestion_for(changes: Sequence[Mapping[str, Any]]) -> str:
    """The change to make for a recompile, from the log's changes (generic without them).

    One tip per kind of change; shape changes of several arguments share one tip
    that lists each axis.
    """
    kinds: list[str] = []
    shape_details: list[str] = []
    for ch in changes:
        what = str(ch.get("what", ""))
        if Change.from_dict(dict(ch)).weak_array:
            what = "weak_array"  # not a Python scalar: an array made from one
        if what not in ADVICE_BY_CHANGE:
            continue
        if what not in kinds:
            kinds.append(what)
        if what == "shape" and ch.get("axis") is not None:
            shape_details.append(
                f"axis {ch['axis']} of {ch.get('label') or ch.get('path') or 'the argument'}: {ch.get('old')} -> {ch.get('new')}"
            )
    tips = []
    for what in kinds:
        detail = f" ({'; '.join(shape_details)})" if what == "shape" and shape_details else ""
        tips.append(ADVICE_BY_CHANGE[what].format(detail=detail))
    return " ".join(tips) if tips else GENERIC


def remainder_advice(changes: Sequence[Mapping[str, Any]]) -> str | None:
    """Advice for a batch that shrank once, as the last batch of an epoch does; ``None`` for other changes.

    Buckets are for sizes that keep changing; a remainder batch compiles once, for
    one smaller size, and the full size comes back from the cache.
    """
    shapes = [ch for ch in changes if ch.get("what") == "shape"]
    if not shapes or len(shapes) != len(changes):
        return None
    sizes = {(str(ch.get("old")), str(ch.get("new"))) for ch in shapes}
    axes = {ch.get("axis") for ch in shapes}
    if None in axes or len(axes) != 1 or len(sizes) != 1:
        return None
    old, new = next(iter(sizes))
    if not (old.isdigit() and new.isdigit() and int(new) < int(old)):
        return None
    return (
        f"A remainder batch: axis {next(iter(axes))} shrank once, {old} -> {new}, as the last batch of an "
        "epoch does. Drop it (`drop_remainder=True`, or stop each epoch at `len(data) // batch_size` batches) or "
        f"pad it to {old} rows and mask the padding, so no size but {old} is compiled."
    )


OTHER_CALLER = (
    "`{name}` is called from more than one place, and each place compiles its own shapes once: this is no "
    "shape varying in the loop, so padding to buckets would not help. If the other call is an evaluation, "
    "its compile is paid once per shape; to share one program, call it with the loop's shapes (evaluate in "
    "batches of the training batch's size)."
)


ONE_OFF = (
    "Each of these compiles made a new version of the function once, outside the steady loop: code that runs "
    "once (an optimizer's init, an evaluation or eager ops run at a few shapes) compiles each new shape it "
    "sees. It is a one-time cost, not a varying shape in the training step, so padding to buckets would not "
    "help. If it recurs (an evaluation each epoch), put that code in one jitted function, so it compiles once "
    "per input shape rather than op by op; or run it once before timing."
)

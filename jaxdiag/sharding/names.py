"""The user's names for a program's inputs in its sharding facts.

JAX names a compiled program's inputs by what its jitted function received; for a
wrapper's own jitted function (flax's ``nnx.jit`` passes its states, equinox's
``filter_jit`` its partitions) that is not what the user wrote. The compile
record's argument labels are (``model.w1``), and here they replace JAX's names
in the facts and in the collectives that serve those inputs, so every view names a
parameter one way.
"""

from __future__ import annotations

from typing import Any, Sequence


def with_user_names(sharding: dict[str, Any] | None, args: Sequence[Any]) -> dict[str, Any] | None:
    """Sharding facts whose inputs (and the collectives that serve them) carry the user's names.

    JAX names a program's inputs by what its jitted function received, which for a
    wrapper's own function is not what the user wrote (flax's ``nnx.jit`` passes
    ``states[0][2]`` for ``model.w2``); the record's labels are the user's.
    """
    if not sharding or not args:
        return sharding
    labels = {a.path: a.label for a in args if a.label}
    given = list(sharding.get("inputs") or ())
    arrays = [a for a in args if a.kind == "array"]
    if not all(isinstance(x, dict) and x.get("path") in labels for x in given) and len(arrays) == len(given):
        # The program's inputs are the wrapper's (nnx.jit: its states); pair them with the call's
        # leaves by position where every shape agrees.
        if all(
            isinstance(x, dict) and list(x.get("shape") or ()) == list(a.shape or ()) for x, a in zip(given, arrays)
        ):
            labels = {x["path"]: a.label for x, a in zip(given, arrays) if a.label}
    renamed: dict[str, str] = {}
    inputs = []
    for leaf in given:
        label = labels.get(leaf.get("path")) if isinstance(leaf, dict) else None
        if label is None or leaf.get("name") == label:
            inputs.append(leaf)
            continue
        if leaf.get("name"):
            renamed[leaf["name"]] = label
        inputs.append({**leaf, "name": label})
    if not renamed and inputs == given:
        return sharding
    # XLA names a collective that gathers an argument by that argument's path on newer JAX
    # (``model.states[0][0]`` where older releases gave the consuming op): the user's name, too.
    collectives = [
        {
            **c,
            "arrays": [renamed.get(a, a) for a in c.get("arrays") or ()],
            **({"op_name": renamed[c["op_name"]]} if c.get("op_name") in renamed else {}),
        }
        if isinstance(c, dict)
        else c
        for c in sharding.get("collectives") or ()
    ]
    return {**sharding, "inputs": inputs, "collectives": collectives}

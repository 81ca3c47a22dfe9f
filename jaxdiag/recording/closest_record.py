"""Which earlier record of a function a recompile is diffed against: the closest.

The closest is the one differing in the fewest leaves and fields, ties broken by the
most recent. JAX's own cache-miss explainer ranks differences by kind first (context,
tree, then types), so in a tie it can explain a sharding change by diffing against an
unrelated shape; counting differences avoids that. Leaf hashes, kept per record, find
the differing leaves without comparing every field of every leaf.
"""

from __future__ import annotations

import operator
import threading
from typing import Sequence

from jaxdiag.recording.record_diff import context_changes, sharding_differs
from jaxdiag.recording.records import ArgSignature, CompileRecord

_MAX_DIGESTS = 4096


def function_key(rec: CompileRecord) -> tuple[str, str | None]:
    """What makes two records the same function: qualname and definition site.

    The site tells apart functions sharing a qualname (two lambdas of one module);
    a closure re-created at one site keeps both, and shows as a new ``function_id``.
    """
    return rec.qualname, rec.source


def last_of_function(
    history: Sequence[CompileRecord],
    key: tuple[str, str | None],
    limit: int,
    transform: str | None | bool = False,
) -> list[CompileRecord]:
    """The last ``limit`` records of function ``key`` (of one ``transform``, unless ``False``)."""
    found: list[CompileRecord] = []
    for rec in reversed(history):
        if (rec.qualname, rec.source) == key and (transform is False or rec.transform == transform):
            found.append(rec)
            if len(found) == limit:
                break
    found.reverse()
    return found


def closest(candidates: Sequence[CompileRecord], new: CompileRecord) -> CompileRecord:
    """The record of ``candidates`` (one function's, oldest first, at least one) closest to ``new``."""
    new_index = {a.path: a for a in new.args}
    new_digest = _leaf_hashes(new)
    best: CompileRecord | None = None
    best_key: tuple[int, int] | None = None
    # Newest first, and only a strictly better key replaces the best: ties go to the newest.
    for old in reversed(candidates):
        key = _distance(old, new, new_digest, new_index, best_key)
        if key is not None and (best_key is None or key < best_key):
            best, best_key = old, key
            if key == (0, 0):
                break
    assert best is not None
    return best


def _distance(
    old: CompileRecord,
    new: CompileRecord,
    new_digest: tuple[int, ...] | None,
    new_index: dict[str, ArgSignature],
    bound: tuple[int, int] | None,
) -> tuple[int, int] | None:
    """(differing leaves and fields, differing axes), or ``None`` once worse than ``bound``.

    Leaf hashes find the differing leaves without comparing every field of every
    leaf, which matters for models with thousands of parameters.
    """
    fields = sum(1 for _ in context_changes(old, new))
    if old.function_id is not None and new.function_id is not None and old.function_id != new.function_id:
        fields += 1
    old_digest = _digest(old)
    if old_digest is None or new_digest is None:
        return _distance_by_path(old, new, new_index, fields, bound)
    if old_digest == new_digest:
        return fields + _tree_differs(old, new), 0
    if len(old_digest) == len(new_digest):
        positions = [i for i, ne in enumerate(map(operator.ne, old_digest, new_digest)) if ne]
        pairs = [(old.args[i], new.args[i]) for i in positions]
        if all(o.path == n.path for o, n in pairs):  # same leaves in the same order
            axes = 0
            for o, n in pairs:
                f, a = _count_leaf_fields(o, n)
                fields, axes = fields + f, axes + a
                if bound is not None and fields > bound[0]:
                    return None
            return fields + _tree_differs(old, new), axes
    return _distance_by_path(old, new, new_index, fields, bound)


def _distance_by_path(
    old: CompileRecord,
    new: CompileRecord,
    new_index: dict[str, ArgSignature],
    fields: int,
    bound: tuple[int, int] | None,
) -> tuple[int, int] | None:
    axes = matched = 0
    limit = bound[0] if bound is not None else None
    for o in old.args:
        n = new_index.get(o.path)
        if n is None:
            fields += 1
        else:
            matched += 1
            if n != o:
                f, a = _count_leaf_fields(o, n)
                fields, axes = fields + f, axes + a
        if limit is not None and fields > limit:
            return None
    fields += len(new_index) - matched
    if matched == len(old.args) == len(new_index):
        fields += _tree_differs(old, new)
    return fields, axes


# id(record) -> (record, leaf hashes). Holding the record keeps its id from being
# reused; a record is hashed once however many later compiles compare against it.
_digests: dict[int, tuple[CompileRecord, tuple[int, ...] | None]] = {}
_digests_lock = threading.Lock()


def _digest(rec: CompileRecord) -> tuple[int, ...] | None:
    hit = _digests.get(id(rec))
    if hit is not None and hit[0] is rec:
        return hit[1]
    digest = _leaf_hashes(rec)
    with _digests_lock:
        if len(_digests) >= _MAX_DIGESTS:
            del _digests[next(iter(_digests))]  # oldest first
        _digests[id(rec)] = (rec, digest)
    return digest


def _leaf_hashes(rec: CompileRecord) -> tuple[int, ...] | None:
    try:
        return tuple(map(hash, rec.args))
    except TypeError:  # an unhashable field (a hand-built shape list); compare by path instead
        return None


def _tree_differs(old: CompileRecord, new: CompileRecord) -> int:
    return int(bool(old.in_tree and new.in_tree and old.in_tree != new.in_tree))


def _count_leaf_fields(o: ArgSignature, n: ArgSignature) -> tuple[int, int]:
    if o.kind != n.kind:
        return 1, 0
    fields = axes = 0
    if o.shape != n.shape:
        fields += 1
        if o.shape is not None and n.shape is not None and len(o.shape) == len(n.shape):
            axes += sum(a != b for a, b in zip(o.shape, n.shape))
    # ``None`` means "not known", which is no evidence of a change (as in ``_leaf_changes``).
    for a, b in (
        (o.dtype, n.dtype),
        (o.weak_type, n.weak_type),
        (o.memory_kind, n.memory_kind),
        (o.committed, n.committed),
    ):
        if a != b and a is not None and b is not None:
            fields += 1
    fields += sharding_differs(o, n)
    return fields + (o.value != n.value), axes

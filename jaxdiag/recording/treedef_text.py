"""Read the text of a ``PyTreeDef`` back into nested nodes, to name a container change by path.

A record keeps its argument tree as text (records hold no jax objects), so two
calls passing the same leaves in a tuple and then a list differ only in that
text. ``container_changes`` walks two such texts side by side and says where the
containers first differ and what they were: ``args[0]: tuple -> list``.
"""

from __future__ import annotations

import dataclasses
import re

_NAME = re.compile(r"[A-Za-z_][\w.]*")


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    kind: str  # "tuple", "list", "dict", "leaf", "None", or a custom node's type name
    children: tuple[tuple[str, Node], ...] = ()  # (path part, child)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.i)

    def eat(self, s: str) -> None:
        if not self.peek(s):
            raise ValueError(f"expected {s!r} at {self.i}")
        self.i += len(s)

    def node(self) -> Node:
        t = self.text
        if self.peek("*"):
            self.i += 1
            return Node("leaf")
        if self.peek("None"):
            self.i += 4
            return Node("None")
        if self.peek("("):
            return Node("tuple", self._items("(", ")"))
        if self.peek("["):
            return Node("list", self._items("[", "]"))
        if self.peek("{"):
            return Node("dict", self._dict())
        if self.peek("CustomNode("):
            self.i += len("CustomNode(")
            m = _NAME.match(t, self.i)
            if m is None:
                raise ValueError("custom node name")
            name = m.group(0)
            self.i = m.end()
            aux_start = self.i
            self._skip_brackets()  # [aux data]
            aux = t[aux_start + 1 : self.i - 1]
            self.eat(", ")
            children = self._items("[", "]")
            self.eat(")")
            if name == "namedtuple" and _NAME.fullmatch(aux):
                name = f"namedtuple {aux}"
            return Node(name, children)
        m = _NAME.match(t, self.i)  # a namedtuple shown by name: P(x=*, y=*) in some versions
        if m is not None and t.startswith("(", m.end()):
            self.i = m.end()
            return Node(m.group(0), self._items("(", ")"))
        raise ValueError(f"unexpected {t[self.i : self.i + 10]!r}")

    def _skip_brackets(self) -> None:
        depth = 0
        start = self.i
        while self.i < len(self.text):
            c = self.text[self.i]
            depth += c in "[("
            depth -= c in "])"
            self.i += 1
            if depth == 0:
                break
        if self.i == start:
            raise ValueError("aux data")

    def _items(self, open_: str, close: str) -> tuple[tuple[str, Node], ...]:
        self.eat(open_)
        out: list[tuple[str, Node]] = []
        while not self.peek(close):
            out.append((f"[{len(out)}]", self.node()))
            if self.peek(", "):
                self.i += 2
            elif self.peek(","):
                self.i += 1
        self.eat(close)
        return tuple(out)

    def _dict(self) -> tuple[tuple[str, Node], ...]:
        self.eat("{")
        out = []
        while not self.peek("}"):
            m = re.compile(r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^:]+): ").match(self.text, self.i)
            if m is None:
                raise ValueError("dict key")
            self.i = m.end()
            out.append((f"[{m.group(1)}]", self.node()))
            if self.peek(", "):
                self.i += 2
        self.eat("}")
        return tuple(out)


def parse(text: str) -> Node | None:
    """The tree of ``str(treedef)`` (``"PyTreeDef(...)"``), or ``None`` when it cannot be read."""
    if not text.startswith("PyTreeDef("):
        return None
    p = _Parser(text)
    p.i = len("PyTreeDef(")
    try:
        return p.node()
    except (ValueError, IndexError):
        return None


def container_changes(old_text: str, new_text: str) -> list[tuple[str, str, str]]:
    """``(path, old container, new container)`` where two call trees first differ in a container.

    The root is jit's ``((args...), {kwargs})``; paths read ``args[0][1]``,
    ``kwargs['batch']``. Empty when either text cannot be read or none differs.
    """
    old, new = parse(old_text), parse(new_text)
    if old is None or new is None or old.kind != "tuple" or new.kind != "tuple":
        return []
    if len(old.children) != 2 or len(new.children) != 2:
        return []
    out: list[tuple[str, str, str]] = []
    (_, oa), (_, ok) = old.children
    (_, na), (_, nk) = new.children
    for (part, o), (_, n) in zip(oa.children, na.children):
        _walk("args" + part, o, n, out)
    okw, nkw = dict(ok.children), dict(nk.children)
    for part in okw.keys() & nkw.keys():
        _walk("kwargs" + part, okw[part], nkw[part], out)
    return out


def _walk(path: str, o: Node, n: Node, out: list[tuple[str, str, str]]) -> None:
    if o.kind != n.kind:
        out.append((path, o.kind, n.kind))
        return
    if len(o.children) != len(n.children):
        return  # not a container type change: a structure change, told elsewhere
    for (part, oc), (_, nc) in zip(o.children, n.children):
        _walk(path + part, oc, nc, out)

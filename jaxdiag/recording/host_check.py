"""Check, as each function compiles, that every process of a multi-controller run compiled the same.

Every process of a ``jax.distributed`` run runs the same program and meets the
others in collectives. A process that traces a function with other shapes
(a batch of 24 rows where the others had 32) compiles another program, and
the run hangs or fails at the next collective, with no hint why.

With the check on (``jaxdiag.watch(check_hosts=True)``, or
``jaxdiag.capture(..., check_hosts=True)``), each compile record is published
through the ``jax.distributed`` key-value store under the function, its
compile number and the process: a fingerprint of what JAX keys its cache on
(each argument's path, shape, dtype, weak type and static value, and the
pytree structure; shardings are left out, since their text names devices of
the process). Then the process reads every peer's entry for the same compile,
waiting at most ``timeout_s`` in all, and compares. A mismatch warns
(``HostDivergenceWarning``), or raises ``HostDivergenceError`` with
``check_hosts="raise"``, naming the processes, the step and the argument, before
the compiled program runs. A peer that has not published in time is named too
(it may compile this function fewer times, or be slower): the check never
waits longer than its bound, and once a peer has not answered for a function
(a function only one process compiles, such as its logging), later compiles of
it are compared with what is there without waiting. JAX's own helpers (``origin="jax-internal"``) are
not checked.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import warnings
from typing import Any

from jaxdiag.errors import ConfigError, HostDivergenceError, HostDivergenceWarning
from jaxdiag.recording.compile_log import Collector
from jaxdiag.recording.records import JAX_INTERNAL_ORIGIN, ArgSignature, CompileRecord

_PREFIX = "jaxdiag/host_check"
#: Default bound, in seconds, on the wait for all peers' entries of one compile.
DEFAULT_TIMEOUT_S = 10.0


class _Discard(list):  # type: ignore[type-arg]
    """A collector's ``records`` that keeps nothing: the check needs each record once."""

    def append(self, item: Any) -> None:
        pass


class HostCheck(Collector):
    """A compile-log collector that compares each compile with the other processes' (see the module doc).

    Args:
      raise_on_mismatch: raise ``HostDivergenceError`` rather than warn.
      timeout_s: the longest wait for the peers' entries of one compile.
      client: a ``jax.distributed`` client (default: the one ``jax.distributed.initialize`` made).
      process_index, process_count: this process and how many there are (default: JAX's).
    """

    def __init__(
        self,
        raise_on_mismatch: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        client: Any = None,
        process_index: int | None = None,
        process_count: int | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"host check timeout_s must be positive, got {timeout_s!r}")
        self.raise_on_mismatch = raise_on_mismatch
        self.timeout_s = float(timeout_s)
        super().__init__()
        self.records = _Discard()
        self.step: int | None = None  # set by ``capture`` each step, for messages
        self._client, self._index, self._count = client, process_index, process_count
        self._lock = threading.Lock()
        self.mismatches: list[str] = []  # every message given, for callers and tests
        self.silent: list[str] = []
        self._alone: set[str] = set()  # functions some peer did not compile: later compiles do not wait for it

    # --- the collector hook --------------------------------------------------------
    def on_record(self, record: CompileRecord) -> None:
        if record.origin == JAX_INTERNAL_ORIGIN or not self._connect():
            return
        mine = entry(record, self.step)
        key = _key(record)
        try:
            self._client.key_value_set(f"{key}/{self._index}", json.dumps(mine), allow_overwrite=True)
        except Exception as exc:  # the store is gone (shutdown): nothing to compare with
            _warn(f"jaxdiag host check: could not publish {record.function}'s compile ({exc})")
            return
        function = key.rsplit("/", 1)[0]
        # A function a peer did not compile once (logging on process 0) is not waited for again.
        deadline = time.monotonic() + (0.0 if function in self._alone else self.timeout_s)
        theirs: dict[int, dict[str, Any]] = {}
        silent: list[int] = []
        for peer in range(self._count or 0):
            if peer == self._index:
                continue
            left_ms = max(int((deadline - time.monotonic()) * 1000), 1)
            try:
                theirs[peer] = json.loads(self._client.blocking_key_value_get(f"{key}/{peer}", left_ms))
            except Exception:  # not published in time (or not at all)
                silent.append(peer)
        if silent and function not in self._alone:
            self._alone.add(function)
            self._compare(record, mine, theirs, silent)
        else:
            self._compare(record, mine, theirs, [])

    def _connect(self) -> bool:
        """Find the distributed client once; without one (a single process) there is nothing to check."""
        if self._client is not None and self._count is not None and self._index is not None:
            return self._count > 1
        try:
            import jax

            from jaxdiag import jax_internals

            client = self._client or jax_internals.distributed_client()
            if client is None:
                return False
            self._client = client
            self._index = jax.process_index() if self._index is None else self._index
            self._count = jax.process_count() if self._count is None else self._count
        except Exception:
            return False
        return self._count > 1

    def _compare(
        self, record: CompileRecord, mine: dict[str, Any], theirs: dict[int, dict[str, Any]], silent: list[int]
    ) -> None:
        where = f"`{record.function}` (compile {record.compile_index}" + (
            f", step {mine['step']})" if mine.get("step") is not None else ")"
        )
        if silent:
            message = (
                f"jaxdiag host check: process(es) {_ranges(silent)} did not publish their {where} within "
                f"{self.timeout_s:g} s: they compile it fewer times than process {self._index}, or later; "
                "not compared with them."
            )
            with self._lock:
                self.silent.append(message)
            _warn(message)
        differ = {p: e for p, e in theirs.items() if e.get("fp") != mine["fp"]}
        if not differ:
            return
        message = (
            f"jaxdiag host check: process {self._index} and process(es) {_ranges(differ)} compiled "
            f"{where} with different signatures: "
            + "; ".join(describe(mine, self._index, e, p) for p, e in sorted(differ.items())[:3])
            + ". In a multi-controller run the processes now run different programs: this hangs or "
            "fails at the next collective. Give every process the same shapes (pad or drop the last batch)."
        )
        with self._lock:
            self.mismatches.append(message)
        if self.raise_on_mismatch:
            raise HostDivergenceError(message)
        _warn(message)


def entry(record: CompileRecord, step: int | None = None) -> dict[str, Any]:
    """What a process publishes about one compile: a fingerprint, the arguments behind it, the step."""
    args = {a.path: _arg_text(a) for a in record.args}
    body = json.dumps([sorted(args.items()), record.in_tree or ""], separators=(",", ":"))
    return {
        "fp": hashlib.sha1(body.encode()).hexdigest()[:16],
        "args": args,
        "step": step,
        "compile": record.compile_index,
    }


def describe(a: dict[str, Any], pa: Any, b: dict[str, Any], pb: Any) -> str:
    """The first differing argument of two entries, as ``args[0] axis 0 = 24 (process 1) vs 32 (process 0)``."""
    for path in sorted(set(a["args"]) | set(b["args"])):
        x, y = a["args"].get(path), b["args"].get(path)
        if x == y:
            continue
        if x is None or y is None:
            return f"{path} only in process {pa if y is None else pb}'s call"
        axis = _axis(x, y)
        if axis is not None:
            return f"{path} axis {axis[0]} = {axis[1]} in process {pa} vs {axis[2]} in process {pb} ({x} vs {y})"
        return f"{path} is {x} in process {pa} vs {y} in process {pb}"
    return f"argument structure differs (process {pa} vs process {pb})"


def _arg_text(a: ArgSignature) -> str:
    if a.kind == "static" or a.shape is None:
        return f"static {a.value}" if a.value is not None else a.kind
    weak = " weak" if a.weak_type else ""
    return f"{a.dtype}[{','.join(map(str, a.shape))}]{weak}"


def _axis(x: str, y: str) -> tuple[int, str, str] | None:
    """The first axis where two ``dtype[d0,d1]`` texts differ in size, same dtype and rank."""
    try:
        dx, sx = x.split("[", 1)
        dy, sy = y.split("[", 1)
        if dx != dy:
            return None
        ax, ay = sx.split("]")[0].split(","), sy.split("]")[0].split(",")
    except ValueError:
        return None
    if len(ax) != len(ay):
        return None
    for i, (u, v) in enumerate(zip(ax, ay)):
        if u != v:
            return i, u, v
    return None


def _key(record: CompileRecord) -> str:
    where = hashlib.sha1(f"{record.qualname}|{record.source}".encode()).hexdigest()[:12]
    return f"{_PREFIX}/{where}/{record.compile_index}"


def _ranges(processes: Any) -> str:
    """``0-2, 4``."""
    nums = sorted(int(p) for p in processes)
    parts: list[list[int]] = []
    for n in nums:
        if parts and parts[-1][1] == n - 1:
            parts[-1][1] = n
        else:
            parts.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def _warn(message: str) -> None:
    try:  # under -W error a warning raises: it must not fail the user's call
        warnings.warn(message, HostDivergenceWarning, stacklevel=4)
    except Exception:
        pass


def resolve(check_hosts: Any) -> HostCheck | None:
    """``check_hosts`` of ``watch``/``capture`` as a ``HostCheck``: ``False``/``None`` off, ``True`` warn, ``"raise"``."""
    if check_hosts is None or check_hosts is False:
        return None
    if isinstance(check_hosts, HostCheck):
        return check_hosts
    if check_hosts is True:
        return HostCheck()
    if check_hosts == "raise":
        return HostCheck(raise_on_mismatch=True)
    raise ConfigError(f'check_hosts must be True, False, "raise" or a HostCheck, got {check_hosts!r}')

"""The ``jax.distributed`` key-value store, as the monitor uses it: JSON values, every wait bounded.

Each call runs on the caller's (background) thread; those that could block on a
lost coordinator run on a helper thread joined with a timeout, so that the
watchdog can still write down a hang when the store is gone.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable


class Store:
    """JSON values under ``prefix`` in the distributed key-value store."""

    def __init__(self, client: Any, prefix: str, index: int, count: int) -> None:
        self.client, self.prefix, self.index, self.count = client, prefix.rstrip("/"), index, count

    @classmethod
    def connect(cls, prefix: str) -> "Store | None":
        """The store of this ``jax.distributed`` run; ``None`` in a single process."""
        try:
            import jax

            from jaxdiag import jax_internals

            client = jax_internals.distributed_client()
            if client is None or jax.process_count() < 2:
                return None
            return cls(client, prefix, jax.process_index(), jax.process_count())
        except Exception:  # noqa: BLE001
            return None

    def set(self, key: str, value: Any) -> None:
        self.client.key_value_set(f"{self.prefix}/{key}", json.dumps(value, default=str), allow_overwrite=True)

    def delete(self, key: str) -> None:
        self.client.key_value_delete(f"{self.prefix}/{key}")

    def folder(self, key: str) -> dict[str, Any]:
        """Every value under ``key/``, by the rest of its key; values that are not JSON are left out."""
        base = f"{self.prefix}/{key.rstrip('/')}/"
        out = {}
        for full, text in self.client.key_value_dir_get(base):
            try:
                out[str(full)[len(base) :] if str(full).startswith(base) else str(full)] = json.loads(text)
            except ValueError:
                continue
        return out


def bounded(fn: Callable[[], Any], timeout_s: float, default: Any = None) -> Any:
    """``fn()``, or ``default`` when it raises or has not returned within ``timeout_s`` (it is left running)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(fn())
        except Exception:  # noqa: BLE001
            pass

    thread = threading.Thread(target=run, name="jaxdiag-monitor-store", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return box[0] if box else default

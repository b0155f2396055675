"""A seeded failing and slow object store, for fault-injection tests and benchmarks.

``FaultyStore`` is an :class:`ObjectStore` whose raw operations fail with a seeded probability
(``transient``: the operation raises before or *after* taking effect, as a lost reply would)
or always fail to write keys under a prefix (``broken_writes``: a persistent failure), and may sleep
(``latency``). The retry layer above the raw operations is the real one, so tests see exactly
what a user's store does with a flaky network: transient faults are retried and invisible,
persistent ones surface as a :class:`StorageError` naming the key.
"""

from __future__ import annotations

import random
import threading
import time

from millpond.store.objects import ObjectStore

__all__ = ["FaultyStore", "InjectedFault"]


class InjectedFault(ConnectionError):
    """A fault injected by :class:`FaultyStore` (looks like a dropped connection)."""


class FaultyStore(ObjectStore):
    def __init__(self, root: str, options: dict[str, str] | None = None, *, seed: int, transient: float = 0.0,
                 broken_writes: tuple[str, ...] = (), latency: float = 0.0):
        super().__init__(root, options)
        self.transient, self.broken_writes, self.latency = transient, tuple(broken_writes), latency
        self.faults = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.sleep = lambda _s: None  # retries do not wait in tests

    def _roll(self, key: str, write: bool) -> str | None:
        """None, "before" (fail without effect) or "after" (fail after the effect)."""
        if write and any(key.startswith(p) for p in self.broken_writes):
            return "before"
        with self._lock:
            r = self._rng.random()
        if r < self.transient:
            self.faults += 1
            return "before" if r < self.transient / 2 else "after"
        return None

    def _inject(self, key: str, op, write: bool = False):  # noqa: ANN001
        if self.latency:
            time.sleep(self.latency)
        when = self._roll(key, write)
        if when == "before":
            raise InjectedFault(f"injected fault before {key!r}")
        out = op()
        if when == "after":
            raise InjectedFault(f"injected fault after {key!r} (the operation took effect)")
        return out

    def _put(self, key: str, data: bytes, mode: str | None) -> None:
        self._inject(key, lambda: ObjectStore._put(self, key, data, mode), write=True)

    def _get(self, key: str) -> bytes:
        return self._inject(key, lambda: ObjectStore._get(self, key))

    def _get_ranges(self, key: str, starts: list[int], ends: list[int]) -> list[bytes]:
        return self._inject(key, lambda: ObjectStore._get_ranges(self, key, starts, ends))

    def _get_mapped(self, key: str, starts: list[int], ends: list[int]) -> list[bytes | memoryview]:
        return self._inject(key, lambda: ObjectStore._get_mapped(self, key, starts, ends))

    def _get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        return self._inject(key, lambda: ObjectStore._get_suffix(self, key, length))

    def _delete(self, key: str) -> None:
        self._inject(key, lambda: ObjectStore._delete(self, key), write=True)

    def _list(self, prefix: str) -> list[str]:
        return self._inject(prefix, lambda: ObjectStore._list(self, prefix))

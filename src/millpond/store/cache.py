"""The local caches in front of object storage: memory blocks and local-disk blocks.

Object storage is the home of state; these only make reads cheaper. Both are per process (a
Spark Python worker reuses its caches across tasks), both have a byte budget and evict the least
recently used entries past it, so state many times larger than the budget still works. Entries
are keyed by (root, file key, block) and SST files are immutable, so an entry never goes stale.

- **memory**: decoded blocks and file footers; ``MILLPOND_BLOCK_CACHE_BYTES`` (default 256 MiB).
- **disk**: raw block bytes fetched from a *remote* store (for a local-folder root the file is
  already on disk); ``MILLPOND_DISK_CACHE_BYTES`` (default 4 GiB) under
  ``MILLPOND_DISK_CACHE_DIR`` (default a temporary directory). A block read from disk is checked
  against the crc in its file's index before use, so a damaged cache entry is refetched.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

__all__ = ["MemoryCache", "DiskCache", "block_cache", "disk_cache", "configure"]


class MemoryCache:
    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.used = 0
        self.hits = self.misses = self.evictions = 0
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return hit[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        if nbytes > self.budget:
            return  # larger than the whole cache: serve it, do not keep it
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._entries[key] = (value, nbytes)
            self.used += nbytes
            while self.used > self.budget:
                _, (_, size) = self._entries.popitem(last=False)
                self.used -= size
                self.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0


class DiskCache:
    """Raw blocks as files ``<dir>/<digest>``; LRU by access order within this process."""

    def __init__(self, directory: str | Path, budget_bytes: int):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.budget = budget_bytes
        self.used = 0
        self.hits = self.misses = self.evictions = 0
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        for entry in sorted(os.scandir(self.dir), key=lambda e: e.stat().st_mtime):  # survive a restart
            if entry.is_file() and not entry.name.endswith(".tmp"):
                self._entries[entry.name] = entry.stat().st_size
                self.used += entry.stat().st_size
        self._evict()

    def _name(self, root: str, key: str, block: int) -> str:
        return hashlib.blake2b(f"{root}|{key}|{block}".encode(), digest_size=16).hexdigest()

    def get(self, root: str, key: str, block: int) -> bytes | None:
        name = self._name(root, key, block)
        with self._lock:
            if name not in self._entries:
                self.misses += 1
                return None
            self._entries.move_to_end(name)
            self.hits += 1
        try:
            return (self.dir / name).read_bytes()
        except OSError:
            return None

    def put(self, root: str, key: str, block: int, data: bytes) -> None:
        if len(data) > self.budget:
            return
        name = self._name(root, key, block)
        tmp = self.dir / f"{name}.{threading.get_ident()}.tmp"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.dir / name)
        except OSError:
            return  # a full or broken cache disk only costs refetches
        with self._lock:
            self.used += len(data) - self._entries.pop(name, 0)
            self._entries[name] = len(data)
            self._evict()

    def _evict(self) -> None:
        while self.used > self.budget and self._entries:
            name, size = self._entries.popitem(last=False)
            self.used -= size
            self.evictions += 1
            try:
                (self.dir / name).unlink()
            except OSError:
                pass


class _RootDisk:
    """The disk cache seen through one store root (what ``sst`` reads with)."""

    def __init__(self, cache: DiskCache, root: str):
        self.cache, self.root = cache, root

    def get(self, key: str, block: int) -> bytes | None:
        return self.cache.get(self.root, key, block)

    def put(self, key: str, block: int, data: bytes) -> None:
        self.cache.put(self.root, key, block, data)


_MEMORY: MemoryCache | None = None
_DISK: DiskCache | None = None
_LOCK = threading.Lock()


def block_cache() -> MemoryCache:
    global _MEMORY
    if _MEMORY is None:
        with _LOCK:
            if _MEMORY is None:
                _MEMORY = MemoryCache(int(os.environ.get("MILLPOND_BLOCK_CACHE_BYTES", 256 << 20)))
    return _MEMORY


def disk_cache(store: Any) -> _RootDisk | None:
    """The disk cache for ``store``'s root; None for a local-folder root (already on disk)."""
    global _DISK
    if store.local_path("") is not None and not os.environ.get("MILLPOND_DISK_CACHE_LOCAL"):
        return None
    if _DISK is None:
        with _LOCK:
            if _DISK is None:
                directory = os.environ.get("MILLPOND_DISK_CACHE_DIR") or os.path.join(
                    tempfile.gettempdir(), f"millpond-cache-{os.getuid()}")
                _DISK = DiskCache(directory, int(os.environ.get("MILLPOND_DISK_CACHE_BYTES", 4 << 30)))
    return _RootDisk(_DISK, store.root)


def configure(*, memory_bytes: int | None = None, disk_bytes: int | None = None,
              disk_dir: str | None = None) -> None:
    """Replace this process's caches (tests and benchmarks size them explicitly)."""
    global _MEMORY, _DISK
    with _LOCK:
        if memory_bytes is not None:
            _MEMORY = MemoryCache(memory_bytes)
        if disk_bytes is not None or disk_dir is not None:
            directory = disk_dir or os.path.join(tempfile.gettempdir(), f"millpond-cache-{os.getuid()}")
            _DISK = DiskCache(directory, disk_bytes if disk_bytes is not None else 4 << 30)

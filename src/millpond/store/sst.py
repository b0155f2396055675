"""SSTs: immutable sorted runs of state rows, one Arrow IPC file each.

Every row carries ``_kh`` (the 64-bit hash of the row's distribution key, computed by Spark's
``xxhash64``) and ``_del`` (tombstone); a file is sorted by ``_kh``, so a batched multi-get
is one ``searchsorted`` per file. A row's vnode is ``_kh mod VNODES``; the set of vnodes a file
holds is recorded with it (``SstRef.vnodes``) so reads skip files of other vnodes.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import polars as pl
import pyarrow as pa

from millpond.errors import StorageError
from millpond.store.objects import ObjectStore

__all__ = ["VNODES", "SstRef", "vnodes_of", "vnode_bitmap", "write_sst", "read_sst"]

VNODES = 256
KH = "_kh"
DEL = "_del"


@dataclass(frozen=True)
class SstRef:
    """A committed SST: object key, the epoch that wrote it, the vnodes it holds (bitmap hex)."""

    key: str
    epoch: int
    vnodes: str

    def mask(self) -> np.ndarray:
        return _mask(self.vnodes)

    def to_json(self) -> list:
        return [self.key, self.epoch, self.vnodes]

    @classmethod
    def from_json(cls, raw: list) -> "SstRef":
        return cls(key=raw[0], epoch=int(raw[1]), vnodes=raw[2])


@lru_cache(maxsize=65536)
def _mask(vnodes_hex: str) -> np.ndarray:
    mask = np.unpackbits(np.frombuffer(bytes.fromhex(vnodes_hex), dtype=np.uint8)).astype(bool)
    mask.flags.writeable = False  # shared between callers
    return mask


def vnodes_of(kh: np.ndarray) -> np.ndarray:
    """Spark's ``pmod(_kh, VNODES)``."""
    return np.mod(kh, VNODES)


def vnode_bitmap(kh: np.ndarray) -> np.ndarray:
    mask = np.zeros(VNODES, dtype=bool)
    mask[vnodes_of(kh)] = True
    return mask


def bitmap_hex(mask: np.ndarray) -> str:
    return np.packbits(mask).tobytes().hex()


def write_sst(store: ObjectStore, key: str, rows: pl.DataFrame) -> None:
    """Write ``rows`` (with ``_kh`` and ``_del``) sorted by ``_kh``; deterministic bytes."""
    rows = rows.sort(rows.columns, nulls_last=True)  # total order: same input, same file
    table = rows.to_arrow()
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    store.put(key, sink.getvalue())


class _Cache:
    """Per-process cache of decoded SSTs (files are immutable, so entries never go stale)."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.used = 0
        self.entries: OrderedDict[str, tuple[pa.Table, np.ndarray]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, store: ObjectStore, key: str) -> tuple[pa.Table, np.ndarray]:
        cache_key = f"{store.root}|{key}"
        with self.lock:
            hit = self.entries.get(cache_key)
            if hit is not None:
                self.entries.move_to_end(cache_key)
                return hit
        data = store.get(key)
        try:
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        except pa.ArrowInvalid as exc:
            raise StorageError(f"SST {key!r} under {store.root!r} is corrupt: {exc}") from exc
        kh = table.column(KH).to_numpy()
        with self.lock:
            self.entries[cache_key] = (table, kh)
            self.used += table.nbytes
            while self.used > self.budget and len(self.entries) > 1:
                _, (old, _) = self.entries.popitem(last=False)
                self.used -= old.nbytes
        return table, kh


# Per Spark worker process; MILLPOND_SST_CACHE_BYTES overrides the default of 1 GiB.
_CACHE = _Cache(budget_bytes=int(os.environ.get("MILLPOND_SST_CACHE_BYTES", 1 << 30)))


def read_sst(store: ObjectStore, key: str) -> tuple[pa.Table, np.ndarray]:
    """The decoded table of an SST and its ``_kh`` column as numpy (cached)."""
    return _CACHE.get(store, key)


def take_ranges(sorted_kh: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row indices of ``sorted_kh`` equal to any of ``wanted`` (vectorized)."""
    lo = np.searchsorted(sorted_kh, wanted, side="left")
    hi = np.searchsorted(sorted_kh, wanted, side="right")
    lengths = hi - lo
    keep = lengths > 0
    lo, lengths = lo[keep], lengths[keep]
    if lengths.size == 0:
        return np.empty(0, dtype=np.int64)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return starts + np.arange(lengths.sum())

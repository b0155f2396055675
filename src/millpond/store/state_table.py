"""Reads of one state table at a committed epoch: merge its SSTs newest-first.

A state table's rows are identified by ``_kh`` plus its key columns; the newest version of a
key wins and a tombstone (``_del``) hides the key. An *additive* table (a multiset, e.g. join
state) instead stores count deltas in ``_count`` and a read sums them across files, so a
writer never has to read a row before changing its count. Reads take the SST list of the manifest the
reader is pinned to, so a read at epoch ``e`` never sees files written after ``e``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from millpond.errors import InvariantError
from millpond.store.objects import ObjectStore
from millpond.store.sst import DEL, KH, SstRef, bitmap_hex, read_sst, take_ranges, vnode_bitmap, write_sst

__all__ = ["StateTable", "write_state"]

COUNT = "_count"

_EPOCH = "__epoch"


@dataclass(frozen=True)
class StateTable:
    """A view of one state table: its SSTs at some committed epoch and its key columns."""

    store: ObjectStore
    ssts: Sequence[SstRef]
    key_columns: Sequence[str]
    additive: bool = False

    def lookup(self, kh: np.ndarray) -> pl.DataFrame | None:
        """All live rows whose ``_kh`` is in ``kh`` (batched multi-get); None if no state."""
        if kh.size == 0 or not self.ssts:
            return None
        wanted = np.unique(kh)
        mask = vnode_bitmap(wanted)
        parts = []
        for ref in self.ssts:
            if not (ref.mask() & mask).any():
                continue
            table, file_kh = read_sst(self.store, ref.key)
            idx = take_ranges(file_kh, wanted)
            if idx.size:
                parts.append(_tagged(table.take(pa.array(idx)), ref.epoch))
        return self._merge(parts)

    def scan(self) -> pl.DataFrame | None:
        """Every live row (a full snapshot; used by SELECT, never by operators)."""
        parts = [_tagged(read_sst(self.store, ref.key)[0], ref.epoch) for ref in self.ssts]
        return self._merge(parts)

    def _merge(self, parts: list[pl.DataFrame]) -> pl.DataFrame | None:
        if not parts:
            return None
        merged = pl.concat(parts, how="vertical_relaxed")
        if self.additive:
            keys = [KH, *self.key_columns]
            merged = merged.group_by(keys, maintain_order=True).agg(pl.col(COUNT).sum())
            if merged.filter(pl.col(COUNT) < 0).height:
                raise InvariantError(f"state {self.ssts[0].key.rsplit('/', 2)[-2]}: a row's count is negative")
            return merged.filter(pl.col(COUNT) > 0)
        if len(parts) > 1:
            merged = merged.sort(_EPOCH, descending=True, maintain_order=True).unique(
                subset=[KH, *self.key_columns], keep="first", maintain_order=True
            )
        return merged.filter(~pl.col(DEL)).drop(_EPOCH, DEL)


def _tagged(table: pa.Table, epoch: int) -> pl.DataFrame:
    return pl.from_arrow(table).with_columns(pl.lit(epoch, dtype=pl.Int64).alias(_EPOCH))


def write_state(store: ObjectStore, key_for_bitmap: Callable[[str], str], rows: pl.DataFrame) -> str | None:
    """Write a task's state delta (puts and tombstones) as one SST named by ``key_for_bitmap``
    of its vnode bitmap; return the key (None when there is nothing to write)."""
    if rows.height == 0:
        return None
    mask = vnode_bitmap(rows[KH].to_numpy())
    key = key_for_bitmap(bitmap_hex(mask))
    write_sst(store, key, rows)
    return key

"""Reads of one state table at an epoch: merge its levels of SSTs.

A state table's rows are identified by ``_kh`` plus its key columns, and every row carries the
epoch that wrote it (``_ep``). Two kinds of table:

- *newest wins*: the version with the largest ``_ep`` (at or below the read epoch) is the row;
  a tombstone (``_del``) hides the key;
- *additive* (a multiset, e.g. join state): rows hold count deltas in ``_count`` and a read sums
  them, so a writer never reads a row before changing its count.

A read at epoch ``e`` ignores rows written after ``e`` (time travel within the retained epochs:
the manifest's ``safe_epoch`` is the oldest readable one). Within L0 every file is probed; in
each deeper level one binary search over the files' first keys maps every wanted key to the one
file that can hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from millpond.columns import COUNT, DEL, EP, KH
from millpond.errors import InvariantError, MillpondError
from millpond.defaults import filled
from millpond.store.manifest import Levels
from millpond.store.objects import ObjectStore
from millpond.store.sst import SstRef, lookup_sst, open_sst, scan_sst, vnode_bitmap, write_sst

__all__ = ["StateTable", "write_state"]


@dataclass(frozen=True)
class StateTable:
    """A view of one state table: its levels at some committed version, its key columns."""

    store: ObjectStore
    levels: Levels
    key_columns: Sequence[str]
    additive: bool = False
    epoch: int | None = None  # read as of this epoch (None: everything in the version)
    name: str = "state"
    buffered: tuple[pa.Table, ...] = ()  # a writer's uncommitted rows (shared buffer), with ``_ep``
    summed: bool = True  # an additive read gives equal rows as one; False: a row's copies may come apart
    # columns older files lack (a table's, added since), filled with their defaults (millpond.defaults.fill)
    defaults: tuple[pa.Field, ...] = ()

    def lookup(self, kh: np.ndarray) -> pl.DataFrame | None:
        """All live rows whose ``_kh`` is in ``kh`` (batched multi-get); None if no state."""
        if kh.size == 0 or not (self.levels or self.buffered):
            return None
        wanted = np.unique(kh)
        mask = vnode_bitmap(wanted)
        keys = pa.array(wanted)
        parts = [t.filter(pc.is_in(t.column(KH), keys)) for t in self.buffered]
        for ref in self.levels.l0:
            if self._visible(ref) and (ref.mask() & mask).any():
                parts.append(lookup_sst(self.store, ref, wanted))
        for level, starts in zip(self.levels.levels, self.levels.starts):
            if not level:
                continue
            which = np.searchsorted(starts, wanted, side="right") - 1
            for i in np.unique(which[which >= 0]).tolist():  # per file, not per key
                if self._visible(level[i]):
                    parts.append(lookup_sst(self.store, level[i], wanted[which == i]))
        return self._merge([self._fit(p) for p in parts])

    def scan(self, lo: int | None = None, hi: int | None = None) -> pl.DataFrame | None:
        """Every live row with ``lo <= _kh < hi`` (bounds optional): a snapshot or range read."""
        if self._unsummed():
            rows = self.scan_arrow(lo, hi)
            return None if rows is None else pl.from_arrow(rows)
        return self._merge(self._parts(lo, hi))

    def scan_arrow(self, lo: int | None = None, hi: int | None = None, *,
                   keep: Callable[[pa.Table], pa.Table] | None = None) -> pa.Table | None:
        """:meth:`scan` as Arrow. An unsummed read (``summed=False``) whose every count is positive
        is the multiset already, its copies of a row perhaps apart (in two files): its columns are
        neither summed nor converted (a scan of a table's rows state, 6M rows of 16 columns: the
        sums and the round trip through polars were 7.5 of 9 s). A count of 0 or less nets against
        another: then only the rows of those key hashes are summed (a table after a DELETE of 6,000
        of its 6M rows: a slice's 500,000 rows were summed, 0.9 of a 4.5 s DELETE). ``keep``: the
        rows a reader wants, taken before they are netted — a filter on the rows' values, the same
        of a row and of its retraction, applied to all of the range's rows at once (so it keeps both
        or neither, even when it chooses to keep all)."""
        parts = self._parts(lo, hi)
        if self._unsummed():
            kept = {KH, COUNT, *self.key_columns}
            parts = [p.select([c for c in p.column_names if c in kept]) for p in parts if p is not None and p.num_rows]
            if not parts:
                return None
            rows = pa.concat_tables(parts, promote_options="permissive")
            if keep is not None:
                rows = keep(rows)
                if not rows.num_rows:
                    return None
            counts = rows.column(COUNT).to_numpy()
            if counts.min() > 0:
                return rows
            kh = rows.column(KH).to_numpy()  # (numpy: Arrow's kernels over thousands of blocks' chunks were 10x slower)
            negative = np.unique(kh[counts <= 0])
            netted = negative[np.minimum(np.searchsorted(negative, kh), negative.size - 1)] == kh
            rows = rows.combine_chunks()
            summed = self._merge([rows.filter(netted)])
            rows = rows.filter(~netted)
            if summed is None:
                return rows if rows.num_rows else None
            return pa.concat_tables([rows, summed.to_arrow().select(rows.column_names).cast(rows.schema)])
        merged = self._merge(parts)
        if merged is None:
            return None
        return merged.to_arrow() if keep is None else keep(merged.to_arrow())

    def _parts(self, lo: int | None, hi: int | None) -> list[pa.Table | None]:
        parts = [self._fit(scan_sst(self.store, ref, lo, hi)) for ref in self.levels.files() if self._visible(ref)]
        for t in self.buffered:
            kh = t.column(KH)
            keep = pc.and_(pc.greater_equal(kh, lo if lo is not None else -(1 << 63)),
                           pc.less(kh, hi) if hi is not None else pc.is_valid(kh))
            parts.append(t.filter(keep))
        return parts

    def _fit(self, part: pa.Table | None) -> pa.Table | None:
        return filled(part, self.defaults) if part is not None and self.defaults else part

    def sample(self, rows: int) -> tuple[pa.Table | None, float]:
        """About ``rows`` of the stored rows — those of the slice of the key-hash space that holds
        that share of them, a random sample of the keys — and the share read (None, 0: no rows)."""
        stored = sum(ref.rows for ref in self.levels.files() if self._visible(ref))
        if not stored:
            return None, 0.0
        width = (1 << 64) * rows // stored
        if width >= (1 << 64):
            return self.scan_arrow(), 1.0
        return self.scan_arrow(None, -(1 << 63) + width), width / (1 << 64)

    def bounds(self, column: str) -> tuple[int, int] | None:
        """The least and greatest value integer ``column`` has in any stored row (older versions and
        tombstones included: every live value lies within), from the files' footers, no block read;
        ``(0, -1)`` (empty) when no row has a value; None when a file did not record it (an older format)."""
        lows, highs = [], []
        for ref in self.levels.files():
            if not self._visible(ref):
                continue
            bounds = open_sst(self.store, ref).bounds
            if bounds is None:
                return None
            if column in bounds:
                lows.append(bounds[column][0])
                highs.append(bounds[column][1])
        for t in self.buffered:
            if t.num_rows and t.column(column).null_count < t.num_rows:
                low, high = pc.min_max(t.column(column)).values()
                lows.append(low.as_py())
                highs.append(high.as_py())
        return (min(lows), max(highs)) if lows else (0, -1)

    def _unsummed(self) -> bool:
        return self.additive and not self.summed and not self.buffered and self.epoch is None

    def slices(self, rows_per_batch: int = 1_000_000) -> list[tuple[int | None, int | None]]:
        """Bounds ``lo <= _kh < hi`` (None: open) that split the key-hash space into slices of about
        ``rows_per_batch`` stored rows each: a key's versions all fall in one slice, so each slice
        merges on its own and a reader holds one slice at a time, never the whole table."""
        stored = sum(ref.rows for ref in self.levels.files() if self._visible(ref)) + \
            sum(t.num_rows for t in self.buffered)
        n = max(1, -(-stored // rows_per_batch))
        step = (1 << 64) // n
        return [(None if i == 0 else -(1 << 63) + i * step, None if i == n - 1 else -(1 << 63) + (i + 1) * step)
                for i in range(n)]

    def _visible(self, ref: SstRef) -> bool:
        return self.epoch is None or ref.min_ep <= self.epoch

    def _merge(self, parts: list[pa.Table | None]) -> pl.DataFrame | None:
        parts = [p for p in parts if p is not None and p.num_rows]
        if not parts:
            return None
        if self.additive:  # a read's columns only: the rest would be converted, then dropped by the sums
            wanted = {KH, EP, COUNT, *self.key_columns}
            parts = [p.select([c for c in p.column_names if c in wanted]) for p in parts]
        merged = pl.from_arrow(pa.concat_tables(parts, promote_options="permissive"))
        if self.epoch is not None:
            merged = merged.filter(pl.col(EP) <= self.epoch)
        keys = [KH, *self.key_columns]
        if self.additive:
            merged = merged.group_by(keys, maintain_order=True).agg(pl.col(COUNT).sum())
            if merged.filter(pl.col(COUNT) < 0).height:
                raise InvariantError(f"{self.name}: a row's count is negative")
            return merged.filter(pl.col(COUNT) > 0)
        if len(parts) > 1 or merged.height != merged.select(keys).n_unique():
            merged = merged.sort(EP, descending=True, maintain_order=True).unique(
                subset=keys, keep="first", maintain_order=True)
        return merged.filter(~pl.col(DEL)).drop(EP, DEL)


def write_state(store: ObjectStore, key: str, rows: pl.DataFrame, epoch: int, *, keys: Sequence[str],
                additive: bool) -> SstRef | None:
    """Write a task's state delta (puts and tombstones, tagged ``epoch``) as one SST at ``key``;
    return its manifest entry (None when there is nothing to write)."""
    if rows.height == 0:
        return None
    if EP in rows.columns:
        raise MillpondError(f"state rows already carry {EP}")
    return write_sst(store, key, rows.with_columns(pl.lit(epoch, dtype=pl.Int64).alias(EP)), keys=tuple(keys),
                     additive=additive)

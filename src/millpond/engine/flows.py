"""What the engine does for flows beyond running them as consumers: window expiry.

A flow with ``EXPIRE AFTER d`` has a *time key* (its first group key of a time type: the window).
Its *watermark* is the latest window its changes have inserted so far; a window older than
``watermark - d`` has *expired*: its sink row stays as it is, and later changes to it (late rows,
updates, deletes of its rows) are dropped and counted — never merged into another window. The
watermark and the count are committed with the epoch, in the flow's offsets under keys that are
never channel names (:data:`WATERMARK`, :data:`EXPIRED`; also :data:`SINK_OWED`, the coordinator's record
of what a sink is owed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from millpond.columns import W

__all__ = ["SINK_OWED", "WATERMARK", "EXPIRED", "Expiry", "expire", "threshold", "unexpired", "as_micros"]

SINK_OWED = "@sink"  # the last epoch whose changes the flow's sink must receive
WATERMARK = "@watermark"  # microseconds since the epoch (1970) of the latest window inserted
EXPIRED = "@expired"  # changes to expired windows dropped so far (groups, counted once per epoch)


def as_micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A time column (DATE, TIMESTAMP, TIMESTAMPTZ) as float microseconds since 1970 (NULL: NaN)."""
    if pa.types.is_date(column.type):
        column = pc.cast(pc.cast(column, pa.date32()), pa.int32())
        return column.to_numpy(zero_copy_only=False).astype("float64") * 86_400_000_000
    return pc.cast(pc.cast(column, pa.timestamp("us")), pa.int64()).to_numpy(zero_copy_only=False).astype("float64")


@dataclass(frozen=True)
class Expiry:
    """A flow's ``EXPIRE AFTER``: its group keys, the time key among them, the span in microseconds."""

    keys: tuple[str, ...]
    time_key: str
    micros: int


def threshold(done: Mapping[str, int], rule: Expiry) -> float | None:
    """The oldest window not expired, given the flow's committed offsets (None: no watermark yet)."""
    mark = done.get(WATERMARK)
    return None if mark is None else mark - rule.micros


def expire(change: pa.Table, rule: Expiry, done: Mapping[str, int]) -> tuple[pa.Table, dict[str, int]]:
    """``change`` without its changes to expired windows, and the flow's new ``WATERMARK`` and
    ``EXPIRED`` offsets (the watermark first moves to this change's latest inserted window)."""
    t = as_micros(change[rule.time_key])
    inserted = t[(change[W].to_numpy() > 0) & ~np.isnan(t)]
    mark = done.get(WATERMARK)
    if inserted.size:
        mark = int(inserted.max()) if mark is None else max(mark, int(inserted.max()))
    offsets = {EXPIRED: done.get(EXPIRED, 0)}
    if mark is None:
        return change, offsets
    offsets[WATERMARK] = mark
    kept = unexpired(change, rule, mark - rule.micros)
    if kept.num_rows < change.num_rows:
        dropped = pl.from_arrow(change.select(list(rule.keys))).join(
            pl.from_arrow(kept.select(list(rule.keys))), on=list(rule.keys), how="anti", nulls_equal=True)
        offsets[EXPIRED] += dropped.unique().height
    return kept, offsets


def unexpired(change: pa.Table, rule: Expiry, oldest: float) -> pa.Table:
    """The rows of ``change`` whose window is ``oldest`` or later (or NULL)."""
    t = as_micros(change[rule.time_key])
    return change.filter(pa.array(np.isnan(t) | (t >= oldest)))

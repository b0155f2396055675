"""Top-N per partition with retraction: ``ORDER BY ... LIMIT n OFFSET m`` and
``ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) <= n``.

Rows are ranked by the ORDER BY columns, ties broken by the remaining columns, so the first
``K = limit + offset`` rows of a partition form a well-defined multiset.

State:
- ``rows``: every input row (additive multiset keyed by partition hash and all columns), read
  only to refill a partition whose top lost a row;
- ``top``: the current first ``K`` rows of each partition with their copies.

Per touched partition the new top is ``first K of (old top + delta)`` — exact when the delta only
adds rows or removes rows ranked after the K-th (any such row was never in the top), and when the
partition has fewer than K rows (the top is then the whole partition). Only when a retraction
removes a row of a full top is the partition's whole multiset read (a refill). The output is the
change of the emitted slice ``[offset, K)``; with ``row_number`` every emitted row carries its
1-based position, so a row entering at position 1 renumbers the rows below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import polars as pl

from millpond.columns import COUNT, KH, W
from millpond.engine.changelog import consolidate, state_rows
from millpond.engine.operators.base import Part, lookup
from millpond.store.state_table import StateTable

__all__ = ["TopN"]

_BEFORE = "_before"


@dataclass(frozen=True)
class TopN:
    """Top-N per partition (an :class:`~millpond.engine.operators.base.Operator`)."""

    columns: tuple[str, ...]  # every input column (the rows' key)
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool, bool], ...]  # (column, descending, nulls first)
    limit: int
    offset: int
    row_number: str | None
    name: str

    @property
    def keep(self) -> int:
        return self.limit + self.offset

    def parts(self) -> dict[str, Part]:
        return {"rows": Part(self.columns, additive=True), "top": Part(self.columns)}

    def apply(self, delta: pl.DataFrame, states: Mapping[str, StateTable]
              ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
        return _apply(self, delta, states["rows"], states["top"])


def _apply(spec: TopN, delta: pl.DataFrame, rows: StateTable, top: StateTable
           ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    keys = [KH, *spec.columns]
    pkeys = [KH, *spec.partition]
    d = consolidate(delta.select(*keys, W))
    schema = {**{c: d.schema[c] for c in keys}, COUNT: pl.Int64}
    touched = d.select(pkeys).unique()
    old_top = lookup(top, touched, pkeys, schema).rename({COUNT: W})

    # partitions whose full top lost one of its rows: read their whole multiset
    full = old_top.group_by(pkeys).agg(pl.col(W).sum()).filter(pl.col(W) >= spec.keep).select(pkeys)
    hit = d.filter(pl.col(W) < 0).join(old_top.select(keys), on=keys, how="semi", nulls_equal=True).select(pkeys)
    refill = hit.unique().join(full, on=pkeys, how="semi", nulls_equal=True)
    base = old_top
    if refill.height:
        everything = lookup(rows, refill, pkeys, schema).rename({COUNT: W})
        base = pl.concat([old_top.join(refill, on=pkeys, how="anti", nulls_equal=True), everything])
    candidates = consolidate(pl.concat([base, d])).filter(pl.col(W) > 0)
    new_top = _ranked(spec, candidates).filter(pl.col(_BEFORE) < spec.keep).with_columns(
        pl.min_horizontal(pl.col(W), spec.keep - pl.col(_BEFORE)).alias(W)).drop(_BEFORE)

    out = consolidate(pl.concat([_emitted(spec, new_top), _emitted(spec, old_top).with_columns(-pl.col(W))]))
    gone = old_top.join(new_top, on=keys, how="anti", nulls_equal=True).with_columns(pl.lit(0, pl.Int64).alias(W))
    writes = {
        "rows": state_rows(d.rename({W: COUNT}), live=pl.lit(True)),
        "top": state_rows(pl.concat([new_top, gone]).rename({W: COUNT}), live=pl.col(COUNT) > 0),
    }
    return out, writes


def _ranked(spec: TopN, df: pl.DataFrame) -> pl.DataFrame:
    """``df`` sorted in rank order per partition, with ``_before`` = copies ranked ahead of a row."""
    ordered = [c for c, _, _ in spec.order]
    ties = [c for c in spec.columns if c not in ordered and c not in spec.partition]
    by = [KH, *spec.partition, *ordered, *ties]
    desc = [False] * (1 + len(spec.partition)) + [d for _, d, _ in spec.order] + [False] * len(ties)
    nulls_last = [True] * (1 + len(spec.partition)) + [not nf for _, _, nf in spec.order] + [True] * len(ties)
    pkeys = [KH, *spec.partition]
    return df.sort(by, descending=desc, nulls_last=nulls_last, maintain_order=True).with_columns(
        (pl.col(W).cum_sum().over(pkeys) - pl.col(W)).alias(_BEFORE))


def _emitted(spec: TopN, top: pl.DataFrame) -> pl.DataFrame:
    """The output rows of a partition's top: the copies at positions ``[offset, K)``."""
    r = _ranked(spec, top)
    lo = pl.max_horizontal(pl.col(_BEFORE), pl.lit(spec.offset))
    hi = pl.min_horizontal(pl.col(_BEFORE) + pl.col(W), pl.lit(spec.keep))
    r = r.with_columns((hi - lo).alias("_n"), lo.alias("_lo")).filter(pl.col("_n") > 0)
    if spec.row_number is None:
        return r.select(*spec.columns, pl.col("_n").alias(W))
    r = r.with_columns(pl.int_ranges(pl.col("_lo"), pl.col("_lo") + pl.col("_n")).alias("_pos")).explode("_pos")
    return r.select(*spec.columns, (pl.col("_pos") + 1).cast(pl.Int64).alias(spec.row_number),
                    pl.lit(1, pl.Int64).alias(W))


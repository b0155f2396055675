"""Changelogs are Z-sets: rows plus an integer weight ``_w``; consolidation is sort-and-sum."""

from __future__ import annotations

import polars as pl

from millpond.columns import DEL, W

__all__ = ["consolidate", "settle", "state_rows"]


def consolidate(df: pl.DataFrame, weight: str = W) -> pl.DataFrame:
    """Sum the weights of equal rows and drop rows whose weight is zero (in no particular order:
    keeping the input's order costs twice the time)."""
    keys = [c for c in df.columns if c != weight]
    if df.height == 0:
        return df
    return (
        df.group_by(keys)
        .agg(pl.col(weight).sum())
        .filter(pl.col(weight) != 0)
        .select(df.columns)
    )


def settle(df: pl.DataFrame, weight: str = W) -> pl.DataFrame:
    """``df`` consolidated if it retracts anything; else as it is, without zero weights. A changelog
    of inserts only is already a Z-set whose equal rows count by their copies, and every operator
    is linear in its input (its state is additive or keyed): consolidating it would only merge
    duplicates, at the cost of a group-by over every column (the most of a big epoch's join step)."""
    low = df[weight].min() if df.height else None
    if low is None or low > 0:
        return df
    if low == 0:
        return df.filter(pl.col(weight) != 0)
    return consolidate(df, weight)


def state_rows(rows: pl.DataFrame, *, live: pl.Expr) -> pl.DataFrame:
    """State writes: every row of ``rows`` is a put where ``live`` holds, else a tombstone."""
    return rows.with_columns(live.not_().alias(DEL))


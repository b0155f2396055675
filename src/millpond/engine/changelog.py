"""Changelogs are Z-sets: rows plus an integer weight ``_w``; consolidation is sort-and-sum."""

from __future__ import annotations

import polars as pl

from millpond.columns import DEL, W

__all__ = ["consolidate", "state_rows"]


def consolidate(df: pl.DataFrame, weight: str = W) -> pl.DataFrame:
    """Sum the weights of equal rows and drop rows whose weight is zero."""
    keys = [c for c in df.columns if c != weight]
    if df.height == 0:
        return df
    return (
        df.group_by(keys, maintain_order=True)
        .agg(pl.col(weight).sum())
        .filter(pl.col(weight) != 0)
        .select(df.columns)
    )


def state_rows(rows: pl.DataFrame, *, live: pl.Expr) -> pl.DataFrame:
    """State writes: every row of ``rows`` is a put where ``live`` holds, else a tombstone."""
    return rows.with_columns(live.not_().alias(DEL))


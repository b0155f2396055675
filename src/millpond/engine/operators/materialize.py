"""Materialize: keeps a view's (or table's) rows by key so they can be read at any committed
epoch. The rows are a multiset keyed by all columns (``_count`` copies); its output is the
consolidated changelog of the view. A retraction of a row that is not there is an invariant
violation and fails the epoch rather than corrupting the view."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from millpond.engine.changelog import COUNT, KH, W, consolidate, state_rows
from millpond.errors import InvariantError
from millpond.store.state_table import StateTable

__all__ = ["MaterializeSpec", "apply_materialize"]


@dataclass(frozen=True)
class MaterializeSpec:
    columns: tuple[str, ...]
    name: str


def apply_materialize(spec: MaterializeSpec, delta: pl.DataFrame, rows: StateTable
                      ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    keys = [KH, *spec.columns]
    d = consolidate(delta.select(*keys, W))
    found = rows.lookup(d[KH].unique().to_numpy())
    schema = {**{c: d.schema[c] for c in keys}, COUNT: pl.Int64}
    old = pl.DataFrame(schema=schema) if found is None else found.select(list(schema)).cast(schema)
    merged = d.join(old, on=keys, how="left", nulls_equal=True).with_columns(
        (pl.col(COUNT).fill_null(0) + pl.col(W)).alias(COUNT))
    bad = merged.filter(pl.col(COUNT) < 0)
    if bad.height:
        raise InvariantError(f"{spec.name}: retraction of a row that is not there: {bad.row(0, named=True)}")
    writes = {"rows": state_rows(merged.drop(W), live=pl.col(COUNT) > 0)}
    return d.drop(KH), writes

"""Materialize: keeps a view's (or table's) rows by key so they can be read at any committed
epoch. The rows are an additive multiset keyed by all columns: each epoch writes only its
consolidated delta as ``_count`` changes and a read sums them (see ``store/state_table.py``), so
inserts never read state. Only the rows an epoch retracts are looked up: a retraction of a row
that is not there is an invariant violation and fails the epoch rather than corrupting the view.
The output is the consolidated changelog of the view."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from millpond.columns import COUNT, KH, W
from millpond.engine.changelog import consolidate, state_rows
from millpond.errors import InvariantError
from millpond.store.state_table import StateTable

__all__ = ["MaterializeSpec", "apply_materialize", "ADDITIVE"]

ADDITIVE = frozenset({"rows"})


@dataclass(frozen=True)
class MaterializeSpec:
    columns: tuple[str, ...]
    name: str


def apply_materialize(spec: MaterializeSpec, delta: pl.DataFrame, rows: StateTable
                      ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    keys = [KH, *spec.columns]
    d = consolidate(delta.select(*keys, W))
    retracted = d.filter(pl.col(W) < 0)
    if retracted.height:
        found = rows.lookup(retracted[KH].unique().to_numpy())
        schema = {**{c: d.schema[c] for c in keys}, COUNT: pl.Int64}
        old = pl.DataFrame(schema=schema) if found is None else found.select(list(schema)).cast(schema)
        bad = retracted.join(old, on=keys, how="left", nulls_equal=True).filter(
            pl.col(COUNT).fill_null(0) + pl.col(W) < 0)
        if bad.height:
            raise InvariantError(f"{spec.name}: retraction of a row that is not there: "
                                 f"{bad.drop(KH, COUNT).row(0, named=True)}")
    return d.drop(KH), {"rows": state_rows(d.rename({W: COUNT}), live=pl.lit(True))}

"""Inner hash join with full state on both sides.

For a delta ``dL``/``dR`` and state ``L``/``R`` at the previous epoch, the output is
``dL ⋈ R + (L + dL) ⋈ dR`` (the bilinear rule of DBSP): correct for any mix of inserts and
deletes on both sides in one epoch. Each side's state is a multiset of rows keyed by
(join key, whole row) with a ``_count``; a row whose count reaches zero becomes a tombstone.

Delta layout: ``_side`` (0 left, 1 right), ``_kh`` (hash of the join key), the key columns
``_k0..``, the left columns, the right columns (the other side's are null), ``_w``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from millpond.engine.changelog import COUNT, KH, W, consolidate, state_rows
from millpond.errors import InvariantError
from millpond.store.state_table import StateTable

__all__ = ["JoinSpec", "apply_join"]

SIDE = "_side"


@dataclass(frozen=True)
class JoinSpec:
    key_columns: tuple[str, ...]  # _k0.. (already cast to a common type on both sides)
    left_columns: tuple[str, ...]
    right_columns: tuple[str, ...]
    name: str  # for error messages


def apply_join(spec: JoinSpec, delta: pl.DataFrame, left: StateTable, right: StateTable
               ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    keys = [KH, *spec.key_columns]
    no_null_key = pl.all_horizontal(pl.col(k).is_not_null() for k in spec.key_columns)
    delta = delta.filter(no_null_key)  # NULL never equals anything: such rows cannot match
    sides = {}
    for side, cols in ((0, spec.left_columns), (1, spec.right_columns)):
        part = delta.filter(pl.col(SIDE) == side).select(*keys, *cols, W)
        sides[side] = consolidate(part)
    kh = delta[KH].unique().to_numpy()
    writes, old_state, new_state = {}, {}, {}
    for side, table, cols, label in ((0, left, spec.left_columns, "left"), (1, right, spec.right_columns, "right")):
        d = sides[side]
        old = old_state[side] = _old_state(table, kh, d, keys, cols)
        merged = old.join(d, on=[*keys, *cols], how="full", coalesce=True, nulls_equal=True)
        merged = merged.with_columns((pl.col(COUNT).fill_null(0) + pl.col(W).fill_null(0)).alias(COUNT))
        if merged.filter(pl.col(COUNT) < 0).height:
            raise InvariantError(f"join {spec.name}: {label} side retracts a row it never saw")
        touched = merged.filter(pl.col(W).is_not_null()).drop(W)
        writes[label] = state_rows(touched, live=pl.col(COUNT) > 0)
        new_state[side] = merged.filter(pl.col(COUNT) > 0).drop(W)
    out_left = sides[0].join(old_state[1], on=keys, how="inner").with_columns((pl.col(W) * pl.col(COUNT)).alias(W))
    out_right = new_state[0].join(sides[1], on=keys, how="inner").with_columns((pl.col(W) * pl.col(COUNT)).alias(W))
    cols = [*spec.left_columns, *spec.right_columns, W]
    out = consolidate(pl.concat([out_left.select(cols), out_right.select(cols)], how="vertical_relaxed"))
    return out, writes


def _old_state(table: StateTable, kh, like: pl.DataFrame, keys: list[str], cols: tuple[str, ...]) -> pl.DataFrame:  # noqa: ANN001
    found = table.lookup(kh)
    schema = {**{c: like.schema[c] for c in (*keys, *cols)}, COUNT: pl.Int64}
    if found is None:
        return pl.DataFrame(schema=schema)
    return found.select(list(schema)).cast(schema)

"""Inner hash join with full state on both sides.

For a delta ``dL``/``dR`` and state ``L``/``R`` at the previous epoch, the output is
``dL ⋈ R + (L + dL) ⋈ dR`` (the bilinear rule of DBSP): correct for any mix of inserts and
deletes on both sides in one epoch. Each side's state is a multiset of rows keyed by
(join key, whole row) kept as an *additive* state table: the epoch writes each side's delta as
count changes, so the work is reading the matches the output needs and nothing more — a new
visit reads the one ``info`` row it joins with, never the other visits of that product.

Delta layout: ``_side`` (0 left, 1 right), ``_kh`` (hash of the join key), the key columns
``_k0..``, the left columns, the right columns (the other side's are null), ``_w``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from millpond.engine.changelog import COUNT, KH, W, consolidate, state_rows
from millpond.store.state_table import StateTable

__all__ = ["JoinSpec", "apply_join", "SIDE"]

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
    dl = consolidate(delta.filter(pl.col(SIDE) == 0).select(*keys, *spec.left_columns, W))
    dr = consolidate(delta.filter(pl.col(SIDE) == 1).select(*keys, *spec.right_columns, W))

    # dL ⋈ R: the right rows matching the left delta's keys, at the previous epoch
    old_right = _lookup(right, dl, dr, keys, spec.right_columns)
    out_left = dl.join(old_right, on=keys, how="inner").with_columns((pl.col(W) * pl.col(COUNT)).alias(W))
    # (L + dL) ⋈ dR: the left rows matching the right delta's keys, with this epoch's changes
    old_left = _lookup(left, dr, dl, keys, spec.left_columns)
    new_left = consolidate(pl.concat([old_left.rename({COUNT: W}),
                                      dl.join(dr.select(keys).unique(), on=keys, how="semi")]))
    out_right = new_left.rename({W: COUNT}).join(dr, on=keys, how="inner").with_columns(
        (pl.col(W) * pl.col(COUNT)).alias(W))

    cols = [*spec.left_columns, *spec.right_columns, W]
    out = consolidate(pl.concat([out_left.select(cols), out_right.select(cols)], how="vertical_relaxed"))
    writes = {label: state_rows(d.rename({W: COUNT}), live=pl.lit(True)) for label, d in (("left", dl), ("right", dr))}
    return out, writes


def _lookup(table: StateTable, probe: pl.DataFrame, other: pl.DataFrame, keys: list[str], cols: tuple[str, ...]
            ) -> pl.DataFrame:
    """State rows of ``table`` whose join key is in ``probe`` (typed like ``other``'s side)."""
    schema = {**{c: other.schema[c] for c in (*keys, *cols)}, COUNT: pl.Int64}
    found = table.lookup(probe[KH].unique().to_numpy()) if probe.height else None
    if found is None:
        return pl.DataFrame(schema=schema)
    return found.select(list(schema)).cast(schema).join(probe.select(keys).unique(), on=keys, how="semi")


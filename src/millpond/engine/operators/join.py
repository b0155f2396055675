"""Hash joins (inner, left, right, full outer) with full state on both sides.

For a delta ``dL``/``dR`` and state ``L``/``R`` at the previous epoch, the output is
``dL ⋈ R + (L + dL) ⋈ dR`` (the bilinear rule of DBSP): correct for any mix of inserts and
deletes on both sides in one epoch. Each side's state is a multiset of rows keyed by
(join key, whole row) kept as an *additive* state table: the epoch writes each side's delta as
count changes, so the work is reading the matches the output needs and nothing more — a new
visit reads the one ``info`` row it joins with, never the other visits of that product.

Outer joins add NULL-padded rows that appear and disappear as matches come and go. A left
join is linear in its left input for a fixed right input, so a join key touched only by the
left delta costs ``LEFT(dL, R_k)`` — the same reads as the inner join. A key whose right side
changed (and every touched key of a full join) is recomputed: ``J(L_k + dL_k, R_k + dR_k) -
J(L_k, R_k)``, reading both sides' rows for that key only (right joins mirror this). The join
itself, with any extra ON condition (``residual``), runs in DuckDB over the key's rows with their
multiplicities. Rows whose key is NULL never match: a preserved side emits them padded and they
are not stored.

Delta layout: ``_side`` (0 left, 1 right), ``_kh`` (hash of the join key), the key columns
``_k0..``, the left columns, the right columns (the other side's are null), ``_w``.

**Shared sides.** A side may be read from an index instead (``CREATE INDEX``; seed 002's shared
arrangements): :class:`Arrange` keeps a table's rows in exactly a side's format, keyed by the
index's columns and holding the table's own column names, once for every view that joins the
table on them. The join then reads that side's rows at the previous epoch from the index (renamed
to its own column names) and writes none: the index's own consumer applies the table's delta in
the same epoch. This is exact while the view and the index have read the table up to the same
offset, which the epoch checks (:mod:`millpond.spark.build`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import polars as pl

from millpond import duck
from millpond.catalog.types import arrow_type
from millpond.columns import COUNT, KH, W
from millpond.engine.changelog import consolidate, settle, state_rows
from millpond.engine.operators.base import Part, lookup
from millpond.pyfunctions import Spec
from millpond.store.state_table import StateTable

__all__ = ["HashJoin", "Arrange", "SIDE"]

SIDE = "_side"


@dataclass(frozen=True)
class HashJoin:
    """An equi-join with both sides' rows as additive state (an
    :class:`~millpond.engine.operators.base.Operator`)."""

    key_columns: tuple[str, ...]  # _k0.. (already cast to a common type on both sides)
    left_columns: tuple[str, ...]
    right_columns: tuple[str, ...]
    name: str  # for error messages
    kind: str = "inner"  # inner | left | right | full
    residual: str | None = None  # DuckDB SQL over the columns of both sides (outer joins only)
    functions: tuple[tuple[str, str], ...] = ()  # the Python functions it calls: (encoded Spec, error mode)
    # per side: None (its own state), or the index's column each of the side's columns is (a shared side)
    left_shared: tuple[str, ...] | None = None
    right_shared: tuple[str, ...] | None = None

    def parts(self) -> dict[str, Part]:
        return {"left": Part((*self.key_columns, *(self.left_shared or self.left_columns)), additive=True),
                "right": Part((*self.key_columns, *(self.right_shared or self.right_columns)), additive=True)}

    def apply(self, delta: pl.DataFrame, states: Mapping[str, StateTable]
              ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
        left, right = (_Shared(states["left"], self.left_columns, self.left_shared),
                       _Shared(states["right"], self.right_columns, self.right_shared))
        out, writes = _apply(self, delta, left, right)
        return out, {k: v for k, v in writes.items() if getattr(self, f"{k}_shared") is None}


@dataclass(frozen=True)
class Arrange:
    """An index's rows: a table's delta written as a :class:`HashJoin` side's state, keyed by the
    index's columns (``_k0..``, their hash in ``_kh``) and holding the table's ``columns``. Rows
    whose key is NULL are not kept (they never match). Emits nothing."""

    key_columns: tuple[str, ...]
    columns: tuple[str, ...]
    name: str

    def parts(self) -> dict[str, Part]:
        return {"rows": Part((*self.key_columns, *self.columns), additive=True)}

    def apply(self, delta: pl.DataFrame, states: Mapping[str, StateTable]
              ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
        rows = settle(delta.filter(pl.all_horizontal(pl.col(k).is_not_null() for k in self.key_columns))
                           .select(KH, *self.key_columns, *self.columns, W))
        return delta.head(0).select(W), {"rows": state_rows(rows.rename({W: COUNT}), live=pl.lit(True))}


@dataclass(frozen=True)
class _Shared:
    """One side's state as the join reads it: its own, or an index's under the side's column names
    (several index rows may be one side row when the side reads fewer columns: their counts add)."""

    table: StateTable
    columns: tuple[str, ...]
    stored: tuple[str, ...] | None

    def read(self, probe: pl.DataFrame, keys: list[str], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
        if self.stored is None:
            return lookup(self.table, probe, keys, schema)
        renames = dict(zip(self.columns, self.stored))
        found = lookup(self.table, probe, keys, {renames.get(c, c): t for c, t in schema.items()})
        found = found.rename({s: c for c, s in renames.items()})
        return found.group_by([c for c in schema if c != COUNT]).agg(pl.col(COUNT).sum()).select(list(schema))


def _apply(spec: HashJoin, delta: pl.DataFrame, left: _Shared, right: _Shared
           ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    if spec.kind != "inner" or spec.residual:
        return _apply_outer(spec, delta, left, right)
    keys = [KH, *spec.key_columns]
    no_null_key = pl.all_horizontal(pl.col(k).is_not_null() for k in spec.key_columns) if spec.key_columns \
        else pl.lit(True)
    delta = delta.filter(no_null_key)  # NULL never equals anything: such rows cannot match
    dl = settle(delta.filter(pl.col(SIDE) == 0).select(*keys, *spec.left_columns, W))
    dr = settle(delta.filter(pl.col(SIDE) == 1).select(*keys, *spec.right_columns, W))

    # dL ⋈ R: the right rows matching the left delta's keys, at the previous epoch
    old_right = _side(right, dl, dr, keys, spec.right_columns)
    out_left = dl.join(old_right, on=keys, how="inner").with_columns((pl.col(W) * pl.col(COUNT)).alias(W))
    # (L + dL) ⋈ dR: the left rows matching the right delta's keys, with this epoch's changes
    old_left = _side(left, dr, dl, keys, spec.left_columns)
    new_left = consolidate(pl.concat([old_left.rename({COUNT: W}),
                                      dl.join(dr.select(keys).unique(), on=keys, how="semi")]))
    out_right = new_left.rename({W: COUNT}).join(dr, on=keys, how="inner").with_columns(
        (pl.col(W) * pl.col(COUNT)).alias(W))

    cols = [*spec.left_columns, *spec.right_columns, W]
    out = settle(pl.concat([out_left.select(cols), out_right.select(cols)], how="vertical_relaxed"))
    writes = {label: state_rows(d.rename({W: COUNT}), live=pl.lit(True)) for label, d in (("left", dl), ("right", dr))}
    return out, writes


def _side(table: _Shared, probe: pl.DataFrame, other: pl.DataFrame, keys: list[str], cols: tuple[str, ...]
          ) -> pl.DataFrame:
    """State rows of one side whose join key is in ``probe`` (typed like ``other``, that side's delta)."""
    return table.read(probe, keys, {**{c: other.schema[c] for c in (*keys, *cols)}, COUNT: pl.Int64})


def _apply_outer(spec: HashJoin, delta: pl.DataFrame, left: _Shared, right: _Shared
                 ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    keys = [KH, *spec.key_columns]
    null_key = pl.any_horizontal(pl.col(k).is_null() for k in spec.key_columns) if spec.key_columns else pl.lit(False)
    lcols, rcols = list(spec.left_columns), list(spec.right_columns)
    types = delta.schema
    dl_all = consolidate(delta.filter(pl.col(SIDE) == 0).select(*keys, *lcols, W))
    dr_all = consolidate(delta.filter(pl.col(SIDE) == 1).select(*keys, *rcols, W))
    dl, dr = dl_all.filter(~null_key), dr_all.filter(~null_key)

    parts = []
    if spec.kind in ("left", "full"):
        parts.append(dl_all.filter(null_key).select(*lcols, *[pl.lit(None, types[c]).alias(c) for c in rcols], W))
    if spec.kind in ("right", "full"):
        parts.append(dr_all.filter(null_key).select(*[pl.lit(None, types[c]).alias(c) for c in lcols], *rcols, W))

    lk, rk = dl.select(keys).unique(), dr.select(keys).unique()
    if spec.kind == "left":
        cheap, recompute = lk.join(rk, on=keys, how="anti"), rk
    elif spec.kind == "right":
        cheap, recompute = rk.join(lk, on=keys, how="anti"), lk
    else:
        cheap, recompute = lk.head(0), pl.concat([lk, rk]).unique()
    need_left = pl.concat([recompute, cheap]) if spec.kind == "right" else recompute
    need_right = pl.concat([recompute, cheap]) if spec.kind == "left" else recompute
    old_left = _side(left, need_left, dl, keys, spec.left_columns).rename({COUNT: W})
    old_right = _side(right, need_right, dr, keys, spec.right_columns).rename({COUNT: W})

    def only(df: pl.DataFrame, which: pl.DataFrame) -> pl.DataFrame:
        return df.join(which, on=keys, how="semi")

    if cheap.height:
        if spec.kind == "left":
            parts.append(_join_rows(spec, only(dl, cheap), only(old_right, cheap), types))
        else:
            parts.append(_join_rows(spec, only(old_left, cheap), only(dr, cheap), types))
    if recompute.height:
        l_old, r_old = only(old_left, recompute), only(old_right, recompute)
        l_new = consolidate(pl.concat([l_old, only(dl, recompute)]))
        r_new = consolidate(pl.concat([r_old, only(dr, recompute)]))
        before = _join_rows(spec, l_old, r_old, types)
        parts += [_join_rows(spec, l_new, r_new, types), before.with_columns(-pl.col(W))]
    cols = [*lcols, *rcols, W]
    out = consolidate(pl.concat([p.select(cols) for p in parts], how="vertical_relaxed")) if parts \
        else pl.DataFrame(schema={c: types[c] for c in cols})
    writes = {label: state_rows(d.rename({W: COUNT}), live=pl.lit(True)) for label, d in (("left", dl), ("right", dr))}
    return out, writes


def _join_rows(spec: HashJoin, left: pl.DataFrame, right: pl.DataFrame, types: pl.Schema) -> pl.DataFrame:
    """``left ⋈ right`` of the spec's kind over weighted rows (weight = product of the matched
    rows' weights; a padded row keeps its own weight), evaluated by DuckDB."""
    lcols, rcols = spec.left_columns, spec.right_columns
    cond = " AND ".join(f"l.{_dq(k)} = r.{_dq(k)}" for k in spec.key_columns) or "TRUE"
    if spec.residual:
        cond = f"{cond} AND ({spec.residual})"
    sql = (f"SELECT {', '.join([*(f'l.{_dq(c)}' for c in lcols), *(f'r.{_dq(c)}' for c in rcols)])}, "
           f"coalesce(l.{W}, 1) * coalesce(r.{W}, 1) AS {W} "
           f"FROM l {spec.kind.upper()} JOIN r ON {cond}")
    for function, mode in spec.functions:  # registered in this process's DuckDB (a Spark worker's)
        decoded = Spec.decode(function)
        duck.python_function(decoded, mode, arrow_type(decoded.returns))
    con = duck.cursor()
    try:
        con.register("l", left.select(*spec.key_columns, *lcols, W).to_arrow())
        con.register("r", right.select(*spec.key_columns, *rcols, W).to_arrow())
        result = pl.from_arrow(con.sql(sql).to_arrow_table())
    finally:
        con.close()
    return result.cast({c: types[c] for c in (*lcols, *rcols)}).with_columns(pl.col(W).cast(pl.Int64))


def _dq(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'

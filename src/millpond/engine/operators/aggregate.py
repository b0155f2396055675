"""Hash aggregation with retraction: COUNT(*), COUNT(x), SUM(x), MIN(x), MAX(x),
COUNT(DISTINCT x), SUM(DISTINCT x), the percentiles PERCENTILE_CONT / PERCENTILE_DISC, and
ARRAY_AGG(x) (the group's multiset of values in order, rebuilt for every changed group).

The delta arrives pre-aggregated by the executor (``spark/build.py``): one row per
(group, min/max arguments) with ``_w`` = sum of weights, ``_s<i>`` = sum of ``x * _w`` for
SUM calls and ``_n<i>`` = sum of weights of non-NULL ``x`` for SUM/COUNT(x) calls. So the work
here is proportional to the number of changed groups.

State:
- ``groups``: one row per group: ``_cnt`` (rows in the group), the running sums and non-NULL
  counts, and ``_o<i>``, the output last emitted (so retracting it needs no recomputation).
- ``values`` (only with MIN/MAX/DISTINCT): the multiset (group, arguments) -> ``_count``, an
  additive table (each epoch writes its delta's counts, reads sum them). MIN/MAX read it only
  for a group where a retraction removes the current extreme and no inserted value reaches it:
  the result then falls back to the next value still in the multiset (full state, as in Flink's
  MAX with retraction); otherwise the new extreme is the old one (``_o<i>``) combined with the
  values inserted. A distinct count is the number of different non-NULL arguments in the
  multiset, read for every changed group; so is a percentile (exact, computed as PostgreSQL
  does from the group's sorted values: no sketch, and a delete retracts exactly).

Over an input that only ever inserts (``append_only``: the planner proves it from APPEND ONLY
tables) MIN and MAX need no multiset: the executor pre-aggregates each group's extreme of the
epoch, and the new result is the extreme of it and the last output. A retraction reaching such
an aggregate is an invariant violation, raised by name.

Output per changed group: ``-old`` (if the group existed) and ``+new`` (if it still has rows),
consolidated so an unchanged result emits nothing. Without GROUP BY (``whole``) the single
group always exists, also with no rows (COUNT 0, other aggregates NULL); Spark adds a
zero-weight row to every epoch's delta so that row is emitted by the first epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import polars as pl

from millpond.columns import COUNT, KH, W
from millpond.engine.changelog import consolidate, settle, state_rows
from millpond.engine.operators.base import Part, lookup
from millpond.engine.plan import AggCall
from millpond.errors import InvariantError
from millpond.store.state_table import StateTable

__all__ = ["HashAggregate", "sum_col", "nonnull_col", "value_col", "VALUE_FUNCS"]

CNT = "_cnt"
VALUE_FUNCS = ("min", "max", "count_distinct", "sum_distinct", "percentile_cont", "percentile_disc", "array_agg")


def sum_col(i: int) -> str:
    return f"_s{i}"


def nonnull_col(i: int) -> str:
    return f"_n{i}"


def value_col(i: int) -> str:
    return f"_m{i}"


def out_col(i: int) -> str:
    return f"_o{i}"


@dataclass(frozen=True)
class HashAggregate:
    """GROUP BY ``group`` computing ``calls`` (an :class:`~millpond.engine.operators.base.Operator`)."""

    group: tuple[str, ...]
    calls: tuple[AggCall, ...]
    name: str
    whole: bool = False
    append_only: bool = False

    def parts(self) -> dict[str, Part]:
        parts = {"groups": Part(self.group)}
        if self.minmax:
            parts["values"] = Part((*self.group, *(value_col(i) for i in self.minmax)), additive=True)
        return parts

    def apply(self, delta: pl.DataFrame, states: Mapping[str, StateTable]
              ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
        return _apply(self, delta, states["groups"], states.get("values"))

    @property
    def minmax(self) -> list[int]:
        """Calls that read the ``values`` multiset."""
        return [i for i, c in enumerate(self.calls) if c.func in VALUE_FUNCS and i not in self.extremes]

    @property
    def extremes(self) -> list[int]:
        """MIN/MAX calls over an append-only input: one value per group, pre-aggregated per epoch."""
        return [i for i, c in enumerate(self.calls) if self.append_only and c.func in ("min", "max")]

    @property
    def running(self) -> list[str]:
        cols = []
        for i, c in enumerate(self.calls):
            if c.func == "sum":
                cols.append(sum_col(i))
            if c.func in ("sum", "count"):
                cols.append(nonnull_col(i))
        return cols


def _apply(spec: HashAggregate, delta: pl.DataFrame, groups: StateTable, values: StateTable | None
           ) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    gkeys = [KH, *spec.group]
    running = spec.running
    if spec.append_only and delta.filter(pl.col(W) < 0).height:
        raise InvariantError(f"aggregate {spec.name}: a retraction reached an aggregate over APPEND ONLY input")
    gd = delta.group_by(gkeys).agg(pl.col(W).sum().alias("_dc"), *[pl.col(c).sum() for c in running],
                                   *[_extreme(spec, i) for i in spec.extremes])

    out_schema = {c: delta.schema[c] for c in gkeys}
    out_types = _output_types(spec, delta)
    state_schema = {**out_schema, CNT: pl.Int64, **{c: delta.schema[c] for c in running},
                    **{out_col(i): t for i, t in enumerate(out_types)}}
    old = lookup(groups, gd, gkeys, state_schema)
    cur = gd.join(old, on=gkeys, how="left", nulls_equal=True, suffix="_old")
    cur = cur.with_columns(
        (pl.col(CNT).fill_null(0) + pl.col("_dc")).alias("_new_cnt"),
        *[(pl.col(f"{c}_old").fill_null(0) + pl.col(c).fill_null(0)).alias(f"_new{c}") for c in running],
    )
    if cur.filter(pl.col("_new_cnt") < 0).height:
        raise InvariantError(f"aggregate {spec.name}: a group's row count went negative")

    horizontal = {"min": pl.min_horizontal, "max": pl.max_horizontal}
    cur = cur.with_columns([horizontal[spec.calls[i].func](pl.col(out_col(i)), pl.col(f"_mm{i}"))
                            .cast(out_types[i]).alias(f"_mm{i}") for i in spec.extremes])
    writes: dict[str, pl.DataFrame] = {}
    if spec.minmax:
        cur, writes["values"] = _apply_minmax(spec, delta, cur, values)

    new_outputs = []
    for i, c in enumerate(spec.calls):
        if c.func == "count_star":
            e = pl.col("_new_cnt")
        elif c.func == "count":
            e = pl.col(f"_new{nonnull_col(i)}")
        elif c.func == "sum":
            e = pl.when(pl.col(f"_new{nonnull_col(i)}") > 0).then(pl.col(f"_new{sum_col(i)}"))
        elif c.func == "count_distinct":
            e = pl.col(f"_mm{i}").fill_null(0)
        else:
            e = pl.col(f"_mm{i}")
        new_outputs.append(e.cast(out_types[i]).alias(f"_new_o{i}"))
    cur = cur.with_columns(new_outputs)

    names = [c.name for c in spec.calls]
    existed = pl.col(CNT).is_not_null() if spec.whole else pl.col(CNT).fill_null(0) > 0
    exists = pl.lit(True) if spec.whole else pl.col("_new_cnt") > 0
    retract = cur.filter(existed).select(
        *spec.group, *[pl.col(out_col(i)).alias(n) for i, n in enumerate(names)], pl.lit(-1, pl.Int64).alias(W))
    insert = cur.filter(exists).select(
        *spec.group, *[pl.col(f"_new_o{i}").alias(n) for i, n in enumerate(names)], pl.lit(1, pl.Int64).alias(W))
    out = consolidate(pl.concat([retract, insert]))

    new_state = cur.select(
        *gkeys, pl.col("_new_cnt").alias(CNT),
        *[pl.col(f"_new{c}").alias(c) for c in running],
        *[pl.col(f"_new_o{i}").alias(out_col(i)) for i in range(len(spec.calls))],
    )
    writes["groups"] = state_rows(new_state, live=pl.lit(True) if spec.whole else pl.col(CNT) > 0)
    return out, writes


def _apply_minmax(spec: HashAggregate, delta: pl.DataFrame, cur: pl.DataFrame, values: StateTable | None
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    gkeys = [KH, *spec.group]
    vcols = [value_col(i) for i in spec.minmax]
    vkeys = [*gkeys, *vcols]
    dv = settle(delta.select(*vkeys, W))
    writes = state_rows(dv.rename({W: COUNT}), live=pl.lit(True))  # additive: no read to write

    # Groups whose multiset must be read: all of them with a DISTINCT call (a value's count
    # crossing zero changes the result), else those where a retraction removes the current MIN/MAX
    # and no value inserted this epoch reaches it.
    if any(spec.calls[i].func not in ("min", "max") for i in spec.minmax):
        refill = cur.select(gkeys)
    else:
        added = dv.filter(pl.col(W) > 0).group_by(gkeys).agg([_extreme(spec, i) for i in spec.minmax])
        old_out = cur.select(*gkeys, *[out_col(i) for i in spec.minmax]).join(
            added, on=gkeys, how="left", nulls_equal=True)
        hit = dv.filter(pl.col(W) < 0).join(old_out, on=gkeys, how="inner", nulls_equal=True)
        lost = []
        for i in spec.minmax:
            old_i, new_i = pl.col(out_col(i)), pl.col(f"_mm{i}")
            reached = (new_i >= old_i) if spec.calls[i].func == "max" else (new_i <= old_i)
            lost.append(((pl.col(value_col(i)) == old_i) & ~reached.fill_null(False)).fill_null(False))
        refill = hit.filter(pl.any_horizontal(lost)).select(gkeys).unique()

    parts = []
    if refill.height:
        old = lookup(values, refill, gkeys, {**{c: delta.schema[c] for c in vkeys}, COUNT: pl.Int64})
        mine = dv.join(refill, on=gkeys, how="semi", nulls_equal=True)
        merged = pl.concat([old.rename({COUNT: W}), mine]).group_by(vkeys).agg(pl.col(W).sum())
        if merged.filter(pl.col(W) < 0).height:
            raise InvariantError(f"aggregate {spec.name}: retracted a value that was never added")
        live = merged.filter(pl.col(W) > 0)
        parts.append(live.group_by(gkeys).agg([_extreme(spec, i) for i in spec.minmax]))
    # every other group (MIN/MAX only): its extreme can only move towards values this epoch inserts
    rest = cur.select(*gkeys, *[out_col(i) for i in spec.minmax]).join(refill, on=gkeys, how="anti", nulls_equal=True)
    if rest.height:
        rest = rest.join(added, on=gkeys, how="left", nulls_equal=True)
        horizontal = {"min": pl.min_horizontal, "max": pl.max_horizontal}
        parts.append(rest.select(*gkeys, *[
            horizontal[spec.calls[i].func](pl.col(out_col(i)), pl.col(f"_mm{i}")).cast(delta.schema[value_col(i)])
            .alias(f"_mm{i}") for i in spec.minmax]))
    mm = pl.concat(parts, how="vertical_relaxed")  # cur is never empty, so one part at least
    return cur.join(mm, on=gkeys, how="left", nulls_equal=True), writes


def _extreme(spec: HashAggregate, i: int) -> pl.Expr:
    """The result of value call ``i`` over a group's live multiset rows."""
    col, func = pl.col(value_col(i)), spec.calls[i].func
    if func.startswith("percentile"):
        e = _percentile(col, spec.calls[i])
    elif func == "array_agg":  # every value, as often as the multiset holds it, in its ORDER BY order
        desc = spec.calls[i].desc  # PostgreSQL's NULLS LAST ascending, NULLS FIRST descending
        e = col.repeat_by(pl.col(W)).list.explode(keep_nulls=True, empty_as_null=False).sort(
            descending=desc, nulls_last=not desc).implode()
    elif func == "count_distinct":
        e = col.drop_nulls().n_unique()
    elif func == "sum_distinct":
        e = pl.when(col.drop_nulls().n_unique() > 0).then(col.drop_nulls().unique().sum())
    else:
        e = col.max() if func == "max" else col.min()
    return e.alias(f"_mm{i}")


def _percentile(col: pl.Expr, call: AggCall) -> pl.Expr:
    """PostgreSQL's percentile over a group's multiset rows (value, ``_w`` copies), NULLs aside:
    ``percentile_disc(f)`` is the value at row ``max(1, ceil(f * n))`` of the ordered values,
    ``percentile_cont(f)`` interpolates between rows ``floor(f * (n - 1))`` and ``ceil(...)``
    (0-based) — the formulas of PostgreSQL's ``orderedsetaggs.c``."""
    live = col.is_not_null()
    values = col.filter(live).sort(descending=call.desc)
    upto = pl.col(W).filter(live).sort_by(col.filter(live), descending=call.desc).cum_sum()  # rows up to each value
    n, f = pl.col(W).filter(live).sum(), call.fraction

    def row(i: pl.Expr) -> pl.Expr:  # the value at 0-based row i
        return values.filter(upto > i).first()
    if call.func == "percentile_disc":
        return row(pl.max_horizontal((n * f).ceil(), pl.lit(1.0)) - 1)
    at = (n - 1) * f
    lo, hi = row(at.floor()).cast(pl.Float64), row(at.ceil()).cast(pl.Float64)
    return lo + (at - at.floor()) * (hi - lo)


def _output_types(spec: HashAggregate, delta: pl.DataFrame) -> list[pl.DataType]:
    types = []
    for i, c in enumerate(spec.calls):
        if c.func in ("count_star", "count", "count_distinct"):
            types.append(pl.Int64)
        elif c.func == "percentile_cont":
            types.append(pl.Float64)
        elif c.func == "array_agg":
            types.append(pl.List(delta.schema[value_col(i)]))
        elif c.func == "sum":
            types.append(delta.schema[sum_col(i)])
        elif c.func == "sum_distinct":
            t = delta.schema[value_col(i)]
            types.append(pl.Int64 if t.is_integer() else pl.Float64 if t.is_float() else t)
        else:
            types.append(delta.schema[value_col(i)])
    return types


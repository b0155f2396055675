"""What the engine does for flows: the trigger's merge on the driver, and window expiry.

**A trigger** (seed 000's design, made durable). A flow's plan is an aggregation with only
projections and filters above it (:func:`shape`). Spark (Catalyst) computes the partial aggregates
of the records the epoch reads — one row per (window, key) touched, the *dirty* groups, with each
group's key hash (:meth:`millpond.spark.build.Builder.partials`) — and the driver merges them
(:func:`merge`): the aggregation's state (:class:`~millpond.engine.operators.HashAggregate`) and
the flow's rows (:class:`~millpond.engine.operators.Materialize`, which the flow's sink table is
read from) are read and written for the dirty groups only, as this epoch's SSTs
(:func:`millpond.engine.step.run_step`), committed with the flow's offsets. No Python stage runs
in Spark for a flow, and the work on the driver follows the dirty groups, not the records.

A flow with ``EXPIRE AFTER d`` has a *time key* (its first group key of a time type: the window).
Its *watermark* is the latest window its changes have inserted so far; a window older than
``watermark - d`` has *expired*: its sink row stays as it is, and later changes to it (late rows,
updates, deletes of its rows) are dropped and counted — never merged into another window. The
watermark and the count are committed with the epoch, in the flow's offsets under keys that are
never channel names (:data:`WATERMARK`, :data:`EXPIRED`; also :data:`SINK_OWED`, the coordinator's record
of what a sink is owed).

**State in time order.** A flow with a window among its group keys (catalog format 9: ``cluster``)
keys its state by the window's minute in the high 32 bits and the group's hash in the low 32 bits
(:func:`cluster_floor`; collisions are told apart by the group columns, as every state lookup does).
Its state files then hold ranges of windows: a trigger's new windows land in new files instead of
overlapping every old one, so compaction rewrites recent files only and a trigger's lookups read
them only — a trigger's cost follows the windows it touches, not the windows in state. An
expiring flow's files wholly older than its floor are dropped whole (:mod:`millpond.store.compaction`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import duckdb

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from millpond import duck, pgerrors
from millpond.columns import KH, W
from millpond.engine import plan as P
from millpond.engine.expressions import to_duckdb
from millpond.engine.operators import HashAggregate, Materialize
from millpond.pyfunctions import PYTHON_ERROR
from millpond.engine.step import run_step
from millpond.store.manifest import Manifest
from millpond.store.objects import ObjectStore

if TYPE_CHECKING:
    from millpond.engine.consumers import Flow

__all__ = ["SINK_OWED", "WATERMARK", "EXPIRED", "Expiry", "Merge", "shape", "merge", "expiry_floors",
           "as_micros", "cluster_floor", "CLUSTER_UNIT", "CLUSTER_MIN", "CLUSTER_MAX", "CLUSTER_NULL"]

SINK_OWED = "@sink"  # the last epoch whose changes the flow's sink must receive
WATERMARK = "@watermark"  # microseconds since the epoch (1970) of the latest window inserted
EXPIRED = "@expired"  # changes to expired windows dropped so far (groups, counted once per epoch)

CLUSTER_UNIT = 60_000_000  # a clustered key's high bits count minutes since 1970 ...
CLUSTER_MIN, CLUSTER_MAX = -(2**31 - 1), 2**31 - 2  # ... clamped to these ...
CLUSTER_NULL = 2**31 - 1  # ... and this for a NULL window (never below an expiry floor)


def cluster_floor(micros: int) -> int:
    """The smallest clustered key of a window at or after ``micros`` (microseconds since 1970) could
    have: every key below it belongs to a window before ``micros``. (Spark computes the keys:
    ``cluster_hash`` in :mod:`millpond.spark.inputs`.)"""
    return max(CLUSTER_MIN, min(CLUSTER_MAX, micros // CLUSTER_UNIT)) << 32


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


@dataclass(frozen=True)
class Merge:
    """How a flow's trigger runs: its aggregation, the projections and filters above it (bottom
    up), its rows' schema, the aggregation's group column that is its ``EXPIRE AFTER`` window, and
    the one its state is ordered by (:func:`cluster_floor`)."""

    aggregate: P.Aggregate
    above: tuple[P.Project | P.Filter, ...]
    schema: pa.Schema
    time_group: str | None
    cluster_group: str | None = None


def shape(plan: P.Materialize, schema: pa.Schema, time_key: str | None, cluster: str | None = None
          ) -> Merge | None:
    """A flow's plan as a :class:`Merge`, or None when it is not an aggregation under projections
    and filters (or its window key is not one of the aggregation's group columns)."""
    above, node = [], plan.input
    while isinstance(node, (P.Project, P.Filter)):
        above.append(node)
        node = node.input
    if not isinstance(node, P.Aggregate) or node.whole:
        return None

    def group(column: str | None) -> str | None:  # an output column's name at the aggregation, top down
        for n in above:
            if column is not None and isinstance(n, P.Project):
                e = dict((name, e) for e, name in n.exprs).get(column)
                column = e.name if isinstance(e, exp.Column) and not e.table else None
        return column if column in node.group else None

    if time_key is not None and group(time_key) is None:
        return None
    return Merge(node, tuple(reversed(above)), schema, group(time_key), group(cluster))


def merge(store: ObjectStore, manifest: Manifest, epoch: int, attempt: str, flow: "Flow", partials: pa.Table
          ) -> tuple[pa.Table | None, dict[str, int]]:
    """One trigger's merge of the partial aggregates of its dirty groups (module docstring): the
    flow's changelog and its new window-expiry offsets. State rows are written as this attempt's
    SSTs; nothing is visible before the coordinator commits them."""
    m = flow.merge
    assert m is not None
    delta = pl.from_arrow(partials)
    done = manifest.offsets.get(flow.key, {})
    marks: dict[str, int] = {}
    if flow.expiry is not None and m.time_group is not None:
        delta, marks = _expire(delta, m, flow.expiry, done)
    if delta.height == 0:
        return None, marks
    node = m.aggregate
    op = HashAggregate(node.group, node.calls, name=f"{flow.name}#{node.node_id}", append_only=node.append_only)

    def step(op, rows: pl.DataFrame, node_id: int) -> pl.DataFrame:  # noqa: ANN001
        levels = {part: manifest.state(P.state_id(flow.object_id, node_id, part)) for part in op.parts()}
        return run_step(op, rows, store, levels, epoch=epoch, attempt=attempt, base_version=manifest.version,
                        object_id=flow.object_id, node_id=node_id, partition=0)

    out = step(op, delta, node.node_id)
    if out.height == 0:
        return None, marks
    group = list(node.group)  # the flow's rows are kept by their group's hash: one key per group
    out = out.join(delta.select(KH, *group).unique(group), on=group, how="left", nulls_equal=True)
    rows = _above(flow.name, m, out)
    changes = step(Materialize(tuple(m.schema.names), flow.name, check=False), rows, flow.plan.node_id)
    return (changes.to_arrow().cast(m.schema.append(pa.field(W, pa.int64()))) if changes.height else None), marks


def _expire(delta: pl.DataFrame, m: Merge, rule: Expiry, done: Mapping[str, int]
            ) -> tuple[pl.DataFrame, dict[str, int]]:
    """The partials without those of expired windows, and the flow's new ``WATERMARK`` (the latest
    window that received rows, this epoch's included) and ``EXPIRED`` (dropped so far) offsets."""
    t = as_micros(delta[m.time_group].to_arrow())
    inserted = t[(delta[W].to_numpy() > 0) & ~np.isnan(t)]
    mark = done.get(WATERMARK)
    if inserted.size:
        mark = int(inserted.max()) if mark is None else max(mark, int(inserted.max()))
    marks = {EXPIRED: done.get(EXPIRED, 0)}
    if mark is None:
        return delta, marks
    marks[WATERMARK] = mark
    keep = np.isnan(t) | (t >= mark - rule.micros)
    if not keep.all():
        marks[EXPIRED] += delta.filter(pl.Series(~keep)).select(list(m.aggregate.group)).unique().height
        delta = delta.filter(pl.Series(keep))
    return delta, marks


def expiry_floors(object_id: int, m: Merge | None, expiry: Expiry | None, offsets: Mapping[str, int]
                  ) -> dict[str, list]:
    """An expiring flow's aggregation states (flow ``object_id``, its trigger ``m``, its committed
    ``offsets``), with their window column and the oldest window not expired, and for a flow whose
    state is in time order the smallest key of that window (:func:`cluster_floor`) — the
    manifest's ``expiry``: compaction drops the older windows' state; their sink rows stay in the
    flow's rows state, which has none."""
    mark = offsets.get(WATERMARK)
    if expiry is None or m is None or m.time_group is None or mark is None:
        return {}
    floor = [m.time_group, mark - expiry.micros]
    if m.cluster_group == m.time_group:  # its files older than the floor go whole
        floor.append(cluster_floor(floor[1]))
    return {P.state_id(object_id, m.aggregate.node_id, part): floor for part in ("groups", "values")}


def _above(name: str, m: Merge, rows: pl.DataFrame) -> pl.DataFrame:
    """The projections and filters above the aggregation, over its changelog, in DuckDB (with
    PostgreSQL's meaning, :func:`millpond.engine.expressions.to_duckdb`): a few rows per dirty group."""
    sql = "SELECT * FROM rows"
    for n in m.above:
        if isinstance(n, P.Filter):
            sql = f"SELECT * FROM ({sql}) WHERE {to_duckdb(n.predicate)}"
        else:
            items = ", ".join(f"{to_duckdb(e)} AS {_ident(c)}" for e, c in n.exprs)
            sql = f"SELECT {KH}, {items}, {W} FROM ({sql})"
    con = duck.cursor()
    try:
        con.register("rows", rows.to_arrow())
        try:
            result = con.sql(sql).to_arrow_table()
        except (duckdb.InvalidInputException, duckdb.ConversionException, duckdb.OutOfRangeException) as exc:
            # a data error, named as Spark names one (the coordinator isolates the flow, as a view)
            if (m := PYTHON_ERROR.search(str(exc))) is not None:  # a Python function raised
                raise FlowDataError(f"flow {name!r}: {m.group(0)}") from None
            pg = pgerrors.translate(str(exc)) or pgerrors.PgError(str(exc).split(":", 1)[-1].strip(), "22000")
            raise FlowDataError(f"flow {name!r}: {pgerrors.shaped(pg)}") from None
    finally:
        con.close()
    cols = [KH, *m.schema.names, W]
    return pl.from_arrow(result.select(cols).cast(pa.schema([pa.field(KH, pa.int64()), *m.schema,
                                                              pa.field(W, pa.int64())])))


class FlowDataError(Exception):
    """A data error in a flow's expressions above its aggregation (evaluated on the driver)."""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'

"""A small epoch's whole plan in one Python task: every operator of a view, one after the other,
each over all vnodes, with the filters and projections between them evaluated by DuckDB.

On Spark's path every stateful operator of a plan is a ``mapInArrow`` stage of its own, with an
exchange before it: a Python stage costs ~0.1 s whatever its delta (TPC-H's 22 views hold 149
stateful operators, so a refresh of 60 lineitems took ~17 s, ``docs/benchmarks.md``). A view
whose every expression DuckDB evaluates as Spark does (:func:`millpond.spark.agreement.cannot_raise`)
and whose every operator's input is made here (:mod:`millpond.spark.local_plan` decides) instead
runs as one task — in the driver's process for a small epoch (:mod:`millpond.spark.executor`),
else as a one-task Spark stage — over a tree of the values below: each yields its rows as the
Spark path would have handed them on (Catalyst's schema, :func:`~millpond.spark.fused.conform`),
each stateful task's delta with the key hash Spark's exchange would have computed
(:mod:`millpond.keyhash`), so operators and their state cannot tell the paths apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Union

import numpy as np
import polars as pl
import pyarrow as pa

from millpond.columns import FILL, KH, W
from millpond.errors import MillpondError
from millpond.engine.operators.join import SIDE
from millpond.keyhash import xxhash64
from millpond.spark.combine import Combine
from millpond.spark.fused import conform, read_scan, select_records
from millpond.spark.inputs import read_rows
from millpond.store.manifest import Levels
from millpond.store.objects import open_store

if TYPE_CHECKING:
    from millpond.spark.task import Task

__all__ = ["Log", "Committed", "Empty", "Sql", "Concat", "Keyed", "Op", "Rows"]


@dataclass(frozen=True)
class Log:
    """A table's records of the epoch's range, named by the scan object ``scan``
    (:func:`millpond.spark.log_source.write_scan`, rewritten every epoch): its ``columns``
    (name, log column) as ``schema`` (with the weight)."""

    root: str
    storage: tuple[tuple[str, str], ...]
    scan: str
    log_schema: pa.Schema  # the channel's columns it reads (TableDef.read_schema)
    columns: tuple[tuple[str, str], ...]
    schema: pa.Schema
    below: tuple = ()  # (key columns, hi): only records whose key hash is below hi (a filling view's parts so far)

    def identity(self) -> tuple:
        return (self.root, self.storage, self.scan, self.log_schema, self.columns, self.schema, self.below)

    def rows(self, partition: int, memo: dict) -> pa.Table:
        records = read_scan(open_store(self.root, dict(self.storage)), self.scan, self.log_schema)
        if records is None:
            return self.schema.empty_table()
        if self.below:
            keys, hi = self.below
            records = records.filter(pa.array(xxhash64([records.column(k) for k in keys]) < hi))
        return conform(pa.table({**{out: records.column(src) for out, src in self.columns}, W: records.column(W)}),
                       self.schema)


@dataclass(frozen=True)
class Committed:
    """A keyed table's committed rows (its rows state at ``levels``: a view's first epoch in batch
    mode, then the log from the table's offset), its ``columns`` (name, table column) as ``schema``."""

    root: str
    storage: tuple[tuple[str, str], ...]
    levels: Levels
    read: tuple[str, ...]  # the table's columns read (a multiset of them: a row's copies as its weight)
    row_id: bool  # and its rows' ids
    stored: pa.Schema  # their types (and the weight)
    columns: tuple[tuple[str, str], ...]
    schema: pa.Schema
    within: tuple[int | None, int | None] = (None, None)  # the key hashes read (a filling view's part)

    def identity(self) -> tuple:
        return (self.root, self.storage, self.levels, self.read, self.row_id, self.stored, self.columns, self.schema,
                self.within)

    def rows(self, partition: int, memo: dict) -> pa.Table:
        batches = list(read_rows(self.root, dict(self.storage), self.levels, self.read, 1, self.stored,
                                 iter([pa.record_batch([pa.array([0], pa.int64())], names=["id"])]), row_id=self.row_id,
                                 defaults=tuple(f for f in self.stored if f.metadata and FILL in f.metadata),
                                 within=self.within))
        if not batches:
            return self.schema.empty_table()
        records = pa.Table.from_batches(batches)
        return conform(pa.table({**{out: records.column(src) for out, src in self.columns}, W: records.column(W)}),
                       self.schema)


@dataclass(frozen=True)
class Empty:
    """No rows (a table with nothing new in its range)."""

    schema: pa.Schema

    def identity(self) -> tuple:
        return (self.schema,)

    def rows(self, partition: int, memo: dict) -> pa.Table:
        return self.schema.empty_table()


@dataclass(frozen=True)
class Sql:
    """DuckDB's ``query`` over the rows of ``input`` (as ``records``), as ``schema``."""

    input: "Rows"
    query: str
    schema: pa.Schema
    # projections' (DuckDB expression, output name, the query over ``records`` whose rows it reads):
    # errors name them
    columns: tuple[tuple[str, str, str], ...] = ()

    def identity(self) -> tuple:
        return (self.input.identity(), self.query, self.schema, self.columns)

    def rows(self, partition: int, memo: dict) -> pa.Table:
        records = self.input.rows(partition, memo)
        if not records.num_rows:
            return self.schema.empty_table()
        try:
            return conform(select_records(self.query, records), self.schema)
        except MillpondError as exc:  # a data error: name the column that raised, as Spark's context does
            for expression, name, rows in self.columns:
                try:
                    select_records(f"SELECT {expression} FROM ({rows})", records)
                except MillpondError:
                    raise MillpondError(f"{exc}\n== SQL (line 1, position 1) ==\n{expression} AS `{name}`") from None
            raise


@dataclass(frozen=True)
class Concat:
    """The rows of each of ``inputs``, as ``schema`` (a union; a join's two sides, with their
    side's number in ``sides``)."""

    inputs: tuple["Rows", ...]
    schema: pa.Schema
    sides: tuple[int, ...] = ()

    def identity(self) -> tuple:
        return (tuple(i.identity() for i in self.inputs), self.schema, self.sides)

    def rows(self, partition: int, memo: dict) -> pa.Table:
        parts = []
        for k, i in enumerate(self.inputs):
            part = i.rows(partition, memo)
            if self.sides:
                part = part.append_column(SIDE, pa.array(np.full(part.num_rows, self.sides[k], np.int8)))
            parts.append(conform(part, self.schema))
        return pa.concat_tables(parts)


@dataclass(frozen=True)
class Keyed:
    """A stateful task's delta: the rows of ``input`` as ``schema`` (Catalyst's input of the
    task, less the vnode) with the key hash of ``hashed`` (none: one group, hash 0) — combined
    per group first where ``combine`` says (an aggregate's partials, then kept where one of
    ``having`` is not 0)."""

    input: "Rows"
    hashed: tuple[str, ...]
    schema: pa.Schema
    combine: Combine | None = None
    having: tuple[str, ...] = ()

    def identity(self) -> tuple:
        return (self.input.identity(), self.hashed, self.schema, self.combine, self.having)

    def delta(self, partition: int, memo: dict) -> pl.DataFrame:
        unkeyed = pa.schema([f for f in self.schema if f.name != KH])
        table = self.input.rows(partition, memo)
        if self.combine is not None:
            table = self.combine(table, unkeyed)
        table = conform(table, unkeyed)
        kh = xxhash64([table.column(k) for k in self.hashed]) if self.hashed else np.zeros(table.num_rows, np.int64)
        delta = pl.from_arrow(conform(table.append_column(KH, pa.array(kh)), self.schema))
        if self.having:
            delta = delta.filter(pl.any_horizontal([pl.col(c) != 0 for c in self.having]))
        return delta


@dataclass(frozen=True)
class Op:
    """The output of a stateful ``task`` whose delta is ``input``, run here."""

    task: "Task"
    input: Keyed

    def identity(self) -> tuple:
        return (self.task.identity(), self.input.identity())

    def rows(self, partition: int, memo: dict) -> pa.Table:
        if id(self) not in memo:  # an operator runs once an epoch, however many read its output
            task = replace(self.task, local=self.input)
            out = task.step([], partition, time.perf_counter(), memo)
            memo[id(self)] = task.out_schema.empty_table() if out is None or out.height == 0 else \
                out.to_arrow().cast(task.out_schema)
        return memo[id(self)]


Rows = Union[Log, Committed, Empty, Sql, Concat, Op]

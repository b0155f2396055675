"""A stateful task that reads its epoch's delta from the log itself: no row enters the JVM.

The general path of a big epoch hands a stateful operator its delta through Spark: a log scan's
Python task hands every record to the JVM, Catalyst projects (and for an aggregate combines)
them, exchanges them by key hash, and hands them to the operator's Python task — every row
crosses the Python/JVM boundary twice, with a shuffle between. Measured on 1,000,000 records
(``benchmarks/per_row.py``, 2 tasks): the operators' tasks waited 1.5–1.8 s (summed) for their
input of a join, 3.4 s for a retractable ``MAX``'s, against 0.1 s to read the records from the log.

When the operator's input is a table's columns as they are (an aggregate of a projection of
plain columns that :mod:`millpond.spark.combine` can combine; an equi-join of two tables on plain
integer-like columns), each of the stage's ``n`` tasks reads the whole range from the log, hashes
the rows' keys exactly as Spark's ``xxhash64`` does (:mod:`millpond.keyhash`), keeps the
vnodes ``v`` with ``v mod n`` = its partition (as ``repartitionById`` would have sent them), and
builds the very delta Catalyst would have handed it (:attr:`Fused.schema`): the operator and its
state cannot tell the two paths apart. Reading the range ``n`` times costs ~35 ms per 500,000
records and task, which is why a fused stage has few tasks (one per
:data:`millpond.spark.inputs.FUSED_ROWS_PER_TASK` records) and a deployment of more than
:data:`MAX_TASKS` keeps Spark's exchange.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Iterator

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from millpond import duck, pgerrors
from millpond.columns import KH, W
from millpond.errors import MillpondError
from millpond.keyhash import xxhash64
from millpond.engine.operators.join import SIDE
from millpond.log import Piece, read_pieces
from millpond.spark.combine import Combine
from millpond.spark.log_source import _cut, _overlapping
from millpond.store.objects import ObjectStore, open_store
from millpond.store.sst import VNODES

__all__ = ["Fused", "Side", "MAX_TASKS", "hashed_here", "read_scan", "select_records", "conform"]

SLICE_RECORDS = 500_000  # records a task takes at a time from its range (Fused.slices)
MAX_TASKS = 4  # a bigger deployment (a cluster) keeps Spark's exchange: each fused task reads the whole range


def hashed_here(t: pa.DataType) -> bool:
    """Whether a key of Arrow type ``t`` is hashed here as Catalyst hashes the same column (types
    whose log and Spark forms are the same values: integers, strings, booleans, dates, timestamps in
    microseconds; not floats or decimals, whose arithmetic may round differently in DuckDB)."""
    return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) \
        or pa.types.is_boolean(t) or pa.types.is_date32(t) or (pa.types.is_timestamp(t) and t.unit == "us")


@dataclass(frozen=True)
class Side:
    """One table's records in a fused delta: the scan object naming the epoch's range of its
    channel (:func:`millpond.spark.log_source.write_scan`), its columns (name in the delta, log
    column), for a join side its number and key columns (name, log column, the Arrow type
    both sides compare them as), and the DuckDB SQL over ``records`` (the log's columns) that
    makes the columns named from the records (a view's filters and projections, expressions an
    aggregate groups by or a join compares) — None: the records as they are (for a view's rows,
    with ``columns`` renamed)."""

    scan: str
    log_schema: pa.Schema  # the channel's columns it reads (TableDef.read_schema)
    columns: tuple[tuple[str, str], ...]
    side: int | None = None
    keys: tuple[tuple[str, str, pa.DataType], ...] = ()
    query: str | None = None


@dataclass(frozen=True)
class Fused:
    """The delta of a stateful task's partition, read from the log (see the module's docstring).
    ``hashed``: the delta's columns whose hash is the key hash (an aggregate's group, a join's key
    columns); ``combine``: an aggregate's partials per group and value (then ``having``: the
    partial columns of which one must be non-zero, as Catalyst keeps them); ``schema``: the delta
    as the operator takes it (the Catalyst path's, less the vnode)."""

    root: str
    storage: tuple[tuple[str, str], ...]
    sides: tuple[Side, ...]
    hashed: tuple[str, ...]
    tasks: int
    schema: pa.Schema
    combine: Combine | None = None
    having: tuple[str, ...] = ()
    share: bool = False  # each task reads its share of the range and keeps every row (inserts only: no exchange)

    def delta(self, slot: int) -> pl.DataFrame:
        """The delta of the vnodes of task ``slot`` (of :attr:`tasks`), whole (:meth:`slices`)."""
        parts = list(self.slices(slot))
        return pl.from_arrow(pa.concat_tables(parts) if parts else self.schema.empty_table())

    def slices(self, slot: int) -> Iterator[pa.Table]:
        """The delta of task ``slot`` a slice at a time, as :attr:`schema` has it: without a
        combine, the records are taken :data:`SLICE_RECORDS` at a time, so what the task holds
        while it reads is one slice's copies (the projection, the key hashes, its vnodes' rows),
        not the whole range's — each task of a table's load of 6M ``lineitem`` rows read all of
        them and kept half; an aggregate's partials are combined over the whole range at once."""
        store = open_store(self.root, dict(self.storage))
        for side in self.sides:
            records = read_scan(store, side.scan, side.log_schema, (self.tasks, slot) if self.share else None)
            if records is None:
                continue
            step = max(1, records.num_rows) if self.combine is not None else SLICE_RECORDS
            for start in range(0, records.num_rows, step):  # a loop per slice of records
                table = self._mine_of(side, records.slice(start, step), slot)
                if self.having:
                    table = table.filter(functools.reduce(pc.or_kleene, [pc.not_equal(table.column(c), 0)
                                                                          for c in self.having]))
                if table.num_rows:
                    yield table

    def _mine_of(self, side: Side, records: pa.Table, slot: int) -> pa.Table:
        """The rows of this task's vnodes of ``records`` (one side's), as the operator takes them."""
        unkeyed = pa.schema([f for f in self.schema if f.name != KH])
        if side.query is not None:
            records = select_records(side.query, records)
        elif side.side is None and side.columns:  # a view's rows: the table's columns renamed
            records = pa.table([*(records.column(src) for _, src in side.columns), records.column(W)],
                               names=[*(out for out, _ in side.columns), W])
        if self.combine is not None:  # this task's groups kept first, then combined: each task combines its share
            if not (self.tasks == 1 or self.share):
                src = dict(self.combine.keys)
                hashed = [records.column(src[h]).cast(unkeyed.field(h).type) for h in self.hashed]
                records = records.filter(self._mine(hashed, slot, records.num_rows)[0])
            # per (group, MIN/MAX value): about one partial per record, and the operator
            # consolidates its delta per (group, value) itself — combining here is work done twice
            table = self.combine(records, unkeyed, grouped=len(self.combine.keys) == len(self.hashed))
        elif side.side is None:  # a view's rows
            table = conform(records, unkeyed)
        else:  # a join side
            keys = {name: records.column(src).cast(t) for name, src, t in side.keys}
            table = pa.table({**keys, **{name: records.column(src) for name, src in side.columns},
                              W: records.column(W), SIDE: pa.array(np.full(len(records), side.side, np.int8))})
        mine, kh = self._mine([table.column(k) for k in self.hashed], slot, table.num_rows)
        table = table.filter(mine).append_column(KH, pa.array(kh[mine]))
        return conform(table, self.schema)

    def _mine(self, columns: list, slot: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``rows`` rows are of this task's vnodes, and every row's key hash (no key
        columns: one group, whose hash is 0 as :func:`millpond.spark.inputs.key_hash` makes it)."""
        kh = xxhash64(columns) if columns else np.zeros(rows, dtype=np.int64)
        every = self.tasks == 1 or self.share
        return (np.ones(len(kh), dtype=bool) if every else (kh % VNODES) % self.tasks == slot), kh


def read_scan(store: ObjectStore, scan: str, log_schema: pa.Schema, share: tuple[int, int] | None = None
              ) -> pa.Table | None:
    """The records of the range the scan object ``scan`` names this epoch (None: an empty range);
    ``share``: (tasks, slot), that slot's share of it."""
    spec = json.loads(store.get(scan))
    if spec["start"] >= spec["stop"]:
        return None
    start, stop = _cut(spec["start"], spec["stop"], *share) if share else (spec["start"], spec["stop"])
    return read_pieces(store, spec["channel"], log_schema,
                       _overlapping([Piece(*p) for p in spec["pieces"]], start, stop), start, stop)


def select_records(query: str, records: pa.Table) -> pa.Table:
    """DuckDB's answer to ``query`` over ``records``; a data error (an integer overflow, a division by
    zero) is reported as Spark reports it."""
    con = duck.cursor()
    try:
        con.register("records", records)
        return con.sql(query).to_arrow_table()
    except duckdb.Error as exc:  # a data error (PostgreSQL's): the view fails alone (engine.failures)
        pg = pgerrors.translate(str(exc))
        if pg is None and isinstance(exc, duckdb.OutOfRangeException):
            pg = pgerrors.PgError("value out of range: overflow", "22003")
        if pg is None or not pgerrors.is_data_error(pg.sqlstate):
            raise
        raise MillpondError(pgerrors.shaped(pg)) from None
    finally:
        con.close()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns as ``schema`` orders and types them (a column a side lacks: NULLs)."""
    cols = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.table(cols, schema=schema)

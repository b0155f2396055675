"""Ingest: rows into a table's log channel, as one durable batch of changes.

A table's channel holds its changelog: each record is a row with ``_w`` = +1 (insert) or -1
(delete) and ``_row_id``, a row's identity. A table without a primary key numbers new rows by
their sequence number in the channel, so an append reads nothing. A table with a primary key
upserts: the batch retracts the table's current rows with the same keys — its committed rows
and the changes appended since, which no epoch has to commit first (within one batch the last
row of a key wins); a change that would leave two rows with one key is refused before anything
is appended. Those rows are looked up by key (:meth:`~millpond.engine.runtime.Runtime.rows_by_key`):
an upsert costs what its batch touches, not the table (tables made before catalog format 10 are
read whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa

from millpond import paths
from millpond.catalog import CatalogStore, TableDef
from millpond.columns import ROW_ID, W
from millpond.errors import FencedError, MillpondError, SchemaError
from millpond.log import Appended, Channel, ChannelInfo, Log
from millpond.log.conform import conform
from millpond.log.tables import is_table

if TYPE_CHECKING:
    from millpond.engine.runtime import Runtime

__all__ = ["to_arrow", "conform_rows", "insert", "append_changes", "serve", "table_channel"]


def to_arrow(data: Any) -> pa.Table:
    """Rows given as a pyarrow Table/RecordBatch, dict of columns, polars, pandas or Spark DataFrame."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, dict):
        return pa.table(data)
    if isinstance(data, pl.DataFrame):
        return data.to_arrow()
    module = type(data).__module__
    if module.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if module.startswith("pyspark"):
        return data.toArrow()
    raise SchemaError(f"cannot insert a {type(data).__name__}: use a pyarrow Table, pandas or Spark DataFrame")


def conform_rows(table: TableDef, rows: pa.Table) -> pa.Table:
    """``rows`` cast to the table's columns, or a SchemaError naming the column and row."""
    return conform(f"table {table.name!r}", table.schema, rows, key=table.primary_key,
                   types={c.name: c.type for c in table.columns}, not_null={c.name for c in table.columns if c.not_null})


def insert(rt: Runtime, table: TableDef, rows: pa.Table, *, producer: tuple[str, int] | None = None
           ) -> Appended | None:
    """Append ``rows`` (already conformed) to ``table``: new rows, or upserts with a primary key.
    ``producer`` (id, seq) makes the append idempotent (a retry is applied once)."""
    if table.primary_key:
        key = list(table.primary_key)
        if pl.from_arrow(rows.select(key)).is_duplicated().any():  # the last of a key's rows wins (no copy when none repeat)
            rows = pl.from_arrow(rows).unique(subset=key, keep="last", maintain_order=True).to_arrow().cast(rows.schema)
        current = _current(rt, table, rows)  # committed rows and changes not yet in an epoch
        old = pl.from_arrow(current).join(pl.from_arrow(rows.select(key)), on=key, how="semi").to_arrow()
        return append_changes(rt, table, old, rows.append_column(ROW_ID, pa.nulls(rows.num_rows, pa.int64())),
                              current=current, producer=producer)
    # A key-less row's id is its sequence number: the log fills it in while it numbers the records
    # (millpond.log.tables), so appends forwarded by other processes never share an id with these.
    return append_changes(rt, table, None, rows.append_column(ROW_ID, pa.nulls(rows.num_rows, pa.int64())),
                          producer=producer)


def apply_by_key(rt: Runtime, table: TableDef, upserts: pa.Table | None, deletes: pa.Table | None, *,
                 producer: tuple[str, int] | None = None) -> Appended | None:
    """Upsert ``upserts`` (the table's columns, conformed) and delete the rows whose keys are the
    rows of ``deletes`` (the key's columns) in one durable append of ``table`` (keyed); the caller
    gives each key one change (its last). A deleted key that is not there deletes nothing."""
    key = list(table.primary_key)
    schema = pa.schema([table.schema.field(k) for k in key])
    keys = [part.select(key).cast(schema) for part in (upserts, deletes) if part is not None and part.num_rows]
    if not keys:
        return None
    keys = pa.concat_tables(keys) if len(keys) > 1 else keys[0]
    current = _current(rt, table, keys)
    old = pl.from_arrow(current).join(pl.from_arrow(keys), on=key, how="semi").to_arrow()
    new = None if upserts is None else upserts.append_column(ROW_ID, pa.nulls(upserts.num_rows, pa.int64()))
    return append_changes(rt, table, old, new, current=current, producer=producer)


def append_changes(rt: Runtime, table: TableDef, old: pa.Table | None, new: pa.Table | None, *,
                   current: pa.Table | None = None, producer: tuple[str, int] | None = None) -> Appended | None:
    """Append retractions of ``old`` and insertions of ``new`` (both with ``_row_id``) as one
    durable batch (with ``producer``, at most once). ``current`` is the committed table, if the
    caller already read it."""
    if table.append_only and old is not None and old.num_rows:
        raise SchemaError(f"table {table.name!r} is APPEND ONLY: its rows cannot be deleted or replaced")
    parts = []
    for rows, w in ((old, -1), (new, 1)):
        if rows is not None and rows.num_rows:
            rows = rows.select([*(c.name for c in table.columns), ROW_ID])
            weights = pa.array(np.full(rows.num_rows, w, dtype=np.int64))
            parts.append(rows.append_column(W, weights).cast(table.log_schema))
    if not parts:
        return None
    batch = pa.concat_tables(parts)
    if table.primary_key and new is not None:
        current = current if current is not None else _current(rt, table, batch)
        _check_unique(table, pl.from_arrow(current.select(list(table.primary_key))),
                      pl.from_arrow(batch.select([*table.primary_key, W])))
    return rt.channel(table).append(batch, producer=producer)


def _current(rt: Runtime, table: TableDef, rows: pa.Table) -> pa.Table:
    """The table's rows as of now (committed, and the changes appended since) that have the key of
    a row of ``rows``: looked up by key where the table's rows are addressed by it, else all of them."""
    key = rt.key_of(table.name)
    if not key:
        return rt.snapshot(table.name, hidden=True, pending=True)
    return rt.rows_by_key(table.name, rows.select(list(key)), hidden=True, pending=True)


def serve(rt: Runtime) -> None:
    """Make the Database the writer of its root's log while it is open (:meth:`millpond.log.Log.serve`):
    rows that other processes append to a table's channel (a Spark sink, ``millpond log append``, the
    Python log API) are inserted here, as :func:`insert` does, one append at a time."""

    def upsert(channel: ChannelInfo, rows: pa.Table, producer: tuple[str, int] | None) -> Appended:
        with rt.lock:
            versions = rt.catalogs.store.list(paths.CATALOG_PREFIX)
            if versions and paths.parse_numbered(versions[-1]) > rt.catalog.version:
                raise FencedError(f"the catalog of {rt.log.store.root!r} was changed by another writer since this "
                                  "Database opened it: it no longer takes appends (reopen the root)")
            table = next((t for t in rt.catalog.tables.values() if t.channel_id == channel.id), None)
            if table is None:
                raise SchemaError(f"log channel {channel.name!r} is not a table's channel under {rt.log.store.root!r}")
            if (flow := rt.catalog.sink_of(table.name)) is not None:
                raise SchemaError(f"table {table.name!r} is the sink of flow {flow.name!r}: only the flow writes its rows")
            appended = insert(rt, table, conform_rows(table, rows), producer=producer)
            if appended is None:
                end = rt.channel(table).end
                return Appended(end, end, rt.log.tick())
            return appended

    try:
        for t in rt.catalog.tables.values():  # tables record their key on their channel (older roots did not)
            rt.log.create_channel(t.channel, t.log_schema, id=t.channel_id, table_key=t.primary_key)
        rt.log.serve(upsert)
    except BaseException:
        rt.log.close()  # a Database that cannot open holds no writer
        raise


def _check_unique(table: TableDef, current: pl.DataFrame, changes: pl.DataFrame) -> None:
    key = list(table.primary_key)
    delta = changes.group_by(key).agg(pl.col(W).sum().alias("_d"))
    counts = current.group_by(key).len("_n").join(delta, on=key, how="full", coalesce=True, nulls_equal=True)
    counts = counts.with_columns((pl.col("_n").fill_null(0) + pl.col("_d").fill_null(0)).alias("_n"))
    dup = counts.filter(pl.col("_n") > 1)
    if dup.height:
        raise SchemaError(f"table {table.name!r}: duplicate primary key {dup.select(key).row(0, named=True)}")


def table_channel(log: Log, name: str) -> Channel | None:
    """The log channel of SQL table ``name`` (what a writer outside SQL — the log's Spark sink,
    ``millpond log append`` — appends to), with the table's key recorded on it (a root written by an
    older millpond may lack the channel or the key); None if there is no such table. Found through
    the catalog, since a renamed table's channel keeps the name it had: a channel named ``name`` that
    is a table's but no table's now (renamed or dropped) is refused, never written into."""
    table = CatalogStore(log.store).load().tables.get(name)
    if table is not None:
        return log.create_channel(table.channel, table.log_schema, id=table.channel_id, table_key=table.primary_key)
    if name in log.channel_names() and is_table(log.channel(name).info):
        raise MillpondError(f"no table named {name!r}: log channel {name!r} is a table's that was renamed or dropped "
                            "(write into the table by its name now)", sqlstate="42P01")
    return None

"""A table's channel: what the log knows of the SQL table whose changelog a channel holds.

A table's channel holds changelog records: the table's columns, ``_row_id`` and ``_w``
(:attr:`millpond.catalog.TableDef.log_schema`). A writer outside the database (the Python log
API, ``millpond log append``, the Spark writers) appends *rows*, the table's columns only, and the
log turns them into records the way millpond's own insert does (:mod:`millpond.engine.ingest`):

- a key-less table: every row is an insert (``_w`` = +1) whose ``_row_id`` is its sequence number,
  filled in by the writer while it numbers the records (:func:`number_rows`), so two writers can
  never hand out one id;
- a table with a primary key: an upsert, resolved against the table's current rows by the
  :class:`~millpond.Database` open on the root; with none open it is refused.

``_row_id`` and ``_w`` themselves are written only by the Database (its inserts, updates and
deletes). Tables record their key on their channel (``ChannelInfo.table_key``); a table's channel
written before they did is recognised by its id (``t<table id>``) and schema, its key unknown.

    >>> import pyarrow as pa
    >>> number_rows(as_inserts(pa.table({"x": [7, 8]})), 40).to_pydict()
    {'x': [7, 8], '_row_id': [40, 41], '_w': [1, 1]}
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from millpond.columns import ROW_ID, W
from millpond.errors import SchemaError
from millpond.log.conform import conform
from millpond.log.state import ChannelInfo

__all__ = ["is_table", "row_schema", "carries_changes", "conform_rows", "as_inserts", "numbers_rows",
           "number_rows", "HIDDEN"]

HIDDEN = (ROW_ID, W)
_TABLE_ID = re.compile(r"t\d+")  # the catalog names a table's channel incarnation t<table id>


def is_table(info: ChannelInfo) -> bool:
    """Whether the channel is a table's changelog."""
    if info.table_key is not None:
        return True
    return bool(_TABLE_ID.fullmatch(info.id)) and info.schema.names[-2:] == list(HIDDEN)


def row_schema(info: ChannelInfo) -> pa.Schema:
    """The columns an append takes: a table's own columns, or a plain channel's schema."""
    if not is_table(info):
        return info.schema
    return pa.schema([f for f in info.schema if f.name not in HIDDEN])


def carries_changes(info: ChannelInfo, data: Any) -> bool:
    """Whether ``data`` for a table's channel brings its own ``_row_id``/``_w`` (changelog records)."""
    return is_table(info) and any(n in HIDDEN for n in _names(data))


def conform_rows(info: ChannelInfo, data: Any) -> pa.Table:
    """``data`` as rows of the table: its columns cast, its key not NULL; or a SchemaError."""
    where = f"table {info.name!r}"
    hidden = [n for n in _names(data) if n in HIDDEN]
    if hidden:
        raise SchemaError(f"{where}: columns {hidden} are millpond's own (only the Database writes them); "
                          f"write the table's columns {row_schema(info).names}")
    return conform(where, row_schema(info), data, key=info.table_key or ())


def as_inserts(rows: pa.Table) -> pa.Table:
    """Rows as changelog records: inserts (``_w`` = +1) whose ``_row_id`` the writer fills in."""
    n = rows.num_rows
    return rows.append_column(ROW_ID, pa.nulls(n, pa.int64())).append_column(
        W, pa.array(np.ones(n, dtype=np.int64)))


def numbers_rows(info: ChannelInfo) -> bool:
    """Whether the writer fills a NULL ``_row_id`` of the channel's records with their sequence
    number: a key-less table's (and a table's whose key is unknown: an id is harmless there)."""
    return is_table(info) and not info.table_key


def number_rows(records: pa.Table, first: int) -> pa.Table:
    """``records`` numbered from ``first``: a NULL ``_row_id`` becomes the record's sequence number
    (an UPDATE's new row keeps the id it was given)."""
    ids = records.column(ROW_ID)
    if not ids.null_count:
        return records
    seqs = pa.array(np.arange(first, first + records.num_rows, dtype=np.int64))
    filled = seqs if ids.null_count == records.num_rows else pc.if_else(pc.is_null(ids), seqs, ids)
    return records.set_column(records.schema.get_field_index(ROW_ID), ROW_ID, filled)


def _names(data: Any) -> list[str]:
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return list(data.schema.names)
    if isinstance(data, dict):
        return list(data)
    return []

"""Columns' defaults in stored rows: a column added to a table (``ALTER TABLE ... ADD COLUMN``), or
declared with a ``DEFAULT``, carries its default's value in its Arrow field's metadata
(:data:`~millpond.columns.DEFAULT`); records and state rows written before the column lack it, and
every reader — the log's, a state table's, compaction's — fills it in where it is missing."""

from __future__ import annotations

import base64
import json

import numpy as np
import pyarrow as pa

from millpond.columns import DEFAULT

__all__ = ["fill", "fit", "encode_default"]


def fill(field: pa.Field, n: int) -> pa.Array:
    """``n`` copies of the default of ``field`` (its :data:`~millpond.columns.DEFAULT` metadata: the
    value as a 1-row Arrow array, IPC in base64, evaluated when the column was declared; none or
    null: NULL)."""
    value = json.loads(field.metadata[DEFAULT]) if field.metadata and DEFAULT in field.metadata else None
    if value is None:
        return pa.nulls(n, field.type)
    return default_array(value).cast(field.type).take(np.zeros(n, dtype=np.int64))


def default_array(value: str) -> pa.Array:
    """The 1-row array a default's value is kept as (:func:`encode_default`)."""
    with pa.ipc.open_stream(pa.py_buffer(base64.b64decode(value))) as reader:
        return reader.read_all().column(0).combine_chunks()


def encode_default(value: pa.Array) -> str:
    """A default's value (a 1-row array of the column's type) as the catalog and metadata keep it."""
    sink = pa.BufferOutputStream()
    table = pa.table({"v": value})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode()


def fit(records: pa.Table, schema: pa.Schema) -> pa.Table:
    """Stored ``records`` as ``schema`` (some or all of their columns, in its order and types); a
    column they predate (added since: a field with a default) filled with its default."""
    for f in schema:
        if f.name not in records.column_names and f.metadata and DEFAULT in f.metadata:
            records = records.append_column(f.name, fill(f, records.num_rows))
    return records.select(schema.names).cast(schema)

"""Columns' defaults, kept in their Arrow fields' metadata: a column declared with a ``DEFAULT`` carries
its value (:data:`~millpond.columns.DEFAULT`: what an insert leaving it out gets), and a column added to
a table (``ALTER TABLE ... ADD COLUMN``) the value of the rows stored before it
(:data:`~millpond.columns.FILL`): records and state rows written before the column lack it, and every
reader — the log's, a state table's, compaction's — fills it in where it is missing."""

from __future__ import annotations

import base64
import functools
import json
from typing import Iterable

import numpy as np
import pyarrow as pa

from millpond.columns import DEFAULT, FILL

__all__ = ["fill", "filled", "default", "may_lack", "fit", "encode_default"]


def fill(field: pa.Field, n: int) -> pa.Array:
    """``n`` copies of the value of ``field`` in the stored rows older than it (its
    :data:`~millpond.columns.FILL` metadata: an added column's default when it was added)."""
    return _copies(field, FILL, n)


def default(field: pa.Field, n: int) -> pa.Array:
    """``n`` copies of the value an insert that leaves ``field`` out gives it (its
    :data:`~millpond.columns.DEFAULT` metadata; none: NULL)."""
    return _copies(field, DEFAULT, n)


def may_lack(field: pa.Field) -> bool:
    """Whether an insert may leave ``field`` out: it has a default, or was added (older producers)."""
    return bool(field.metadata) and (DEFAULT in field.metadata or FILL in field.metadata)


def _copies(field: pa.Field, key: bytes, n: int) -> pa.Array:
    value = json.loads(field.metadata[key]) if field.metadata and key in field.metadata else None
    if value is None:
        return pa.nulls(n, field.type)
    return default_array(value).cast(field.type).take(np.zeros(n, dtype=np.int64))


@functools.lru_cache(maxsize=256)
def default_array(value: str) -> pa.Array:
    """The 1-row array a default's value is kept as (:func:`encode_default`); decoded once a process."""
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
    column they predate (added since) filled with its value then (:func:`fill`)."""
    return filled(records, [f for f in schema if f.metadata and FILL in f.metadata]).select(schema.names).cast(schema)


def filled(rows: pa.Table, fields: Iterable[pa.Field]) -> pa.Table:
    """``rows`` with each of ``fields`` they lack (added since they were stored) as its :func:`fill`."""
    for f in fields:
        if f.name not in rows.column_names:
            rows = rows.append_column(f, fill(f, rows.num_rows))
    return rows

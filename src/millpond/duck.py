"""One in-memory DuckDB per process, for the ad-hoc queries on the driver and the joins in tasks.

Opening a DuckDB database costs ~50 ms; a cursor on an open one ~1 ms. A cursor is a connection
of its own (registered tables are per connection), so concurrent callers do not see each other.
Its TimeZone is UTC, millpond's (a TIMESTAMPTZ result is ``timestamp[us, tz=UTC]``, as stored).
It has millpond's DuckDB functions: :data:`millpond.pgnumeric.UDF` (PostgreSQL's numeric
division; the SQL that :func:`millpond.engine.expressions.to_duckdb` writes calls it).
"""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa
from duckdb.sqltypes import VARCHAR

from millpond import pgnumeric, pyfunctions

__all__ = ["cursor", "python_function"]

_database: duckdb.DuckDBPyConnection | None = None
_lock = threading.Lock()


def cursor() -> duckdb.DuckDBPyConnection:
    """A new connection to the process's DuckDB; close it when done."""
    global _database
    with _lock:
        if _database is None:
            _database = duckdb.connect()
            _database.execute("SET GLOBAL TimeZone = 'UTC'")
            _database.create_function(pgnumeric.UDF, pgnumeric.divide_arrays, [VARCHAR, VARCHAR],
                                      duckdb.struct_type({pgnumeric.FIELD: VARCHAR, pgnumeric.DIVISOR: VARCHAR}),
                                      type="arrow", null_handling="special")
        return _database.cursor()


def python_function(spec: pyfunctions.Spec, mode: str, out: pa.DataType) -> str:
    """The name of Python function ``spec`` (returning Arrow type ``out``) in the process's DuckDB
    (registered on first use)."""
    cursor().close()  # the database exists
    with _lock:
        return pyfunctions.register_duckdb(_database, spec, mode, out)

"""One in-memory DuckDB per process, for the ad-hoc queries on the driver and the joins in tasks.

Opening a DuckDB database costs ~50 ms; a cursor on an open one ~1 ms. A cursor is a connection
of its own (registered tables are per connection), so concurrent callers do not see each other.
Its TimeZone is UTC, millpond's (a TIMESTAMPTZ result is ``timestamp[us, tz=UTC]``, as stored).
It has millpond's DuckDB functions: :data:`millpond.pgnumeric.UDF` (PostgreSQL's numeric
division; the SQL that :func:`millpond.engine.expressions.to_duckdb` writes calls it) and the
JSONB operations (:data:`millpond.jsonb.OPERATIONS`).
"""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa
from duckdb.sqltypes import VARCHAR

from millpond import jsonb, pgnumeric, pyfunctions

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
            _jsonb_functions(_database)
        return _database.cursor()


def _jsonb_functions(con: duckdb.DuckDBPyConnection) -> None:
    """millpond.jsonb's operations, under the names the engine SQL calls them."""
    doc = duckdb.struct_type({jsonb.FIELD: VARCHAR})
    kinds = {"jsonb": doc, "text": VARCHAR, "int": duckdb.sqltype("INTEGER"), "bool": duckdb.sqltype("BOOLEAN"),
             "text[]": duckdb.list_type(VARCHAR), "jsonb[]": duckdb.list_type(doc)}
    for operation, (fn, params, result) in jsonb.OPERATIONS.items():
        names = ", ".join(f"a{i}" for i in range(len(params)))  # DuckDB counts the parameters it is given
        run = eval(f"lambda {names}: fn({names})", {"fn": _combined(fn)})  # noqa: S307 - generated from a count
        con.create_function(jsonb.udf_name(operation), run, [kinds[p] for p in params], kinds[result], type="arrow",
                            null_handling="special", side_effects=False)


def _combined(fn):  # noqa: ANN001, ANN202
    def go(*columns):  # noqa: ANN002, ANN202
        return fn(*(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns))
    return go


def python_function(spec: pyfunctions.Spec, mode: str, out: pa.DataType) -> str:
    """The name of Python function ``spec`` (returning Arrow type ``out``) in the process's DuckDB
    (registered on first use)."""
    cursor().close()  # the database exists
    with _lock:
        return pyfunctions.register_duckdb(_database, spec, mode, out)

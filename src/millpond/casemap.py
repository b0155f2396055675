"""PostgreSQL's ``upper()`` and ``lower()``, one answer on every path.

PostgreSQL (a UTF-8 database, libc's ``C.UTF-8``) maps each code point to its simple case mapping:
``upper('straße')`` is ``'STRAßE'``, ``lower('ΣΑΣ')`` is ``'σασ'``. Spark's ``upper``/``lower``
take ICU's full, context-sensitive mappings (``'STRASSE'``, ``'σας'``, ``upper('ﬁ')`` ``'FI'``):
they differ from PostgreSQL on 157 and 56 code points. DuckDB's differ on one: its ``upper('ß')``
is ``'ẞ'`` (checked over every code point up to U+2FFFF but the control characters against
PostgreSQL 15). So both engines evaluate them as DuckDB SQL with ``ß`` kept (:func:`duckdb_sql`):
DuckDB directly, Spark through an Arrow function that runs that SQL over its batch
(:func:`evaluate`, registered by :mod:`millpond.spark.functions`) — the rows one path makes are
the rows the other retracts.
"""

from __future__ import annotations

import pyarrow as pa

from millpond import duck

__all__ = ["FUNCTIONS", "duckdb_sql", "evaluate", "udf_name"]

FUNCTIONS = ("UPPER", "LOWER")


def duckdb_sql(func: str, x: str) -> str:
    """DuckDB SQL of PostgreSQL's ``func`` (``UPPER``/``LOWER``) of the text ``x`` (SQL)."""
    if func == "LOWER":
        return f"LOWER({x})"
    # DuckDB upper-cases ß as ẞ; PostgreSQL keeps it (it has no one-character capital in the simple mapping)
    return (f"CASE WHEN contains({x}, 'ß') THEN array_to_string(list_transform(string_split({x}, 'ß'), "
            f"lambda p: upper(p)), 'ß') ELSE upper({x}) END")


def udf_name(func: str) -> str:
    """The Arrow function's name in Spark SQL."""
    return f"mp_pg_{func.lower()}"


def evaluate(func: str, values: pa.Array) -> pa.Array:
    """``func`` of each of ``values`` (an Arrow array of text), as DuckDB computes it."""
    con = duck.cursor()
    try:
        con.register("records", pa.table({"x": values.cast(pa.string())}))
        return con.sql(f"SELECT {duckdb_sql(func, 'x')} AS y FROM records").to_arrow_table().column(0).combine_chunks()
    finally:
        con.close()

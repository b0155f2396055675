"""DuckDB's answer to a TPC-H query over the same rows, and the comparison of two answers: numbers
as floats equal to 1e-9 (millpond's NUMERIC quotient against DuckDB's double), rows as a multiset."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa

__all__ = ["answer", "rows", "same"]


def _value(v: object) -> object:
    if isinstance(v, (Decimal, float, int)) and not isinstance(v, bool):
        return float(v)
    return v


def rows(table: pa.Table) -> list[tuple]:
    """``table``'s rows, numbers as floats, sorted."""
    out = [tuple(_value(v) for v in row.values()) for row in table.to_pylist()]
    return sorted(out, key=lambda r: tuple((v is None, str(type(v)), round(v, 6) if isinstance(v, float) else v)
                                           for v in r))


def same(got: list[tuple], want: list[tuple]) -> bool:
    """Two :func:`rows` lists are equal, floats up to a relative 1e-9."""
    def close(a: object, b: object) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        return a == b
    return len(got) == len(want) and all(len(g) == len(w) and all(close(a, b) for a, b in zip(g, w))
                                         for g, w in zip(got, want))


def answer(tables: "dict[str, pa.Table] | Path", sql: str) -> list[tuple]:
    """DuckDB's rows for ``sql`` over ``tables``: name -> rows, or a folder of ``<name>.parquet``
    files (read by DuckDB where they are, in at most 1 GB of memory: it spills to the folder
    beyond, so the check weighs little in a benchmark's peak)."""
    con = duckdb.connect()
    try:
        if isinstance(tables, Path):
            con.execute(f"SET memory_limit = '1GB'; SET temp_directory = '{(tables / '.duckdb-spill').as_posix()}'")
            for f in sorted(tables.glob("*.parquet")):
                con.execute(f"CREATE VIEW {f.stem} AS SELECT * FROM read_parquet('{f.as_posix()}')")
        else:
            for name, t in tables.items():
                con.register(name, t)
        return rows(con.sql(sql).to_arrow_table())
    finally:
        con.close()

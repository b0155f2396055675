"""Ad-hoc queries: a SELECT answered by DuckDB over the committed snapshots of the tables and
views it reads (read-your-writes after ``FLUSH``). DuckDB SQL is generated here, where it runs.

The query comes bound (:func:`millpond.sql.query.bind_query`): its internal calls expand to
DuckDB's spelling of PostgreSQL's meaning (:mod:`millpond.engine.expressions`). An INTERVAL column of
the result is Arrow ``month_day_nano_interval`` (stored, and in DuckDB, it is the struct of
:data:`millpond.catalog.types.INTERVAL`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
from sqlglot import exp

from millpond import duck
from millpond.catalog.types import INTERVAL
from millpond.engine.expressions import to_duckdb
from millpond.errors import SqlError
from millpond.log.conform import from_interval

if TYPE_CHECKING:
    from millpond.engine.runtime import Runtime

__all__ = ["answer"]


def answer(rt: Runtime, query: exp.Expression, *, hidden: bool = False) -> pa.Table:
    """The result of ``query``; ``hidden`` exposes tables' ``_row_id`` (for UPDATE and DELETE)."""
    con = duck.cursor()
    try:
        ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
        for name in {t.name for t in query.find_all(exp.Table) if isinstance(t.this, exp.Identifier)} - ctes:
            con.register(name, rt.snapshot(name, hidden=hidden))
        try:
            result = con.sql(to_duckdb(query)).to_arrow_table()
        except duckdb.Error as exc:
            raise SqlError(f"query failed: {exc}") from None
        return result if hidden else _shown(result)
    finally:
        con.close()


def _shown(table: pa.Table) -> pa.Table:
    """``table`` with its INTERVAL columns as ``month_day_nano_interval`` (a ``hidden`` read keeps
    them stored: UPDATE and DELETE append the rows they read)."""
    for i, f in enumerate(table.schema):
        if f.type.equals(INTERVAL):
            table = table.set_column(i, pa.field(f.name, pa.month_day_nano_interval(), f.nullable),
                                     from_interval(table.column(i)))
    return table

"""Clients' catalog queries over the wire (``information_schema``, ``pg_catalog``, ``version()``,
psql's ``\\dt``): answered by DuckDB, whose PostgreSQL catalogs list millpond's tables and views
(their columns, no rows)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
from sqlglot import exp

from millpond.errors import SqlError

if TYPE_CHECKING:
    from millpond.api import Database

__all__ = ["catalog_query", "catalog_rows", "SERVER_VERSION"]

SERVER_VERSION = "16.0 (millpond)"

_CATALOG_SCHEMAS = {"pg_catalog", "information_schema"}
_CATALOG_FUNCTIONS = {"version", "current_database", "current_schema", "current_schemas", "current_user",
                      "session_user", "pg_backend_pid", "has_table_privilege", "pg_get_userbyid",
                      "pg_table_is_visible", "format_type", "obj_description", "col_description"}


def catalog_query(s: exp.Expression) -> bool:
    if not isinstance(s, exp.Query):
        return False
    if any(t.db in _CATALOG_SCHEMAS or t.name.startswith("pg_") for t in s.find_all(exp.Table)):
        return True
    text = s.sql("postgres").lower()
    return any(re.search(rf"\b{name}\s*\(", text) for name in _CATALOG_FUNCTIONS) \
        or bool(re.search(r"\bcurrent_(user|schema|database)\b", text))


def catalog_rows(db: "Database", sql: str) -> pa.Table:
    """A client's catalog query, answered by DuckDB over empty tables shaped like millpond's
    tables and views (so ``information_schema.tables``, ``pg_class``... list them)."""
    con = duckdb.connect()  # a database of its own: the tables made here are seen by this query only
    try:
        catalog = db.catalog  # one catalog version
        relations = {**{t.name: t.schema for t in catalog.tables.values()},
                     **{v.name: v.schema for v in catalog.views.values()}}
        for name, schema in relations.items():
            con.register("_millpond_empty", schema.empty_table())
            if name in catalog.tables:
                con.sql(f'CREATE TABLE "{name}" AS SELECT * FROM _millpond_empty')
            else:  # a view of typed NULLs (no table behind it to list)
                rel = con.sql("SELECT * FROM _millpond_empty")
                cols = ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in zip(rel.columns, rel.types))
                con.sql(f'CREATE VIEW "{name}" AS SELECT {cols} WHERE false')
            con.unregister("_millpond_empty")
        sql = _duckdb_catalog_sql(sql)
        for macro in _MACROS:  # what PostgreSQL has and DuckDB's catalogs lack (or answer as DuckDB)
            try:
                con.sql(f"CREATE OR REPLACE MACRO {macro}")
            except Exception:  # noqa: BLE001  a built-in of this DuckDB: kept
                pass
        return con.sql(sql).to_arrow_table()
    except Exception as exc:
        raise SqlError(f"catalog query failed: {exc}") from None
    finally:
        con.close()


def _duckdb_catalog_sql(sql: str) -> str:
    """PostgreSQL spellings of catalog queries (psql's) that DuckDB reads otherwise: calls
    qualified with ``pg_catalog.``, ``OPERATOR(pg_catalog.~)``, ``COLLATE pg_catalog.default``."""
    sql = re.sub(r"OPERATOR\(pg_catalog\.([~!=<>]+)\)", r"\1", sql)
    sql = re.sub(r"COLLATE\s+pg_catalog\.\w+", "", sql)
    return re.sub(r"pg_catalog\.(\w+)\s*\(", r"\1(", sql)


_MACROS = [f"version() AS 'PostgreSQL {SERVER_VERSION}'", "pg_get_userbyid(id) AS 'millpond'",
           "pg_encoding_to_char(e) AS 'UTF8'"]  # (DuckDB's catalog views call its own current_database())

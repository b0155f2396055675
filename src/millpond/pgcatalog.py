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
        for view in _PG_VIEWS:  # what psql's \\d and \\l read that DuckDB's catalogs lack
            con.sql(f"CREATE OR REPLACE VIEW {view}")
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
    sql = re.sub(r"::\s*(?:pg_catalog\.)?(regtype|regclass|regproc|regnamespace)\b", "", sql)
    sql = re.sub(r"::\s*pg_catalog\.(\w+)", r"::\1", sql)
    sql = re.sub(rf"\b(?:pg_catalog\.)?({'|'.join(_OWN)})\b(?!\s*\()", r"main.mp_\1", sql)
    sql = re.sub(r"COLLATE\s+pg_catalog\.\w+", "", sql)
    return re.sub(r"pg_catalog\.(\w+)\s*\(", r"\1(", sql)


# psql's catalogs DuckDB lacks (empty: millpond has no inheritance, triggers, policies, rules...) or
# lacks columns of, as views ``main.mp_<name>`` that the client's SQL is rewritten to read
_PG_VIEWS = [
    # a view is a materialized view ('m'), as PostgreSQL's \\dm lists it
    "mp_pg_class AS SELECT * REPLACE (CASE relkind WHEN 'v' THEN 'm' ELSE relkind END AS relkind), "
    "false AS relforcerowsecurity FROM pg_catalog.pg_class WHERE relname NOT LIKE 'mp!_pg!_%' ESCAPE '!'",
    "mp_pg_database AS SELECT 1 AS oid, 'millpond' AS datname, 10 AS datdba, 6 AS encoding, 'C' AS datcollate, "
    "'C' AS datctype, NULL::VARCHAR AS daticulocale, NULL::VARCHAR AS daticurules, 'c' AS datlocprovider, "
    "NULL::VARCHAR[] AS datacl, true AS datallowconn, false AS datistemplate, -1 AS datconnlimit, 0 AS dattablespace",
    "mp_pg_inherits AS SELECT 0 AS inhrelid, 0 AS inhparent, 0 AS inhseqno, false AS inhdetachpending WHERE false",
    "mp_pg_trigger AS SELECT 0 AS oid, 0 AS tgrelid, 0 AS tgparentid, '' AS tgname, false AS tgisinternal, "
    "'O' AS tgenabled WHERE false",
    "mp_pg_policy AS SELECT 0 AS oid, '' AS polname, 0 AS polrelid, 'r' AS polcmd, true AS polpermissive, "
    "NULL::INT[] AS polroles, NULL::VARCHAR AS polqual, NULL::VARCHAR AS polwithcheck WHERE false",
    "mp_pg_publication AS SELECT 0 AS oid, '' AS pubname, false AS puballtables, false AS pubinsert, "
    "false AS pubupdate, false AS pubdelete, false AS pubtruncate, false AS pubviaroot WHERE false",
    "mp_pg_publication_rel AS SELECT 0 AS oid, 0 AS prpubid, 0 AS prrelid, NULL::VARCHAR AS prqual, "
    "NULL::INT[] AS prattrs WHERE false",
    "mp_pg_publication_namespace AS SELECT 0 AS oid, 0 AS pnpubid, 0 AS pnnspid WHERE false",
    "mp_pg_statistic_ext AS SELECT 0 AS oid, 0 AS stxrelid, '' AS stxname, 0 AS stxnamespace, 0 AS stxowner, "
    "NULL::INT[] AS stxkeys, NULL::VARCHAR[] AS stxkind, -1 AS stxstattarget, NULL::VARCHAR AS stxexprs WHERE false",
    "mp_pg_roles AS SELECT 10 AS oid, 'millpond' AS rolname, true AS rolsuper, true AS rolcanlogin",
    "mp_pg_rewrite AS SELECT 0 AS oid, '' AS rulename, 0 AS ev_class, '1' AS ev_type, 'O' AS ev_enabled, "
    "false AS is_instead WHERE false",
]
_OWN = [v.split(" ", 1)[0][len("mp_"):] for v in _PG_VIEWS]

_MACROS = [f"version() AS 'PostgreSQL {SERVER_VERSION}'", "pg_get_userbyid(id) AS 'millpond'",
           "pg_encoding_to_char(e) AS 'UTF8'",
           "pg_get_viewdef(v, pretty := false) AS NULL", "pg_get_expr(e, r, pretty := false) AS NULL",
           "pg_get_constraintdef(c, pretty := false) AS NULL", "pg_get_indexdef(i, n := 0, pretty := false) AS NULL",
           "pg_get_statisticsobjdef_columns(s) AS NULL", "pg_get_triggerdef(t, pretty := false) AS NULL",
           "pg_get_ruledef(r, pretty := false) AS NULL", "pg_relation_is_publishable(r) AS false",
           "array_upper(a, d) AS len(a)"]  # (DuckDB's catalog views call its own current_database())

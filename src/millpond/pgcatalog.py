"""Clients' catalog queries over the wire (``information_schema``, ``pg_catalog``, ``version()``,
psql's ``\\dt``): answered by DuckDB, whose PostgreSQL catalogs list millpond's tables and views
(their columns, no rows). A column's type in ``pg_attribute`` is the PostgreSQL type the wire sends
its values as (:func:`millpond.serve.pgtext.oid`: an average is a ``numeric``, an INTERVAL an
``interval``, not the struct millpond keeps them as), and ``format_type`` names it as PostgreSQL
does (``integer``, ``timestamp without time zone``, ``integer[]``...): psql's ``\\d`` prints
PostgreSQL's names."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
from sqlglot import exp

from millpond.catalog.types import INTERVAL
from millpond.errors import SqlError
from millpond.serve.pgtext import ARRAY_OIDS, oid

if TYPE_CHECKING:
    from millpond.api import Database
    from millpond.catalog import Catalog

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
        con.register("mp_pg_columns", _columns(catalog))
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


def _columns(catalog: "Catalog") -> pa.Table:
    """Each column of millpond's tables and views as ``pg_attribute`` holds it: its PostgreSQL type
    (the OID the wire sends), a table's numeric's precision and scale (its typmod as PostgreSQL
    encodes it, ``(precision << 16 | scale) + 4``; a view's numeric is ``numeric``, as PostgreSQL
    types an expression), and whether it is NOT NULL (a table's primary key and NOT NULL columns: a
    NULL is refused)."""
    rows = []
    for rel in [*catalog.tables.values(), *catalog.views.values()]:
        key = set(getattr(rel, "primary_key", ())) | {c.name for c in getattr(rel, "columns", ()) if c.not_null}
        for f in rel.schema:
            typmod = ((f.type.precision << 16) | f.type.scale) + 4 \
                if pa.types.is_decimal(f.type) and rel.name in catalog.tables else -1
            rows.append({"relname": rel.name, "attname": f.name, "atttypid": oid(_queried(f.type)),
                         "atttypmod": typmod, "attnotnull": f.name in key})
    return pa.Table.from_pylist(rows, pa.schema([("relname", pa.string()), ("attname", pa.string()),
                                                 ("atttypid", pa.int32()), ("atttypmod", pa.int32()),
                                                 ("attnotnull", pa.bool_())]))


def _queried(t: pa.DataType) -> pa.DataType:
    """A column's type as a query gives it: an INTERVAL (kept as a struct) as Arrow's interval."""
    if t == INTERVAL:
        return pa.month_day_nano_interval()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_queried(t.value_type))
    return t


# PostgreSQL's names of the types a column can have (format_type's, with its typname in pg_type)
_TYPES = {16: ("boolean", "bool"), 17: ("bytea", "bytea"), 20: ("bigint", "int8"), 21: ("smallint", "int2"),
          23: ("integer", "int4"), 25: ("text", "text"), 700: ("real", "float4"), 701: ("double precision", "float8"),
          1043: ("character varying", "varchar"), 1082: ("date", "date"), 1083: ("time without time zone", "time"),
          1114: ("timestamp without time zone", "timestamp"), 1184: ("timestamp with time zone", "timestamptz"),
          1186: ("interval", "interval"), 1700: ("numeric", "numeric"), 2249: ("record", "record"),
          3802: ("jsonb", "jsonb")}
_TYPES.update({array: (f"{_TYPES[element][0]}[]", f"_{_TYPES[element][1]}") for element, array in ARRAY_OIDS.items()})


def _category(type_oid: int) -> str:
    """A type's ``typcategory`` in PostgreSQL (of the types DuckDB's ``pg_type`` lacks)."""
    return "A" if type_oid in ARRAY_OIDS.values() else {25: "S", 2249: "P"}.get(type_oid, "U")


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
    # a column's type as PostgreSQL's (_columns); DuckDB's own decimals' typmods as PostgreSQL encodes them
    "mp_pg_attribute AS SELECT a.* REPLACE (coalesce(m.atttypid, a.atttypid) AS atttypid, "
    "CASE WHEN m.atttypid IS NOT NULL THEN m.atttypmod WHEN a.atttypmod > 0 "
    "THEN (((a.atttypmod // 1000) << 16) | (a.atttypmod % 1000)) + 4 ELSE a.atttypmod END AS atttypmod, "
    "coalesce(m.attnotnull, a.attnotnull) AS attnotnull) FROM pg_catalog.pg_attribute a "
    "LEFT JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
    "LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN mp_pg_columns m ON n.nspname = 'main' AND m.relname = c.relname AND m.attname = a.attname",
    # the types a column can have that DuckDB's pg_type lacks (text, jsonb, record, arrays)
    "mp_pg_type AS SELECT * FROM pg_catalog.pg_type UNION ALL BY NAME SELECT * FROM (VALUES "
    + ", ".join(f"({o}, '{typname}', '{_category(o)}')" for o, (_, typname) in _TYPES.items())
    + ") AS m(oid, typname, typcategory) WHERE oid NOT IN (SELECT oid FROM pg_catalog.pg_type WHERE oid IS NOT NULL)",
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
           "array_upper(a, d) AS len(a)",  # (DuckDB's catalog views call its own current_database())
           # PostgreSQL's name of a type (psql's \\d), a numeric's precision and scale from its typmod
           "format_type(t, m) AS CASE t " + " ".join(f"WHEN {o} THEN '{name}'" for o, (name, _) in _TYPES.items())
           + " ELSE pg_catalog.format_type(t, -1) END || CASE WHEN t = 1700 AND m >= 4 "
           "THEN concat('(', (m - 4) >> 16, ',', (m - 4) & 65535, ')') ELSE '' END"]

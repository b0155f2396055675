"""millpond's statements as PostgreSQL runs them: the oracle side of sqllogictest.

A file is written in millpond's SQL, which is PostgreSQL's plus a few statements of its own. The
mirror changes only what PostgreSQL has no word for, and keeps the meaning:

- ``CREATE MATERIALIZED VIEW v [WITH (…)] AS q`` is ``CREATE VIEW v AS q`` (a view that is always
  current: what a materialized view is after ``FLUSH``); ``DROP MATERIALIZED VIEW`` is ``DROP VIEW``;
- ``CREATE TABLE … APPEND ONLY`` / ``WITH (append_only = …)`` is a plain table;
- ``INSERT`` into a table with a primary key is an upsert in millpond: ``ON CONFLICT (key) DO
  UPDATE`` every other column;
- ``TUMBLE(t, ts, size)`` and ``HOP(t, ts, slide, size)`` in ``FROM`` are spelled out as the rows
  they stand for (``t``'s columns, ``window_start``, ``window_end``; windows aligned to the Unix
  epoch; rows with a NULL time in none), named ``tumble``/``hop`` unless aliased, as in millpond;
- ``FLUSH`` does nothing, and millpond's own statements (``SHOW``, ``SET``, ``DESCRIBE``,
  ``EXPLAIN``) are not run: :meth:`Mirror.translate` returns None.

    >>> m = Mirror()
    >>> m.translate("CREATE TABLE t (k INT PRIMARY KEY, v INT) APPEND ONLY")
    'CREATE TABLE t (k INT PRIMARY KEY, v INT)'
    >>> m.translate("INSERT INTO t VALUES (1, 2)")
    'INSERT INTO t VALUES (1, 2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v'
    >>> m.translate("CREATE MATERIALIZED VIEW v WITH (on_error = 'null') AS SELECT k FROM t")
    'CREATE VIEW v AS SELECT k FROM t'
    >>> m.translate("FLUSH") is None
    True
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

__all__ = ["Mirror"]

_MILLPOND_ONLY = re.compile(r"^\s*(FLUSH|SHOW|SET|DESCRIBE|EXPLAIN)\b", re.IGNORECASE)
_CREATE_VIEW = re.compile(r"^(\s*CREATE\s+)MATERIALIZED\s+(VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?[\w\".]+\s*(?:\([^)]*\)\s*)?)"
                          r"(?:WITH\s*\([^)]*\)\s*)?(AS\b)", re.IGNORECASE)
_DROP_VIEW = re.compile(r"^(\s*DROP\s+)MATERIALIZED\s+(VIEW\b)", re.IGNORECASE)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\b", re.IGNORECASE)
_APPEND_ONLY = re.compile(r"\)\s*(?:APPEND\s+ONLY|WITH\s*\(\s*append_only\s*=\s*\w+\s*\))\s*;?\s*$", re.IGNORECASE)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+([\w\"]+)", re.IGNORECASE)
_WINDOWS = re.compile(r"\b(TUMBLE|HOP)\s*\(", re.IGNORECASE)
_EPOCH = "TIMESTAMP '1970-01-01 00:00:00'"


class Mirror:
    """Translates one file's statements in order (it remembers each table's primary key)."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[list[str], list[str]]] = {}  # table -> (key columns, other columns)

    def translate(self, sql: str) -> str | None:
        """``sql`` for PostgreSQL, or None when it has no PostgreSQL counterpart to run."""
        sql = sql.strip().rstrip(";").rstrip()
        if _MILLPOND_ONLY.match(sql):
            return None
        if _CREATE_TABLE.match(sql):
            sql = _APPEND_ONLY.sub(")", sql)
            self._remember(sql)
            return sql
        sql = _CREATE_VIEW.sub(r"\1\2\3", sql)
        sql = _DROP_VIEW.sub(r"\1\2", sql)
        if _WINDOWS.search(sql):
            sql = _spell_out_windows(sql)
        insert = _INSERT.match(sql)
        if insert and insert.group(1).strip('"').lower() in self._keys and "ON CONFLICT" not in sql.upper():
            key, others = self._keys[insert.group(1).strip('"').lower()]
            action = ("DO UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in others)) if others else "DO NOTHING"
            sql = f"{sql} ON CONFLICT ({', '.join(key)}) {action}"
        return sql

    def _remember(self, sql: str) -> None:
        try:
            create = sqlglot.parse_one(sql, read="postgres")
        except sqlglot.errors.ParseError:
            return  # PostgreSQL will say what is wrong with it
        schema = create.this
        if not isinstance(schema, exp.Schema):
            return
        columns = [c.name for c in schema.expressions if isinstance(c, exp.ColumnDef)]
        key = [c.name for c in schema.expressions if isinstance(c, exp.ColumnDef)
               and any(isinstance(k.kind, exp.PrimaryKeyColumnConstraint) for k in c.constraints)]
        for constraint in schema.expressions:
            if isinstance(constraint, exp.PrimaryKey):
                key += [e.name for e in constraint.expressions]
        if key:
            self._keys[schema.this.name.lower()] = (key, [c for c in columns if c not in key])


def _spell_out_windows(sql: str) -> str:
    """Each ``TUMBLE``/``HOP`` in ``FROM`` as a subquery of the rows it stands for."""
    def windows(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous)
                and node.this.name.upper() in ("TUMBLE", "HOP")):
            return node
        table, ts, *sizes = node.this.expressions
        slide, size = sizes[0].sql("postgres"), sizes[-1].sql("postgres")
        source, time = table.sql("postgres"), ts.sql("postgres")
        start = f"date_bin({slide}, {time}, {_EPOCH})"
        if node.this.name.upper() == "HOP":
            start = f"{start} - _hops.k * {slide}"
            count = f"CEIL(EXTRACT(EPOCH FROM {size}) / EXTRACT(EPOCH FROM {slide}))::int"
            hops = f"CROSS JOIN generate_series(0, {count} - 1) AS _hops(k)"
        else:
            hops = ""
        rows = sqlglot.parse_one(f"SELECT {source}.*, {start} AS window_start, {start} + {size} AS window_end "
                                 f"FROM {source} {hops} WHERE {time} IS NOT NULL", read="postgres")
        alias = node.alias or node.this.name.lower()
        return exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    return sqlglot.parse_one(sql, read="postgres").transform(windows).sql("postgres")

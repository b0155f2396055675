"""Spark's SQL as the PostgreSQL that means the same: what a Spark Declarative Pipelines project's
SQL files hold (``pipelines.py``) is planned by millpond's PostgreSQL planner.

sqlglot reads Spark's dialect and writes PostgreSQL's (backquoted names, double-quoted strings,
``/`` of integers as a double, ``nvl``, ``if``, ``concat``...); the rules here add what it does not
give, and refuse by name what has no translation: :func:`from_spark`. :func:`declared` reads a
definition's column list (``(k BIGINT COMMENT '…', …)``).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from millpond.errors import SqlError

__all__ = ["from_spark", "declared"]


def declared(head: str) -> list[tuple[str, str | None]]:
    """The columns a definition declares (``v (k BIGINT COMMENT '…', name STRING) AS …``): name and
    PostgreSQL type (None where only the name is given); [] for none."""
    head = head.strip()
    if not head.startswith("("):
        return []
    depth = 0
    for i, ch in enumerate(head):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            break
    try:
        schema = sqlglot.parse_one(f"CREATE TABLE t {head[:i + 1]}", read="spark").this
    except sqlglot.errors.SqlglotError as exc:
        raise SqlError(f"the declared columns: {str(exc).splitlines()[0]} (constraints and expectations are not "
                       "supported yet)") from None
    out = []
    for col in schema.expressions:
        if not isinstance(col, exp.ColumnDef):
            raise SqlError(f"{col.sql(dialect='spark')!r} in the declared columns is not supported yet (constraints "
                           "and expectations)")
        kind = col.args.get("kind")
        out.append((col.name.lower(), kind.sql(dialect="postgres") if kind is not None else None))
    return out


def from_spark(query: str) -> str:
    """An SDP query (Spark's SQL: backquoted names, double-quoted strings, ``/`` giving a double,
    Spark's function names) as the PostgreSQL query that means the same; what has no translation
    is refused by name."""
    try:
        tree = sqlglot.parse_one(query, read="spark").transform(_lateral_view).transform(_spark_functions)
        return tree.sql(dialect="postgres", unsupported_level=sqlglot.ErrorLevel.RAISE)
    except sqlglot.errors.SqlglotError as exc:
        raise SqlError(str(exc).splitlines()[0]) from None


def _spark_functions(node: exp.Expression) -> exp.Expression:
    """Spark's functions whose PostgreSQL spelling sqlglot does not give: ``size(a)`` is
    ``cardinality`` (0 for an empty array); ``collect_list``/``collect_set`` are refused by name."""
    if isinstance(node, exp.ArraySize):
        return exp.Anonymous(this="cardinality", expressions=[node.this.transform(_spark_functions)])
    if isinstance(node, (exp.ArrayUniqueAgg, exp.ArrayAgg)):  # Spark's: NULLs dropped, [] for none
        raise sqlglot.errors.UnsupportedError(f"{'collect_set' if isinstance(node, exp.ArrayUniqueAgg) else 'collect_list'}"
                                              " is not supported yet in a pipeline's SQL")
    return node


def _lateral_view(node: exp.Expression) -> exp.Expression:
    """Spark's ``FROM t LATERAL VIEW explode(a) e AS x`` as ``FROM t CROSS JOIN LATERAL unnest(a)
    AS e(x)``; the forms with no PostgreSQL twin here are refused by name."""
    if not isinstance(node, exp.Select) or not node.args.get("laterals"):
        return node
    joins = list(node.args.get("joins") or [])
    for lateral in node.args["laterals"]:
        fn = lateral.this
        if lateral.args.get("outer"):
            raise sqlglot.errors.UnsupportedError("LATERAL VIEW OUTER is not supported yet (LATERAL VIEW is)")
        if type(fn) is not exp.Explode:  # posexplode, inline, json_tuple, stack...
            raise sqlglot.errors.UnsupportedError(f"LATERAL VIEW {fn.sql(dialect='spark').split('(')[0]} is not "
                                                  "supported (LATERAL VIEW explode is)")
        unnest = exp.Unnest(expressions=[fn.this.copy()])
        joins.append(exp.Join(this=exp.Lateral(this=unnest, alias=lateral.args["alias"].copy()), kind="CROSS"))
    node.set("laterals", None)
    node.set("joins", joins)
    return node

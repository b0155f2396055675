"""SELECT -> incremental plan (:mod:`millpond.engine.plan`).

A materialized view may use: joins (inner, LEFT/RIGHT/FULL outer, cross, extra non-equi
conditions, self-joins, any number of tables), ``WHERE``, ``GROUP BY`` or whole-input
aggregation with COUNT(*), COUNT(x), SUM, AVG, MIN, MAX, COUNT/SUM/AVG(DISTINCT x),
``FILTER (WHERE ...)``, ``HAVING``, ``SELECT DISTINCT``, ``UNION [ALL]``, subqueries in FROM,
CTEs, other views, ``ORDER BY ... LIMIT/OFFSET``, ``ROW_NUMBER() OVER (...)`` filtered by
``rn <= N``, and the time-window table functions ``TUMBLE(t, ts, size)`` and
``HOP(t, ts, slide, size)``.

The stages, one concern per module:

- :mod:`~millpond.sql.planner.prepare` — binding, as an ordered tuple of rules: time-window table
  functions, table names, unsupported subqueries, column qualification (sqlglot's ``qualify``);
- :mod:`~millpond.sql.planner.query` — the driver over queries, UNIONs, FROM items and SELECTs;
- :mod:`~millpond.sql.planner.pushdown` — WHERE conjuncts below the joins;
- :mod:`~millpond.sql.planner.joins` — join keys from ON and WHERE, residual conditions;
- :mod:`~millpond.sql.planner.aggregates` — the aggregate rewrite, DISTINCT;
- :mod:`~millpond.sql.planner.topn` — ORDER BY ... LIMIT and ROW_NUMBER;
- :mod:`~millpond.sql.planner.windows` — TUMBLE and HOP.

Plans keep sqlglot expressions; no engine's SQL is generated here.

    >>> plan, depends = plan_view(parse("SELECT k, COUNT(*) AS n FROM t GROUP BY k")[0], catalog)  # doctest: +SKIP
"""

from __future__ import annotations

from sqlglot import exp

from millpond.catalog import Catalog
from millpond.engine import plan as P
from millpond.sql.planner.context import Context
from millpond.sql.planner.prepare import prepare
from millpond.sql.planner.query import plan_query

__all__ = ["plan_view"]


def plan_view(select: exp.Expression, catalog: Catalog) -> tuple[P.Materialize, tuple[str, ...]]:
    """Plan a view's query; return the plan and the tables and views it reads directly."""
    ctx = Context(catalog)
    node, _ = plan_query(ctx, prepare(ctx, select), {})
    return P.Materialize(node, ctx.next_id()), tuple(sorted(ctx.depends))

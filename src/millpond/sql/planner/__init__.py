"""SELECT -> incremental plan (:mod:`millpond.engine.plan`).

A materialized view may use: joins (inner, LEFT/RIGHT/FULL outer, cross, extra non-equi
conditions, self-joins, any number of tables), ``WHERE``, ``GROUP BY`` or whole-input
aggregation with COUNT(*), COUNT(x), SUM, AVG, MIN, MAX, COUNT/SUM/AVG(DISTINCT x),
``FILTER (WHERE ...)``, ``HAVING``, ``SELECT DISTINCT``, ``UNION [ALL]``, subqueries in FROM,
``[NOT] IN (SELECT ...)`` and ``[NOT] EXISTS (...)`` ANDed in WHERE, scalar aggregate subqueries
in SELECT, WHERE and HAVING (uncorrelated, or correlated by equalities), CTEs, other views,
``ORDER BY ... LIMIT/OFFSET``, ``ROW_NUMBER() OVER (...)`` filtered by ``rn <= N``, and the
time-window table functions ``TUMBLE(t, ts, size)`` and ``HOP(t, ts, slide, size)``.

The stages, one concern per module:

- :mod:`~millpond.sql.planner.prepare` — binding, as an ordered tuple of rules: time-window table
  functions, table names, column qualification (sqlglot's ``qualify``), subqueries, PostgreSQL's
  meaning (:mod:`millpond.sql.semantics`);
- :mod:`~millpond.sql.planner.subqueries` — subqueries outside FROM as joins: semi-joins, anti-joins,
  NOT IN with PostgreSQL's NULL rules, scalar aggregates joined on their correlation keys;
- :mod:`~millpond.sql.planner.query` — the driver over queries, UNIONs, FROM items and SELECTs;
- :mod:`~millpond.sql.planner.pushdown` — WHERE conjuncts below the joins;
- :mod:`~millpond.sql.planner.order` — the order of inner joins, by estimated intermediate rows;
- :mod:`~millpond.sql.planner.joins` — join keys from ON and WHERE, residual conditions;
- :mod:`~millpond.sql.planner.aggregates` — the aggregate rewrite, DISTINCT;
- :mod:`~millpond.sql.planner.eager` — an aggregate over a join pre-aggregating one side (views only);
- :mod:`~millpond.sql.planner.topn` — ORDER BY ... LIMIT and ROW_NUMBER;
- :mod:`~millpond.sql.planner.windows` — TUMBLE and HOP;
- :mod:`~millpond.sql.planner.prune` — each node keeps only the columns used above it.

Plans keep sqlglot expressions; no engine's SQL is generated here. A last pass marks each
aggregation whose input can only grow (every source an APPEND ONLY table, through filters,
projections, windows, unions and inner joins): its MIN and MAX then keep one value per group,
not the multiset a retraction would need.

    >>> plan, depends = plan_view(parse("SELECT k, COUNT(*) AS n FROM t GROUP BY k")[0], catalog)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from sqlglot import exp

from millpond.catalog import Catalog
from millpond.engine import plan as P
from millpond.sql.planner.context import Context
from millpond.sql.planner.eager import eager as eager_aggregation
from millpond.sql.planner.prepare import prepare
from millpond.sql.planner.prune import prune as prune_columns
from millpond.sql.planner.query import plan_query

__all__ = ["plan_view"]


def plan_view(select: exp.Expression, catalog: Catalog, *, views: bool = False, fixed_outputs: bool = False,
              eager: bool = False, legacy: bool = False,
              sizes: dict[str, int] | None = None, shares: dict[str, float] | None = None,
              sample: Callable | None = None) -> tuple[P.Materialize, tuple[str, ...]]:
    """Plan a view's query; return the plan and the tables and views it reads directly. With
    ``views``, a view it reads (not a partial one) is a :class:`~millpond.engine.plan.Source` of
    the view's changes, which the epoch computes first; else the view's query is inlined (as
    views created before millpond read views did). ``fixed_outputs``: its quotient columns are
    ``numeric(38,16)`` (a flow's, written to a table). ``eager``: aggregates over joins
    pre-aggregate a side where they can (:mod:`~millpond.sql.planner.eager`; a view's choice).
    ``legacy``: as views created before 2026-11-30 were planned, to derive their stored plans again
    (their state was built by them): every column through joins (no
    :mod:`~millpond.sql.planner.prune`), every eager partial. ``sizes``: the rows of the tables it reads,
    by which inner joins are ordered (:mod:`~millpond.sql.planner.order`; None: FROM order, as
    views created before 2026-12-01 were planned); ``shares``: the share of a table's rows its filters
    keep, as sampled (``sample(table, columns, condition)``; it fills ``shares``) at CREATE."""
    ctx = Context(catalog, views=views, fixed_outputs=fixed_outputs, sizes=None if legacy else sizes, shares=shares,
                  sample=sample)
    node, _ = plan_query(ctx, prepare(ctx, select), {})
    if eager:
        node = eager_aggregation(ctx, node, wide=legacy)
    if not legacy:
        node = prune_columns(node)
    node = _mark_append_only(node, {t.name for t in catalog.tables.values() if t.append_only})
    return P.Materialize(node, ctx.next_id(), key=P.row_key(node)), tuple(sorted(ctx.depends))


def _mark_append_only(node: P.Node, append_only: set[str]) -> P.Node:
    """``node`` with ``Aggregate.append_only`` set where the aggregate's input only ever inserts."""
    if isinstance(node, P.Source):
        return node
    if isinstance(node, P.Join):
        node = dataclasses.replace(node, left=_mark_append_only(node.left, append_only),
                                   right=_mark_append_only(node.right, append_only))
    elif isinstance(node, P.Union):
        node = dataclasses.replace(node, inputs=tuple(_mark_append_only(i, append_only) for i in node.inputs))
    else:
        node = dataclasses.replace(node, input=_mark_append_only(node.input, append_only))
    if isinstance(node, P.Aggregate):
        node = dataclasses.replace(node, append_only=_inserts_only(node.input, append_only))
    return node


def _inserts_only(node: P.Node, append_only: set[str]) -> bool:
    if isinstance(node, P.Source):
        return node.table in append_only
    if isinstance(node, (P.Filter, P.Project, P.Window, P.Union)) or (isinstance(node, P.Join) and node.kind == "inner"):
        return all(_inserts_only(i, append_only) for i in P.inputs(node))
    return False  # aggregates, top-N and outer joins retract rows they emitted

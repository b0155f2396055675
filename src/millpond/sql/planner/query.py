"""The planner's driver: queries, UNIONs, FROM items and SELECT blocks.

Inside a SELECT, every FROM item's columns are renamed ``<alias>__<column>`` (self-joins and
clashing names stay apart) and every item that is not a plain table is re-projected to those
names. Then, in order: filter pushdown, joins, the remaining WHERE conjuncts, time windows,
aggregation or ROW_NUMBER, DISTINCT, ORDER BY ... LIMIT.
"""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.aggregates import plan_aggregate, plan_distinct
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import column, conjuncts, rename, unalias
from millpond.sql.planner.joins import join_kind, plan_join
from millpond.sql.planner.prepare import prepare
from millpond.sql.planner.pushdown import padded_aliases, push_filters
from millpond.sql.planner.topn import plan_order_limit, plan_row_number, row_number_limit
from millpond.sql.planner.windows import place_windows
from millpond.sql.statements import view_query

__all__ = ["plan_query"]


def plan_query(ctx: Context, q: exp.Expression, ctes: dict[str, exp.Expression], rn_limit: int | None = None
               ) -> tuple[P.Node, list[str]]:
    """Plan a (prepared) query; return its node and output column names (the node's columns)."""
    if isinstance(q, exp.Subquery):
        return plan_query(ctx, q.this, ctes, rn_limit)
    ctes = {**ctes, **{c.alias_or_name: c.this for c in (q.args.get("with_").expressions
                                                           if q.args.get("with_") else [])}}
    if isinstance(q, exp.Union):
        return _union(ctx, q, ctes)
    if isinstance(q, exp.SetOperation):
        raise err(f"{q.key.upper()} is not supported (UNION and UNION ALL are)", q)
    if not isinstance(q, exp.Select):
        raise err(f"unsupported query {q.key.upper()}", q)
    return _select(ctx, q, ctes, rn_limit)


def _union(ctx: Context, q: exp.Union, ctes: dict) -> tuple[P.Node, list[str]]:
    for arg in ("order", "limit", "offset"):
        if q.args.get(arg):
            raise err(f"{arg.upper()} on a UNION is not supported; wrap the UNION in a subquery", q)
    left, names = plan_query(ctx, q.this, ctes)
    right, rnames = plan_query(ctx, q.expression, ctes)
    if len(names) != len(rnames):
        raise err(f"each UNION query must have the same number of columns ({len(names)} vs {len(rnames)})", q)
    right = P.Project(right, tuple((column(r), n) for r, n in zip(rnames, names)))
    inputs = (*(left.inputs if isinstance(left, P.Union) else (left,)), right)
    node: P.Node = P.Union(inputs)
    if q.args.get("distinct"):
        node = plan_distinct(ctx, node, names)
    return node, names


def _relation(ctx: Context, item: exp.Expression, ctes: dict, rn_limit: int | None) -> tuple[P.Node, list[str]]:
    if isinstance(item, exp.Subquery):
        return plan_query(ctx, item.this, ctes, rn_limit)
    if not isinstance(item, exp.Table):
        raise err(f"unsupported FROM item {item.sql('postgres')}", item)
    name = item.name
    if name in ctes:
        return plan_query(ctx, ctes[name], {k: v for k, v in ctes.items() if k != name}, rn_limit)
    ctx.depends.add(name)
    if name in ctx.catalog.views:  # a view over a view inlines the inner view's query
        return plan_query(ctx, prepare(ctx, view_query(ctx.catalog.views[name].sql)), {}, rn_limit)
    cols = [c.name for c in ctx.catalog.tables[name].columns]
    return P.Source(name, tuple((c, c) for c in cols)), cols


def _select(ctx: Context, q: exp.Select, ctes: dict, rn_limit: int | None) -> tuple[P.Node, list[str]]:
    if not q.args.get("from_"):
        raise err("a materialized view needs a FROM clause", q)
    joins = q.args.get("joins") or []
    items = [q.args["from_"].this] + [j.this for j in joins]
    where = conjuncts(q.args["where"].this) if q.args.get("where") else []

    # FROM items, renamed to <alias>__<column>
    rels: dict[str, P.Node] = {}
    for item in items:
        alias = item.alias_or_name
        node, names = _relation(ctx, item, ctes, row_number_limit(item, alias, where, ctes))
        if isinstance(node, P.Source):
            rels[alias] = P.Source(node.table, tuple((f"{alias}__{out}", src) for out, src in node.columns))
        else:
            rels[alias] = P.Project(node, tuple((column(n), f"{alias}__{n}") for n in names))

    late = push_filters(rels, where, padded_aliases(items[0].alias_or_name, joins))
    all_inner = all(join_kind(j) in ("inner", "cross") for j in joins)
    first = items[0].alias_or_name
    node, seen = rels[first], {first}
    for j in joins:
        if all_inner:
            node, late = plan_join(ctx, node, j, rels, seen, late)
        else:
            node, _ = plan_join(ctx, node, j, rels, seen, [])
        seen.add(j.this.alias_or_name)
    for cond in late:
        node = P.Filter(node, rename(cond))

    node, selects = place_windows(ctx, node, q.expressions)
    if any(s.find(exp.Window) for s in selects):
        node, names = plan_row_number(ctx, q, node, selects, rn_limit)
    else:
        having = [q.args["having"]] if q.args.get("having") else []
        aggs = [a for e in [*selects, *having] for a in e.find_all(exp.AggFunc)]
        if aggs or q.args.get("group"):
            node, exprs = plan_aggregate(ctx, q, node, selects)
        else:
            exprs = [(rename(unalias(e)), e.alias_or_name) for e in selects]
        names = [n for _, n in exprs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise err(f"output column names must be unique; alias {', '.join(dup)}", q)
        node = P.Project(node, tuple(exprs))
    if q.args.get("distinct"):
        if q.args["distinct"].args.get("on"):
            raise err("SELECT DISTINCT ON is not supported; use ROW_NUMBER() ... = 1", q)
        node = plan_distinct(ctx, node, names)
    return plan_order_limit(ctx, q, node, selects, names), names

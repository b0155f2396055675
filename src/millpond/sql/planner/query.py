"""The planner's driver: queries, UNIONs, FROM items and SELECT blocks.

Inside a SELECT, every FROM item's columns are renamed ``<alias>__<column>`` (self-joins and
clashing names stay apart) and every item that is not a plain table is re-projected to those
names. Then, in order: filter pushdown, joins, the remaining WHERE conjuncts, time windows,
aggregation or window functions, DISTINCT, ORDER BY ... LIMIT.
"""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.aggregates import plan_aggregate, plan_distinct
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import aliases, column, conjuncts, rename, unalias
from millpond.sql.planner.joins import join_kind, plan_join
from millpond.sql.planner.order import inner_ons, order_joins
from millpond.sql.planner.prepare import prepare
from millpond.sql.planner.pushdown import padded_aliases, push_filters
from millpond.sql.planner.over import plan_window_functions
from millpond.sql.planner.topn import plan_order_limit, row_number_limit
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
    if isinstance(q, (exp.Intersect, exp.Except)):
        return _intersect_except(ctx, q, ctes)
    if not isinstance(q, exp.Select):
        raise err(f"unsupported query {q.key.upper()}", q)
    return _select(ctx, q, ctes, rn_limit)


def _branches(ctx: Context, q: exp.SetOperation, ctes: dict) -> tuple[P.Node, list[str], P.Node, list[str]]:
    """The two planned inputs of a UNION, INTERSECT or EXCEPT and their column names (as many)."""
    word = q.key.upper()
    for arg in ("order", "limit", "offset"):
        if q.args.get(arg):
            raise err(f"{arg.upper()} on {word} is not supported; wrap the {word} in a subquery", q)
    left, names = plan_query(ctx, q.this, ctes)
    right, rnames = plan_query(ctx, q.expression, ctes)
    if len(names) != len(rnames):
        raise err(f"each {word} query must have the same number of columns ({len(names)} vs {len(rnames)})", q)
    return left, names, right, rnames


def _union(ctx: Context, q: exp.Union, ctes: dict) -> tuple[P.Node, list[str]]:
    left, names, right, rnames = _branches(ctx, q, ctes)
    right = P.Project(right, tuple((column(r), n) for r, n in zip(rnames, names)))
    inputs = (*(left.inputs if isinstance(left, P.Union) else (left,)), right)
    node: P.Node = P.Union(inputs)
    if q.args.get("distinct"):
        node = plan_distinct(ctx, node, names)
    return node, names


def _intersect_except(ctx: Context, q: exp.SetOperation, ctes: dict) -> tuple[P.Node, list[str]]:
    """``INTERSECT`` / ``EXCEPT``: both inputs tagged with the side they come from, grouped by every
    column (NULLs equal, as set operations compare rows), each group's rows counted per side; a row
    is kept when both counts are positive (INTERSECT) or only the left one is (EXCEPT)."""
    word = q.key.upper()
    if not q.args.get("distinct"):
        raise err(f"{word} ALL is not supported ({word} is; a bag difference or intersection would emit a "
                  "row a computed number of times)", q)
    left, names, right, rnames = _branches(ctx, q, ctes)
    one, zero = exp.Literal.number(1), exp.Literal.number(0)
    tagged = P.Union((P.Project(left, (*((column(n), n) for n in names), (one, "_l"), (zero, "_r"))),
                      P.Project(right, (*((column(r), n) for r, n in zip(rnames, names)), (zero, "_l"), (one, "_r")))))
    node: P.Node = P.Aggregate(tagged, tuple(names), (P.AggCall("sum", "_l", "_nl"), P.AggCall("sum", "_r", "_nr")),
                               ctx.next_id())
    keep = exp.GT(this=column("_nl"), expression=zero.copy())
    right_rows = exp.GT(this=column("_nr"), expression=zero.copy())
    node = P.Filter(node, exp.and_(keep, right_rows if word == "INTERSECT" else exp.Not(this=right_rows)))
    return P.Project(node, tuple((column(n), n) for n in names)), names


def _distinct_on(ctx: Context, q: exp.Select, node: P.Node, selects: list, exprs: list, grouped: bool) -> P.Node:
    """``SELECT DISTINCT ON (keys) ... ORDER BY keys, rest``: per distinct key, the first row by
    ``rest`` (ties broken by the remaining columns, so the row kept is well defined): a top-1 per
    partition; then the query's own ``ORDER BY ... LIMIT``."""
    names = [n for _, n in exprs]
    bodies = [unalias(s) for s in selects]

    def key(e: exp.Expression) -> exp.Expression:
        if isinstance(e, exp.Column) and not e.table and e.name in names:
            return exprs[names.index(e.name)][0].copy()
        if e in bodies:
            return exprs[bodies.index(e)][0].copy()
        if e.is_int and 1 <= int(e.name) <= len(names):
            return exprs[int(e.name) - 1][0].copy()
        if grouped:
            raise err(f"DISTINCT ON / ORDER BY {e.sql('postgres')} with GROUP BY: use an output column", e)
        return rename(e)

    ons = q.args["distinct"].args["on"].expressions
    orders = q.args["order"].expressions if q.args.get("order") else []
    lead = [o.this for o in orders[:len(ons)]]
    if orders and sorted(map(str, lead)) != sorted(map(str, ons)):
        raise err("SELECT DISTINCT ON expressions must match the leftmost ORDER BY expressions", q)
    rest = orders[len(ons):] if orders else []
    partition = [(key(e), f"_p{i}") for i, e in enumerate(ons)]
    order = [(key(o.this), f"_r{i}") for i, o in enumerate(rest)]
    node = P.Project(node, (*exprs, *partition, *order))
    node = P.TopN(node, tuple(n for _, n in partition),
                  tuple((n, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))) for (_, n), o in zip(order, rest)),
                  1, 0, None, ctx.next_id())
    node = P.Project(node, tuple((column(n), n) for n in names))
    return plan_order_limit(ctx, q, node, selects, names)


def _relation(ctx: Context, item: exp.Expression, ctes: dict, rn_limit: int | None) -> tuple[P.Node, list[str]]:
    if isinstance(item, exp.Subquery):
        return plan_query(ctx, item.this, ctes, rn_limit)
    if not isinstance(item, exp.Table):
        raise err(f"unsupported FROM item {item.sql('postgres')}", item)
    name = item.name
    if name in ctes:
        return plan_query(ctx, ctes[name], {k: v for k, v in ctes.items() if k != name}, rn_limit)
    ctx.depends.add(name)
    if name in ctx.catalog.views and ctx.views and not ctx.catalog.views[name].partial:  # its changes
        cols = ctx.catalog.views[name].schema.names
        return P.Source(name, tuple((c, c) for c in cols)), cols
    if name in ctx.catalog.views:  # a view over a view inlines the inner view's query (before views read views)
        return plan_query(ctx, prepare(ctx, view_query(ctx.catalog.views[name].sql)), {}, rn_limit)
    cols = [c.name for c in ctx.catalog.tables[name].columns]
    return P.Source(name, tuple((c, c) for c in cols)), cols


def _select(ctx: Context, q: exp.Select, ctes: dict, rn_limit: int | None) -> tuple[P.Node, list[str]]:
    if not q.args.get("from_"):
        raise err("a materialized view needs a FROM clause: with none it reads no input, so no epoch would ever "
                  "change it (and random() or now() would be evaluated once); use a table, or run the SELECT", q)
    joins = q.args.get("joins") or []
    items = [q.args["from_"].this] + [j.this for j in joins]
    where = conjuncts(q.args["where"].this) if q.args.get("where") else []
    if ctx.sizes is not None:  # inner JOIN ... ON items are ordered as comma items are (planner.order)
        joins, where = inner_ons(joins, where)

    # FROM items, renamed to <alias>__<column>
    rels: dict[str, P.Node] = {}
    for item in items:
        alias = item.alias_or_name
        node, names = _relation(ctx, item, ctes, row_number_limit(item, alias, where, ctes))
        if isinstance(node, P.Source):
            rels[alias] = P.Source(node.table, tuple((f"{alias}__{out}", src) for out, src in node.columns))
        else:
            rels[alias] = P.Project(node, tuple((column(n), f"{alias}__{n}") for n in names))

    padded = padded_aliases(items[0].alias_or_name, joins)
    late = push_filters(rels, where, padded)
    first, joins = order_joins(ctx, items[0], joins, where, rels)
    node, seen = rels[first], {first}
    for j in joins:
        if join_kind(j) in ("inner", "cross"):  # WHERE conjuncts over items no outer join pads may join here
            usable = [c for c in late if not aliases(c) & padded]
            node, unused = plan_join(ctx, node, j, rels, seen, usable)
            late = [c for c in late if not any(c is u for u in usable)] + unused
        else:
            node, _ = plan_join(ctx, node, j, rels, seen, [])
        seen.add(j.this.alias_or_name)
    for cond in late:
        node = P.Filter(node, rename(cond))

    node, selects = place_windows(ctx, node, q.expressions)
    if any(s.find(exp.Window) for s in selects):
        node, names = plan_window_functions(ctx, q, node, selects, rn_limit)
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
        if q.args.get("distinct") and q.args["distinct"].args.get("on"):
            return _distinct_on(ctx, q, node, selects, exprs, bool(aggs or q.args.get("group"))), names
        node = P.Project(node, tuple(exprs))
    if q.args.get("distinct"):
        if q.args["distinct"].args.get("on"):
            raise err("SELECT DISTINCT ON together with window functions is not supported", q)
        node = plan_distinct(ctx, node, names)
    return plan_order_limit(ctx, q, node, selects, names), names

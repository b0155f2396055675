"""Aggregation: ``GROUP BY`` (or the whole input) with COUNT(*), COUNT, SUM, AVG, MIN, MAX, their
DISTINCT forms and ``FILTER (WHERE ...)``, PERCENTILE_CONT / PERCENTILE_DISC ``WITHIN GROUP``, and
``HAVING``.

The rewrite projects each group expression to ``_g<i>`` and each aggregate argument to
``_a<i>`` (a FILTER becomes ``CASE WHEN cond THEN arg END``), plans one
:class:`~millpond.engine.plan.Aggregate` computing ``_c<i>`` per distinct call, and rewrites the
SELECT list and HAVING over those columns. AVG is SUM / COUNT, so it retracts exactly.
"""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import column, rename, unalias

__all__ = ["plan_aggregate", "plan_distinct"]


def plan_aggregate(ctx: Context, q: exp.Select, node: P.Node, selects: list[exp.Expression]
                   ) -> tuple[P.Node, list[tuple[exp.Expression, str]]]:
    """The Aggregate (and HAVING filter) over ``node``; the SELECT list as (expression, name) over it."""
    group = list(q.args["group"].expressions) if q.args.get("group") else []
    for g in group:
        if isinstance(g, (exp.Cube, exp.Rollup, exp.GroupingSets)):
            raise err("GROUPING SETS, CUBE and ROLLUP are not supported", g)
    pre: list[tuple[exp.Expression, str]] = [(rename(g), f"_g{i}") for i, g in enumerate(group)]
    calls: list[P.AggCall] = []
    replaced: dict[str, exp.Expression] = {}

    def call(func: str, arg: exp.Expression | None, fraction: float | None = None, desc: bool = False
             ) -> exp.Expression:
        if arg is not None:
            pre.append((rename(arg), f"_a{len(pre)}"))
        name = f"_c{len(calls)}"
        calls.append(P.AggCall(func, pre[-1][1] if arg is not None else None, name, fraction, desc))
        return column(name)

    def percentile(n: exp.WithinGroup, cond: exp.Expression | None) -> exp.Expression:
        ordered = n.expression.expressions[0]  # bound: one ORDER BY item, a numeric fraction
        arg = ordered.this if cond is None else exp.Case(ifs=[exp.If(this=cond.copy(), true=ordered.this.copy())])
        func = "percentile_cont" if isinstance(n.this, exp.PercentileCont) else "percentile_disc"
        return call(func, arg, float(n.this.this.name), bool(ordered.args.get("desc")))  # NULLs do not count

    def aggregate(agg: exp.Expression, cond: exp.Expression | None) -> exp.Expression:
        arg = agg.this
        distinct = isinstance(arg, exp.Distinct)
        if distinct:
            if len(arg.expressions) != 1:
                raise err(f"{agg.sql('postgres')}: DISTINCT over several arguments is not supported", agg)
            arg = arg.expressions[0]
        if cond is not None and not isinstance(arg, exp.Star):
            arg = exp.Case(ifs=[exp.If(this=cond.copy(), true=arg.copy())])
        if isinstance(agg, exp.Count):
            if isinstance(arg, exp.Star):
                if cond is not None:
                    return call("count", exp.Case(ifs=[exp.If(this=cond.copy(), true=exp.Literal.number(1))]))
                return call("count_star", None)
            return call("count_distinct" if distinct else "count", arg)
        if isinstance(agg, exp.Sum):
            return call("sum_distinct" if distinct else "sum", arg)
        if isinstance(agg, (exp.Max, exp.Min)):
            return call(type(agg).__name__.lower(), arg)  # DISTINCT changes nothing for MIN/MAX
        if isinstance(agg, exp.ArrayAgg):  # bound: array_agg(x ORDER BY x [DESC]) (semantics.aggregates)
            if cond is not None:
                raise err(f"{agg.sql('postgres')}: FILTER on array_agg is not supported (use a WHERE)", agg)
            ordered = agg.this.expressions[0]
            return call("array_agg", ordered.this, desc=bool(ordered.args.get("desc")))
        if isinstance(agg, exp.Avg):
            s = call("sum_distinct" if distinct else "sum", arg)
            c = call("count_distinct" if distinct else "count", arg)
            return exp.Div(this=exp.cast(s, "DOUBLE"), expression=exp.Nullif(this=c, expression=exp.Literal.number(0)))
        raise err(f"aggregate {agg.sql('postgres')} is not supported (COUNT, SUM, AVG, MIN, MAX, PERCENTILE_CONT and "
                  "PERCENTILE_DISC are)", agg)

    def rewrite(e: exp.Expression) -> exp.Expression:
        def fn(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.WithinGroup) or isinstance(n, exp.Filter) and isinstance(n.this, exp.WithinGroup):
                key = n.sql()
                if key not in replaced:
                    replaced[key] = percentile(n.this, n.expression.this) if isinstance(n, exp.Filter) else \
                        percentile(n, None)
                return replaced[key].copy()
            if isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc):
                key = n.sql()
                if key not in replaced:
                    replaced[key] = aggregate(n.this, n.expression.this)
                return replaced[key].copy()
            if isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Filter):
                key = n.sql()
                if key not in replaced:
                    if any(isinstance(a, exp.AggFunc) for a in n.find_all(exp.AggFunc) if a is not n):
                        raise err(f"aggregate calls cannot be nested: {n.sql('postgres')}", n)
                    replaced[key] = aggregate(n, None)
                return replaced[key].copy()
            for i, g in enumerate(group):
                if n == g:
                    return column(f"_g{i}")
            if isinstance(n, exp.Column) and n.table:
                raise err(f"column {n.sql('postgres')} must appear in the GROUP BY clause or be used "
                          "in an aggregate function", n)
            return n
        return e.transform(fn)

    out_exprs = [(rewrite(unalias(e).copy()), e.alias_or_name) for e in selects]
    having = rewrite(q.args["having"].this.copy()) if q.args.get("having") else None
    node = P.Project(node, tuple(pre))
    node = P.Aggregate(node, tuple(f"_g{i}" for i in range(len(group))), tuple(calls), ctx.next_id(),
                       whole=not group)
    if having is not None:
        node = P.Filter(node, having)
    return node, out_exprs


def plan_distinct(ctx: Context, node: P.Node, names: list[str]) -> P.Node:
    """SELECT DISTINCT / UNION: an aggregation with no calls, grouped by every column."""
    return P.Aggregate(node, tuple(names), (), ctx.next_id())

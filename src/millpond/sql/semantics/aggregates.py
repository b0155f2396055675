"""Aggregates and window functions, typed as PostgreSQL types them: ``sum`` of integers is a
bigint and of a bigint a numeric, ``avg`` of integers and numerics a numeric quotient (the sum
over the count, with PostgreSQL's display scale), ``count`` a bigint. In a view the planner keeps
the aggregate calls these rules leave (``SUM``, ``COUNT``...) as its incremental aggregation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.sql.semantics import types as T
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.types import SqlType, Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["CONSTRUCTS"]


def _name(node: exp.Expression) -> str:
    return node.sql_name().lower() if isinstance(node, exp.Func) else node.key


def _to(node: exp.Expression, t: SqlType) -> exp.Cast:
    return exp.Cast(this=node, to=T.datatype(t))


def _int(b: Binder, node: exp.Expression, at: exp.Expression) -> exp.Expression:
    typed = b.value(node)
    if not (typed[1].integer or typed[1].untyped):
        raise refuse(f"{_name(at)}: argument {node.sql('postgres')} must be an integer, not {typed[1]}", at)
    return b.cast_to(typed, T.INTEGER, at) if typed[1].untyped else typed[0]


def _aggregate_arg(b: Binder, node: exp.Expression) -> tuple[Typed, bool]:
    arg = node.this
    if isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1:
            raise refuse(f"{_name(node)}(DISTINCT ...) over several arguments is not supported", node)
        typed = b.value(arg.expressions[0])
        return (exp.Distinct(expressions=[typed[0]]), typed[1]), True
    if node.expressions if hasattr(node, "expressions") and not isinstance(node, exp.Count) else False:
        raise refuse(f"{_name(node)} takes one argument", node)
    if arg is None:  # PostgreSQL: count(*) must be used to call a parameterless aggregate function
        raise refuse(f"{_name(node)}() needs an argument" + (" (count(*) counts rows)" * isinstance(node, exp.Count)),
                     node)
    typed = b.value(arg)
    return typed, False


def _count(b: Binder, node: exp.Count) -> Typed:
    if isinstance(node.this, exp.Star):
        return exp.Count(this=exp.Star()), T.BIGINT
    (arg, t), distinct = _aggregate_arg(b, node)
    if distinct and t.kind == "interval":  # equal intervals ('24 hours', '1 day') count once
        from millpond.sql.semantics.intervals import span

        arg = exp.Distinct(expressions=[span(arg.expressions[0])])
    return exp.Count(this=arg), T.BIGINT


def _interval_aggregate(node: exp.Expression, arg: exp.Expression, distinct: bool) -> Typed:
    """SUM, AVG, MIN and MAX of intervals over plain aggregates both the engines and the incremental
    planner have: SUM adds the fields (PostgreSQL's interval addition), AVG divides that sum by the
    count as PostgreSQL does, MIN and MAX take the extreme of a text key that orders intervals by
    span and keeps them whole (:func:`~millpond.sql.semantics.interval_keys.sort_key`)."""
    from millpond.sql.semantics import intervals
    from millpond.sql.semantics.interval_keys import of_sort_key, sort_key

    name = _name(node)
    if distinct and name in ("sum", "avg"):
        raise refuse(f"{name}(DISTINCT interval) is not supported", node)
    if isinstance(node, (exp.Min, exp.Max)):  # the extreme interval itself, found by its sort key
        return of_sort_key(type(node)(this=sort_key(arg))), T.INTERVAL
    total = intervals.make(*(exp.Sum(this=p) for p in intervals.parts(arg)))
    if isinstance(node, exp.Sum):
        return total, T.INTERVAL
    count = exp.Nullif(this=exp.Count(this=arg.copy()), expression=exp.Literal.number(0))  # no rows: NULL
    return intervals.divide(total, exp.Cast(this=count, to=T.datatype(T.DOUBLE))), T.INTERVAL


def _sum(b: Binder, node: exp.Sum) -> Typed:
    (arg, t), distinct = _aggregate_arg(b, node)
    inner = arg.expressions[0] if distinct else arg
    if t.untyped:
        raise refuse("function sum(unknown) is not unique: cast the argument", node)
    if t.kind == "interval":
        return _interval_aggregate(node, inner, distinct)
    if not t.number:
        raise refuse(f"function sum({t}) does not exist", node)

    def wrap(x: exp.Expression) -> exp.Expression:
        return exp.Distinct(expressions=[x]) if distinct else x
    if t.kind in ("smallint", "integer"):
        return _to(exp.Sum(this=wrap(inner)), T.BIGINT), T.BIGINT
    if t.kind == "bigint":
        out = T.numeric(38, 0)
        return _to(exp.Sum(this=wrap(_to(inner, out))), out), out
    if t.decimal:
        out = T.numeric(38, t.scale, exact=t.exact)
        return _to(exp.Sum(this=wrap(inner)), out), out
    return exp.Sum(this=wrap(inner)), t


def _avg(b: Binder, node: exp.Avg) -> Typed:
    """AVG of floats is double precision; of integers and numerics it is numeric, as in PostgreSQL:
    the quotient of the sum and the count, with PostgreSQL's display scale
    (:func:`~millpond.sql.semantics.numerics.quotient`; both engines average integers as doubles)."""
    from millpond.sql.semantics.numerics import quotient

    (arg, t), distinct = _aggregate_arg(b, node)
    if t.untyped:
        raise refuse("function avg(unknown) is not unique: cast the argument", node)
    if t.kind == "interval":
        return _interval_aggregate(node, arg.expressions[0] if distinct else arg, distinct)
    if not t.number:
        raise refuse(f"function avg({t}) does not exist", node)
    if t.float:
        return exp.Avg(this=arg), T.DOUBLE
    inner = arg.expressions[0] if distinct else arg

    def wrap(x: exp.Expression) -> exp.Expression:
        return exp.Distinct(expressions=[x]) if distinct else x
    total_t = T.numeric(38, T.decimal_of(t).scale, exact=t.exact)
    # a bigint summed as a numeric, as sum(bigint) is: a sum of bigints may pass 2**63 (a Spark
    # BIGINT sum would overflow); smaller integers are summed as bigints, as PostgreSQL does
    summed = _to(inner.copy(), T.numeric(38, 0)) if t.kind == "bigint" else inner.copy()
    total = _to(exp.Sum(this=wrap(summed)), total_t)
    return quotient((total, total_t), (exp.Count(this=wrap(inner)), T.BIGINT))


def _min_max(b: Binder, node: exp.Expression) -> Typed:
    (arg, t), distinct = _aggregate_arg(b, node)
    if t.untyped:
        t = T.TEXT
    if t.kind == "interval":
        return _interval_aggregate(node, arg.expressions[0] if distinct else arg, distinct)
    return type(node)(this=arg), t


def _array_agg(b: Binder, node: exp.ArrayAgg) -> Typed:
    """``array_agg(x [ORDER BY x [ASC|DESC]])``: the group's values with NULLs, in the order of ``x``
    (PostgreSQL's order without ORDER BY is unspecified: millpond's is ascending), as
    ``array_agg(x ORDER BY x)``, which both engines order alike."""
    arg, desc = node.this, False
    if isinstance(arg, exp.Distinct):
        raise refuse("array_agg(DISTINCT x) is not supported", node)
    if isinstance(arg, exp.Order):
        items = arg.expressions
        if len(items) != 1 or items[0].this != arg.this:
            raise refuse("array_agg(x ORDER BY y) is supported only ordered by x itself", node)
        arg, desc = arg.this, bool(items[0].args.get("desc"))
        if items[0].args.get("nulls_first") is not None and bool(items[0].args.get("nulls_first")) != desc:
            raise refuse("array_agg(x ORDER BY x ... NULLS FIRST/LAST) keeps PostgreSQL's default NULLS order only", node)
    value, t = b.value(arg)
    if t.untyped:
        value, t = b.cast_to((value, t), T.TEXT, arg), T.TEXT
    if t.kind == "interval" or t.nested or t.dynamic:  # (PostgreSQL's array_agg of arrays makes a 2-D array)
        raise refuse(f"array_agg of {t} is not supported (of scalar types it is)", node)
    ordered = exp.Ordered(this=value.copy(), desc=desc, nulls_first=desc)
    return exp.ArrayAgg(this=exp.Order(this=value, expressions=[ordered])), T.array_of(t)


def _within_group(b: Binder, node: exp.WithinGroup) -> Typed:
    """``percentile_cont(f)`` / ``percentile_disc(f) WITHIN GROUP (ORDER BY x [DESC])``, f a constant
    in [0, 1] (PostgreSQL also takes an array of fractions: not supported). percentile_cont
    interpolates double precision values (an integer or numeric ``x`` is cast, as PostgreSQL
    does); percentile_disc returns one of the values, of ``x``'s type."""
    func, order = node.this, node.expression
    if not isinstance(func, (exp.PercentileCont, exp.PercentileDisc)) or not isinstance(order, exp.Order):
        raise refuse(f"{node.sql('postgres')}: WITHIN GROUP is supported for percentile_cont and percentile_disc",
                      node)
    name = _ordered_name(func)
    if len(order.expressions) != 1:
        raise refuse(f"{name} takes one ORDER BY expression in WITHIN GROUP", node)
    fraction = func.this
    negative = isinstance(fraction, exp.Neg)
    literal = fraction.this if negative else fraction
    if not (isinstance(literal, exp.Literal) and not literal.is_string):
        raise refuse(f"{name}: the fraction must be a numeric constant, not {fraction.sql('postgres')}", node)
    value = -float(literal.name) if negative else float(literal.name)
    if not 0 <= value <= 1:
        raise refuse(f"percentile value {fraction.sql('postgres')} is not between 0 and 1", node)
    ordered = order.expressions[0]
    arg, t = b.value(ordered.this)
    if name == "percentile_cont":
        if t.kind == "interval":
            raise refuse("percentile_cont over an interval is not supported (numbers are; percentile_disc takes "
                          "any type)", node)
        if not (t.number or t.untyped):
            raise refuse(f"function percentile_cont(double precision) within group ({t}) does not exist", node)
        arg, t = b.cast_to((arg, t), T.DOUBLE, node), T.DOUBLE
    elif t.untyped:
        arg, t = b.cast_to((arg, t), T.TEXT, node), T.TEXT
    out = type(func)(this=exp.Literal.number(value))
    return exp.WithinGroup(this=out, expression=exp.Order(expressions=[
        exp.Ordered(this=arg, desc=bool(ordered.args.get("desc")), nulls_first=False)])), t


def _bare_percentile(b: Binder, node: exp.Expression) -> Typed:
    raise refuse(f"WITHIN GROUP is required for ordered-set aggregate {_ordered_name(node)}: write "
                  f"{_ordered_name(node)}(fraction) WITHIN GROUP (ORDER BY x)", node)


def _ordered_name(node: exp.Expression) -> str:
    return "percentile_cont" if isinstance(node, exp.PercentileCont) else "percentile_disc"


def _filter(b: Binder, node: exp.Filter) -> Typed:
    """``agg FILTER (WHERE cond)``; the FILTER stays on the aggregate call inside the rule's result
    (``CAST(SUM(x) FILTER (WHERE c) AS BIGINT)``)."""
    out, t = b.value(node.this, keep=True)
    cond, _ = b.condition(node.expression.this)
    if isinstance(out, (exp.AggFunc, exp.WithinGroup)):
        return exp.Filter(this=out, expression=exp.Where(this=cond)), t
    for call in list(out.find_all(exp.AggFunc)):  # AVG is a SUM and a COUNT: both filtered
        call.replace(exp.Filter(this=call.copy(), expression=exp.Where(this=cond.copy())))
    return out, t


def _window(b: Binder, node: exp.Window) -> Typed:
    from millpond.sql.semantics import intervals

    ordered = node.this.this if isinstance(node.this, exp.WithinGroup) else node.this
    if isinstance(ordered, (exp.PercentileCont, exp.PercentileDisc)):
        raise refuse(f"OVER is not supported for ordered-set aggregate {_ordered_name(ordered)}", node)
    func, t = b.value(node.this, keep=True)
    if t.kind == "interval" and not isinstance(func, type(node.this)):  # an aggregate rewritten over fields
        raise refuse(f"{_name(node.this)}(interval) over a window is not supported", node)
    partition = []
    for p in node.args.get("partition_by") or []:
        value, pt = b.value(p)
        partition.append(intervals.normal(value) if pt.kind == "interval" else value)  # equal intervals: one partition
    out = exp.Window(this=func, partition_by=partition, over=node.args.get("over"))
    order = node.args.get("order")
    if order is not None:
        items = []
        for o in order.expressions:
            value, ot = b.value(o.this)
            value = intervals.span(value) if ot.kind == "interval" else value  # ordered by span
            nulls_first = o.args.get("nulls_first")
            items.append(exp.Ordered(this=value, desc=o.args.get("desc"),
                                     nulls_first=bool(o.args.get("desc")) if nulls_first is None else nulls_first))
        out.set("order", exp.Order(expressions=items))
    if node.args.get("spec") is not None:
        out.set("spec", node.args["spec"])
    return _over_calls(func, out), t


def _over_calls(func: exp.Expression, window: exp.Window) -> exp.Expression:
    """``window`` over ``func``, bound. Binding may have wrapped an aggregate in PostgreSQL's typing
    (``CAST(SUM(x) AS BIGINT)``, AVG as a SUM over a COUNT): then the window goes on each aggregate
    call inside, which is where SQL engines accept it."""
    if isinstance(func, (exp.AggFunc, exp.Filter)) or not func.find(exp.AggFunc):
        window.set("this", func)
        return window

    def over(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Filter) or isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Filter):
            w = window.copy()
            w.set("this", n.copy())
            return w
        return n
    return func.transform(over)


def _rank(b: Binder, node: exp.Expression) -> Typed:
    if node.expressions if hasattr(node, "expressions") else False:
        raise refuse(f"{_name(node)}() takes no arguments", node)
    return type(node)(), T.BIGINT


def _lag_lead(b: Binder, node: exp.Expression) -> Typed:
    value, t = b.value(node.this)
    offset = node.args.get("offset")
    default = node.args.get("default")
    args: dict = {"this": value}
    if offset is not None:
        args["offset"] = _int(b, offset, node)
    if default is not None:
        args["default"] = b.cast_to(b.value(default), t, node)
    return type(node)(**args), t



register(
    Function("count", _count, (exp.Count,), kind="aggregate"),
    Function("sum", _sum, (exp.Sum,), kind="aggregate"),
    Function("avg", _avg, (exp.Avg,), kind="aggregate"),
    Function("min", _min_max, (exp.Min,), kind="aggregate"),
    Function("max", _min_max, (exp.Max,), kind="aggregate"),
    Function("percentile_cont", _bare_percentile, (exp.PercentileCont,), kind="aggregate"),
    Function("percentile_disc", _bare_percentile, (exp.PercentileDisc,), kind="aggregate"),
    Function("array_agg", _array_agg, (exp.ArrayAgg,), kind="aggregate"),
    Function("row_number", _rank, (exp.RowNumber,), kind="window"),
    Function("rank", _rank, (exp.Rank,), kind="window"),
    Function("dense_rank", _rank, (exp.DenseRank,), kind="window"),
    Function("lag", _lag_lead, (exp.Lag,), kind="window"),
    Function("lead", _lag_lead, (exp.Lead,), kind="window"),
)
# FILTER, OVER and WITHIN GROUP around a call
CONSTRUCTS = {exp.Filter: _filter, exp.Window: _window, exp.WithinGroup: _within_group}

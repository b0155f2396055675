"""Window functions in a SELECT: ``f(...) OVER (PARTITION BY ... ORDER BY ... [frame])`` as
:class:`~millpond.engine.plan.Over` nodes, one per distinct PARTITION BY / ORDER BY (chained: each
adds its columns to the rows the next one reads).

Supported: ROW_NUMBER, RANK, DENSE_RANK, LAG and LEAD (constant offset, any default), and COUNT(*),
COUNT, SUM, AVG, MIN, MAX (with FILTER) over the default frame or a ROWS frame with UNBOUNDED /
n PRECEDING / CURRENT ROW / n FOLLOWING bounds, or a RANGE frame bounded by UNBOUNDED and CURRENT
ROW. Binding (:mod:`millpond.sql.semantics`) may leave an aggregate's PostgreSQL typing around the
call (``CAST(SUM(x) AS BIGINT) OVER w``, AVG as a quotient of SUM and COUNT): every aggregate call
inside the windowed expression is computed over the window, and the expression above them is
evaluated on the results.

``ROW_NUMBER() OVER (...) AS rn`` alone, filtered by ``rn <= N`` in the enclosing query, is still
a top-N (:func:`~millpond.sql.planner.topn.plan_row_number`): it keeps only the first N rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import column, rename, unalias
from millpond.sql.planner.topn import plan_row_number

__all__ = ["plan_window_functions"]

SUPPORTED = "ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD, COUNT, SUM, AVG, MIN and MAX"
_RANKING = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
_AGGREGATES = {exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}
_WHOLE = P.Frame("rows", None, None)


def plan_window_functions(ctx: Context, q: exp.Select, node: P.Node, selects: list, rn_limit: int | None
                          ) -> tuple[P.Node, list[str]]:
    """Plan a SELECT whose output has window functions; return the node and its column names."""
    if rn_limit is not None and _row_number_only(selects):
        return plan_row_number(ctx, q, node, selects, rn_limit)
    if q.args.get("group") or q.args.get("having") or any(
            a.find_ancestor(exp.Window) is None for s in selects for a in s.find_all(exp.AggFunc)):
        raise err("window functions together with aggregation are not supported", q)
    plan = _Windows()
    outputs = [(plan.replace(unalias(s)), s.alias_or_name) for s in selects]
    names = [n for _, n in outputs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise err(f"output column names must be unique; alias {', '.join(dup)}", q)
    kept = {c.name: None for e, _ in outputs for c in e.find_all(exp.Column) if c.name not in plan.outputs}
    kept.update(dict.fromkeys(plan.columns))
    node = P.Project(node, (*((column(c), c) for c in kept), *plan.helpers))
    for group in plan.merged():
        node = P.Over(node, group.partition, group.order, tuple(group.calls), ctx.next_id())
    return P.Project(node, tuple(outputs)), names


def _row_number_only(selects: list) -> bool:
    windows = [w for s in selects for w in s.find_all(exp.Window)]
    return len(windows) == 1 and any(isinstance(s, exp.Alias) and s.this is windows[0] for s in selects) \
        and isinstance(windows[0].this, exp.RowNumber)


@dataclass
class _Group:
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool, bool], ...]
    calls: list[P.OverCall] = field(default_factory=list)


class _Windows:
    """The window calls of one SELECT, grouped by window, and the columns they read."""

    def __init__(self) -> None:
        self.groups: dict[tuple, _Group] = {}
        self.helpers: list[tuple[exp.Expression, str]] = []  # computed inputs: (expression, name)
        self.columns: list[str] = []  # plain input columns the windows read
        self.outputs: list[str] = []  # the calls' output columns

    def merged(self) -> list[_Group]:
        """The groups to plan: aggregates over whole partitions (``OVER (PARTITION BY k)``) read no
        order, so they join a window with the same PARTITION BY and an ORDER BY if there is one."""
        groups = list(self.groups.values())
        for g in groups:
            if not g.order and all(c.frame == _WHOLE for c in g.calls):
                other = next((h for h in groups if h is not g and h.partition == g.partition and h.order), None)
                if other is not None:
                    other.calls.extend(g.calls)
                    g.calls = []
        return [g for g in groups if g.calls]

    def replace(self, e: exp.Expression) -> exp.Expression:
        """``e`` over plan-internal names, each window function replaced by its output column."""
        def fn(n: exp.Expression) -> exp.Expression:
            return self._window(n) if isinstance(n, exp.Window) else n
        return rename(e.copy().transform(fn))

    def _window(self, w: exp.Window) -> exp.Expression:
        if w.this.find(exp.Window) or any(x.find(exp.Window) for x in w.args.get("partition_by") or []) \
                or w.args.get("order") is not None and w.args["order"].find(exp.Window):
            raise err("window function calls cannot be nested", w)
        partition = tuple(self._input(p, "_p") for p in w.args.get("partition_by") or [])
        items = w.args["order"].expressions if w.args.get("order") else []
        order = tuple((self._input(o.this, "_r"), bool(o.args.get("desc")), _nulls_first(o)) for o in items)
        group = self.groups.setdefault((partition, order), _Group(partition, order))
        f = w.this
        if type(f) in _RANKING:
            return self._call(group, P.OverCall(_RANKING[type(f)], None, ""))
        if isinstance(f, (exp.Lag, exp.Lead)):
            default = f.args.get("default")
            call = P.OverCall("lag" if isinstance(f, exp.Lag) else "lead", self._input(f.this, "_a"), "",
                              offset=_offset(f.args.get("offset"), f),
                              default=None if default is None or isinstance(default, exp.Null)
                              else self._input(default, "_d"))
            return self._call(group, call)
        calls = list(f.find_all(exp.AggFunc))
        if not calls or any(type(a) not in (exp.Count, exp.Avg, *_AGGREGATES) for a in calls):
            what = next((a for a in calls if type(a) not in (exp.Count, exp.Avg, *_AGGREGATES)), f)
            raise err(f"window function {_name(what)} is not supported in a materialized view "
                      f"(supported: {SUPPORTED})", w)
        frame = _frame(w.args.get("spec"), ordered=bool(order), at=w)

        def agg(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc):
                return self._aggregate(group, n.this, frame, n.expression.this)
            if isinstance(n, exp.AggFunc):
                return self._aggregate(group, n, frame, None)
            return n
        return f.copy().transform(agg)

    def _aggregate(self, group: _Group, a: exp.AggFunc, frame: P.Frame, where: exp.Expression | None
                   ) -> exp.Expression:
        if isinstance(a.this, exp.Distinct):
            raise err("DISTINCT is not implemented for window functions", a)

        def arg(x: exp.Expression) -> str:
            if where is not None:  # FILTER (WHERE c): the rows where c is not true count as NULLs
                x = exp.Case(ifs=[exp.If(this=where.copy(), true=x.copy())])
            return self._input(x, "_a")
        if isinstance(a, exp.Count):
            if isinstance(a.this, exp.Star) or a.this is None:
                if where is None:
                    return self._call(group, P.OverCall("count_star", None, "", frame))
                return self._call(group, P.OverCall("count", arg(exp.Literal.number(1)), "", frame))
            return self._call(group, P.OverCall("count", arg(a.this), "", frame))
        if isinstance(a, exp.Avg):  # of floats (binding makes other AVGs a SUM over a COUNT): double precision
            total = self._call(group, P.OverCall("sum", arg(a.this), "", frame))
            count = self._call(group, P.OverCall("count", arg(a.this), "", frame))
            return exp.Div(this=total, expression=exp.Nullif(this=count, expression=exp.Literal.number(0)))
        return self._call(group, P.OverCall(_AGGREGATES[type(a)], arg(a.this), "", frame))

    def _call(self, group: _Group, call: P.OverCall) -> exp.Expression:
        name = f"_f{len(self.outputs)}"
        self.outputs.append(name)
        group.calls.append(P.OverCall(call.func, call.arg, name, call.frame, call.offset, call.default))
        return column(name)

    def _input(self, e: exp.Expression, prefix: str) -> str:
        """The input column holding ``e``: a plain column by its own name, else a computed one."""
        e = rename(e)
        if isinstance(e, exp.Column):
            if e.name not in self.columns:
                self.columns.append(e.name)
            return e.name
        for body, name in self.helpers:
            if body == e:
                return name
        name = f"{prefix}{sum(1 for _, n in self.helpers if n.startswith(prefix))}"
        self.helpers.append((e, name))
        return name


def _frame(spec: exp.WindowSpec | None, *, ordered: bool, at: exp.Expression) -> P.Frame:
    """PostgreSQL's frame: by default RANGE UNBOUNDED PRECEDING .. CURRENT ROW (the current row's
    peers included), which without ORDER BY is the whole partition (every row is a peer)."""
    if spec is None:
        return P.Frame("range", None, 0) if ordered else _WHOLE
    kind = str(spec.args.get("kind") or "").lower()
    if kind not in ("rows", "range"):
        raise err(f"{kind.upper()} frames are not supported (ROWS and RANGE are)", at)
    if spec.args.get("exclude") is not None:
        raise err("frame EXCLUDE is not supported", at)
    start = _bound(spec.args.get("start"), spec.args.get("start_side"), at)
    end = _bound(spec.args.get("end") or "CURRENT ROW", spec.args.get("end_side"), at)
    if start == "following_unbounded":
        raise err("frame start cannot be UNBOUNDED FOLLOWING", at)
    if end == "preceding_unbounded":
        raise err("frame end cannot be UNBOUNDED PRECEDING", at)
    start = None if start == "preceding_unbounded" else start
    end = None if end == "following_unbounded" else end
    if start is not None and end is not None and (start == 0 and end < 0 or start > 0 and end <= 0):
        raise err(f"frame starting from {'current' if start == 0 else 'following'} row cannot have "
                  f"{'preceding rows' if start == 0 else 'preceding rows or current row'}", at)
    if kind == "range":
        if any(b not in (None, 0) for b in (start, end)):
            raise err("RANGE with an offset (n PRECEDING or FOLLOWING) is not supported in a materialized view: "
                      "use ROWS", at)
        if not ordered:  # every row is a peer of every other
            return _WHOLE
    return P.Frame(kind, start, end)  # type: ignore[arg-type]


def _bound(value: object, side: object, at: exp.Expression) -> int | str:
    side = str(side or "").upper()
    if isinstance(value, str):
        if value.upper() == "CURRENT ROW":
            return 0
        if value.upper() == "UNBOUNDED":
            return "following_unbounded" if side == "FOLLOWING" else "preceding_unbounded"
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        n = int(value.this)
        return -n if side == "PRECEDING" else n
    raise err("a frame offset must be a non-negative integer constant (n PRECEDING or n FOLLOWING)", at)


def _offset(e: exp.Expression | None, at: exp.Expression) -> int:
    if e is None:
        return 1
    inner = e
    while isinstance(inner, (exp.Cast, exp.Paren)):
        inner = inner.this
    sign = 1
    if isinstance(inner, exp.Neg):
        sign, inner = -1, inner.this
    if isinstance(inner, exp.Literal) and not inner.is_string and inner.this.isdigit():
        return sign * int(inner.this)
    raise err(f"{_name(at)}: the offset must be an integer constant in a materialized view", e)


def _nulls_first(o: exp.Ordered) -> bool:
    """PostgreSQL's NULL placement: NULLs sort as the largest value unless the item says otherwise."""
    nulls_first = o.args.get("nulls_first")
    return bool(o.args.get("desc")) if nulls_first is None else bool(nulls_first)


def _name(f: exp.Expression) -> str:
    return f.sql_name() if isinstance(f, exp.Func) else f.key.upper()

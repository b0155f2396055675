"""SELECT -> incremental plan.

Supported in a materialized view (the spine): ``SELECT`` over one table or inner equi-joins of
tables, ``WHERE``, ``GROUP BY`` with COUNT(*), COUNT(x), SUM, AVG, MIN, MAX, ``HAVING``, and any
scalar expression Spark SQL evaluates. Columns are renamed to ``<alias>__<column>`` inside the
plan so self-joins and clashing names stay apart; expressions are emitted as Spark SQL.
"""

from __future__ import annotations

import itertools

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify

from millpond.catalog import ROW_ID, Catalog, TableDef
from millpond.engine import plan as P
from millpond.errors import CatalogError, SqlError

__all__ = ["plan_view", "table_plan"]


def table_plan(table: TableDef) -> P.Materialize:
    """A table's own materialization: its changelog kept as rows (including ``_row_id``)."""
    columns = [*(c.name for c in table.columns), ROW_ID]
    return P.Materialize(P.Source(table.name, tuple((c, c) for c in columns)), node_id=1)


def _err(message: str, node: exp.Expression | None = None) -> SqlError:
    meta = getattr(node, "meta", None) or {}
    if not meta and node is not None:
        ident = node.find(exp.Identifier)
        meta = (ident.meta if ident is not None else {}) or {}
    return SqlError(message, line=meta.get("line"), col=meta.get("col"))


def _unsupported(q: exp.Select) -> None:
    for arg, what in (("distinct", "SELECT DISTINCT"), ("order", "ORDER BY"), ("limit", "LIMIT"),
                      ("offset", "OFFSET"), ("with", "WITH (CTEs)")):
        if q.args.get(arg):
            raise _err(f"{what} in a materialized view is not supported yet", q.args[arg])
    for node in q.find_all(exp.Window):
        raise _err("window functions in a materialized view are not supported yet", node)
    for node in q.find_all(exp.Subquery):
        raise _err("subqueries in a materialized view are not supported yet", node)


class _Planner:
    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.ids = itertools.count(1)
        self.aliases: dict[str, str] = {}  # alias -> table

    def plan(self, select: exp.Expression) -> tuple[P.Materialize, tuple[str, ...]]:
        if not isinstance(select, exp.Select):
            raise _err(f"a materialized view must be a SELECT, got {select.key.upper()}", select)
        _unsupported(select)
        tables = [select.args["from_"].this] + [j.this for j in select.args.get("joins") or []] \
            if select.args.get("from_") else []
        if not tables:
            raise _err("a materialized view needs a FROM clause", select)
        schema = {}
        for t in tables:
            if not isinstance(t, exp.Table):
                raise _err("only tables may appear in FROM (subqueries come later)", t)
            if t.name in self.catalog.views:
                raise _err(f"{t.name!r} is a view; views over views are not supported yet", t)
            if t.name not in self.catalog.tables:
                raise CatalogError(_err(f"no table named {t.name!r}", t).args[0])
            td = self.catalog.tables[t.name]
            schema[t.name] = {c.name: c.type for c in td.columns}
        try:
            q = qualify(select.copy(), schema=schema, dialect="postgres", validate_qualify_columns=True,
                        quote_identifiers=False)
        except OptimizeError as exc:
            raise _err(f"cannot resolve the query: {exc}", select) from None

        sources: dict[str, P.Node] = {}
        for t in [q.args["from_"].this] + [j.this for j in q.args.get("joins") or []]:
            alias = t.alias_or_name
            self.aliases[alias] = t.name
            cols = self.catalog.tables[t.name].columns
            sources[alias] = P.Source(t.name, tuple((f"{alias}__{c.name}", c.name) for c in cols))

        where = _conjuncts(q.args["where"].this) if q.args.get("where") else []
        late = []
        for cond in where:  # push single-source predicates below the joins
            used = _aliases(cond)
            if len(used) == 1:
                (a,) = used
                sources[a] = P.Filter(sources[a], _spark(cond))
            else:
                late.append(cond)

        first = q.args["from_"].this.alias_or_name
        node, seen = sources[first], {first}
        for j in q.args.get("joins") or []:
            alias = j.this.alias_or_name
            if j.args.get("side") or (j.args.get("kind") or "").upper() not in ("", "INNER"):
                raise _err(f"{(j.args.get('side') or j.args.get('kind')).upper()} JOIN is not supported yet "
                           "(inner equi-joins only)", j)
            if j.args.get("using"):
                raise _err("JOIN ... USING is not supported yet; write JOIN ... ON", j)
            lk, rk, rest = [], [], []
            for cond in _conjuncts(j.args["on"]) if j.args.get("on") else []:
                if isinstance(cond, exp.EQ):
                    a, b = _aliases(cond.this), _aliases(cond.expression)
                    if a and b and a <= seen and b == {alias}:
                        lk.append(_spark(cond.this)); rk.append(_spark(cond.expression)); continue
                    if a and b and b <= seen and a == {alias}:
                        lk.append(_spark(cond.expression)); rk.append(_spark(cond.this)); continue
                rest.append(cond)
            if not lk:
                raise _err(f"the join with {alias!r} needs an equality condition between the two sides "
                           "(cross joins are not supported yet)", j)
            node = P.Join(node, sources[alias], tuple(lk), tuple(rk), next(self.ids))
            for cond in rest:
                node = P.Filter(node, _spark(cond))
            seen.add(alias)
        for cond in late:
            node = P.Filter(node, _spark(cond))

        selects = q.expressions
        aggs = [a for e in [*selects, *([q.args["having"]] if q.args.get("having") else [])]
                for a in e.find_all(exp.AggFunc)]
        if aggs or q.args.get("group"):
            node, exprs = self._aggregate(q, node, selects)
        else:
            exprs = [(_spark(e.unalias() if isinstance(e, exp.Alias) else e), e.alias_or_name) for e in selects]
        names = [n for _, n in exprs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise _err(f"output column names must be unique; alias {', '.join(sorted(dup))}", q)
        node = P.Project(node, tuple(exprs))
        return P.Materialize(node, next(self.ids)), tuple(sorted(set(self.aliases.values())))

    def _aggregate(self, q: exp.Select, node: P.Node, selects: list[exp.Expression]):  # noqa: ANN202
        group = list(q.args["group"].expressions) if q.args.get("group") else []
        if not group:
            raise _err("aggregation without GROUP BY is not supported yet", q)
        pre = [(_spark(g), f"_g{i}") for i, g in enumerate(group)]
        calls: list[P.AggCall] = []
        replaced: dict[str, exp.Expression] = {}

        def call(func: str, arg: exp.Expression | None) -> exp.Expression:
            if arg is not None:
                pre.append((_spark(arg), f"_a{len(pre)}"))
            name = f"_c{len(calls)}"
            calls.append(P.AggCall(func, pre[-1][1] if arg is not None else None, name))
            return exp.column(name, quoted=True)

        def rewrite(e: exp.Expression) -> exp.Expression:
            def fn(n: exp.Expression) -> exp.Expression:
                if isinstance(n, exp.AggFunc):
                    key = n.sql()
                    if key in replaced:
                        return replaced[key].copy()
                    if n.find(exp.Distinct):
                        raise _err(f"{n.sql('postgres')}: DISTINCT aggregates are not supported yet", n)
                    arg = n.this
                    if isinstance(n, exp.Count):
                        out = call("count_star", None) if isinstance(arg, exp.Star) else call("count", arg)
                    elif isinstance(n, (exp.Sum, exp.Max, exp.Min)):
                        out = call(type(n).__name__.lower(), arg)
                    elif isinstance(n, exp.Avg):
                        s, c = call("sum", arg), call("count", arg)
                        out = exp.Div(this=exp.cast(s, "DOUBLE"), expression=exp.Nullif(this=c, expression=exp.Literal.number(0)))
                    else:
                        raise _err(f"aggregate {n.sql('postgres')} is not supported yet "
                                   "(COUNT, SUM, AVG, MIN, MAX are)", n)
                    replaced[key] = out
                    return out.copy()
                for i, g in enumerate(group):
                    if n == g:
                        return exp.column(f"_g{i}", quoted=True)
                if isinstance(n, exp.Column) and n.table in self.aliases:
                    raise _err(f"column {n.sql('postgres')} must appear in the GROUP BY clause or be used "
                               "in an aggregate function", n)
                return n
            return e.transform(fn)

        out_exprs = []
        for e in selects:
            body = e.unalias() if isinstance(e, exp.Alias) else e
            out_exprs.append((rewrite(body.copy()).sql(dialect="spark"), e.alias_or_name))
        having = rewrite(q.args["having"].this.copy()).sql(dialect="spark") if q.args.get("having") else None
        node = P.Project(node, tuple(pre))
        node = P.Aggregate(node, tuple(f"_g{i}" for i in range(len(group))), tuple(calls), next(self.ids))
        if having:
            node = P.Filter(node, having)
        return node, out_exprs


def _conjuncts(e: exp.Expression) -> list[exp.Expression]:
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]


def _aliases(e: exp.Expression) -> set[str]:
    return {c.table for c in e.find_all(exp.Column) if c.table}


def _spark(e: exp.Expression) -> str:
    """The expression as Spark SQL, with columns renamed to plan-internal names."""
    def fn(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.table:
            return exp.column(f"{n.table}__{n.name}", quoted=True)
        return n
    return e.copy().transform(fn).sql(dialect="spark")


def plan_view(select: exp.Expression, catalog: Catalog) -> tuple[P.Materialize, tuple[str, ...]]:
    """Plan a view's SELECT; return the plan and the tables it reads."""
    return _Planner(catalog).plan(select)

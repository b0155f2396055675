"""SELECT -> incremental plan.

A materialized view may use: joins (inner, LEFT/RIGHT/FULL outer, cross, extra non-equi
conditions, self-joins, any number of tables), ``WHERE``, ``GROUP BY`` or whole-input
aggregation with COUNT(*), COUNT(x), SUM, AVG, MIN, MAX, COUNT/SUM/AVG(DISTINCT x),
``FILTER (WHERE ...)``, ``HAVING``, ``SELECT DISTINCT``, ``UNION [ALL]``, subqueries in FROM,
CTEs, other views, ``ORDER BY ... LIMIT/OFFSET``, ``ROW_NUMBER() OVER (...)`` filtered by
``rn <= N``, and the time-window table functions ``TUMBLE(t, ts, size)`` and
``HOP(t, ts, slide, size)``; scalar expressions are whatever Spark SQL evaluates.

sqlglot's ``qualify`` resolves every column to the FROM item (alias) of its scope; inside a scope
columns are renamed ``<alias>__<column>`` so self-joins and clashing names stay apart, and each
FROM item that is not a plain table is re-projected to those names. Expressions are emitted as
Spark SQL (and as DuckDB SQL for an outer join's residual condition, which runs in the join task).
"""

from __future__ import annotations

import itertools
import re

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify

from millpond.catalog import Catalog, TableDef
from millpond.columns import ROW_ID
from millpond.engine import plan as P
from millpond.errors import CatalogError, SqlError

__all__ = ["plan_view", "table_plan"]

WINDOW_FN = "MP_WINDOW"  # placeholder for TUMBLE/HOP's window_start/window_end inside the rewrite


def table_plan(table: TableDef) -> P.Materialize:
    """A table's own materialization: its changelog kept as rows (including ``_row_id``)."""
    columns = [*(c.name for c in table.columns), ROW_ID]
    return P.Materialize(P.Source(table.name, tuple((c, c) for c in columns)), node_id=1)


def plan_view(select: exp.Expression, catalog: Catalog) -> tuple[P.Materialize, tuple[str, ...]]:
    """Plan a view's query; return the plan and the tables and views it reads directly."""
    planner = _Planner(catalog)
    node, _ = planner.query(planner.prepare(select), {})
    return P.Materialize(node, next(planner.ids)), tuple(sorted(planner.depends))


def _err(message: str, node: exp.Expression | None = None) -> SqlError:
    meta = getattr(node, "meta", None) or {}
    if not meta and node is not None:
        ident = node.find(exp.Identifier)
        meta = (ident.meta if ident is not None else {}) or {}
    return SqlError(message, line=meta.get("line"), col=meta.get("col"))


class _Planner:
    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.ids = itertools.count(1)
        self.depends: set[str] = set()
        self.windows: dict[str, tuple[int, int]] = {}  # window id -> (size_us, slide_us)

    # -- preparation: table functions, name checks, qualification ------------------------------
    def prepare(self, query: exp.Expression) -> exp.Expression:
        if not isinstance(query, (exp.Select, exp.SetOperation, exp.Subquery)):
            raise _err(f"a materialized view must be a query, got {query.key.upper()}", query)
        query = query.copy().transform(self._table_function)
        ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
        for t in query.find_all(exp.Table):
            if isinstance(t.this, exp.Identifier) and t.name not in ctes and t.name not in self.catalog.views:
                self._table_exists(t)
        for node in query.find_all(exp.Subquery):
            if node.parent is not None and not isinstance(node.parent, (exp.From, exp.Join, exp.SetOperation)):
                raise _err("subqueries outside FROM (in SELECT, WHERE or ON) are not supported; "
                           "write them as a join", node)
        for node in query.find_all(exp.Exists, exp.In):
            if node.args.get("query") or isinstance(node, exp.Exists):
                raise _err("IN (SELECT ...) and EXISTS are not supported; write them as a join", node)
        schema = {t.name: {c.name: c.type for c in t.columns} for t in self.catalog.tables.values()}
        schema.update({v.name: {n: "VARCHAR" for n in v.schema.names} for v in self.catalog.views.values()})
        try:
            return qualify(query, schema=schema, dialect="postgres", validate_qualify_columns=True,
                           quote_identifiers=False)
        except OptimizeError as exc:
            raise _err(f"cannot resolve the query: {exc}", query) from None

    def _table_exists(self, t: exp.Table) -> None:
        if t.name not in self.catalog.tables:
            known = sorted([*self.catalog.tables, *self.catalog.views])
            raise CatalogError(_err(f"no table or view named {t.name!r} (known: {', '.join(known) or 'none'})",
                                    t).args[0])

    def _table_function(self, node: exp.Expression) -> exp.Expression:
        """``TUMBLE(t, ts, size)`` / ``HOP(t, ts, slide, size)`` in FROM -> a subquery over ``t``
        adding ``window_start``/``window_end`` (placeholders the planner turns into a Window)."""
        if not (isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous)):
            return node
        fn = node.this
        name = fn.name.upper()
        args = fn.expressions
        if name not in ("TUMBLE", "HOP"):
            raise _err(f"unknown table function {fn.name}() (TUMBLE and HOP are supported)", fn)
        want = 3 if name == "TUMBLE" else 4
        if len(args) != want or not isinstance(args[0], exp.Column) or not isinstance(args[1], exp.Column):
            usage = "TUMBLE(table, time_column, size)" if name == "TUMBLE" else "HOP(table, time_column, slide, size)"
            raise _err(f"{name} takes {usage}", fn)
        table = self.catalog.tables.get(args[0].name)
        types = {c.name: c.type for c in table.columns} if table is not None else {}
        if args[1].name in types and types[args[1].name] not in ("TIMESTAMP", "TIMESTAMPTZ"):
            raise _err(f"{name}: column {args[1].name!r} is {types[args[1].name]}; a time window needs a "
                       "TIMESTAMP column", args[1])
        size = _interval_us(args[-1])
        slide = size if name == "TUMBLE" else _interval_us(args[2])
        if size % slide:
            raise _err("HOP: the window size must be a multiple of the slide", fn)
        wid = f"w{len(self.windows)}"
        self.windows[wid] = (size, slide)
        ts = exp.column(args[1].name)
        inner = exp.select(
            exp.Star(),
            exp.alias_(exp.Anonymous(this=WINDOW_FN, expressions=[ts.copy(), exp.Literal.string(wid),
                                                                  exp.Literal.string("start")]), "window_start"),
            exp.alias_(exp.Anonymous(this=WINDOW_FN, expressions=[ts.copy(), exp.Literal.string(wid),
                                                                  exp.Literal.string("end")]), "window_end"),
        ).from_(exp.to_table(args[0].name))
        return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(node.alias or name.lower())))

    # -- queries ------------------------------------------------------------------------------
    def query(self, q: exp.Expression, ctes: dict[str, exp.Expression], rn_limit: int | None = None
              ) -> tuple[P.Node, list[str]]:
        """Plan a query; return its node and output column names (the node's columns)."""
        if isinstance(q, exp.Subquery):
            return self.query(q.this, ctes, rn_limit)
        ctes = {**ctes, **{c.alias_or_name: c.this for c in (q.args.get("with_").expressions
                                                               if q.args.get("with_") else [])}}
        if isinstance(q, exp.Union):
            return self._union(q, ctes)
        if isinstance(q, exp.SetOperation):
            raise _err(f"{q.key.upper()} is not supported (UNION and UNION ALL are)", q)
        if not isinstance(q, exp.Select):
            raise _err(f"unsupported query {q.key.upper()}", q)
        return self._select(q, ctes, rn_limit)

    def _union(self, q: exp.Union, ctes: dict) -> tuple[P.Node, list[str]]:
        for arg in ("order", "limit", "offset"):
            if q.args.get(arg):
                raise _err(f"{arg.upper()} on a UNION is not supported; wrap the UNION in a subquery", q)
        left, names = self.query(q.this, ctes)
        right, rnames = self.query(q.expression, ctes)
        if len(names) != len(rnames):
            raise _err(f"each UNION query must have the same number of columns ({len(names)} vs {len(rnames)})", q)
        right = P.Project(right, tuple((_q(r), n) for r, n in zip(rnames, names)))
        inputs = (*(left.inputs if isinstance(left, P.Union) else (left,)), right)
        node: P.Node = P.Union(inputs)
        if q.args.get("distinct"):
            node = self._distinct(node, names)
        return node, names

    def _relation(self, item: exp.Expression, ctes: dict, rn_limit: int | None) -> tuple[P.Node, list[str]]:
        if isinstance(item, exp.Subquery):
            return self.query(item.this, ctes, rn_limit)
        if not isinstance(item, exp.Table):
            raise _err(f"unsupported FROM item {item.sql('postgres')}", item)
        name = item.name
        if name in ctes:
            return self.query(ctes[name], {k: v for k, v in ctes.items() if k != name}, rn_limit)
        self.depends.add(name)
        if name in self.catalog.views:
            from millpond.sql.statements import parse

            view = self.catalog.views[name]
            return self.query(self.prepare(parse(view.sql)[0]), {}, rn_limit)
        cols = [c.name for c in self.catalog.tables[name].columns]
        return P.Source(name, tuple((c, c) for c in cols)), cols

    def _select(self, q: exp.Select, ctes: dict, rn_limit: int | None) -> tuple[P.Node, list[str]]:
        if not q.args.get("from_"):
            raise _err("a materialized view needs a FROM clause", q)
        joins = q.args.get("joins") or []
        items = [q.args["from_"].this] + [j.this for j in joins]
        where = _conjuncts(q.args["where"].this) if q.args.get("where") else []

        # FROM items, renamed to <alias>__<column>
        rels: dict[str, P.Node] = {}
        for item in items:
            alias = item.alias_or_name
            node, names = self._relation(item, ctes, self._row_number_limit(item, alias, where, ctes))
            if isinstance(node, P.Source):
                rels[alias] = P.Source(node.table, tuple((f"{alias}__{out}", src) for out, src in node.columns))
            else:
                rels[alias] = P.Project(node, tuple((_q(n), f"{alias}__{n}") for n in names))

        # WHERE conjuncts on one FROM item go below the joins, unless outer joins pad that item
        padded = _padded_aliases(items[0].alias_or_name, joins)
        late = []
        for cond in where:
            used = _aliases(cond)
            if len(used) == 1 and not (used & padded) and not _has_agg_or_window(cond):
                (a,) = used
                rels[a] = P.Filter(rels[a], _spark(cond))
            else:
                late.append(cond)
        all_inner = all(_join_kind(j) in ("inner", "cross") for j in joins)

        first = items[0].alias_or_name
        node, seen = rels[first], {first}
        for j in joins:
            if all_inner:
                node, late = self._join(node, j, rels, seen, late)
            else:
                node, _ = self._join(node, j, rels, seen, [])
            seen.add(j.this.alias_or_name)
        for cond in late:
            node = P.Filter(node, _spark(cond))

        node, selects = self._windows(node, q.expressions)
        if any(s.find(exp.Window) for s in selects):
            node, names = self._row_number(q, node, selects, rn_limit)
        else:
            having = [q.args["having"]] if q.args.get("having") else []
            aggs = [a for e in [*selects, *having] for a in e.find_all(exp.AggFunc)]
            if aggs or q.args.get("group"):
                node, exprs = self._aggregate(q, node, selects)
            else:
                exprs = [(_spark(e.unalias() if isinstance(e, exp.Alias) else e), e.alias_or_name) for e in selects]
            names = [n for _, n in exprs]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise _err(f"output column names must be unique; alias {', '.join(dup)}", q)
            node = P.Project(node, tuple(exprs))
        if q.args.get("distinct"):
            if q.args["distinct"].args.get("on"):
                raise _err("SELECT DISTINCT ON is not supported; use ROW_NUMBER() ... = 1", q)
            node = self._distinct(node, names)
        return self._order_limit(q, node, selects, names), names

    def _windows(self, node: P.Node, selects: list[exp.Expression]) -> tuple[P.Node, list[exp.Expression]]:
        """Turn TUMBLE/HOP placeholders into a Window node and references to its columns."""
        done: set[str] = set()

        def fn(n: exp.Expression) -> exp.Expression:
            nonlocal node
            if not (isinstance(n, exp.Anonymous) and n.name.upper() == WINDOW_FN):
                return n
            ts, wid, which = (a for a in n.expressions)
            wid = wid.this
            if wid not in done:
                size, slide = self.windows[wid]
                node = P.Window(node, f"{ts.table}__{ts.name}", size, slide, f"_{wid}_start", f"_{wid}_end")
                done.add(wid)
            return exp.column(f"_{wid}_{which.this}", quoted=True)
        out = [s.transform(fn) if s.find(exp.Anonymous) else s for s in selects]
        return node, out

    # -- joins --------------------------------------------------------------------------------
    def _join(self, node: P.Node, j: exp.Join, rels: dict, seen: set, where: list
              ) -> tuple[P.Node, list]:
        """Join ``node`` (the FROM items in ``seen``) with ``j``; for inner joins, WHERE conjuncts
        that relate the two sides become join keys too. Returns the node and the unused ``where``."""
        alias = j.this.alias_or_name
        kind = _join_kind(j)
        if j.args.get("using"):
            raise _err("JOIN ... USING could not be resolved; write JOIN ... ON", j)
        on = _conjuncts(j.args["on"]) if j.args.get("on") else []
        right = rels[alias]
        left_keys, right_keys, rest, unused = [], [], [], []
        for cond, from_where in [*((c, False) for c in on), *((c, True) for c in where)]:
            used = _aliases(cond)
            if isinstance(cond, exp.EQ) and not _has_agg_or_window(cond):
                a, b = _aliases(cond.this), _aliases(cond.expression)
                if a and b and a <= seen and b == {alias}:
                    left_keys.append(_spark(cond.this)); right_keys.append(_spark(cond.expression)); continue
                if a and b and b <= seen and a == {alias}:
                    left_keys.append(_spark(cond.expression)); right_keys.append(_spark(cond.this)); continue
            if from_where:
                unused.append(cond)
            elif used == {alias} and kind in ("inner", "cross", "left"):
                right = P.Filter(right, _spark(cond))  # ON conditions on the padded side filter its input
            elif used and used <= seen and kind in ("inner", "cross", "right"):
                node = P.Filter(node, _spark(cond))
            else:
                rest.append(cond)
        if kind in ("inner", "cross"):
            out: P.Node = P.Join(node, right, tuple(left_keys), tuple(right_keys), next(self.ids))
            for cond in rest:
                out = P.Filter(out, _spark(cond))
            return out, unused
        residual = " AND ".join(f"({_duckdb(c)})" for c in rest) or None
        return P.Join(node, right, tuple(left_keys), tuple(right_keys), next(self.ids), kind, residual), unused

    # -- aggregation --------------------------------------------------------------------------
    def _aggregate(self, q: exp.Select, node: P.Node, selects: list[exp.Expression]):  # noqa: ANN202
        group = list(q.args["group"].expressions) if q.args.get("group") else []
        for g in group:
            if isinstance(g, (exp.Cube, exp.Rollup, exp.GroupingSets)):
                raise _err("GROUPING SETS, CUBE and ROLLUP are not supported", g)
        pre = [(_spark(g), f"_g{i}") for i, g in enumerate(group)]
        calls: list[P.AggCall] = []
        replaced: dict[str, exp.Expression] = {}

        def call(func: str, arg: exp.Expression | None) -> exp.Expression:
            if arg is not None:
                pre.append((_spark(arg), f"_a{len(pre)}"))
            name = f"_c{len(calls)}"
            calls.append(P.AggCall(func, pre[-1][1] if arg is not None else None, name))
            return exp.column(name, quoted=True)

        def aggregate(n: exp.Expression, cond: exp.Expression | None) -> exp.Expression:
            agg = n
            arg = agg.this
            distinct = isinstance(arg, exp.Distinct)
            if distinct:
                if len(arg.expressions) != 1:
                    raise _err(f"{agg.sql('postgres')}: DISTINCT over several arguments is not supported", agg)
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
            if isinstance(agg, exp.Avg):
                s = call("sum_distinct" if distinct else "sum", arg)
                c = call("count_distinct" if distinct else "count", arg)
                return exp.Div(this=exp.cast(s, "DOUBLE"),
                               expression=exp.Nullif(this=c, expression=exp.Literal.number(0)))
            raise _err(f"aggregate {agg.sql('postgres')} is not supported (COUNT, SUM, AVG, MIN, MAX are)", agg)

        def rewrite(e: exp.Expression) -> exp.Expression:
            def fn(n: exp.Expression) -> exp.Expression:
                if isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc):
                    key = n.sql()
                    if key not in replaced:
                        replaced[key] = aggregate(n.this, n.expression.this)
                    return replaced[key].copy()
                if isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Filter):
                    key = n.sql()
                    if key not in replaced:
                        if any(isinstance(a, exp.AggFunc) for a in n.find_all(exp.AggFunc) if a is not n):
                            raise _err(f"aggregate calls cannot be nested: {n.sql('postgres')}", n)
                        replaced[key] = aggregate(n, None)
                    return replaced[key].copy()
                for i, g in enumerate(group):
                    if n == g:
                        return exp.column(f"_g{i}", quoted=True)
                if isinstance(n, exp.Column) and n.table:
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
        node = P.Aggregate(node, tuple(f"_g{i}" for i in range(len(group))), tuple(calls), next(self.ids),
                           whole=not group)
        if having:
            node = P.Filter(node, having)
        return node, out_exprs

    def _distinct(self, node: P.Node, names: list[str]) -> P.Node:
        return P.Aggregate(node, tuple(names), (), next(self.ids))

    # -- top-N --------------------------------------------------------------------------------
    def _order_limit(self, q: exp.Select, node: P.Node, selects: list, names: list[str]) -> P.Node:
        limit, offset = q.args.get("limit"), q.args.get("offset")
        if limit is None:
            if offset is not None:
                raise _err("OFFSET without LIMIT in a materialized view is not supported", offset)
            return node  # a view's rows have no order: ORDER BY alone changes nothing
        order = []
        for o in (q.args["order"].expressions if q.args.get("order") else []):
            col = o.this
            bodies = [s.unalias() if isinstance(s, exp.Alias) else s for s in selects]
            if isinstance(col, exp.Column) and not col.table and col.name in names:
                name = col.name
            elif col in bodies:
                name = names[bodies.index(col)]
            else:
                raise _err(f"ORDER BY {o.this.sql('postgres')} with LIMIT: order by an output column "
                           "(add it to the SELECT list)", o)
            order.append((name, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))))
        return P.TopN(node, (), tuple(order), _count(limit.expression, "LIMIT"),
                      _count(offset.expression, "OFFSET") if offset is not None else 0, None, next(self.ids))

    def _row_number_limit(self, item: exp.Expression, alias: str, where: list, ctes: dict) -> int | None:
        """N when ``item`` computes ROW_NUMBER() and the enclosing WHERE keeps ``rn <= N``."""
        inner = item.this if isinstance(item, exp.Subquery) else ctes.get(item.name) if isinstance(item, exp.Table) \
            else None
        if not isinstance(inner, exp.Select):
            return None
        rn = [s.alias_or_name for s in inner.expressions if isinstance(s, exp.Alias) and isinstance(s.this, exp.Window)]
        bounds = []
        for cond in where:
            for op, col, lit in _comparisons(cond):
                if col.table == alias and col.name in rn:
                    n = int(lit)
                    bounds.append({"<=": n, "<": n - 1, "=": n if n == 1 else None}.get(op))
        bounds = [b for b in bounds if b is not None]
        return min(bounds) if bounds else None

    def _row_number(self, q: exp.Select, node: P.Node, selects: list, limit: int | None):  # noqa: ANN202
        if q.args.get("group") or any(a.find_ancestor(exp.Window) is None for s in selects
                                      for a in s.find_all(exp.AggFunc)):
            raise _err("window functions together with aggregation are not supported", q)
        windows = [s for s in selects if s.find(exp.Window)]
        w = windows[0].find(exp.Window)
        if len(windows) > 1 or not isinstance(windows[0], exp.Alias) or windows[0].this is not w \
                or not isinstance(w.this, exp.RowNumber):
            raise _err("the only window function supported is ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) AS rn, "
                       "filtered by rn <= N in the enclosing query", w)
        if limit is None:
            raise _err("ROW_NUMBER() needs a filter rn <= N (or rn = 1) in the enclosing query's WHERE", w)
        exprs, names = [], []
        for s in selects:
            if s is windows[0]:
                continue
            exprs.append((_spark(s.unalias() if isinstance(s, exp.Alias) else s), s.alias_or_name))
            names.append(s.alias_or_name)
        partition = [(_spark(p), f"_p{i}") for i, p in enumerate(w.args.get("partition_by") or [])]
        orders = w.args["order"].expressions if w.args.get("order") else []
        order = [(_spark(o.this), f"_r{i}") for i, o in enumerate(orders)]
        node = P.Project(node, tuple([*exprs, *partition, *order]))
        rn = windows[0].alias_or_name
        node = P.TopN(node, tuple(n for _, n in partition),
                      tuple((n, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))) for (_, n), o in zip(order, orders)),
                      limit, 0, rn, next(self.ids))
        out = [s.alias_or_name for s in selects]
        dup = sorted({n for n in out if out.count(n) > 1})
        if dup:
            raise _err(f"output column names must be unique; alias {', '.join(dup)}", q)
        return P.Project(node, tuple((_q(n), n) for n in out)), out


def _join_kind(j: exp.Join) -> str:
    side = (j.args.get("side") or "").lower()
    kind = (j.args.get("kind") or "").lower()
    if side in ("left", "right", "full"):
        return side
    if kind in ("", "inner"):
        return "inner" if j.args.get("on") else "cross"
    if kind == "cross":
        return "cross"
    raise _err(f"{kind.upper()} JOIN is not supported", j)


def _padded_aliases(first: str, joins: list[exp.Join]) -> set[str]:
    """FROM items that an outer join may pad with NULLs (WHERE conditions on them stay above)."""
    padded: set[str] = set()
    seen = {first}
    for j in joins:
        alias = j.this.alias_or_name
        kind = _join_kind(j)
        if kind in ("left", "full"):
            padded.add(alias)
        if kind in ("right", "full"):
            padded |= seen
        seen.add(alias)
    return padded


def _conjuncts(e: exp.Expression) -> list[exp.Expression]:
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]


def _comparisons(cond: exp.Expression):  # noqa: ANN202
    """(op, column, integer literal) for ``col op N`` or ``N op col`` comparisons."""
    ops = {exp.LTE: ("<=", ">="), exp.LT: ("<", ">"), exp.EQ: ("=", "="), exp.GTE: (">=", "<="), exp.GT: (">", "<")}
    for cls, (op, flipped) in ops.items():
        if isinstance(cond, cls):
            a, b = cond.this, cond.expression
            if isinstance(a, exp.Column) and isinstance(b, exp.Literal) and not b.is_string:
                yield op, a, b.this
            elif isinstance(b, exp.Column) and isinstance(a, exp.Literal) and not a.is_string:
                yield flipped, b, a.this


def _aliases(e: exp.Expression) -> set[str]:
    return {c.table for c in e.find_all(exp.Column) if c.table}


def _has_agg_or_window(e: exp.Expression) -> bool:
    return e.find(exp.AggFunc, exp.Window) is not None


def _count(e: exp.Expression, what: str) -> int:
    if not (isinstance(e, exp.Literal) and not e.is_string and re.fullmatch(r"\d+", e.this)):
        raise _err(f"{what} must be a non-negative integer constant", e)
    return int(e.this)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _rename(e: exp.Expression) -> exp.Expression:
    def fn(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.table:
            return exp.column(f"{n.table}__{n.name}", quoted=True)
        if isinstance(n, exp.Anonymous) and n.name.upper() == WINDOW_FN:
            ts, wid, which = n.expressions
            return exp.Anonymous(this=WINDOW_FN, expressions=[fn(ts), wid, which])
        return n
    return e.copy().transform(fn)


def _spark(e: exp.Expression) -> str:
    """The expression as Spark SQL, with columns renamed to plan-internal names."""
    return _rename(e).sql(dialect="spark")


def _duckdb(e: exp.Expression) -> str:
    return _rename(e).sql(dialect="duckdb")


_UNITS_US = {"microsecond": 1, "millisecond": 1000, "second": 10**6, "minute": 60 * 10**6,
             "hour": 3600 * 10**6, "day": 86400 * 10**6, "week": 7 * 86400 * 10**6}


def _interval_us(e: exp.Expression) -> int:
    """A constant INTERVAL as microseconds (months and years have no fixed length: rejected)."""
    if isinstance(e, exp.Interval):
        text = f"{e.this.name} {e.unit.name if e.args.get('unit') else ''}".strip()
    elif isinstance(e, exp.Literal) and e.is_string:
        text = e.this
    else:
        raise _err(f"a window size must be an INTERVAL constant, got {e.sql('postgres')}", e)
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]+?)s?\s*", text, re.IGNORECASE)
    unit = m.group(2).lower() if m else ""
    unit = {"us": "microsecond", "ms": "millisecond", "sec": "second", "min": "minute", "h": "hour"}.get(unit, unit)
    if not m or unit not in _UNITS_US or int(m.group(1)) <= 0:
        raise _err(f"window size {e.sql('postgres')}: use a positive INTERVAL in microseconds .. weeks", e)
    return int(m.group(1)) * _UNITS_US[unit]

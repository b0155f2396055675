"""Subqueries outside FROM, rewritten into joins the planner already maintains incrementally.

A rule of :data:`~millpond.sql.planner.prepare.RULES`, run on the qualified query (every column
names its FROM item) and producing a qualified query: each subquery in a SELECT's WHERE, SELECT
list or HAVING becomes a derived table joined into that SELECT's FROM, so inserts, updates and
deletes on every table involved flow through ordinary joins and aggregations. With PostgreSQL's
meaning (``_sqN`` is a fresh alias; ``s.k = t.k`` stands for the correlation equalities, ANDed at
the top of the subquery's WHERE, which become join keys):

- ``x IN (SELECT y FROM s WHERE s.k = t.k AND p)`` (also ``(a, b) IN (SELECT c, d ...)``), a
  semi-join: ``JOIN (SELECT DISTINCT y AS v0, s.k AS c0 FROM s WHERE p) _sqN ON x = v0 AND c0 = t.k``.
- ``EXISTS (SELECT ... WHERE s.k = t.k AND p)``: the same join on the correlation keys alone (a
  cross join with ``SELECT DISTINCT 1`` when uncorrelated).
- ``NOT EXISTS``: ``LEFT JOIN`` the distinct keys (and a marker ``m``), keep rows where ``m IS NULL``.
  EXISTS elsewhere in WHERE (under OR or NOT) or in the SELECT list of a query that does not
  aggregate is the same join, the EXISTS becoming the value ``m IS NOT NULL``.
- ``x NOT IN (SELECT y ...)``: true when the subquery is empty, else only when ``x`` is not NULL,
  no ``y`` is NULL and none equals ``x``. So a ``LEFT JOIN`` of the distinct values (the match) and
  one of ``SELECT count(*) > 0 AS ne, count(*) > count(y) AS hn ... [GROUP BY s.k]`` (a cross
  join when uncorrelated: a whole-input aggregate has its one row also over no input), and
  ``WHERE NOT COALESCE(ne, FALSE) OR (x IS NOT NULL AND NOT hn AND m IS NULL)``.
- a scalar subquery ``(SELECT f(aggregates) FROM s WHERE s.k = t.k AND p)``: the aggregates as
  columns of ``(SELECT s.k AS c0, agg AS a0 ... FROM s WHERE p GROUP BY s.k)``, ``LEFT JOIN`` on
  the keys, and ``f`` evaluated in the outer query over them, a COUNT of a key with no rows being 0
  (``COALESCE(a0, 0)``) as PostgreSQL's count over no rows is; uncorrelated, a cross join with the
  whole-input aggregate. In the SELECT list or HAVING of a GROUP BY query the aggregate columns
  join the GROUP BY (one value per group); in a query aggregated without GROUP BY, that query
  becomes a derived table (``_aggN``, its aggregates as columns) the subquery is joined to, so it
  keeps its one row over no input.

The membership relations are DISTINCT and the flags of NOT IN are booleans, so a change in a
subquery's input reaches the outer rows only when it changes a set or a flag. Refused by name:
IN anywhere but ANDed at the top of WHERE, EXISTS in HAVING, ON or the SELECT list of an
aggregating query, ``(a, b) NOT IN``, ``ANY``/``ALL``, a scalar subquery that is not an aggregate without GROUP
BY (PostgreSQL raises at runtime when it returns two rows; a view cannot), a correlated
subquery that refers to the outer query anywhere but in those equalities, and subqueries in ON,
GROUP BY or ORDER BY.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT t.k AS k FROM t AS t WHERE t.x IN (SELECT s.y AS y FROM s AS s)")
    >>> unnest_subqueries(None, q).sql()  # doctest: +NORMALIZE_WHITESPACE
    'SELECT t.k AS k FROM t AS t JOIN (SELECT DISTINCT s.y AS v0 FROM s AS s) AS _sq1 ON t.x = _sq1.v0'
"""

from __future__ import annotations

import itertools

from sqlglot import exp

from millpond.sql.planner.context import Context
from millpond.sql.planner.exprs import conjuncts, unalias
from millpond.sql.planner.subquery_shapes import (  # noqa: F401
    SCALAR_SHAPE, SUPPORTED, _ITEM_PARENTS, _agg_units, _aggregate_columns, _check_scalar_place, _clause, _col,
    _constant_select, _construct, _correlation, _depth, _derived, _direct_subqueries, _eq, _grouped,
    _inside_aggregate, _join, _local, _membership_shape, _outer_columns, _position, _put_value, _retable, _rows, _sources, err,
)

__all__ = ["unnest_subqueries"]


def unnest_subqueries(ctx: Context | None, query: exp.Expression) -> exp.Expression:
    """``query`` with every subquery outside FROM joined into its SELECT, or a SqlError naming it."""
    names = _Names(query)
    for select in sorted(query.find_all(exp.Select), key=_depth, reverse=True):  # inner SELECTs first
        _count_inequalities(select)
        new = _Unnester(select, names).run()
        if select is query:
            query = new
    for node in query.find_all(exp.Query):  # every subquery left is a FROM item, a CTE or a UNION branch
        if node.parent is not None and not isinstance(node.parent, _ITEM_PARENTS):
            raise err(f"{node.sql('postgres')[:80]}: this subquery is not supported in a materialized view", node)
    return query


def _count_inequalities(s: exp.Select) -> None:
    """``EXISTS (SELECT ... FROM r WHERE <equalities> AND r.b <> t.b AND p)`` in ``s`` (TPC-H's Q21:
    another supplier of the same order) as counts, which the scalar subqueries below keep as joins
    on equalities alone: the rows with ``r.b <> t.b`` are those with a ``b`` less those with ``b``
    equal to ``t.b``, so it is ``t.b IS NOT NULL AND (SELECT count(r.b) ... WHERE <equalities> AND
    p) > (SELECT count(*) ... WHERE <equalities> AND r.b = t.b AND p)`` — never NULL, as EXISTS;
    NOT EXISTS is its negation. One such inequality per subquery; more are refused below."""
    for test in [e for e in s.find_all(exp.Exists) if e.find_ancestor(exp.Select) is s]:
        q = test.this
        where = q.args.get("where") if isinstance(q, exp.Select) else None
        if where is None or any(q.args.get(a) is not None for a in ("group", "having", "limit", "offset", "distinct")) \
                or any(_agg_units(e) for e in q.expressions):
            continue
        parts = conjuncts(where.this)
        found = [(i, pair) for i, c in enumerate(parts) if (pair := _correlation(c, q, exp.NEQ)) is not None]
        if len(found) != 1:
            continue
        i, (inner, outer) = found[0]
        rest = [c for j, c in enumerate(parts) if j != i]

        def counted(item: exp.Expression, extra: list[exp.Expression]) -> exp.Subquery:
            sub = q.copy()
            sub.set("expressions", [exp.alias_(item, "n")])
            sub.set("order", None)
            sub.set("where", exp.Where(this=exp.and_(*(c.copy() for c in [*rest, *extra]))))
            return exp.Subquery(this=sub)

        some = counted(exp.Count(this=inner.copy()), [])
        same = counted(exp.Count(this=exp.Star()), [exp.EQ(this=inner.copy(), expression=outer.copy())])
        known = exp.Not(this=exp.Is(this=outer.copy(), expression=exp.Null()))
        test.replace(exp.Paren(this=exp.and_(known, exp.GT(this=some, expression=same))))


class _Names:
    """Fresh aliases: ``_sq1``, ``_sq2`` ... never an identifier the query already uses."""

    def __init__(self, query: exp.Expression):
        self.used = {i.name for i in query.find_all(exp.Identifier)}
        self.counter = itertools.count(1)

    def fresh(self, prefix: str) -> str:
        while True:
            name = f"_{prefix}{next(self.counter)}"
            if name not in self.used:
                self.used.add(name)
                return name


class _Unnester:
    """The rewrite of one SELECT (``s``) whose own subqueries (not those of nested SELECTs) are
    turned into joins; nested SELECTs were rewritten before it."""

    def __init__(self, s: exp.Select, names: _Names):
        self.s = s
        self.names = names
        self.joins: list[exp.Join] = []
        self.conditions: list[exp.Expression] = []  # extra WHERE conjuncts (anti-joins)
        self.group_extra: list[exp.Expression] = []  # scalar results that join a GROUP BY

    def run(self) -> exp.Expression:
        s = self.s
        found = _direct_subqueries(s)
        if not found:
            return s
        group = list(s.args["group"].expressions) if s.args.get("group") else []
        aggregated = bool(group) or s.args.get("having") is not None or any(_agg_units(e) for e in s.expressions)
        tests: list[exp.Expression] = []
        post_agg: list[exp.Subquery] = []
        for node in found:
            if isinstance(node.parent, exp.Exists) or (isinstance(node.parent, exp.In) and node.arg_key == "query"):
                tests.append(node)
                continue
            _check_scalar_place(node, s)
            constant = isinstance(node.this, exp.Select) and _constant_select(node.this)
            if _clause(node, s) == "where" or not aggregated or constant or _inside_aggregate(node, s):
                self._scalar(node, group=None)  # a value per input row
            elif group:
                self._scalar(node, group=group)  # a value per group
            else:
                post_agg.append(node)  # a value beside the one row of an aggregate without GROUP BY
        self._membership(tests)
        if post_agg:
            return self._wrap_whole_aggregate(post_agg)
        self._finish()
        return s

    # -- WHERE conjuncts: IN, NOT IN, EXISTS, NOT EXISTS ------------------------------------------
    def _membership(self, nodes: list[exp.Expression]) -> None:
        if not nodes:
            return
        where = self.s.args.get("where")
        handled: dict[int, tuple[str, exp.Expression]] = {}
        kept = []
        for c in conjuncts(where.this) if where is not None else []:
            shape = _membership_shape(c)
            if shape is None:
                kept.append(c)
            else:
                handled[id(shape[1])] = shape
        for node in nodes:
            test = node.parent
            if id(test) in handled:
                continue
            if isinstance(test, exp.Exists) and self._row_level(test):
                self._exists_value(test)
                continue
            raise err(f"{_construct(test)} {_position(test, self.s)} is not supported in a materialized view; "
                      f"{SUPPORTED}", test)
        for kind, test in handled.values():
            if kind in ("in", "not_in"):
                self._in(test, negated=kind == "not_in")
            else:
                self._exists(test, negated=kind == "not_exists")
        self.s.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)

    def _in(self, test: exp.In, *, negated: bool) -> None:
        construct = _construct(test, negated=negated)
        x = test.this.this if isinstance(test.this, exp.Paren) else test.this
        values = list(x.expressions) if isinstance(x, exp.Tuple) else [x]
        if negated and len(values) > 1:
            raise err(f"{construct}: a NOT IN over several columns is not supported in a materialized view (a row "
                      "with a NULL would need PostgreSQL's row comparison); write NOT EXISTS (... WHERE a = c AND "
                      "b = d)", test)
        q = test.args["query"].this
        rows, inner, outer = _rows(q, construct, values=len(values), names=self.names)
        keys = [_eq(c, _col("?", f"c{i}")) for i, c in enumerate(outer)]
        if not negated:
            alias = self.names.fresh("sq")
            rows.set("distinct", exp.Distinct())
            on = [_eq(v.copy(), _col(alias, f"v{i}")) for i, v in enumerate(values)] + _retable(keys, alias)
            self.joins.append(_join(_derived(rows, alias), on, left=False))
            return
        # NOT IN: (a) the matching value, (b) whether the subquery is non-empty and holds a NULL
        match, flags = self.names.fresh("sq"), self.names.fresh("sq")
        matched = rows.copy()
        matched.set("expressions", [*matched.expressions, exp.alias_(exp.Literal.number(1), "m")])
        matched.set("distinct", exp.Distinct())
        on = [_eq(values[0].copy(), _col(match, "v0")), *_retable(keys, match)]
        self.joins.append(_join(_derived(matched, match), on, left=True))
        inner_alias = self.names.fresh("r")
        counted = exp.Select(expressions=[
            *(exp.alias_(_col(inner_alias, f"c{i}"), f"c{i}") for i in range(len(inner))),
            exp.alias_(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0)), "ne"),
            exp.alias_(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Count(this=_col(inner_alias, "v0"))),
                       "hn"),
        ], from_=exp.From(this=_derived(rows, inner_alias)))
        if inner:
            counted.set("group", exp.Group(expressions=[_col(inner_alias, f"c{i}") for i in range(len(inner))]))
        self.joins.append(_join(_derived(counted, flags), _retable(keys, flags), left=bool(inner)))
        empty = exp.Not(this=exp.Coalesce(this=_col(flags, "ne"), expressions=[exp.false()]))
        allowed = exp.and_(exp.Not(this=exp.Is(this=values[0].copy(), expression=exp.Null())),
                           exp.Not(this=_col(flags, "hn")),
                           exp.Is(this=_col(match, "m"), expression=exp.Null()))
        self.conditions.append(exp.Paren(this=exp.or_(empty, exp.Paren(this=allowed))))

    def _exists(self, test: exp.Exists, *, negated: bool) -> None:
        construct = _construct(test, negated=negated)
        rows, inner, outer = _rows(test.this, construct, values=0, names=self.names)
        alias = self.names.fresh("sq")
        if negated or not rows.expressions:  # a marker: NULL when a LEFT JOIN found no row
            rows.set("expressions", [*rows.expressions, exp.alias_(exp.Literal.number(1), "m")])
        rows.set("distinct", exp.Distinct())
        on = [_eq(c.copy(), _col(alias, f"c{i}")) for i, c in enumerate(outer)]
        self.joins.append(_join(_derived(rows, alias), on, left=negated))
        if negated:
            self.conditions.append(exp.Is(this=_col(alias, "m"), expression=exp.Null()))

    def _row_level(self, test: exp.Exists) -> bool:
        """Whether ``test`` is evaluated once per input row: in WHERE, or in the SELECT list of a
        query that does not aggregate."""
        clause = _clause(test, self.s)
        if clause == "where":
            return True
        aggregated = self.s.args.get("group") is not None or self.s.args.get("having") is not None or any(
            _agg_units(e) for e in self.s.expressions)
        return clause == "expressions" and not aggregated and not test.find_ancestor(exp.Window)

    def _exists_value(self, test: exp.Exists) -> None:
        """EXISTS as a boolean value (never NULL): ``LEFT JOIN`` the distinct correlation keys with
        a marker ``m``, and put ``m IS NOT NULL`` in its place."""
        rows, _inner, outer = _rows(test.this, _construct(test, negated=False), values=0, names=self.names)
        alias = self.names.fresh("sq")
        rows.set("expressions", [*rows.expressions, exp.alias_(exp.Literal.number(1), "m")])
        rows.set("distinct", exp.Distinct())
        on = [_eq(c.copy(), _col(alias, f"c{i}")) for i, c in enumerate(outer)]
        self.joins.append(_join(_derived(rows, alias), on, left=True))
        test.replace(exp.Paren(this=exp.Not(this=exp.Is(this=_col(alias, "m"), expression=exp.Null()))))

    # -- scalar subqueries ----------------------------------------------------------------------
    def _scalar(self, node: exp.Subquery, *, group: list[exp.Expression] | None) -> None:
        """Join the aggregate ``node`` computes into ``s`` and put its value in ``node``'s place;
        with ``group`` (the query's GROUP BY), its columns join the GROUP BY."""
        q = node.this
        if not isinstance(q, exp.Select):
            raise err(f"{SCALAR_SHAPE}; a set operation ({q.key.upper()}) is not supported there", node)
        if _constant_select(q):
            _put_value(node, unalias(q.expressions[0]).copy())
            return
        alias = self.names.fresh("sq")
        value, outer, columns = _aggregate_columns(q, alias)
        if group is not None:
            for o in outer:
                if not _grouped(o, group):
                    raise err(f"subquery uses ungrouped column {o.sql('postgres')} from outer query", o)
            self.group_extra.extend(columns)
        on = [_eq(o.copy(), _col(alias, f"c{i}")) for i, o in enumerate(outer)]
        self.joins.append(_join(_derived(q, alias), on, left=bool(outer)))
        _put_value(node, value)

    def _wrap_whole_aggregate(self, post_agg: list[exp.Subquery]) -> exp.Select:
        """``s`` aggregates without GROUP BY and a scalar subquery reads its result: ``s`` becomes
        a derived table of its aggregates, so it keeps its one row over no input."""
        s = self.s
        if any(e.find(exp.Window) for e in s.expressions):
            raise err("a scalar subquery beside a window function over an aggregate is not supported", s)
        self._finish()  # the row-level joins stay with the aggregated FROM
        agg = self.names.fresh("agg")
        clauses = [*s.expressions, s.args.get("having"), s.args.get("order")]
        units = [u for e in clauses if e is not None for u in _agg_units(e)]
        if not units:
            raise err("a HAVING without GROUP BY needs an aggregate in the query", s)
        inner_items = []
        for i, u in enumerate(units):
            inner_items.append(exp.alias_(u.copy(), f"g{i}"))
            u.replace(_col(agg, f"g{i}"))
        wrapper = exp.Select()
        for node in post_agg:
            for c in _outer_columns(node.this):
                raise err(f"subquery uses ungrouped column {c.sql('postgres')} from outer query", c)
            self._scalar(node, group=None)
        for e in [*s.expressions, s.args.get("having"), s.args.get("order")]:
            for c in e.find_all(exp.Column) if e is not None else []:
                if c.table and c.table != agg and c.table in _sources(s):
                    raise err(f"column {c.sql('postgres')} must appear in the GROUP BY clause or be used in an "
                              "aggregate function", c)
        having = s.args.get("having")
        wrapper.set("expressions", s.expressions)
        wrapper.set("joins", self.joins)
        if having is not None:
            wrapper.set("where", exp.Where(this=having.this))
        for arg in ("distinct", "with_", "order", "limit", "offset"):
            wrapper.set(arg, s.args.get(arg))
            s.set(arg, None)
        s.set("expressions", inner_items)
        s.set("having", None)
        if s.parent is not None:
            s.replace(wrapper)
        wrapper.set("from_", exp.From(this=_derived(s, agg)))
        return wrapper

    def _finish(self) -> None:
        s = self.s
        s.set("joins", [*(s.args.get("joins") or []), *self.joins])
        self.joins = []
        if self.conditions:
            where = s.args.get("where")
            s.set("where", exp.Where(this=exp.and_(*([where.this] if where is not None else []), *self.conditions)))
            self.conditions = []
        if self.group_extra:
            s.args["group"].set("expressions", [*s.args["group"].expressions, *self.group_extra])
            self.group_extra = []


# -- the subquery's rows ------------------------------------------------------------------------------

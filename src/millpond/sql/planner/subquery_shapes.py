"""The shapes :mod:`~millpond.sql.planner.subqueries` reads and builds: a subquery's rows and
correlation, where it stands in the outer query, and the derived tables and joins it becomes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.sql.planner.context import err
from millpond.sql.planner.exprs import conjuncts, unalias

if TYPE_CHECKING:
    from millpond.sql.planner.subqueries import _Names

SUPPORTED = ("IN / NOT IN (SELECT ...) are supported as conditions ANDed at the top level of WHERE, "
             "[NOT] EXISTS (SELECT ...) in WHERE and in the SELECT list of a query without aggregates")
SCALAR_SHAPE = ("a scalar subquery must be an aggregate without GROUP BY, such as (SELECT max(v) FROM s WHERE "
                "s.k = t.k)")
CORRELATION = ("a correlated subquery may refer to the outer query only in equalities ANDed at the top level of "
               "its WHERE (inner expression = outer expression)")


def _rows(q: exp.Expression, construct: str, *, values: int, names: _Names
          ) -> tuple[exp.Select, list[exp.Expression], list[exp.Expression]]:
    """The rows an IN / EXISTS subquery yields as ``v0..`` (its ``values`` columns) and ``c0..``
    (the inner sides of its correlation equalities); also the inner and outer sides."""
    if isinstance(q, exp.Select):
        inner, outer = _split_correlation(q, construct)
        if not _needs_wrap(q):
            items = [unalias(e) for e in q.expressions]
            _check_width(items, values, construct, q)
            q.set("expressions", [*(exp.alias_(v, f"v{i}") for i, v in enumerate(items[:values])),
                                  *(exp.alias_(c, f"c{i}") for i, c in enumerate(inner))])
            if inner and q.args.get("group"):
                q.args["group"].set("expressions", [*q.args["group"].expressions, *(c.copy() for c in inner)])
            q.set("order", None)
            return q, inner, outer
        if inner:
            raise err(f"{construct}: a correlated subquery with LIMIT, OFFSET, a window function or an aggregate "
                      "without GROUP BY is not supported in a materialized view", q)
    elif _outer_columns(q):
        raise err(f"{construct}: a correlated {q.key.upper()} is not supported in a materialized view", q)
    outputs = q.named_selects
    _check_width(outputs, values, construct, q)
    if len(set(outputs[:values])) < values or "*" in outputs:
        raise err(f"{construct}: name the subquery's output columns apart (AS ...)", q)
    alias = names.fresh("in")
    items = [exp.alias_(_col(alias, n), f"v{i}") for i, n in enumerate(outputs[:values])]
    q.pop()
    return exp.Select(expressions=items, from_=exp.From(this=_derived(q, alias))), [], []


def _split_correlation(q: exp.Select, construct: str, *, scalar: bool = False
                       ) -> tuple[list[exp.Expression], list[exp.Expression]]:
    """Take the correlation equalities out of ``q``'s WHERE: (inner sides, outer sides). Any other
    reference to the outer query is refused (a scalar subquery's may stay in its SELECT list,
    outside aggregates: that expression is evaluated in the outer query)."""
    where = q.args.get("where")
    kept, inner, outer = [], [], []
    for c in conjuncts(where.this) if where is not None else []:
        pair = _correlation(c, q)
        if pair is None:
            kept.append(c)
        else:
            inner.append(pair[0].copy())
            outer.append(pair[1].copy())
    q.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    allowed = {id(c) for item in q.expressions for c in _outside_units(item)} if scalar else set()
    for c in _outer_columns(q):
        if id(c) not in allowed:
            raise err(f"{construct}: {CORRELATION}; here {c.sql('postgres')}", c)
    return inner, outer


def _correlation(c: exp.Expression, q: exp.Select, op: type[exp.Expression] = exp.EQ
                 ) -> tuple[exp.Expression, exp.Expression] | None:
    """(inner side, outer side) when ``c`` is ``inner = outer`` (or ``op``, e.g. ``exp.NEQ``: ``<>``)."""
    if not isinstance(c, op) or c.find(exp.AggFunc, exp.Query, exp.Window):
        return None
    sides = [{_local(col, q) for col in e.find_all(exp.Column) if col.table} for e in (c.this, c.expression)]
    if sides == [{True}, {False}]:
        return c.this, c.expression
    if sides == [{False}, {True}]:
        return c.expression, c.this
    return None


def _aggregate_columns(q: exp.Select, alias: str) -> tuple[exp.Expression, list[exp.Expression], list[exp.Column]]:
    """A scalar subquery ``q`` made into a relation: its correlation keys ``c0..`` and its
    aggregates ``a0..`` as columns (grouped by the keys), ``q``'s SELECT expression over
    ``alias``'s columns (a COUNT of a key with no rows is 0), the outer sides of the keys and the
    ``alias`` columns the expression reads."""
    construct = "a scalar subquery"
    if len(q.expressions) != 1:
        raise err(f"subquery must return only one column ({len(q.expressions)} here)", q)
    for arg, what in (("group", "GROUP BY"), ("having", "HAVING"), ("limit", "LIMIT"), ("offset", "OFFSET")):
        if q.args.get(arg) is not None:
            raise err(f"{SCALAR_SHAPE}; one with {what} may return another number of rows than one and is not "
                      "supported in a materialized view", q)
    if q.args.get("distinct") is not None and q.args["distinct"].args.get("on") is not None:
        raise err(f"{SCALAR_SHAPE}; DISTINCT ON is not supported there", q)
    f = unalias(q.expressions[0])
    if f.find(exp.Window):
        raise err(f"{SCALAR_SHAPE}; a window function is not supported there", q)
    units = _agg_units(f)
    if not units:
        raise err(f"a scalar subquery that may return more than one row is not supported in a materialized view "
                  f"(PostgreSQL fails at runtime when it does): {q.sql('postgres')[:80]}; {SCALAR_SHAPE}", q)
    for u in units:
        for c in u.find_all(exp.Column):
            if c.table and not _local(c, q):
                raise err(f"{construct}: an aggregate over a column of the outer query ({c.sql('postgres')}) is "
                          "not supported", c)
    for c in _outside_units(f):
        if _local(c, q):
            raise err(f"column {c.sql('postgres')} must appear in the GROUP BY clause or be used in an aggregate "
                      "function", c)
    inner, outer = _split_correlation(q, construct, scalar=True)
    holder = exp.Paren(this=f.copy())  # so that a call replaced at the top stays reachable
    columns, items = [], []
    for i, u in enumerate(_agg_units(holder.this)):
        items.append(exp.alias_(u.copy(), f"a{i}"))
        col = _col(alias, f"a{i}")
        columns.append(col.copy())
        is_count = isinstance(u.this if isinstance(u, exp.Filter) else u, exp.Count)
        u.replace(exp.Coalesce(this=col, expressions=[exp.Literal.number(0)]) if is_count and inner else col)
    q.set("expressions", [*(exp.alias_(c, f"c{i}") for i, c in enumerate(inner)), *items])
    q.set("group", exp.Group(expressions=[c.copy() for c in inner]) if inner else None)
    for arg in ("order", "distinct"):
        q.set(arg, None)
    return holder.this, outer, columns


def _needs_wrap(q: exp.Select) -> bool:
    """``q``'s SELECT list cannot simply be replaced by the columns a membership test needs."""
    if q.args.get("limit") is not None or q.args.get("offset") is not None:
        return True
    if q.args.get("distinct") is not None and q.args["distinct"].args.get("on") is not None:
        return True
    if any(e.find(exp.Window) for e in q.expressions):
        return True
    aggregated = q.args.get("having") is not None or any(_agg_units(e) for e in q.expressions)
    return aggregated and not q.args.get("group")


def _check_width(items: list, values: int, construct: str, q: exp.Expression) -> None:
    if values and len(items) != values:
        raise err(f"{construct}: subquery has too {'many' if len(items) > values else 'few'} columns "
                  f"({len(items)}, {values} expected)", q)


def _constant_select(q: exp.Select) -> bool:
    """``(SELECT expression)``: no FROM, one value, always one row."""
    return len(q.expressions) == 1 and not _agg_units(q.expressions[0]) and not any(
        q.args.get(a) is not None for a in ("from_", "where", "group", "having", "limit", "offset", "joins"))


# -- where a subquery is -------------------------------------------------------------------------------
_CLAUSE_NAMES = {"joins": "a JOIN's ON condition", "group": "GROUP BY", "order": "ORDER BY",
                 "expressions": "the SELECT list", "having": "HAVING", "where": "WHERE", "qualify": "QUALIFY",
                 "distinct": "DISTINCT ON", "limit": "LIMIT", "offset": "OFFSET"}


_ITEM_PARENTS = (exp.From, exp.Join, exp.CTE, exp.SetOperation, exp.Subquery)


def _direct_subqueries(s: exp.Select) -> list[exp.Expression]:
    """The queries in ``s``'s own clauses that are not FROM items (nor CTEs)."""
    out = []
    for n in s.walk(prune=lambda n: n is not s and isinstance(n, exp.Query)):
        if n is s or not isinstance(n, exp.Query) or isinstance(n.parent, _ITEM_PARENTS):
            continue
        out.append(n)
    return out


def _check_scalar_place(node: exp.Expression, s: exp.Select) -> None:
    """``node`` is a scalar subquery where one is supported, or refused by name."""
    if isinstance(node.parent, (exp.Any, exp.All)):
        raise err(f"{node.parent.key.upper()} (SELECT ...) is not supported in a materialized view; write "
                  "x IN (SELECT ...), NOT IN or [NOT] EXISTS", node.parent)
    if not isinstance(node, exp.Subquery):
        raise err(f"{node.sql('postgres')[:80]}: this subquery is not supported in a materialized view", node)
    clause = _clause(node, s)
    if clause not in ("expressions", "where", "having"):
        raise err(f"a subquery in {_CLAUSE_NAMES.get(clause, clause.upper())} is not supported in a materialized "
                  "view (scalar subqueries are, in SELECT, WHERE and HAVING)", node)


def _clause(node: exp.Expression, s: exp.Select) -> str:
    while node.parent is not s:
        node = node.parent
    return node.arg_key


def _membership_shape(c: exp.Expression) -> tuple[str, exp.Expression] | None:
    negated = False
    while isinstance(c, (exp.Paren, exp.Not)) and not (negated and isinstance(c, exp.Not)):
        if isinstance(c, exp.Not):
            negated = True
        c = c.this
    if isinstance(c, exp.In) and c.args.get("query") is not None:
        return ("not_in" if negated else "in"), c
    if isinstance(c, exp.Exists):
        return ("not_exists" if negated else "exists"), c
    return None


def _construct(test: exp.Expression, *, negated: bool | None = None) -> str:
    if negated is None:
        negated = isinstance(test.parent, exp.Not) or (isinstance(test.parent, exp.Paren)
                                                       and isinstance(test.parent.parent, exp.Not))
    word = "IN (SELECT ...)" if isinstance(test, exp.In) else "EXISTS (SELECT ...)"
    return f"NOT {word}" if negated else word


def _position(test: exp.Expression, s: exp.Select) -> str:
    node = test
    while isinstance(node.parent, exp.Paren):
        node = node.parent
    if isinstance(node.parent, exp.Not):  # NOT IN / NOT EXISTS itself
        node = node.parent
    while node.parent is not s:
        node = node.parent
        if isinstance(node, exp.Or):
            return "under OR"
        if isinstance(node, exp.Not):
            return "under NOT"
    if node.arg_key == "where":
        return "inside an expression of WHERE"
    return f"in {_CLAUSE_NAMES.get(node.arg_key, node.arg_key.upper())}"


def _inside_aggregate(node: exp.Expression, s: exp.Select) -> bool:
    p = node.parent
    while p is not s:
        if isinstance(p, exp.AggFunc):
            return True
        p = p.parent
    return False


# -- aggregates and columns ------------------------------------------------------------------------------
def _agg_units(e: exp.Expression) -> list[exp.Expression]:
    """The outermost aggregate calls in ``e`` (with their FILTER), not those of nested queries
    nor window functions."""
    units = []
    for n in e.walk(prune=_unit_boundary):
        if isinstance(n, exp.Window):
            continue
        if _is_filtered_agg(n) or (isinstance(n, exp.AggFunc) and not _is_filtered_agg(n.parent)):
            units.append(n)
    return units


def _is_filtered_agg(n: exp.Expression | None) -> bool:
    return isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc)


def _outside_units(e: exp.Expression) -> list[exp.Column]:
    """The columns of ``e`` outside its aggregate calls."""
    return [n for n in e.walk(prune=_unit_boundary) if isinstance(n, exp.Column) and n.table]


def _unit_boundary(n: exp.Expression) -> bool:
    return isinstance(n, (exp.AggFunc, exp.Query, exp.Window)) or _is_filtered_agg(n)


def _sources(s: exp.Select) -> set[str]:
    items = ([s.args["from_"].this] if s.args.get("from_") else []) + [j.this for j in s.args.get("joins") or []]
    return {i.alias_or_name for i in items}


def _local(col: exp.Column, root: exp.Expression) -> bool:
    """``col`` belongs to a FROM item of ``root`` or of a query nested in it."""
    p = col.parent
    while p is not None:
        if isinstance(p, exp.Select) and col.table in _sources(p):
            return True
        if p is root:
            return False
        p = p.parent
    return False


def _outer_columns(q: exp.Expression) -> list[exp.Column]:
    """The columns in ``q`` that belong to an enclosing query."""
    return [c for c in q.find_all(exp.Column) if c.table and not _local(c, q)]


def _grouped(e: exp.Expression, group: list[exp.Expression]) -> bool:
    return any(e == g for g in group) or all(any(c == g for g in group) for c in e.find_all(exp.Column))


# -- building -------------------------------------------------------------------------------------------------
def _col(table: str, name: str) -> exp.Column:
    return exp.column(name, table=table)


def _eq(a: exp.Expression, b: exp.Expression) -> exp.EQ:
    return exp.EQ(this=a, expression=b)


def _retable(conds: list[exp.EQ], alias: str) -> list[exp.EQ]:
    """Copies of ``outer = ?.cN`` conditions with ``?`` replaced by ``alias``."""
    out = []
    for c in conds:
        c = c.copy()
        c.expression.set("table", exp.to_identifier(alias))
        out.append(c)
    return out


def _put_value(node: exp.Subquery, value: exp.Expression) -> None:
    """``value`` in the place of the scalar subquery ``node``, keeping the output name it carries
    as a SELECT item (``(SELECT ...) AS n`` is a subquery with an alias, not an Alias)."""
    alias = node.args.get("alias")
    value = exp.Paren(this=value)
    if alias is not None:
        ident = alias.this
        ident = ident.copy() if isinstance(ident, exp.Identifier) else exp.to_identifier(ident)
        value = exp.Alias(this=value, alias=ident)
    node.replace(value)


def _derived(q: exp.Expression, alias: str) -> exp.Subquery:
    return exp.Subquery(this=q, alias=exp.TableAlias(this=exp.to_identifier(alias)))


def _join(item: exp.Subquery, on: list[exp.Expression], *, left: bool) -> exp.Join:
    if left:
        return exp.Join(this=item, side="LEFT", on=exp.and_(*on) if on else exp.true())
    return exp.Join(this=item, on=exp.and_(*on)) if on else exp.Join(this=item, kind="CROSS")


def _depth(node: exp.Expression) -> int:
    depth = 0
    while node.parent is not None:
        node, depth = node.parent, depth + 1
    return depth

"""The order of a SELECT's inner joins.

Joins are planned left-deep, and every join keeps both its inputs as state: an input that is a
FROM item is kept whatever the order, but each left input past the first is an *intermediate
result*, kept only because of the order chosen. TPC-H's Q7 written ``FROM supplier, lineitem,
orders, customer, nation n1, nation n2`` keeps 1.8M lineitems widened by each table in turn in
four joins' state before the two nations (two of 25 rows each) cut them to 6,000; starting from
the nations it keeps a few hundred thousand. So the FROM items of the leading run of inner joins
are put in the order whose intermediate results are estimated smallest (the sum of their rows:
the "C_out" cost), greedily from each possible first item, as a cost-based planner does:

- a table's or view's rows are as counted at ``CREATE`` (the sizes the view's plan is stored with,
  so that the plan derived again on open is the same); an empty one or a subquery count
  ``DEFAULT_ROWS``;
- a filter keeps the share of them it keeps in a sample of the table's rows at ``CREATE``
  (``Reads.filter_share``: ~20,000 rows of a slice of the key-hash space, as PostgreSQL's
  ``ANALYZE`` samples; stored with the plan too), or, where there is none (an empty table), a
  share by the shape of its condition (:func:`selectivity`: an equality with a constant 5%, a
  range a third, ...), as PostgreSQL's planner guesses without statistics;
- a join on the whole primary key of the item joined keeps at most one match per row (``|P| ×
  share of the item kept``); one on the whole primary key of an item already joined gives each of
  the new item's rows the matches of its key (``|item| × |P| / rows of that table``); any other
  equality is taken as a lookup (the larger side's rows); no equality, a cross product.

Ties keep FROM order, and so does a plan derived without sizes (views created before this planner,
and flows). Inner ``JOIN ... ON`` items of the leading run join the reordering: their ON conditions
are WHERE conditions (when no RIGHT or FULL join follows, which would pad them).
"""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.context import DEFAULT_ROWS, Context
from millpond.sql.planner.exprs import aliases, conjuncts, has_agg_or_window
from millpond.sql.planner.joins import join_kind

__all__ = ["order_joins", "inner_ons", "selectivity"]

_EQ, _RANGE, _BETWEEN, _LIKE, _OTHER = 0.05, 1 / 3, 0.25, 0.1, 0.5


def selectivity(e: exp.Expression) -> float:
    """The share of rows a condition keeps, by its shape alone."""
    if isinstance(e, exp.Paren):
        return selectivity(e.this)
    if isinstance(e, exp.And):
        return selectivity(e.this) * selectivity(e.expression)
    if isinstance(e, exp.Or):
        return min(1.0, selectivity(e.this) + selectivity(e.expression))
    if isinstance(e, exp.Not):
        return 1.0 - selectivity(e.this)
    if isinstance(e, (exp.EQ, exp.Is)):
        return _EQ
    if isinstance(e, exp.In):
        return min(1.0, _EQ * max(1, len(e.expressions)))
    if isinstance(e, exp.NEQ):
        return 1.0 - _EQ
    if isinstance(e, exp.Between):
        return _BETWEEN
    if isinstance(e, (exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return _RANGE
    if isinstance(e, (exp.Like, exp.ILike, exp.SimilarTo, exp.RegexpLike)):
        return _LIKE
    return _OTHER


def inner_ons(joins: list[exp.Join], where: list[exp.Expression]) -> tuple[list[exp.Join], list[exp.Expression]]:
    """The leading run of inner ``JOIN ... ON`` items as comma items, their ON conditions in
    ``where`` (unless a RIGHT or FULL join follows: it may pad them, and a WHERE condition would see
    its padding)."""
    if any(join_kind(j) in ("right", "full") for j in joins):
        return joins, where
    out, moved = [], []
    for i, j in enumerate(joins):
        if join_kind(j) not in ("inner", "cross") or j.args.get("using"):
            return out + joins[i:], where + moved
        if j.args.get("on"):
            moved += conjuncts(j.args["on"])
            j = j.copy()
            j.set("on", None)
            j.set("kind", None)
        out.append(j)
    return out, where + moved


def order_joins(ctx: Context, first: exp.Expression, joins: list[exp.Join], where: list[exp.Expression],
                rels: dict[str, P.Node]) -> tuple[str, list[exp.Join]]:
    """The first FROM item's alias and the joins after it, the leading run of comma items (every
    join a cross join with no ON) in the order of least intermediate rows (the module's docstring;
    FROM order without sizes). Each item joins the ones before it on an equality of ``where``
    when one can, as PostgreSQL's planner never takes a cross product an equality avoids (TPC-H Q2,
    Q8, Q9: millions of pairs at SF 1). From the first join with an ON (an outer join, a
    decorrelated subquery's) on, the order is kept."""
    n = next((i for i, j in enumerate(joins) if join_kind(j) != "cross" or j.args.get("on") or j.args.get("using")),
             len(joins))
    name = first.alias_or_name
    if ctx.sizes is None:
        return name, _from_order(name, joins[:n], where) + joins[n:]
    if n < 1:
        return name, joins
    run = {name: exp.Join(this=first.copy()), **{j.this.alias_or_name: j for j in joins[:n]}}  # first keeps its parent
    links, sides = _links(where, set(run)), _sides(where)
    sized = ({a: _rows(ctx, rels[a]) for a in run}, {a: _table(ctx, rels[a]) for a in run}, ctx)
    orders = [_greedy(a, list(run), links, sides, sized) for a in run]
    order = min(orders, key=lambda o: _cost(o, links, *sized))  # the first of the cheapest: FROM order on ties
    return order[0], [run[a] for a in order[1:]] + joins[n:]


def _from_order(first: str, joins: list[exp.Join], where: list[exp.Expression]) -> list[exp.Join]:
    """``joins`` (comma items after ``first``, which stays first) with each item joined to the ones
    before it by an equality where one can be, in FROM order otherwise (plans derived without sizes)."""
    if len(joins) < 2:
        return joins
    links = _sides(where)
    seen, rest, out = {first}, list(joins), []
    while rest:
        def joins_seen(j: exp.Join) -> bool:
            alias = j.this.alias_or_name
            return any(a and b and ((a <= seen and b == {alias}) or (b <= seen and a == {alias})) for a, b in links)
        pick = next((j for j in rest if joins_seen(j)), rest[0])
        rest.remove(pick)
        out.append(pick)
        seen.add(pick.this.alias_or_name)
    return out


def _sides(where: list[exp.Expression]) -> list[tuple[set[str], set[str]]]:
    """The items each side of each equality of ``where`` reads (``a.x + b.y = c.z``: {a, b}, {c})."""
    return [(aliases(c.this), aliases(c.expression)) for c in where
            if isinstance(c, exp.EQ) and not has_agg_or_window(c)]


def _links(where: list[exp.Expression], items: set[str]) -> list[tuple[str, str, str, str]]:
    """(alias, column, alias, column) of each equality of ``where`` between two items' columns."""
    out = []
    for c in where:
        if isinstance(c, exp.EQ) and not has_agg_or_window(c):
            a, b = aliases(c.this), aliases(c.expression)
            if len(a) == 1 and len(b) == 1 and a != b and a | b <= items:
                ca = c.this.name if isinstance(c.this, exp.Column) else ""
                cb = c.expression.name if isinstance(c.expression, exp.Column) else ""
                out.append((*a, ca, *b, cb))
    return out


def _greedy(start: str, items: list[str], links: list, sides: list, sized: tuple) -> list[str]:
    """From ``start``, add at each step the item giving the fewest rows (the first in FROM order on
    ties) among those joined to the ones before on a primary key, else on another equality (which
    may pair many rows with many: TPC-H Q5's suppliers and customers of a nation), else by a cross
    product."""
    rows, tables, ctx = sized
    order, size = [start], rows[start]
    rest = [a for a in items if a != start]
    while rest:
        keyed = [a for a in rest if _kind(set(order), a, links, tables, ctx) == 0]
        joined = [a for a in rest if any(x and y and ((x <= set(order) and y == {a}) or (y <= set(order) and x == {a}))
                                         for x, y in sides)]
        pick = min(keyed or joined or rest, key=lambda a: _join_rows(size, set(order), a, links, rows, tables, ctx))
        size = _join_rows(size, set(order), pick, links, rows, tables, ctx)
        order.append(pick)
        rest.remove(pick)
    return order


def _cost(order: list[str], links: list, rows: dict, tables: dict, ctx: Context) -> float:
    """The rows of the intermediate results of joining ``order`` left-deep (its last result aside:
    any order makes it)."""
    size, total = rows[order[0]], 0.0
    for i, a in enumerate(order[1:], 1):
        size = _join_rows(size, set(order[:i]), a, links, rows, tables, ctx)
        if i < len(order) - 1:
            total += size
    return total


def _pairs(joined: set[str], a: str, links: list) -> list[tuple[str, str, str]]:
    """(item joined, its column, ``a``'s column) of each equality between ``a`` and ``joined``."""
    return [(y, cy, ca) for x, ca, y, cy in links if x == a and y in joined] + \
           [(x, cx, cb) for x, cx, y, cb in links if y == a and x in joined]


def _kind(joined: set[str], a: str, links: list, tables: dict, ctx: Context) -> int:
    """0: ``a`` joins ``joined`` on a primary key (its own or one's of ``joined``); else 1."""
    pairs = _pairs(joined, a, links)
    if pairs and (_keyed(ctx, tables[a], {c for _, _, c in pairs}) or
                  any(_keyed(ctx, tables[o], {c for p, c, _ in pairs if p == o})
                      for o in dict.fromkeys(o for o, _, _ in pairs))):
        return 0
    return 1


def _join_rows(size: float, joined: set[str], a: str, links: list, rows: dict, tables: dict, ctx: Context) -> float:
    """The rows of joining ``a`` to the items ``joined`` (``size`` rows); an equality beyond a
    primary key's keeps a share of them as a filter would (TPC-H Q5's ``c_nationkey = s_nationkey``)."""
    pairs = _pairs(joined, a, links)
    if not pairs:
        return size * rows[a]
    if _keyed(ctx, tables[a], {c for _, _, c in pairs}):
        return size * rows[a] / _base(ctx, tables[a]) * _EQ ** _extra(ctx, tables[a], [c for _, _, c in pairs])
    for other in dict.fromkeys(o for o, _, _ in pairs):  # in FROM order: a set's order would vary between runs
        if _keyed(ctx, tables[other], {c for o, c, _ in pairs if o == other}):
            return rows[a] * size / _base(ctx, tables[other]) * _EQ ** (len(pairs) - len(_key(ctx, tables[other])))
    return max(size, rows[a]) * _EQ ** (len(pairs) - 1)


def _extra(ctx: Context, table: str | None, columns: list[str]) -> int:
    return len(columns) - len(_key(ctx, table))


def _key(ctx: Context, table: str | None) -> tuple[str, ...]:
    return ctx.catalog.tables[table].primary_key if table is not None else ()


def _table(ctx: Context, node: P.Node) -> str | None:
    """The table a FROM item reads through its filters (None: a subquery or a view)."""
    while isinstance(node, P.Filter):
        node = node.input
    return node.table if isinstance(node, P.Source) and node.table in ctx.catalog.tables else None


def _keyed(ctx: Context, table: str | None, columns: set[str]) -> bool:
    """Whether ``columns`` hold the whole primary key of ``table``."""
    key = _key(ctx, table)
    return bool(key) and set(key) <= columns


def _base(ctx: Context, table: str | None) -> float:
    return ctx.size(table) if table is not None else DEFAULT_ROWS


def _rows(ctx: Context, node: P.Node) -> float:
    """A FROM item's estimated rows: its table's, times the share its filters keep."""
    share, conditions = 1.0, []
    while isinstance(node, P.Filter):
        share *= selectivity(node.predicate)
        conditions.append(node.predicate)
        node = node.input
    if not isinstance(node, P.Source):  # a subquery
        return max(1.0, DEFAULT_ROWS * share)
    if conditions and node.table in ctx.catalog.tables:  # sampled (a view read as a source: a share by shape)
        both = exp.and_(*(exp.Paren(this=c.copy()) for c in reversed(conditions)))
        sampled = ctx.share(node, both)
        share = share if sampled is None else sampled
    return max(1.0, ctx.size(node.table) * share)

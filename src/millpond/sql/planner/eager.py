"""Eager aggregation: an aggregate over an inner join pre-aggregates one side by its join key.

``SELECT d.name, count(*), sum(e.v) FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name`` keeps, as
planned, every row of ``ev`` in the join's state (the bilinear rule must find them when ``dim``
changes) and sends every joined row on to the aggregate. When every aggregate argument comes from
one side (here ``ev``), that side can be aggregated first, per join key and per its own group
columns — ``SELECT p, count(*) AS c, sum(v) AS s FROM ev GROUP BY p`` — and the join then keeps
and matches one row per key, and the aggregate above sums the partial results (``sum(c)``,
``sum(s)``; MIN and MAX of the partial extremes). Each side row matched by ``n`` rows of the other
side is counted ``n`` times either way, so the result is the same for any data (the textbook rule
of eager aggregation, Yan and Larson); the join's state and the rows it emits follow the number of
keys, not of rows: a change to a dimension row reads one partial row per key, not every fact row.

When it applies (:func:`eager`): the aggregate's input is a projection straight over an inner
equi-join (no residual condition, no index or delta-join side); its calls are COUNT(*), COUNT, SUM,
MIN or MAX (AVG is SUM and COUNT), each over columns of one side, the same side for all; every
group expression is over one side; and the pre-aggregation would not be one row per side row: the
side's join key is not its table's primary key or a view's key; and no table under the join has
an index (``CREATE INDEX``: the join reads it, :mod:`millpond.sql.indexes`). A partial grouped by
columns of its side besides a join key that is part of the side's primary key (a few rows per
key, as lineitems per order) keeps about a group per row — TPC-H's Q5 pre-aggregated ``lineitem``
by order and supplier, 6M rows into 6M groups, and its first epoch at SF 1 took 43 s against 23 s
without — so it is not made, unless a partial deeper under it (whose reduction it carries up) is.
A whole-input aggregate with a COUNT is left alone (over no rows its COUNT is 0, a sum of partial
counts NULL). Nested joins (``fact JOIN d1 JOIN d2``) pre-aggregate again below each join the
aggregate's side is in.

It is a choice made when a view is created, stored in its plan (``Aggregate.eager``), so a view
created before keeps its plan (:mod:`millpond.sql.plans`). Flows do not take it: a flow merges its
aggregate's partials on the driver, from stateless input.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from millpond.catalog import Catalog
from millpond.engine import plan as P
from millpond.engine.explain import columns
from millpond.sql.planner.context import Context
from millpond.sql.planner.exprs import column

__all__ = ["eager", "has_eager"]

_MERGE = {"count_star": "sum", "count": "sum", "sum": "sum", "min": "min", "max": "max"}


def eager(ctx: Context, node: P.Node, *, wide: bool = False) -> P.Node:
    """``node`` with every aggregate that can pre-aggregate one side of the join below it doing so
    (``wide``: also by group columns that enable no deeper partial, as views created before
    2026-11-30 did)."""
    if isinstance(node, P.Source):
        return node
    if isinstance(node, P.Join):
        node = dataclasses.replace(node, left=eager(ctx, node.left, wide=wide), right=eager(ctx, node.right, wide=wide))
    elif isinstance(node, P.Union):
        node = dataclasses.replace(node, inputs=tuple(eager(ctx, i, wide=wide) for i in node.inputs))
    else:
        node = dataclasses.replace(node, input=eager(ctx, node.input, wide=wide))
    return _rewrite(ctx, node, 0, wide) if isinstance(node, P.Aggregate) else node


def has_eager(node: P.Node) -> bool:
    """Whether ``node`` (a stored plan) pre-aggregates below a join anywhere."""
    return (isinstance(node, P.Aggregate) and node.eager) or any(has_eager(i) for i in P.inputs(node))


def _rewrite(ctx: Context, agg: P.Aggregate, depth: int, wide: bool) -> P.Aggregate:
    """``agg`` pre-aggregating a side of the join it reads, if it can. The partial's columns are
    named ``_e<depth>...`` (not after node ids: a plan must name its columns the same when its nodes
    are numbered anew, :func:`millpond.engine.plan.canonical`); a partial's own columns are read only
    by the aggregate above it, so names need only differ along one chain of partials."""
    project = agg.input
    if not (isinstance(project, P.Project) and isinstance(project.input, P.Join)):
        return agg
    join = project.input
    if (join.kind != "inner" or join.residual is not None or not join.left_keys or any(join.lookup)
            or join.shared != (None, None) or not agg.calls or any(c.func not in _MERGE for c in agg.calls)
            or (agg.whole and any(c.func.startswith("count") for c in agg.calls))
            or {s.table for s in P.sources(join)} & {i.table for i in ctx.catalog.indexes.values()}):
        return agg  # (a join over indexed tables reads the indexes: sql/indexes.py)
    exprs = dict((name, e) for e, name in project.exprs)
    sides = (set(columns(join.left)), set(columns(join.right)))

    def side(e: exp.Expression) -> int | None:  # 0, 1; -1 for a constant; None for both sides
        used = {c.name for c in e.find_all(exp.Column)}
        found = [s for s in (0, 1) if used <= sides[s]]
        return -1 if not used else found[0] if len(found) == 1 else None

    arg_sides = {side(exprs[c.arg]) for c in agg.calls if c.arg is not None} - {-1}
    group_sides = [side(exprs[g]) for g in agg.group]
    if None in arg_sides or None in group_sides or len(arg_sides) > 1:
        return agg
    if arg_sides:
        (s,) = arg_sides
    else:  # COUNT(*) alone: the side with no group columns (the rows being counted), else none
        free = [k for k in (0, 1) if k not in group_sides]
        if not free:
            return agg
        s = free[0]
    side_node, keys = (join.left, join.left_keys) if s == 0 else (join.right, join.right_keys)
    if _unique_by(ctx.catalog, side_node, keys):
        return agg

    pid, x = ctx.next_id(), f"_e{depth}"
    key_names = [f"{x}k{j}" for j in range(len(keys))]
    mine = [g for g, gs in zip(agg.group, group_sides) if gs == s]
    pre = [*zip(keys, key_names), *((exprs[g], f"{x}{g}") for g in mine),
           *((exprs[c.arg], f"{x}{c.arg}") for c in agg.calls if c.arg is not None)]
    partial = P.Aggregate(P.Project(side_node, tuple((e.copy(), n) for e, n in pre)),
                          (*key_names, *(f"{x}{g}" for g in mine)),
                          tuple(P.AggCall(c.func, c.arg and f"{x}{c.arg}", f"{x}c{i}")
                                for i, c in enumerate(agg.calls)),
                          pid, eager=True)
    partial = _rewrite(ctx, partial, depth + 1, wide)  # a side that is itself a join pre-aggregates below it too
    if mine and not wide and _in_primary_key(ctx.catalog, side_node, keys) and not has_eager(partial.input):
        return agg  # a few rows per key, grouped by more of their columns: about a group per row
    new_keys = tuple(column(n) for n in key_names)
    join = dataclasses.replace(join, **({"left": partial, "left_keys": new_keys} if s == 0
                                        else {"right": partial, "right_keys": new_keys}))
    above = [(column(f"{x}{g}") if gs == s else exprs[g].copy(), g) for g, gs in zip(agg.group, group_sides)]
    above += [(column(f"{x}c{i}"), f"{x}m{i}") for i in range(len(agg.calls))]
    calls = tuple(P.AggCall(_MERGE[c.func], f"{x}m{i}", c.name) for i, c in enumerate(agg.calls))
    return dataclasses.replace(agg, input=P.Project(join, tuple(above)), calls=calls)


def _in_primary_key(catalog: Catalog, node: P.Node, keys: tuple[exp.Expression, ...]) -> bool:
    """Whether a plain column among ``keys`` is part of the primary key of the table ``node`` reads
    (through filters): its rows are a key's children, a few per key (lineitems per order)."""
    while isinstance(node, P.Filter):
        node = node.input
    if not isinstance(node, P.Source) or node.table not in catalog.tables:
        return False
    names = dict(node.columns)
    return any(names.get(k.name) in catalog.tables[node.table].primary_key for k in keys if isinstance(k, exp.Column))


def _unique_by(catalog: Catalog, node: P.Node, keys: tuple[exp.Expression, ...]) -> bool:
    """Whether ``node``'s rows are known to be one per value of the plain columns among ``keys``
    (a table's primary key, a view's or an aggregate's key): pre-aggregating would keep as many rows."""
    plain = {k.name for k in keys if isinstance(k, exp.Column)}
    if isinstance(node, P.Source):
        names = dict((src, out) for out, src in node.columns)
        if node.table in catalog.tables:
            key = catalog.tables[node.table].primary_key
        else:
            stored = catalog.views[node.table].plan
            key = P.decode(stored).key if stored else ()
        return bool(key) and all(names.get(k) in plain for k in key)
    found = P.row_key(node)
    return bool(found) and set(found) <= plain

"""Joins: equality conditions between the two sides become join keys (from ON, and for inner
joins also from WHERE); conditions on one side of an inner or outer join filter that side's
input where that keeps the meaning; the rest is a filter above an inner join or the residual of
an outer one (evaluated with the join, because it decides which rows are padded)."""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import aliases, conjuncts, has_agg_or_window, rename

__all__ = ["plan_join", "join_kind", "order_joins"]


def join_kind(j: exp.Join) -> str:
    side = (j.args.get("side") or "").lower()
    kind = (j.args.get("kind") or "").lower()
    if side in ("left", "right", "full"):
        return side
    if kind in ("", "inner"):
        return "inner" if j.args.get("on") else "cross"
    if kind == "cross":
        return "cross"
    raise err(f"{kind.upper()} JOIN is not supported", j)


def order_joins(first: str, joins: list[exp.Join], where: list[exp.Expression]) -> list[exp.Join]:
    """Comma-separated FROM items (every join a cross join with no ON) in an order where each item
    joins the ones before it on an equality of ``where`` when one can, in FROM order otherwise, as
    PostgreSQL's planner never takes a cross product an equality avoids: ``FROM part, supplier,
    lineitem WHERE p_partkey = l_partkey AND s_suppkey = l_suppkey`` joins lineitem second, not
    part × supplier (TPC-H Q2, Q8, Q9: millions of pairs at SF 1, and a worker out of memory).
    ``first`` is the first FROM item (it stays first). Only the leading run of such items moves:
    from the first join with an ON (an outer join, a decorrelated subquery's) on, the order is kept."""
    n = next((i for i, j in enumerate(joins) if join_kind(j) != "cross" or j.args.get("on") or j.args.get("using")),
             len(joins))
    if n < 2:
        return joins
    joins, kept = joins[:n], joins[n:]
    links = [(aliases(c.this), aliases(c.expression)) for c in where
             if isinstance(c, exp.EQ) and not has_agg_or_window(c)]
    seen, rest, out = {first}, list(joins), []
    while rest:
        def joins_seen(j: exp.Join) -> bool:
            alias = j.this.alias_or_name
            return any(a and b and ((a <= seen and b == {alias}) or (b <= seen and a == {alias})) for a, b in links)
        pick = next((j for j in rest if joins_seen(j)), rest[0])
        rest.remove(pick)
        out.append(pick)
        seen.add(pick.this.alias_or_name)
    return out + kept


def plan_join(ctx: Context, node: P.Node, j: exp.Join, rels: dict[str, P.Node], seen: set[str],
              where: list[exp.Expression]) -> tuple[P.Node, list[exp.Expression]]:
    """Join ``node`` (the FROM items in ``seen``) with ``j``; WHERE conjuncts in ``where`` that
    relate the two sides become join keys too. Returns the node and the unused ``where``."""
    alias = j.this.alias_or_name
    kind = join_kind(j)
    if j.args.get("using"):
        raise err("JOIN ... USING could not be resolved; write JOIN ... ON", j)
    on = conjuncts(j.args["on"]) if j.args.get("on") else []
    right = rels[alias]
    left_keys, right_keys, rest, unused = [], [], [], []
    for cond, from_where in [*((c, False) for c in on), *((c, True) for c in where)]:
        used = aliases(cond)
        if isinstance(cond, exp.EQ) and not has_agg_or_window(cond):
            a, b = aliases(cond.this), aliases(cond.expression)
            if a and b and a <= seen and b == {alias}:
                left_keys.append(rename(cond.this))
                right_keys.append(rename(cond.expression))
                continue
            if a and b and b <= seen and a == {alias}:
                left_keys.append(rename(cond.expression))
                right_keys.append(rename(cond.this))
                continue
        if from_where:
            unused.append(cond)
        elif used == {alias} and kind in ("inner", "cross", "left"):
            right = P.Filter(right, rename(cond))  # ON conditions on the padded side filter its input
        elif used and used <= seen and kind in ("inner", "cross", "right"):
            node = P.Filter(node, rename(cond))
        else:
            rest.append(cond)
    if kind in ("inner", "cross"):
        out: P.Node = P.Join(node, right, tuple(left_keys), tuple(right_keys), ctx.next_id())
        for cond in rest:
            out = P.Filter(out, rename(cond))
        return out, unused
    residual = exp.and_(*(exp.Paren(this=rename(c)) for c in rest)) if rest else None
    return P.Join(node, right, tuple(left_keys), tuple(right_keys), ctx.next_id(), kind, residual), unused

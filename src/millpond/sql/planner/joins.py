"""Joins: equality conditions between the two sides become join keys (from ON, and for inner
joins also from WHERE); conditions on one side of an inner or outer join filter that side's
input where that keeps the meaning; the rest is a filter above an inner join or the residual of
an outer one (evaluated with the join, because it decides which rows are padded)."""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.context import Context, err
from millpond.sql.planner.exprs import aliases, conjuncts, has_agg_or_window, rename

__all__ = ["plan_join", "join_kind"]


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

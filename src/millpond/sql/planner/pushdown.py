"""Filter pushdown: WHERE conjuncts on a single FROM item filter that item below the joins,
unless an outer join may pad that item with NULLs (the condition must then see the padding); an
OR over several items also filters each item every branch restricts."""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.exprs import aliases, conjuncts, disjuncts, has_agg_or_window, rename
from millpond.sql.planner.joins import join_kind

__all__ = ["push_filters", "padded_aliases"]


def push_filters(rels: dict[str, P.Node], where: list[exp.Expression], padded: set[str]) -> list[exp.Expression]:
    """Wrap FROM items of ``rels`` in the conjuncts they alone use; return the conjuncts left. An
    OR over several items also filters each item that every branch restricts, by the OR of those
    restrictions (as PostgreSQL extracts them), and stays: ``(n1.name = 'FR' AND n2.name = 'DE')
    OR (n1.name = 'DE' AND n2.name = 'FR')`` keeps 2 of ``n1``'s and ``n2``'s rows below the joins
    (TPC-H Q7), not 25 × 25 pairs above them. Implied, so exact in three-valued logic too: a row
    the OR keeps makes some branch true, so that branch's restriction too."""
    late = []
    for cond in where:
        used = aliases(cond)
        if len(used) == 1 and not (used & padded) and not has_agg_or_window(cond):
            (a,) = used
            rels[a] = P.Filter(rels[a], rename(cond))
        else:
            late.append(cond)
            for a, implied in _implied(cond, used - padded):
                rels[a] = P.Filter(rels[a], rename(implied))
    return late


def _implied(cond: exp.Expression, items: set[str]) -> list[tuple[str, exp.Expression]]:
    """For an OR ``cond``: (item, the OR of each branch's conditions on that item alone) for each
    of ``items`` that every branch restricts."""
    branches = disjuncts(cond)
    if len(branches) < 2:
        return []
    out = []
    for a in sorted(items):
        parts = []
        for branch in branches:
            own = [c for c in conjuncts(branch) if aliases(c) == {a} and _plain(c)]
            if not own:
                break
            parts.append(exp.and_(*(c.copy() for c in own)) if len(own) > 1 else own[0].copy())
        else:
            out.append((a, exp.or_(*(exp.Paren(this=p) for p in parts))))
    return out


def _plain(c: exp.Expression) -> bool:
    """A condition that may be evaluated once more, anywhere: no aggregate, window, subquery, random
    or user function."""
    return not has_agg_or_window(c) and c.find(exp.Subquery, exp.Exists, exp.Rand, exp.Anonymous) is None


def padded_aliases(first: str, joins: list[exp.Join]) -> set[str]:
    """FROM items that an outer join may pad with NULLs (WHERE conditions on them stay above)."""
    padded: set[str] = set()
    seen = {first}
    for j in joins:
        alias = j.this.alias_or_name
        kind = join_kind(j)
        if kind in ("left", "full"):
            padded.add(alias)
        if kind in ("right", "full"):
            padded |= seen
        seen.add(alias)
    return padded

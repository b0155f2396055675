"""Filter pushdown: WHERE conjuncts on a single FROM item filter that item below the joins,
unless an outer join may pad that item with NULLs (the condition must then see the padding)."""

from __future__ import annotations

from sqlglot import exp

from millpond.engine import plan as P
from millpond.sql.planner.exprs import aliases, has_agg_or_window, rename
from millpond.sql.planner.joins import join_kind

__all__ = ["push_filters", "padded_aliases"]


def push_filters(rels: dict[str, P.Node], where: list[exp.Expression], padded: set[str]) -> list[exp.Expression]:
    """Wrap FROM items of ``rels`` in the conjuncts they alone use; return the conjuncts left."""
    late = []
    for cond in where:
        used = aliases(cond)
        if len(used) == 1 and not (used & padded) and not has_agg_or_window(cond):
            (a,) = used
            rels[a] = P.Filter(rels[a], rename(cond))
        else:
            late.append(cond)
    return late


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

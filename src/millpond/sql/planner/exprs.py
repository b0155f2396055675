"""Small helpers over sqlglot expressions shared by the planning rules."""

from __future__ import annotations

import re
from typing import Iterator

from sqlglot import exp

from millpond.sql.planner.context import err

__all__ = ["conjuncts", "disjuncts", "comparisons", "aliases", "has_agg_or_window", "count", "column", "rename", "unalias",
           "WINDOW_FN"]

WINDOW_FN = "MP_WINDOW"  # placeholder for TUMBLE/HOP's window_start/window_end inside the rewrite


def conjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The conditions ANDed in ``e``; a condition common to every branch of an OR is factored out
    of it, as PostgreSQL and Spark do (``(A AND x) OR (A AND y)`` is ``A AND (x OR y)``, in
    three-valued logic too), so that an equality every branch repeats becomes a join key (TPC-H's
    Q19 would otherwise be a cross product).

    >>> import sqlglot
    >>> [c.sql() for c in conjuncts(sqlglot.parse_one("(a = b AND x > 1) OR (a = b AND y < 2 AND z)"))]
    ['a = b', 'x > 1 OR (y < 2 AND z)']
    """
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    if isinstance(e, exp.Or):
        return _factored(e)
    return [e]


def disjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The branches ORed in ``e``."""
    if isinstance(e, exp.Paren):
        return disjuncts(e.this)
    if isinstance(e, exp.Or):
        return disjuncts(e.this) + disjuncts(e.expression)
    return [e]


def _factored(e: exp.Or) -> list[exp.Expression]:
    branches = [conjuncts(d) for d in disjuncts(e)]
    common = [c for c in branches[0] if all(any(c == x for x in b) for b in branches[1:])]
    common = [c for i, c in enumerate(common) if not any(c == d for d in common[:i])]
    if not common:
        return [e]
    rests = [[x for x in b if not any(x == c for c in common)] for b in branches]
    if any(not rest for rest in rests):  # A OR (A AND y) is A
        return common
    ored = [exp.and_(*(x.copy() for x in rest)) if len(rest) > 1 else rest[0].copy() for rest in rests]
    either = ored[0]
    for o in ored[1:]:
        either = exp.or_(either, o)
    return [c.copy() for c in common] + [either]


def comparisons(cond: exp.Expression) -> Iterator[tuple[str, exp.Column, str]]:
    """(op, column, integer literal) for ``col op N`` or ``N op col`` comparisons."""
    ops = {exp.LTE: ("<=", ">="), exp.LT: ("<", ">"), exp.EQ: ("=", "="), exp.GTE: (">=", "<="), exp.GT: (">", "<")}
    for cls, (op, flipped) in ops.items():
        if isinstance(cond, cls):
            a, b = cond.this, cond.expression
            if isinstance(a, exp.Column) and isinstance(b, exp.Literal) and not b.is_string:
                yield op, a, b.this
            elif isinstance(b, exp.Column) and isinstance(a, exp.Literal) and not a.is_string:
                yield flipped, b, a.this


def aliases(e: exp.Expression) -> set[str]:
    """The FROM items (aliases) an expression's columns belong to."""
    return {c.table for c in e.find_all(exp.Column) if c.table}


def has_agg_or_window(e: exp.Expression) -> bool:
    return e.find(exp.AggFunc, exp.Window) is not None


def count(e: exp.Expression, what: str) -> int:
    if not (isinstance(e, exp.Literal) and not e.is_string and re.fullmatch(r"\d+", e.this)):
        raise err(f"{what} must be a non-negative integer constant", e)
    return int(e.this)


def column(name: str) -> exp.Column:
    """A reference to a plan-internal column by its exact name."""
    return exp.column(name, quoted=True)


def unalias(e: exp.Expression) -> exp.Expression:
    return e.unalias() if isinstance(e, exp.Alias) else e


def rename(e: exp.Expression) -> exp.Expression:
    """A copy of ``e`` over plan-internal names: ``alias.column`` becomes ``alias__column``."""
    def fn(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.table:
            return column(f"{n.table}__{n.name}")
        if isinstance(n, exp.Anonymous) and n.name.upper() == WINDOW_FN:
            ts, wid, which = n.expressions
            return exp.Anonymous(this=WINDOW_FN, expressions=[fn(ts), wid, which])
        return n
    return e.copy().transform(fn)

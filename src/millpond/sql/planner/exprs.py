"""Small helpers over sqlglot expressions shared by the planning rules."""

from __future__ import annotations

import re
from typing import Iterator

from sqlglot import exp

from millpond.sql.planner.context import err

__all__ = ["conjuncts", "comparisons", "aliases", "has_agg_or_window", "count", "column", "rename", "unalias",
           "WINDOW_FN"]

WINDOW_FN = "MP_WINDOW"  # placeholder for TUMBLE/HOP's window_start/window_end inside the rewrite


def conjuncts(e: exp.Expression) -> list[exp.Expression]:
    if isinstance(e, exp.Paren):
        return conjuncts(e.this)
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    return [e]


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

"""Quotients: NUMERIC values whose display scale is their own, as PostgreSQL's are.

PostgreSQL divides numerics to at least 16 significant digits and never fewer digits after the
point than an operand has (``select_div_scale``): ``1::numeric / 3`` is
``0.33333333333333333333``, ``5::numeric / 2`` is ``2.5000000000000000``, and ``avg`` of integers
or numerics is such a quotient (the sum over the count). The scale depends on the values, so a
quotient is a :data:`~millpond.sql.semantics.types.QUOTIENT`: both engines carry it as its
PostgreSQL text (:mod:`millpond.engine.numerics` computes the quotient's digits there, exactly;
Spark keeps its operands, and a query's result divides them: :func:`final`).

What keeps a quotient's own display scale: a column or subquery output that is one, ``( )``,
unary ``-``, ``abs``, ``CAST(… AS NUMERIC)``, ``CAST(… AS TEXT)`` (its text), ``CASE`` and ``COALESCE``
among numerics, a ``UNION`` column, and a quotient of quotients (its operands' display scales count,
as in PostgreSQL). Anything else reads its value as ``numeric(38,16)``
(:data:`~millpond.sql.semantics.types.QUOTIENT_VALUE`): ``ORDER BY``, other arithmetic, functions
and aggregates; a comparison with a numeric of a finer scale reads it to that scale (20 digits at
most).

    >>> from millpond.engine.expressions import to_duckdb
    >>> node, t = quotient((exp.column("i"), T.INTEGER), (exp.Literal.number("2.0"), T.numeric(2, 1)))
    >>> str(t), to_duckdb(node)[:28]
    ('numeric', '(LIST_TRANSFORM([STRUCT_PACK')
"""

from __future__ import annotations

from sqlglot import exp

from millpond.engine.expressions import mp
from millpond.sql.semantics import types as T
from millpond.sql.semantics.types import SqlType, Typed

__all__ = ["quotient", "operand_text", "value", "of", "negate", "absolute", "final", "text"]



def quotient(left: Typed, right: Typed) -> Typed:
    """``left / right`` for integers and numerics, one of them a numeric: PostgreSQL's quotient."""
    return mp("NUMERIC_DIV", operand_text(*left), operand_text(*right)), T.QUOTIENT


def operand_text(node: exp.Expression, t: SqlType) -> exp.Expression:
    """The text an operand's digits and display scale are read from: a quotient's own; a numeric
    printed at its type's scale (an unconstrained NUMERIC: its 10 digits); an integer."""
    if t.dynamic:
        return text(node)
    if t.decimal:
        node = node if _is_cast_to(node, t) else exp.Cast(this=node, to=T.datatype(t))
    return exp.Cast(this=node, to=T.datatype(T.TEXT))


def _is_cast_to(node: exp.Expression, t: SqlType) -> bool:
    return isinstance(node, exp.Cast) and node.args["to"] == T.datatype(t)


def value(node: exp.Expression, scale: int = T.QUOTIENT_VALUE.scale) -> exp.Expression:
    """A quotient's value as ``numeric(38, scale)`` (by default
    :data:`~millpond.sql.semantics.types.QUOTIENT_VALUE`), rounded half away from zero."""
    return mp("NUMERIC_VALUE", node, exp.Literal.number(T.MAX_PRECISION), exp.Literal.number(scale))


def of(node: exp.Expression, t: SqlType) -> exp.Expression:
    """An integer or numeric of type ``t`` as a quotient: its text (an unconstrained NUMERIC shows
    its 10 digits after the point, as everywhere in millpond)."""
    if t.dynamic:
        return node
    if t.kind == "null":
        return exp.Cast(this=exp.Null(), to=T.datatype(T.QUOTIENT))
    return mp("NUMERIC_OF", operand_text(node, t))


def negate(node: exp.Expression) -> exp.Expression:
    return mp("NUMERIC_NEG", node)


def absolute(node: exp.Expression) -> exp.Expression:
    return mp("NUMERIC_ABS", node)


def final(node: exp.Expression) -> exp.Expression:
    """A quotient divided (a view may keep its operands, a query's result holds its text)."""
    return mp("NUMERIC_FINAL", node)


def text(node: exp.Expression) -> exp.Expression:
    """A quotient as PostgreSQL's text of it."""
    return mp("NUMERIC_TEXT", node)

"""Literals, columns and casts: a constant's PostgreSQL type (``7`` is an integer, ``1.5`` and
``1e3`` numerics, ``'x'`` untyped until used), and PostgreSQL's conversions (a cast to an integer
rounds: a numeric half away from zero, a float half to even)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.engine.expressions import mp
from millpond.sql.semantics import intervals, jsonb, numerics, types as T
from millpond.sql.semantics.constants import parse_constant
from millpond.sql.semantics.nested import array_constant, cast_nested, map_constant, record_constant
from millpond.sql.semantics.types import SqlType, Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["cast", "literal_as", "HANDLERS"]


def _literal(b: Binder, node: exp.Literal) -> Typed:
    if node.is_string:
        return node, T.UNKNOWN
    text = node.this
    if re.fullmatch(r"\d+", text):
        n = int(text)
        return node, T.INTEGER if n < 2**31 else T.BIGINT if n < 2**63 else T.numeric(len(text), 0)
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise refuse(f"invalid number {text!r}", node) from None
    plain = format(d, "f")
    whole, _, fraction = plain.lstrip("-").partition(".")
    scale = len(fraction)
    precision = len(whole.lstrip("0")) + scale
    if precision > T.MAX_PRECISION:
        raise refuse(f"number {text} has more than {T.MAX_PRECISION} digits", node)
    t = T.numeric(max(precision, 1), scale)
    lit = exp.Literal.number(plain)
    lit.meta.update(node.meta)
    if "." not in plain:  # 1e3 is numeric in PostgreSQL; the engines read 1000 as an integer
        return exp.Cast(this=lit, to=T.datatype(t)), t
    return lit, t


def literal_as(node: exp.Expression, target: SqlType, at: exp.Expression) -> exp.Expression:
    """An untyped literal (a string constant or NULL) read as a value of ``target``."""
    if isinstance(node, exp.Null) or (isinstance(node, exp.Cast) and isinstance(node.this, exp.Null)):
        return exp.Cast(this=exp.Null(), to=T.datatype(target)) if target.kind not in ("null", "unknown") \
            else exp.Null()
    if target.kind in ("unknown", "text"):
        return node
    text = node.this if isinstance(node, exp.Literal) else None
    if text is None:
        return cast(node, T.TEXT, target, at)
    if target.kind == "array":  # '{1,2,NULL}': PostgreSQL's array input
        return array_constant(text, target, at, literal_as)
    if target.kind == "jsonb":
        return jsonb.constant(text, at)
    if target.kind in ("record", "map"):  # '(1,x)': PostgreSQL's record input; '{a:1}': a map's text
        return (record_constant if target.kind == "record" else map_constant)(text, target, at, literal_as)
    return parse_constant(text, target, at)


def _null(b: Binder, node: exp.Null) -> Typed:
    return node, T.NULL


def _boolean(b: Binder, node: exp.Boolean) -> Typed:
    return node, T.BOOLEAN


def _column(b: Binder, node: exp.Column) -> Typed:
    if isinstance(node.this, exp.Star):
        return node, T.TEXT
    return node, b.column_type(node)


def _paren(b: Binder, node: exp.Paren) -> Typed:
    inner, t = b.value(node.this, keep=True)
    return exp.Paren(this=inner), t


def _subquery(b: Binder, node: exp.Subquery) -> Typed:
    """A scalar subquery (already bound as its own scope): the type of its one column."""
    inner = node.this
    out = b.outputs.get(id(inner), [])
    if len(out) != 1:
        raise refuse("a subquery used as a value must return one column", node)
    return node, out[0][1]


# -- casts ----------------------------------------------------------------------------------------
def _cast(b: Binder, node: exp.Cast) -> Typed:
    if isinstance(node, exp.TryCast):
        raise refuse("TRY_CAST is not PostgreSQL; use CAST", node)
    to = node.args["to"]
    length = None
    if to.this in (exp.DataType.Type.VARCHAR, exp.DataType.Type.NVARCHAR) and to.expressions:
        length = int(to.expressions[0].name)
        target = T.TEXT
    else:
        target = T.from_datatype(to)
    if to.this == exp.DataType.Type.JSON:
        raise refuse("type json is not supported: use jsonb (the same documents, compared by value)", to)
    if target is None:
        raise refuse(f"type {to.sql('postgres')} is not supported (supported: SMALLINT, INTEGER, BIGINT, NUMERIC, "
                     "REAL, DOUBLE PRECISION, TEXT, VARCHAR, BOOLEAN, DATE, TIMESTAMP, TIMESTAMPTZ, INTERVAL, BYTEA, JSONB, "
                     "arrays, STRUCT<…>, MAP(…))", to)
    if target.kind == "array" and isinstance(node.this, exp.Array) and not node.this.expressions:
        return exp.Cast(this=exp.Array(), to=T.datatype(target)), target  # ARRAY[]::INT[]
    inner, t = b.value(node.this, keep=True)
    if target == T.NUMERIC_DEFAULT:  # a numeric without a declared scale keeps the value's own
        own = _own_scale(inner, t)
        if own is not None:
            target = own
    if target == t and length is None:
        return inner, t
    if t.untyped:
        out = literal_as(inner, target, node)
    else:
        out = cast(inner, t, target, node)
    if length is not None:  # an explicit cast to VARCHAR(n) truncates
        out = exp.Anonymous(this="LEFT", expressions=[out, exp.Literal.number(length)])
    return out, target


def _own_scale(node: exp.Expression, t: SqlType) -> SqlType | None:
    """The type ``CAST(node AS NUMERIC)`` has when PostgreSQL's display scale of its values is known:
    an integer's (scale 0), a numeric's with a declared or per-value scale, a string constant's own
    digits. None: millpond's ``numeric(38,10)`` (a float, an unconstrained numeric)."""
    if t.integer:
        return T.numeric(T.decimal_of(t).precision, 0)
    if t.decimal and (t.exact or t.dynamic):
        return t
    if t.kind == "unknown" and isinstance(node, exp.Literal) and node.is_string:
        try:
            d = Decimal(node.this.strip())
        except InvalidOperation:
            return None  # the cast says why
        if not d.is_finite():
            return None
        scale = max(0, -d.as_tuple().exponent)
        digits = max(d.adjusted() + 1, 0) + scale
        return T.numeric(max(digits, 1), scale) if digits <= T.MAX_PRECISION else None
    return None


def cast(node: exp.Expression, source: SqlType, target: SqlType, at: exp.Expression) -> exp.Expression:
    """``node`` (of type ``source``) as ``target`` with PostgreSQL's conversion."""
    if source == target or (source.kind == target.kind and not target.decimal and not target.nested):
        return node
    if source.kind == "jsonb" or target.kind == "jsonb":
        return jsonb.cast_jsonb(node, source, target, at)
    if source.nested or target.nested:
        return cast_nested(node, source, target, at, cast)
    if target.dynamic or source.dynamic:
        if target.dynamic and (source.integer or source.decimal or source.kind == "null"):
            return numerics.of(node, source)
        if source.dynamic and target.kind == "text":
            return numerics.text(node)
        if source.dynamic:
            return cast(numerics.value(node), T.QUOTIENT_VALUE, target, at)
        raise refuse(f"cannot cast type {source} to {target}", at)
    if target.integer and source.decimal:  # numeric -> integer rounds half away from zero
        return _to(exp.Anonymous(this="ROUND", expressions=[node]), target)
    if target.integer and source.float:  # float -> integer rounds half to even
        return _to(mp("ROUND_EVEN", node), target)
    if target.kind == "text":
        if source.float:
            raise refuse(f"casting {source} to text is not supported: PostgreSQL prints the shortest exact "
                         "digits, the engines do not; cast to NUMERIC(p,s) first", at)
        if source.decimal and not source.exact:
            raise refuse("casting a NUMERIC without a declared scale (or a quotient) to text is not supported: "
                         "PostgreSQL prints its own scale; cast to NUMERIC(p,s) first", at)
        if source.kind == "interval":
            return intervals.text(node)
        if source.kind == "timestamp with time zone":  # shown in millpond's TimeZone, UTC
            return exp.DPipe(this=_to(mp("TZ_TO_TS", node), T.TEXT), expression=exp.Literal.string("+00"), safe=False)
    if source.kind == "timestamp with time zone" and target.kind in ("timestamp", "date"):
        return _to(mp("TZ_TO_TS", node), target) if target.kind == "date" else mp("TZ_TO_TS", node)
    if target.kind == "timestamp with time zone" and source.kind in ("timestamp", "date"):
        return mp("TS_TO_TZ", _to(node, T.TIMESTAMP) if source.kind == "date" else node)
    if target.kind == "timestamp with time zone" and source.kind == "text":
        raise refuse("casting text to timestamp with time zone is not supported (a constant is: "
                     "'2001-01-01 18:00:00+02'::timestamptz)", at)
    if target.kind == "boolean" and source.kind == "text":
        return mp("TEXT_TO_BOOL", node)
    if target.kind == "boolean" and source.integer:
        return exp.NEQ(this=node, expression=exp.Literal.number(0))
    if source.kind == "boolean" and target.integer:
        return _to(exp.Case(ifs=[exp.If(this=node, true=exp.Literal.number(1))], default=exp.Literal.number(0)),
                   target)
    if target.kind == "interval" or source.kind == "interval":
        hint = " (a constant is: '1 day 02:00'::interval)" if source.kind == "text" else ""
        raise refuse(f"casting {source} to {target} is not supported{hint}", at)
    if target.kind == "boolean" and source.kind != "boolean" or source.kind == "boolean" and target.kind not in (
            "text", "boolean"):
        raise refuse(f"cannot cast type {source} to {target}", at)
    if target.temporal and source.number or source.temporal and target.number:
        raise refuse(f"cannot cast type {source} to {target}", at)
    return _to(node, target)


def _to(node: exp.Expression, target: SqlType) -> exp.Cast:
    return exp.Cast(this=node, to=T.datatype(target))



HANDLERS = {
    exp.Literal: _literal, exp.Null: _null, exp.Boolean: _boolean, exp.Column: _column, exp.Paren: _paren,
    exp.Subquery: _subquery, exp.Cast: _cast, exp.TryCast: _cast,
}

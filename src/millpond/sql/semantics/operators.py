"""Operators, comparisons, logic and CASE, typed as PostgreSQL types them: ``integer / integer``
truncates, ``numeric`` arithmetic has one result type in both engines, a numeric quotient is
PostgreSQL's (:mod:`~millpond.sql.semantics.numerics`), an untyped literal takes the type of the
other side (``i = '7'``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sqlglot import exp

from millpond.engine.expressions import mp
from millpond.sql.semantics import numerics, types as T
from millpond.sql.semantics.numerics import quotient
from millpond.sql.semantics.casts import HANDLERS as CASTS, cast, literal_as
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.types import Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["arithmetic", "comparable", "HANDLERS"]


_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}


def _arith(b: Binder, node: exp.Binary) -> Typed:
    op = _ARITH[type(node)]
    left, right = b.value(node.this, keep=True), b.value(node.expression, keep=True)
    from millpond.sql.semantics.datetime import temporal_arith

    if any(t.temporal or t.kind == "interval" for _, t in (left, right)):
        return temporal_arith(b, op, left, right, node)
    (l, lt), (r, rt) = _unify_untyped(left, right, node)
    if not (lt.number or lt.kind == "null") or not (rt.number or rt.kind == "null"):
        raise refuse(f"operator does not exist: {lt} {op} {rt}", node)
    if lt.kind == "null" or rt.kind == "null":
        t = rt if lt.kind == "null" else lt
        t = T.INTEGER if t.kind == "null" else t
        return exp.Cast(this=exp.Null(), to=T.datatype(t)), t
    return arithmetic(op, (l, lt), (r, rt), node)


def arithmetic(op: str, left: Typed, right: Typed, at: exp.Expression) -> Typed:
    """``left op right`` over numbers, typed as PostgreSQL types it. Plain sqlglot operators with
    typed operands: ``IntDiv`` for integers; for numerics the operator over two DECIMAL casts,
    cast to the result type, and a quotient PostgreSQL's (:func:`~millpond.sql.semantics.numerics.quotient`);
    doubles. A quotient operand keeps its display scale in a quotient, elsewhere it is its value."""
    if op != "/" or left[1].float or right[1].float:
        left, right = _fixed(left), _fixed(right)
    (l, lt), (r, rt) = left, right
    if lt.float or rt.float:
        if op == "%":
            raise refuse(f"operator does not exist: {lt} % {rt} (PostgreSQL has no floating-point modulo)", at)
        t = T.REAL if lt.kind == rt.kind == "real" else T.DOUBLE
        return _binary(op, cast(l, lt, t, at), cast(r, rt, t, at)), t
    if lt.integer and rt.integer:
        t = max(lt, rt, key=lambda x: T._INTEGER_RANK[x.kind])
        if op == "/":  # truncates toward zero
            return _to(exp.IntDiv(this=_wrap(l), expression=_wrap(r)), t), t
        return _binary(op, l, r), t
    if op == "/":
        return quotient(left, right)
    t = T.decimal_result(op, lt, rt)
    ld, rd = T.decimal_of(lt), T.decimal_of(rt)
    # explicit DECIMAL operands: Spark types the result as decimal_result does, DuckDB reads the scales
    return _to(_binary(op, _decimal(l, lt, ld, at), _decimal(r, rt, rd, at)), t), t


def _fixed(typed: Typed) -> Typed:
    """A quotient as its value (numeric(38,16)); anything else as it is."""
    return (numerics.value(typed[0]), T.QUOTIENT_VALUE) if typed[1].dynamic else typed


def _decimal(node: exp.Expression, source: T.SqlType, target: T.SqlType, at: exp.Expression) -> exp.Cast:
    """``node`` as an explicit CAST to DECIMAL(p,s), even when it already is one."""
    if isinstance(node, exp.Cast) and node.args["to"] == T.datatype(target):
        return node
    return exp.Cast(this=cast(node, source, target, at) if source != target else node, to=T.datatype(target))


def _to(node: exp.Expression, target: T.SqlType) -> exp.Cast:
    return exp.Cast(this=node, to=T.datatype(target))


def _binary(op: str, l: exp.Expression, r: exp.Expression) -> exp.Expression:
    cls = {"+": exp.Add, "-": exp.Sub, "*": exp.Mul, "/": exp.Div, "%": exp.Mod}[op]
    return cls(this=_wrap(l), expression=_wrap(r))


def _wrap(node: exp.Expression) -> exp.Expression:
    return exp.Paren(this=node) if isinstance(node, (exp.Binary, exp.Neg)) else node


def _unify_untyped(left: Typed, right: Typed, at: exp.Expression) -> tuple[Typed, Typed]:
    """An untyped literal on one side takes the other side's type (PostgreSQL's ``unknown``)."""
    (l, lt), (r, rt) = left, right
    if lt.untyped and not rt.untyped:
        return (literal_as(l, rt, at), rt), right
    if rt.untyped and not lt.untyped:
        return left, (literal_as(r, lt, at), lt)
    if lt.kind == rt.kind == "unknown":
        return (l, T.TEXT), (r, T.TEXT)
    return left, right


def _neg(b: Binder, node: exp.Neg) -> Typed:
    inner, t = b.value(node.this, keep=True)
    if t.dynamic:
        return numerics.negate(inner), t
    if t.kind == "unknown":
        raise refuse("operator is not unique: - unknown", node)
    if not (t.number or t.kind in ("interval", "null")):
        raise refuse(f"operator does not exist: - {t}", node)
    if t.kind == "interval":
        from millpond.sql.semantics.intervals import negate

        return negate(inner), t
    return exp.Neg(this=_wrap(inner)), t


def _bitwise(b: Binder, node: exp.Expression) -> Typed:
    name = {exp.BitwiseAnd: "&", exp.BitwiseOr: "|", exp.BitwiseXor: "#"}[type(node)]
    (l, lt), (r, rt) = _unify_untyped(b.value(node.this), b.value(node.expression), node)
    if not (lt.integer and rt.integer):
        raise refuse(f"operator does not exist: {lt} {name} {rt}", node)
    t = max(lt, rt, key=lambda x: T._INTEGER_RANK[x.kind])
    return _to(type(node)(this=_wrap(cast(l, lt, t, node)), expression=_wrap(cast(r, rt, t, node))), t), t


def _bitwise_not(b: Binder, node: exp.BitwiseNot) -> Typed:
    inner, t = b.value(node.this)
    if not t.integer:
        raise refuse(f"operator does not exist: ~ {t}", node)
    return exp.BitwiseNot(this=_wrap(inner)), t


def _pow(b: Binder, node: exp.Pow) -> Typed:
    (l, lt), (r, rt) = _unify_untyped(b.value(node.this), b.value(node.expression), node)
    if lt.decimal or rt.decimal:
        raise refuse("^ / power() on NUMERIC is not supported (PostgreSQL computes it in NUMERIC); cast an "
                     "argument to double precision", node)
    if not (lt.number and rt.number):
        raise refuse(f"operator does not exist: {lt} ^ {rt}", node)
    return mp("POWER", cast(l, lt, T.DOUBLE, node), cast(r, rt, T.DOUBLE, node)), T.DOUBLE


# -- comparisons and logic ------------------------------------------------------------------------
def comparable(b: Binder, left: Typed, right: Typed, at: exp.Expression) -> tuple[exp.Expression, exp.Expression]:
    """The two sides of a comparison, in a form both engines compare as PostgreSQL does: intervals
    by their span (``'24 hours' = '1 day'``), a timestamp with a timestamptz as timestamptz, a
    quotient by its value (to the other side's scale, 16 to 20 digits)."""
    left, right = _by_value(left, right), _by_value(right, left)
    (l, lt), (r, rt) = _unify_untyped(left, right, at)
    if lt.kind == "interval" or rt.kind == "interval":
        from millpond.sql.semantics.intervals import span

        if lt.kind in ("interval", "null") and rt.kind in ("interval", "null"):
            return (span(l) if lt.kind == "interval" else l), (span(r) if rt.kind == "interval" else r)
        raise refuse(f"operator does not exist: {lt} {_op_name(at)} {rt}", at)
    if lt.kind == "null" or rt.kind == "null" or lt == rt:
        return l, r
    if lt.number and rt.number:
        if lt.float or rt.float:  # PostgreSQL compares a number with a float as float8
            return cast(l, lt, T.DOUBLE, at) if not lt.float else l, cast(r, rt, T.DOUBLE, at) if not rt.float else r
        return l, r
    if lt.kind in ("date", "timestamp") and rt.kind in ("date", "timestamp"):
        return cast(l, lt, T.TIMESTAMP, at), cast(r, rt, T.TIMESTAMP, at)
    if lt.temporal and rt.temporal:  # PostgreSQL compares a timestamp with a timestamptz as timestamptz
        return cast(l, lt, T.TIMESTAMPTZ, at), cast(r, rt, T.TIMESTAMPTZ, at)
    if lt.kind == "array" and rt.kind == "array":  # element by element, in their common element type
        common = T.common_type([lt, rt])
        if common is None:
            raise refuse(f"operator does not exist: {lt} {_op_name(at)} {rt}", at)
        return cast(l, lt, common, at), cast(r, rt, common, at)
    if lt.kind == rt.kind and not lt.nested:
        return l, r
    raise refuse(f"operator does not exist: {lt} {_op_name(at)} {rt}", at)


def _by_value(typed: Typed, other: Typed) -> Typed:
    """A quotient compared with ``other``: its value, to ``other``'s scale where that is finer than
    16 digits (``1::numeric / 3 = 0.33333333333333333333``), 20 at most (20 digits after the point
    leave 18 before it)."""
    node, t = typed
    if not t.dynamic:
        return typed
    o = other[1]
    scale = max(T.QUOTIENT_VALUE.scale, min(o.scale, 20)) if o.decimal and not o.dynamic else T.QUOTIENT_VALUE.scale
    return numerics.value(node, scale), T.numeric(T.MAX_PRECISION, scale, exact=False)


def _op_name(node: exp.Expression) -> str:
    return {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}.get(
        type(node), node.key.upper())


def _compare(b: Binder, node: exp.Binary) -> Typed:
    left, right = b.value(node.this, keep=True), b.value(node.expression, keep=True)
    if "jsonb" in (left[1].kind, right[1].kind) and not isinstance(node, (exp.EQ, exp.NEQ)):
        raise refuse(f"operator does not exist: {left[1]} {_op_name(node)} {right[1]} (millpond compares jsonb "
                     "values for equality only: compare a field's text, j ->> 'k')", node)
    l, r = comparable(b, left, right, node)
    if not isinstance(node, (exp.EQ, exp.NEQ)) and (left[1].nested or right[1].nested):
        from millpond.sql.semantics.nested import order_key

        common = right[1] if left[1].untyped else left[1]
        l, r = order_key(l, common, node), order_key(r, common, node)
    return type(node)(this=l, expression=r), T.BOOLEAN


def _logic(b: Binder, node: exp.Connector) -> Typed:
    l, _ = b.condition(node.this)
    r, _ = b.condition(node.expression)
    return type(node)(this=l, expression=r), T.BOOLEAN


def _not(b: Binder, node: exp.Not) -> Typed:
    inner, _ = b.condition(node.this)
    return exp.Not(this=inner), T.BOOLEAN


def _is(b: Binder, node: exp.Is) -> Typed:
    inner, t = b.value(node.this)
    target = node.expression
    if isinstance(target, exp.Boolean):  # IS [NOT] TRUE/FALSE: never NULL
        if t.kind not in ("boolean", "null", "unknown"):
            raise refuse(f"argument of IS {target.sql('postgres')} must be boolean, not {t}", node)
        inner = literal_as(inner, T.BOOLEAN, node) if t.untyped else inner
        test = exp.NullSafeEQ(this=inner, expression=exp.Boolean(this=target.this))
        return (exp.Not(this=test) if node.args.get("negate") else test), T.BOOLEAN
    return exp.Is(this=inner, expression=target, negate=node.args.get("negate")), T.BOOLEAN


def _between(b: Binder, node: exp.Between) -> Typed:
    if node.args.get("symmetric"):
        raise refuse("BETWEEN SYMMETRIC is not supported", node)
    value = b.value(node.this)
    low, high = b.value(node.args["low"]), b.value(node.args["high"])
    this, low_ = comparable(b, value, low, node)
    _, high_ = comparable(b, (value[0].copy(), value[1]), high, node)
    return exp.Between(this=this, low=low_, high=high_), T.BOOLEAN


def _in(b: Binder, node: exp.In) -> Typed:
    if node.args.get("query") is not None:
        row = node.this.expressions if isinstance(node.this, exp.Tuple) else [node.this]  # (a, b) IN (SELECT c, d …)
        values = b.values(row)
        query = node.args["query"]
        out = b.outputs.get(id(query.this if isinstance(query, exp.Subquery) else query), [])
        if len(out) != len(values):
            raise refuse(f"subquery has {'too many' if len(out) > len(values) else 'too few'} columns", node)
        for i, (value, (_, t)) in enumerate(zip(values, out)):
            if t.dynamic:  # compared by value
                b.cast_output(query, i, T.QUOTIENT_VALUE)
                t = T.QUOTIENT_VALUE
            comparable(b, value, (query, t), node)
            if value[1].kind == "interval":
                raise refuse("IN (SELECT ...) of an INTERVAL is not supported; compare spans: "
                             "EXTRACT(EPOCH FROM ...)", node)
        this = exp.Tuple(expressions=[v[0] for v in values]) if isinstance(node.this, exp.Tuple) else values[0][0]
        return exp.In(this=this, query=query), T.BOOLEAN
    value = b.value(node.this)
    items = b.values(node.expressions)
    t = T.common_type([value[1], *(i[1] for i in items)])
    if t is None:
        raise refuse(f"IN: {value[1]} cannot be compared with {', '.join(str(i[1]) for i in items)}", node)
    this = b.cast_to(value, t, node) if not t.untyped else value[0]
    listed = [b.cast_to(i, t, node) if not t.untyped else i[0] for i in items]
    if t.kind == "interval":  # compared by span, as =
        from millpond.sql.semantics.intervals import span

        this, listed = span(this), [span(i) for i in listed]
    return exp.In(this=this, expressions=listed), T.BOOLEAN


def _exists(b: Binder, node: exp.Exists) -> Typed:
    return node, T.BOOLEAN


def _null_safe(b: Binder, node: exp.Binary) -> Typed:
    l, r = comparable(b, b.value(node.this, keep=True), b.value(node.expression, keep=True), node)
    return type(node)(this=l, expression=r), T.BOOLEAN


# -- CASE and friends -----------------------------------------------------------------------------
def _case(b: Binder, node: exp.Case) -> Typed:
    subject = b.value(node.this) if node.this is not None else None
    conds, results = [], []
    for i in node.args.get("ifs") or []:
        if subject is not None:
            l, r = comparable(b, (subject[0].copy(), subject[1]), b.value(i.this), i)
            conds.append(exp.EQ(this=l, expression=r))
        else:
            conds.append(b.condition(i.this)[0])
        results.append(b.value(i.args["true"], keep=True))
    default = b.value(node.args["default"], keep=True) if node.args.get("default") is not None else None
    t = T.common_type([r[1] for r in results] + ([default[1]] if default else []))
    if t is None:
        raise refuse(f"CASE types {', '.join(str(r[1]) for r in results)} cannot be matched", node)
    ifs = [exp.If(this=c, true=b.cast_to(r, t, node)) for c, r in zip(conds, results)]
    return exp.Case(ifs=ifs, default=b.cast_to(default, t, node) if default else None), t


def _common_call(b: Binder, node: exp.Expression, args: list[exp.Expression], name: str) -> Typed:
    typed = b.values(args, keep=name == "COALESCE")  # GREATEST and LEAST compare: quotients by value
    t = T.common_type([a[1] for a in typed])
    if t is None:
        raise refuse(f"{name} types {', '.join(str(a[1]) for a in typed)} cannot be matched", node)
    if t.kind == "interval" and name != "COALESCE":
        raise refuse(f"{name.lower()} of intervals is not supported; compare them in a CASE", node)
    if t.kind == "unknown":
        t = T.TEXT
    return exp.Anonymous(this=name, expressions=[b.cast_to(a, t, node) for a in typed]), t


def _coalesce(b: Binder, node: exp.Coalesce) -> Typed:
    return _common_call(b, node, [node.this, *node.expressions], "COALESCE")


def _greatest(b: Binder, node: exp.Expression) -> Typed:
    name = "GREATEST" if isinstance(node, exp.Greatest) else "LEAST"
    return _common_call(b, node, [node.this, *node.expressions], name)


def _nullif(b: Binder, node: exp.Nullif) -> Typed:
    value = b.value(node.this)
    l, r = comparable(b, value, b.value(node.expression), node)
    t = value[1] if not value[1].untyped else T.TEXT
    if t.kind == "interval":  # equal spans give NULL; else the first interval itself
        return exp.Case(ifs=[exp.If(this=exp.EQ(this=l, expression=r), true=exp.Cast(
            this=exp.Null(), to=T.datatype(t)))], default=value[0].copy()), t
    return exp.Nullif(this=l, expression=r), t


def _alias(b: Binder, node: exp.Alias) -> Typed:
    inner, t = b.value(node.this, keep=True)
    return exp.alias_(inner, node.alias, quoted=True), t


HANDLERS: dict[type, Callable[[Binder, exp.Expression], Typed]] = {
    **CASTS,
    exp.Add: _arith, exp.Sub: _arith, exp.Mul: _arith, exp.Div: _arith, exp.Neg: _neg,
    exp.BitwiseAnd: _bitwise, exp.BitwiseOr: _bitwise, exp.BitwiseXor: _bitwise, exp.BitwiseNot: _bitwise_not,
    exp.EQ: _compare, exp.NEQ: _compare, exp.LT: _compare, exp.LTE: _compare, exp.GT: _compare, exp.GTE: _compare,
    exp.NullSafeEQ: _null_safe, exp.NullSafeNEQ: _null_safe,
    exp.And: _logic, exp.Or: _logic, exp.Not: _not, exp.Is: _is, exp.Between: _between, exp.In: _in,
    exp.Exists: _exists, exp.Case: _case, exp.Alias: _alias,
}
# functions sqlglot parses as these operators' kin (mod(a, b) is a % b: named ?column? as the operator)
register(
    Function("coalesce", _coalesce, (exp.Coalesce,)),
    Function("nullif", _nullif, (exp.Nullif,)),
    Function("greatest", _greatest, (exp.Greatest,)),
    Function("least", _greatest, (exp.Least,)),
    Function("power", _pow, (exp.Pow,), forms=("POWER",)),
    Function("mod", _arith, (exp.Mod,), names_output=False),
)

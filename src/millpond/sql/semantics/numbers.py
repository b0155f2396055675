"""Functions of numbers with PostgreSQL's meaning: ``abs``, ``ceil``/``floor``, ``round`` (half away
from zero for numeric, half to even for double precision), ``trunc``, ``sign``, ``sqrt``...
(an integer argument is double precision, as PostgreSQL resolves the call), ``pi`` and ``random``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sqlglot import exp

from millpond.engine.expressions import mp
from millpond.sql.semantics import types as T
from millpond.sql.semantics.calls import call as _call, name as _name, to as _to
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.types import Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__: list[str] = []  # its functions are its registry entries


def _number_arg(b: Binder, node: exp.Expression | None, at: exp.Expression, *, keep: bool = False) -> Typed:
    if node is None:
        raise refuse(f"{_name(at)}: missing argument", at)
    typed = b.value(node, keep=keep)
    if typed[1].untyped:
        return b.cast_to(typed, T.DOUBLE if typed[1].kind == "unknown" else T.INTEGER, at), \
            T.DOUBLE if typed[1].kind == "unknown" else T.INTEGER
    if not typed[1].number:
        raise refuse(f"function {_name(at)}({typed[1]}) does not exist", at)
    return typed


def _abs(b: Binder, node: exp.Expression) -> Typed:
    from millpond.sql.semantics.numerics import absolute

    x, t = _number_arg(b, node.this, node, keep=True)
    if t.dynamic:  # a quotient keeps its display scale
        return absolute(x), t
    return _call("ABS", x), t


def _ceil_floor(b: Binder, node: exp.Expression) -> Typed:
    if node.args.get("decimals") is not None or node.args.get("to") is not None:
        raise refuse(f"{_name(node)} takes one argument", node)
    name = "CEIL" if isinstance(node, exp.Ceil) else "FLOOR"
    x, t = _number_arg(b, node.this, node)
    if t.decimal:
        out = T.numeric(t.precision - t.scale + 1, 0, exact=t.exact)
        return _to(_call(name, x), out), out
    x = b.cast_to((x, t), T.DOUBLE, node)  # PostgreSQL: ceil(integer) is ceil(double precision)
    return _to(_call(name, x), T.DOUBLE), T.DOUBLE


def _round(b: Binder, node: exp.Round) -> Typed:
    x, t = _number_arg(b, node.this, node)
    digits = node.args.get("decimals")
    if digits is not None:
        if not t.decimal and not t.integer:
            raise refuse(f"function round({t}, integer) does not exist (round(numeric, integer) does: cast "
                          "the value to numeric)", node)
        n = b.value(digits)[0]
        if not (isinstance(n, exp.Literal) and not n.is_string) and not (
                isinstance(n, exp.Neg) and isinstance(n.this, exp.Literal)):
            raise refuse("round(numeric, n) needs a constant n", node)
        places = int(n.this) if isinstance(n, exp.Literal) else -int(n.this.this)
        d = T.decimal_of(t)
        x = b.cast_to((x, t), d, node)
        scale = max(places, 0)
        out = T.numeric(min(d.precision - d.scale + 1 + scale, T.MAX_PRECISION), scale, exact=t.exact)
        return _to(_call("ROUND", x, exp.Literal.number(places)), out), out
    if t.decimal:
        out = T.numeric(t.precision - t.scale + 1, 0, exact=t.exact)
        return _to(_call("ROUND", x), out), out
    x = b.cast_to((x, t), T.DOUBLE, node)  # round(double precision) rounds half to even
    return mp("ROUND_EVEN", x), T.DOUBLE


def _trunc(b: Binder, node: exp.Expression) -> Typed:
    if node.args.get("decimals") is not None:
        raise refuse("trunc(numeric, n) is not supported; trunc(x) is", node)
    x, t = _number_arg(b, node.this, node)
    neg = exp.LT(this=x.copy(), expression=exp.Literal.number(0))
    if t.decimal:
        out = T.numeric(t.precision - t.scale + 1, 0, exact=t.exact)
        return _to(exp.Case(ifs=[exp.If(this=neg, true=_call("CEIL", x.copy()))], default=_call("FLOOR", x)),
                   out), out
    x = b.cast_to((x, t), T.DOUBLE, node)
    neg = exp.LT(this=x.copy(), expression=exp.Literal.number(0))
    return _to(exp.Case(ifs=[exp.If(this=neg, true=_call("CEIL", x.copy()))], default=_call("FLOOR", x)),
               T.DOUBLE), T.DOUBLE


def _sign(b: Binder, node: exp.Expression) -> Typed:
    x, t = _number_arg(b, node.this, node)
    if t.decimal:
        out = T.numeric(1, 0)
        return _to(_call("SIGN", x), out), out
    return _to(_call("SIGN", b.cast_to((x, t), T.DOUBLE, node)), T.DOUBLE), T.DOUBLE


def _double_fn(name: str) -> Callable[[Binder, exp.Expression], Typed]:
    def rule(b: Binder, node: exp.Expression) -> Typed:
        x, t = _number_arg(b, node.this, node)
        if t.decimal:
            raise refuse(f"{name.lower()}(numeric) is not supported (PostgreSQL computes it in NUMERIC); cast the "
                          "argument to double precision", node)
        return _call(name, b.cast_to((x, t), T.DOUBLE, node)), T.DOUBLE
    return rule


def _random(b: Binder, node: exp.Expression) -> Typed:
    if b.view:
        raise refuse("random() in a materialized view is not supported: a view's rows must be reproducible", node)
    return mp("RANDOM"), T.DOUBLE


def _pi(b: Binder, node: exp.Expression) -> Typed:
    return _call("PI"), T.DOUBLE


register(
    Function("abs", _abs, (exp.Abs,), forms=("NUMERIC_ABS",)),
    Function("ceil", _ceil_floor, (exp.Ceil,), aliases=("ceiling",)),
    Function("floor", _ceil_floor, (exp.Floor,)),
    Function("round", _round, (exp.Round,), forms=("ROUND_EVEN",)),
    Function("trunc", _trunc, (exp.Trunc,)),
    Function("sign", _sign, (exp.Sign,)),
    Function("sqrt", _double_fn("SQRT"), (exp.Sqrt,)),
    Function("cbrt", _double_fn("CBRT"), (exp.Cbrt,)),
    Function("exp", _double_fn("EXP"), (exp.Exp,)),
    Function("ln", _double_fn("LN"), (exp.Ln,)),
    Function("pi", _pi, (exp.Pi,)),
    Function("random", _random, (exp.Rand,), forms=("RANDOM",)),
)

"""INTERVAL values with PostgreSQL's meaning: arithmetic, comparison, keys, text output, EXTRACT and
the ``justify_*`` functions.

**Representation.** An interval is PostgreSQL's three fields, kept apart as PostgreSQL keeps them
(``INTERVAL '1 mon'``, ``'30 days'`` and ``'720:00:00'`` are three values): in both engines, in a
table's log and in state it is the struct ``(months INT, days INT, micros BIGINT)`` — Arrow
``struct<months: int32, days: int32, micros: int64>``, :data:`~millpond.sql.semantics.types.INTERVAL_FIELDS`.
Spark's own interval types cannot hold it (a DayTimeIntervalType has no days apart from hours, so
``21 days 23:59:59`` would come back as ``527:59:59``; months cannot mix with days). A query's
result shows an interval as Arrow ``month_day_nano_interval`` (:mod:`millpond.serve.query`).
Internally ``MP_IV(months, days, micros)`` builds one (NULL when its fields are) and
``MP_IV_PART(iv, 'days')`` reads a field (:mod:`millpond.engine.expressions`); every rule here is
plain integer and double arithmetic over the fields, the same SQL in both engines.

**Equality.** PostgreSQL compares intervals by their span, a month being 30 days and a day 24 hours
(``'24 hours' = '1 day'``, ``'1 mon' = '30 days'``): every comparison compares :func:`span` s, in
microseconds (``=``, ``<``, ``BETWEEN``, ``IN``, ``CASE``, joins, ``ORDER BY``). The engines' own
hashing and equality (group keys, state keys, joins) compare the struct field by field, so where
intervals are keys millpond hands them the span instead:

- ``GROUP BY d`` groups by ``span(d)`` and shows, for ``d``, one member of the group: the MIN of
  a sort key (a text ordered by span, then months, then days), so the member with the fewest
  months, then days (PostgreSQL shows the first member it met: which one is not defined).
  ``SELECT DISTINCT`` without aggregates is grouped so too (:mod:`~millpond.sql.semantics.interval_keys`);
- ``MIN``/``MAX`` take the extreme sort key: the extreme interval itself;
- ``count(DISTINCT d)`` counts spans, window partitions are spans' :func:`normal` forms;
- ``UNION``/``INTERSECT``/``EXCEPT`` and a ``DISTINCT`` over an aggregation show an interval column
  in its :func:`normal` form (days and time: ``30 days`` for ``1 mon``), equal (``=``) to the rows it
  stands for.

**Limits.** A span is a BIGINT of microseconds: beyond ±292,000 years a comparison or a key
overflows, an error (never a wrong value). ``ORDER BY`` an interval with ``LIMIT`` in a view, ``DISTINCT
ON`` an interval, ``IN (SELECT ...)`` of intervals, ``greatest``/``least``, ``SUM``/``AVG`` of
``DISTINCT`` intervals, aggregates of intervals over a window and INTERVAL primary keys are refused
by name.

    >>> from millpond.engine.expressions import to_duckdb
    >>> to_duckdb(span(constant(1, 2, 3)))
    '2764800000003'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.engine.expressions import is_mp, mp
from millpond.sql.semantics import types as T
from millpond.sql.semantics.types import Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["constant", "value", "make", "parts", "span", "normal", "of_span", "add", "negate", "multiply",
           "divide", "text", "extract", "justify", "ts_diff", "ts_add", "EXTRACT_FIELDS", "JUSTIFY", "DAY"]

DAY = 86_400_000_000  # microseconds
HOUR, MINUTE, SECOND = 3_600_000_000, 60_000_000, 1_000_000
_FIELDS = ("months", "days", "micros")


def _n(v: int | float) -> exp.Expression:
    lit = exp.Literal.number(abs(v))
    return exp.Neg(this=lit) if v < 0 else lit


def _p(e: exp.Expression) -> exp.Expression:
    return e if isinstance(e, (exp.Literal, exp.Column, exp.Paren, exp.Anonymous, exp.Cast)) else exp.Paren(this=e)


def _add(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Paren(this=exp.Add(this=_p(a), expression=_p(b)))


def _sub(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Paren(this=exp.Sub(this=_p(a), expression=_p(b)))


def _mul(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Paren(this=exp.Mul(this=_p(a), expression=_p(b)))


def _div(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """``a / b`` truncated toward zero (integers)."""
    return exp.Paren(this=exp.IntDiv(this=_p(a), expression=_p(b)))


def _mod(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Paren(this=exp.Mod(this=_p(a), expression=_p(b)))


def _big(e: exp.Expression) -> exp.Expression:
    return e if isinstance(e, exp.Literal) else exp.Cast(this=e, to=T.datatype(T.BIGINT))


def _dbl(e: exp.Expression) -> exp.Expression:
    return exp.Cast(this=e, to=T.datatype(T.DOUBLE))


def _case(*branches: tuple[exp.Expression, exp.Expression], default: exp.Expression) -> exp.Expression:
    return exp.Case(ifs=[exp.If(this=c, true=v) for c, v in branches], default=default)


# -- values ---------------------------------------------------------------------------------------
def constant(months: int, days: int, micros: int) -> exp.Expression:
    return mp("IV", _n(months), _n(days), _n(micros))


def make(months: exp.Expression, days: exp.Expression, micros: exp.Expression) -> exp.Expression:
    """The interval of three field expressions (NULL when they are: they are NULL together)."""
    return mp("IV", months, days, micros)


def _literal_int(e: exp.Expression) -> int | None:
    if isinstance(e, exp.Neg):
        inner = _literal_int(e.this)
        return None if inner is None else -inner
    if isinstance(e, exp.Paren):
        return _literal_int(e.this)
    if isinstance(e, exp.Literal) and not e.is_string and e.this.lstrip("-").isdigit():
        return int(e.this)
    return None


def value(node: exp.Expression) -> tuple[int, int, int] | None:
    """The (months, days, microseconds) of a constant interval, or None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if is_mp(node, "IV") or is_mp(node, "INTERVAL"):
        fields = [_literal_int(a) for a in node.expressions]
        if all(f is not None for f in fields):
            return tuple(fields)  # type: ignore[return-value]
    return None


def parts(node: exp.Expression) -> tuple[exp.Expression, exp.Expression, exp.Expression]:
    """Expressions of the three fields of an interval: a constant's numbers, the arguments of an
    interval built here (``MP_IV``), else ``MP_IV_PART`` reads of it (a column, a key, a CASE...)."""
    while isinstance(node, exp.Paren):
        node = node.this
    known = value(node)
    if known is not None:
        return _n(known[0]), _n(known[1]), _n(known[2])
    if is_mp(node, "IV"):
        return tuple(a.copy() for a in node.expressions)  # type: ignore[return-value]
    return tuple(mp("IV_PART", node.copy(), exp.Literal.string(f)) for f in _FIELDS)  # type: ignore[return-value]


def span(node: exp.Expression) -> exp.Expression:
    """The interval as microseconds, a month being 30 days (PostgreSQL's comparison order), a BIGINT."""
    known = value(node)
    if known is not None:
        m, d, u = known
        return _n((m * 30 + d) * DAY + u)
    m, d, u = parts(node)
    return _add(_mul(_add(_mul(_big(m), _n(30)), d), _n(DAY)), u)


def of_span(micros: exp.Expression) -> exp.Expression:
    """The normal form of a span of microseconds: whole days and the time under a day, same signs
    (``MP_IV_KEY(span)``)."""
    known = _literal_int(micros)
    if known is not None:
        days = abs(known) // DAY * (1 if known >= 0 else -1)
        return constant(0, days, known - days * DAY)
    return mp("IV_KEY", micros)


def normal(node: exp.Expression) -> exp.Expression:
    """The key of an interval: equal intervals (``'24 hours'``, ``'1 day'``) have equal keys."""
    return of_span(span(node))


# -- arithmetic -----------------------------------------------------------------------------------
def add(a: exp.Expression, b: exp.Expression, *, sign: int = 1) -> exp.Expression:
    """``a + b`` (``a - b`` with ``sign=-1``): field by field, as PostgreSQL adds intervals."""
    va, vb = value(a), value(b)
    if va is not None and vb is not None:
        return constant(*(x + sign * y for x, y in zip(va, vb)))
    op = _add if sign > 0 else _sub
    return make(*(op(x, y) for x, y in zip(parts(a), parts(b))))


def negate(a: exp.Expression) -> exp.Expression:
    known = value(a)
    if known is not None:
        return constant(*(-x for x in known))
    return make(*(exp.Neg(this=_p(x)) for x in parts(a)))


def _rint(x: exp.Expression) -> exp.Expression:
    return mp("ROUND_EVEN", x)


def _trunc(x: exp.Expression) -> exp.Expression:
    return mp("TRUNC_INT", x)


def _float(text_: str) -> exp.Expression:
    """A constant in a double precision expression (``1000000.0``: read as a double next to one,
    and, as a divisor, seen to be nonzero by the DuckDB generator)."""
    return exp.Literal.number(text_)


def _tsround(x: exp.Expression) -> exp.Expression:
    """PostgreSQL's TSROUND: rounded (half to even) to 6 digits after the point, as a double."""
    return exp.Paren(this=exp.Div(this=_rint(_mul(x, _float("1000000.0"))), expression=_float("1000000.0")))


def _scaled(a: exp.Expression, factor: exp.Expression, op: type) -> exp.Expression:
    """PostgreSQL 15's interval_mul (``op`` Mul) and interval_div (``op`` Div) with a double
    ``factor``: the months and days scaled and truncated, their fractions cascaded down to days and
    seconds (rounded to microseconds), then the time scaled and rounded half to even."""
    m, d, u = (_dbl(x) for x in parts(a))

    def scale(x: exp.Expression) -> exp.Expression:
        return exp.Paren(this=op(this=_p(x.copy()), expression=_p(factor.copy())))
    months, days = _trunc(scale(m)), _trunc(scale(d))
    month_days = _tsround(_mul(_sub(scale(m), _dbl(months.copy())), _dbl(_n(30))))
    seconds = _tsround(_mul(_sub(_add(_sub(scale(d), _dbl(days.copy())), month_days),
                                 _dbl(_trunc(month_days.copy()))), _dbl(_n(86400))))
    carry = _trunc(exp.Paren(this=exp.Div(this=seconds, expression=_float("86400.0"))))
    seconds_left = _sub(seconds.copy(), _dbl(_mul(carry, _n(86400))))
    out_days = _add(_add(days, carry.copy()), _trunc(month_days.copy()))
    out_micros = _trunc(_rint(_add(scale(u), _mul(seconds_left, _dbl(_n(1_000_000))))))
    return make(months, out_days, out_micros)


def multiply(a: exp.Expression, factor: exp.Expression) -> exp.Expression:
    """``a * factor`` (``factor`` a double precision expression)."""
    return _scaled(a, factor, exp.Mul)


def divide(a: exp.Expression, factor: exp.Expression) -> exp.Expression:
    """``a / factor``; a zero factor is PostgreSQL's ``division by zero``."""
    check = mp("ERROR", exp.Literal.string("division by zero"))
    guarded = _case((exp.EQ(this=factor.copy(), expression=_dbl(_n(0))), _dbl(check)), default=factor)
    return _scaled(a, guarded, exp.Div)


# -- timestamps -----------------------------------------------------------------------------------
def ts_diff(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """``a - b`` of two TIMESTAMPs: PostgreSQL's ``justify_hours`` of the difference (days, and the
    time under a day)."""
    diff = _sub(_epoch_us(a), _epoch_us(b))
    return make(_n(0), _div(diff, _n(DAY)), _mod(diff.copy(), _n(DAY)))


def _epoch_us(ts: exp.Expression) -> exp.Expression:
    """A TIMESTAMP's microseconds since 1970 (:func:`millpond.sql.semantics.datetime.field`'s ``epoch_us``)."""
    return mp("FIELD", exp.Literal.string("epoch_us"), ts.copy())


def ts_add(ts: exp.Expression, iv: exp.Expression, *, sign: int = 1) -> exp.Expression:
    """``ts + iv`` of a TIMESTAMP: months first (the day clamped to the month's end), then days and
    time, as PostgreSQL adds them."""
    known = value(iv)
    if known is not None:  # the form plans had before intervals were values (a stored plan stays equal)
        return mp("ADD_INTERVAL", ts, *(exp.Literal.number(sign * p) for p in known))
    fields = parts(iv)
    if sign < 0:
        fields = tuple(exp.Neg(this=_p(f)) for f in fields)
    return mp("TS_ADD", ts, *fields)


# -- text output ----------------------------------------------------------------------------------
def _str(x: exp.Expression) -> exp.Expression:
    return exp.Cast(this=x, to=T.datatype(T.TEXT))


def _cat(*pieces: exp.Expression) -> exp.Expression:
    out = pieces[0]
    for p in pieces[1:]:
        out = exp.DPipe(this=out, expression=p, safe=False)
    return out


def _s(text_: str) -> exp.Expression:
    return exp.Literal.string(text_)


def _abs(x: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="ABS", expressions=[x])


def _two_digits(x: exp.Expression) -> exp.Expression:
    """A non-negative integer with at least two digits (hours may have more)."""
    return _cat(_case((exp.LT(this=x.copy(), expression=_n(10)), _s("0")), default=_s("")), _str(x))


def _unit(v: exp.Expression, unit: str, *, lead: exp.Expression, plus: exp.Expression) -> exp.Expression:
    """PostgreSQL's AddPostgresIntPart: ``[ ][+]<v> <unit>[s]``, or nothing for 0."""
    piece = _cat(_case((lead, _s(" ")), default=_s("")),
                 _case((exp.and_(plus, exp.GT(this=v.copy(), expression=_n(0))), _s("+")), default=_s("")),
                 _str(v.copy()), _s(f" {unit}"),
                 _case((exp.EQ(this=v.copy(), expression=_n(1)), _s("")), default=_s("s")))
    return _case((exp.EQ(this=v.copy(), expression=_n(0)), _s("")), default=piece)


def text(node: exp.Expression) -> exp.Expression:
    """PostgreSQL's text output of an interval (IntervalStyle ``postgres``): ``1 year 2 mons``,
    ``21 days 23:59:59``, ``-1 days +02:00:00``, ``00:00:00``."""
    m, d, u = parts(node)
    year, mon = _div(m, _n(12)), _mod(m.copy(), _n(12))
    zero = _n(0)

    def nonzero(x: exp.Expression) -> exp.Expression:
        return exp.NEQ(this=x.copy(), expression=zero.copy())

    def negative(x: exp.Expression) -> exp.Expression:
        return exp.LT(this=x.copy(), expression=zero.copy())
    # each nonzero field: a space before it unless it is the first; a '+' when the field before
    # it (the nearest nonzero one) was negative
    pieces = [
        _unit(year, "year", lead=exp.false(), plus=exp.false()),
        _unit(mon, "mon", lead=nonzero(year), plus=negative(year)),
        _unit(d, "day", lead=exp.or_(nonzero(year), nonzero(mon)),
              plus=_case((nonzero(mon), negative(mon)), default=negative(year))),
    ]
    dated = exp.or_(nonzero(m), nonzero(d))
    before = _case((nonzero(d), negative(d)), (nonzero(mon), negative(mon)), default=negative(year))
    au = _abs(u)
    fraction = _mod(au.copy(), _n(SECOND))
    clock = _cat(
        _case((dated, _s(" ")), default=_s("")),
        _case((negative(u), _s("-")), (before, _s("+")), default=_s("")),
        _two_digits(_div(au.copy(), _n(HOUR))), _s(":"),
        _two_digits(_mod(_div(au.copy(), _n(MINUTE)), _n(60))), _s(":"),
        _two_digits(_mod(_div(au.copy(), _n(SECOND)), _n(60))),
        _case((nonzero(fraction), _cat(_s("."), mp("TRIM", exp.Anonymous(this="LPAD", expressions=[
            _str(fraction.copy()), _n(6), _s("0")]), _s("0"), _s("TRAILING")))), default=_s("")))
    pieces.append(_case((exp.or_(exp.not_(dated.copy()), nonzero(u)), clock), default=_s("")))
    return _case((exp.Is(this=node.copy(), expression=exp.Null()), exp.Null()), default=_cat(*pieces))


# -- EXTRACT --------------------------------------------------------------------------------------
# field -> PostgreSQL's result scale (EXTRACT(... FROM interval) is numeric)
EXTRACT_FIELDS = {"microseconds": 0, "milliseconds": 3, "second": 6, "minute": 0, "hour": 0, "day": 0, "month": 0,
                  "quarter": 0, "year": 0, "decade": 0, "century": 0, "millennium": 0, "epoch": 6}


def extract(name: str, node: exp.Expression, at: exp.Expression) -> Typed:
    """``EXTRACT(name FROM interval)`` as PostgreSQL 15 computes it from the fields (years and
    months from the months, the clock from the time; the epoch counts a year as 365.25 days and a
    month as 30)."""
    if name not in EXTRACT_FIELDS:
        raise refuse(f'unit "{name}" not supported for type interval (supported: {", ".join(EXTRACT_FIELDS)})', at)
    m, d, u = parts(node)
    year = _div(m, _n(12))
    if name == "epoch":
        days_seconds = _add(_add(_mul(_big(year), _n(31_557_600)), _mul(_big(_mod(m.copy(), _n(12))), _n(2_592_000))),
                            _mul(_big(d), _n(86_400)))
        micros = _add(_mul(days_seconds, _n(1_000_000)), u)
        return _decimal(_micros(micros, 20), 20, 6), T.numeric(20, 6)
    if name in ("second", "milliseconds"):
        scale = EXTRACT_FIELDS[name]
        within = _mod(u, _n(60 * SECOND))
        factor = exp.Literal.number("0.000001" if name == "second" else "0.001")
        out = _mul(exp.Cast(this=within, to=T.datatype(T.numeric(20, 0))), factor)
        return _decimal(out, 20, scale), T.numeric(20, scale)
    out = {
        "microseconds": lambda: _mod(u, _n(60 * SECOND)), "minute": lambda: _mod(_div(u, _n(MINUTE)), _n(60)),
        "hour": lambda: _div(u, _n(HOUR)), "day": lambda: d, "month": lambda: _mod(m, _n(12)),
        "quarter": lambda: _add(_div(_mod(m, _n(12)), _n(3)), _n(1)), "year": lambda: year,
        "decade": lambda: _div(year, _n(10)), "century": lambda: _div(year, _n(100)),
        "millennium": lambda: _div(year, _n(1000)),
    }[name]()
    return _decimal(out, 20, 0), T.numeric(20, 0)


def _micros(x: exp.Expression, digits: int) -> exp.Expression:
    return _mul(exp.Cast(this=x, to=T.datatype(T.numeric(digits, 0))), exp.Literal.number("0.000001"))


def _decimal(node: exp.Expression, precision: int, scale: int) -> exp.Expression:
    return exp.Cast(this=node, to=T.datatype(T.numeric(precision, scale)))


# -- justify_hours, justify_days, justify_interval ------------------------------------------------
# PostgreSQL carries whole days (months) up, then borrows so that the fields share one sign: the
# result is the one decomposition of the total with fields of its sign, each under its unit (trunc
# division and remainder give it).
def _justify_hours(node: exp.Expression) -> exp.Expression:
    m, d, u = parts(node)
    total = _add(_mul(_big(d), _n(DAY)), u)
    return make(m, _div(total, _n(DAY)), _mod(total.copy(), _n(DAY)))


def _justify_days(node: exp.Expression) -> exp.Expression:
    m, d, u = parts(node)
    total = _add(_mul(_big(m), _n(30)), d)
    return make(_div(total, _n(30)), _mod(total.copy(), _n(30)), u)


def _justify_interval(node: exp.Expression) -> exp.Expression:
    total = span(node)
    month = 30 * DAY
    return make(_div(total, _n(month)), _div(_mod(total.copy(), _n(month)), _n(DAY)), _mod(total.copy(), _n(DAY)))


JUSTIFY = {"justify_hours": _justify_hours, "justify_days": _justify_days, "justify_interval": _justify_interval}


def justify(b: Binder, node: exp.Expression) -> Typed:
    """``justify_hours``, ``justify_days``, ``justify_interval`` (a call sqlglot knows, or by name)."""
    if isinstance(node, exp.Anonymous):
        name, args = str(node.this).lower(), list(node.expressions)
    else:
        name, args = node.sql_name().lower(), [node.this]
    if len(args) != 1 or args[0] is None:
        raise refuse(f"{name} takes one interval", node)
    arg, t = b.value(args[0])
    if t.untyped:
        arg, t = b.cast_to((arg, t), T.INTERVAL, node), T.INTERVAL
    if t.kind != "interval":
        raise refuse(f"function {name}({t}) does not exist", node)
    return JUSTIFY[name](arg), T.INTERVAL

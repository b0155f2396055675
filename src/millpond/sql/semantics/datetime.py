"""Dates, timestamps and intervals: arithmetic, ``EXTRACT``/``date_part``, ``date_trunc`` and
``to_char``, with PostgreSQL's fields, types and patterns.

Date parts are built from integer fields (``MP_FIELD('dow', ts)``: 0 = Sunday, as PostgreSQL), the
only part each engine spells its own way; ``to_char`` is a concatenation of such fields, padded and
named in SQL both engines share. A TIMESTAMPTZ is a UTC instant; its fields, truncation and text are
those of its UTC wall clock (millpond's TimeZone is UTC, PostgreSQL's session TimeZone). Interval
values are :mod:`~millpond.sql.semantics.intervals`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.engine.expressions import mp
from millpond.sql.semantics import intervals, types as T
from millpond.sql.semantics.casts import cast as _cast, literal_as
from millpond.sql.semantics.constants import interval_node, interval_parts, parse_constant
from millpond.sql.semantics.intervals import JUSTIFY, justify
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.to_char import TO_CHAR_PATTERNS, to_char
from millpond.sql.semantics.types import Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["temporal_arith", "to_char", "date_part", "CONSTRUCTS", "EXTRACT_FIELDS", "TRUNC_UNITS", "TO_CHAR_PATTERNS"]


def _lit(n: int | str) -> exp.Literal:
    return exp.Literal.string(n) if isinstance(n, str) else exp.Literal.number(n)


def _int_div(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Cast(this=exp.IntDiv(this=exp.Paren(this=a) if isinstance(a, exp.Binary) else a, expression=b),
                    to=T.datatype(T.BIGINT))


def field(name: str, ts: exp.Expression) -> exp.Expression:
    """An integer field of a TIMESTAMP, spelled per engine by the generator."""
    return mp("FIELD", exp.Literal.string(name), ts.copy())


# -- arithmetic -----------------------------------------------------------------------------------
_DATETIME = ("date", "timestamp", "timestamp with time zone")


def temporal_arith(b: Binder, op: str, left: Typed, right: Typed, at: exp.Expression) -> Typed:
    """``left op right`` where one side is a date, a timestamp or an interval."""
    (l, lt), (r, rt) = left, right
    if lt.untyped and rt.kind in _DATETIME and op == "-":
        l, lt = literal_as(l, rt, at), rt
    if rt.untyped:  # ts + '1 day', d - '2024-01-01', iv * '2'
        if lt.kind == "interval":
            want = T.INTERVAL if op in "+-" else T.DOUBLE
        else:
            want = T.INTERVAL if lt.kind in ("timestamp", "timestamp with time zone") or op == "+" else lt
        r, rt = literal_as(r, want, at), want
    if lt.untyped:
        l, lt = literal_as(l, T.INTERVAL, at), T.INTERVAL
    if lt.kind == "interval" and rt.temporal and op == "+":
        (l, lt), (r, rt) = (r, rt), (l, lt)
    if lt.kind == "date" and rt.integer and op in "+-":
        cls = exp.Add if op == "+" else exp.Sub
        return cls(this=l, expression=r), T.DATE
    if lt.integer and rt.kind == "date" and op == "+":
        return exp.Add(this=r, expression=l), T.DATE
    if lt.kind == rt.kind == "date" and op == "-":
        return mp("DATE_DIFF", l, r), T.INTEGER
    if lt.kind == "timestamp with time zone" and rt.kind == "interval" and op in "+-":
        # days and months counted in millpond's TimeZone (UTC): on the UTC wall clock
        ts = _cast(l, lt, T.TIMESTAMP, at)
        out = intervals.ts_add(ts, r, sign=1 if op == "+" else -1)
        return _cast(out, T.TIMESTAMP, T.TIMESTAMPTZ, at), T.TIMESTAMPTZ
    if lt.kind in ("date", "timestamp") and rt.kind == "interval" and op in "+-":
        ts = _cast(l, lt, T.TIMESTAMP, at)
        return intervals.ts_add(ts, r, sign=1 if op == "+" else -1), T.TIMESTAMP
    if lt.kind in _DATETIME and rt.kind in _DATETIME and op == "-":
        return intervals.ts_diff(_cast(l, lt, T.TIMESTAMP, at), _cast(r, rt, T.TIMESTAMP, at)), T.INTERVAL
    if lt.kind == rt.kind == "interval" and op in "+-":
        return intervals.add(l, r, sign=1 if op == "+" else -1), T.INTERVAL
    if lt.number and rt.kind == "interval" and op == "*":
        (l, lt), (r, rt) = (r, rt), (l, lt)
    if lt.kind == "interval" and (rt.number or rt.kind == "null") and op in "*/":
        factor = _cast(r, rt, T.DOUBLE, at) if rt.number else exp.Cast(this=r, to=T.datatype(T.DOUBLE))
        out = intervals.multiply(l, factor) if op == "*" else intervals.divide(l, factor)
        return out, T.INTERVAL
    raise refuse(f"operator is not supported: {lt} {op} {rt}", at)


def _interval(b: Binder, node: exp.Interval) -> Typed:
    text = node.this.name if node.this is not None else ""
    unit = node.args.get("unit")
    if unit is not None:
        if isinstance(unit, exp.IntervalSpan):
            raise refuse("INTERVAL '...' <unit> TO <unit> is not supported; write INTERVAL '1 day 02:00:00'", node)
        text = f"{text} {unit.name}"
    return interval_node(*interval_parts(text, node)), T.INTERVAL


# -- EXTRACT / date_part --------------------------------------------------------------------------
# field -> (PostgreSQL result scale, needs a time of day)
EXTRACT_FIELDS: dict[str, tuple[int, bool]] = {
    "year": (0, False), "month": (0, False), "day": (0, False), "hour": (0, True), "minute": (0, True),
    "second": (6, True), "milliseconds": (3, True), "microseconds": (0, True), "dow": (0, False),
    "isodow": (0, False), "doy": (0, False), "week": (0, False), "quarter": (0, False), "isoyear": (0, False),
    "decade": (0, False), "century": (0, False), "millennium": (0, False), "epoch": (6, False),
}
_FIELD_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour", "minutes": "minute",
                  "seconds": "second", "millisecond": "milliseconds", "microsecond": "microseconds",
                  "weeks": "week", "dayofweek": "dow", "dayofyear": "doy", "mon": "month", "mons": "month",
                  "y": "year", "d": "day", "h": "hour", "m": "minute", "s": "second", "ms": "milliseconds",
                  "us": "microseconds", "decades": "decade", "centuries": "century", "millenniums": "millennium",
                  "quarters": "quarter"}


def _field_name(node: exp.Expression, at: exp.Expression) -> str:
    name = (node.name if isinstance(node, (exp.Var, exp.Literal, exp.Column)) else node.sql()).lower()
    name = _FIELD_ALIASES.get(name, name)
    if name not in EXTRACT_FIELDS:
        raise refuse(f"EXTRACT/date_part field {name!r} is not supported (supported: "
                      f"{', '.join(EXTRACT_FIELDS)})", at)
    return name


def extract_numeric(name: str, value: Typed, at: exp.Expression) -> Typed:
    """``EXTRACT(name FROM value)`` as PostgreSQL's numeric."""
    node, t = value
    scale, needs_time = EXTRACT_FIELDS[name]
    if t.kind == "interval":
        return intervals.extract(name, node, at)
    if t.kind == "timestamp with time zone":  # its fields in millpond's TimeZone, UTC
        node, t = _cast(node, t, T.TIMESTAMP, at), T.TIMESTAMP
    if t.kind == "date":
        if needs_time:
            raise refuse(f'unit "{name}" not supported for type date', at)
        scale = 0
    elif t.kind != "timestamp":
        raise refuse(f"EXTRACT from {t} is not supported (from date, timestamp or interval)", at)
    ts = _cast(node, t, T.TIMESTAMP, at)
    if name == "second":
        out = _micros_as_decimal(field("second_micros", ts))
        return _decimal(out, 8, scale), T.numeric(8, scale)
    if name == "milliseconds":
        out = exp.Mul(this=exp.Cast(this=field("second_micros", ts), to=T.datatype(T.numeric(8, 0))),
                      expression=exp.Literal.number("0.001"))
        return _decimal(out, 11, 3), T.numeric(11, 3)
    if name == "microseconds":
        return _decimal(field("second_micros", ts), 20, 0), T.numeric(20, 0)
    if name == "epoch":
        if t.kind == "date":
            days = exp.Mul(this=exp.Paren(this=mp("DATE_DIFF", node, exp.Cast(
                this=exp.Literal.string("1970-01-01"), to=T.datatype(T.DATE)))), expression=exp.Literal.number(86400))
            return _decimal(days, 20, 0), T.numeric(20, 0)
        return _decimal(_micros_as_decimal(field("epoch_us", ts)), 20, 6), T.numeric(20, 6)
    year = field("year", ts)
    if name == "decade":
        out: exp.Expression = _int_div(year, exp.Literal.number(10))
    elif name == "century":
        out = _int_div(exp.Add(this=year, expression=exp.Literal.number(99)), exp.Literal.number(100))
    elif name == "millennium":
        out = _int_div(exp.Add(this=year, expression=exp.Literal.number(999)), exp.Literal.number(1000))
    else:
        out = field(name, ts)
    return _decimal(out, 20, 0), T.numeric(20, 0)


def _micros_as_decimal(micros: exp.Expression) -> exp.Expression:
    """A count of microseconds as exact seconds (a product: a quotient would be approximate)."""
    return exp.Mul(this=exp.Cast(this=micros, to=T.datatype(T.numeric(20, 0))),
                   expression=exp.Literal.number("0.000001"))


def _decimal(node: exp.Expression, precision: int, scale: int) -> exp.Expression:
    return exp.Cast(this=node, to=T.datatype(T.numeric(precision, scale)))


def _extract(b: Binder, node: exp.Extract) -> Typed:
    name = _field_name(node.this, node)
    return extract_numeric(name, b.value(node.expression), node)


def date_part(b: Binder, node: exp.Expression, args: list[exp.Expression]) -> Typed:
    if len(args) != 2 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
        raise refuse("date_part takes a constant field name and a date, timestamp or interval", node)
    name = _field_name(args[0], node)
    out, _ = extract_numeric(name, b.value(args[1]), node)
    return exp.Cast(this=out, to=T.datatype(T.DOUBLE)), T.DOUBLE


# -- date_trunc -----------------------------------------------------------------------------------
TRUNC_UNITS = ("microseconds", "milliseconds", "second", "minute", "hour", "day", "week", "month", "quarter", "year")


def _date_trunc(b: Binder, node: exp.Expression) -> Typed:
    unit = node.args.get("unit")
    name = (unit.name if unit is not None else "").lower()
    name = {"microsecond": "microseconds", "millisecond": "milliseconds", "seconds": "second",
            "minutes": "minute", "hours": "hour", "days": "day", "weeks": "week", "months": "month",
            "quarters": "quarter", "years": "year"}.get(name, name)
    if name not in TRUNC_UNITS:
        raise refuse(f"date_trunc unit {name!r} is not supported (supported: {', '.join(TRUNC_UNITS)})", node)
    if node.args.get("zone") is not None:
        raise refuse("date_trunc with a time zone argument is not supported (millpond's TimeZone is UTC)", node)
    value, t = b.value(node.this)
    if t.kind not in _DATETIME:
        raise refuse(f"date_trunc of {t} is not supported (of a timestamp, a timestamptz or a date)", node)
    if t.kind == "timestamp":
        return mp("DATE_TRUNC", exp.Literal.string(name), value), T.TIMESTAMP
    # a date is a timestamptz here (PostgreSQL's choice of date_trunc); both truncate in UTC
    ts = _cast(value, t, T.TIMESTAMP, node)
    return _cast(mp("DATE_TRUNC", exp.Literal.string(name), ts), T.TIMESTAMP, T.TIMESTAMPTZ, node), T.TIMESTAMPTZ


# -- date_bin -------------------------------------------------------------------------------------
def _date_bin(b: Binder, node: exp.DateBin) -> Typed:
    """``date_bin(stride, ts[, origin])``: the start of the stride-long bin ``ts`` falls in, bins
    aligned to ``origin`` (PostgreSQL requires it; millpond defaults it to the Unix epoch, as TUMBLE
    and HOP align). The stride is a constant without months, as PostgreSQL requires."""
    stride, st = b.value(node.this)
    known = intervals.value(stride) if st.kind == "interval" else None
    if known is None:
        raise refuse("date_bin's stride must be an INTERVAL constant", node)
    months, days, micros = known
    if months:
        raise refuse("timestamps cannot be binned into intervals containing months or years", node)
    size = days * 86_400_000_000 + micros
    if size <= 0:
        raise refuse("stride must be greater than zero", node)
    value, t = b.value(node.expression)
    if t.kind not in ("timestamp", "timestamp with time zone"):
        raise refuse(f"function date_bin(interval, {t}) does not exist (it bins a timestamp or a timestamptz)", node)
    origin_arg = node.args.get("origin") or node.args.get("unit")  # sqlglot reads PostgreSQL's third argument as unit
    if origin_arg is None:
        origin: exp.Expression = parse_constant("1970-01-01 00:00:00", T.TIMESTAMP, node)
    else:
        origin = _cast(*b.value(origin_arg), T.TIMESTAMP if t.kind == "timestamp" else T.TIMESTAMPTZ, node)
        if t.kind != "timestamp":
            origin = _cast(origin, T.TIMESTAMPTZ, T.TIMESTAMP, node)
    ts = value if t.kind == "timestamp" else _cast(value, t, T.TIMESTAMP, node)  # UTC wall clock
    diff = exp.Paren(this=exp.Sub(this=field("epoch_us", ts), expression=field("epoch_us", origin.copy())))
    below = exp.Mod(this=exp.Paren(this=exp.Add(this=exp.Mod(this=diff, expression=_lit(size)), expression=_lit(size))),
                    expression=_lit(size))  # the floor's remainder, also for a time before the origin
    start = mp("TS_ADD", origin, _lit(0), _lit(0), exp.Paren(this=exp.Sub(this=diff.copy(), expression=below)))
    if t.kind == "timestamp":
        return start, T.TIMESTAMP
    return _cast(start, T.TIMESTAMP, T.TIMESTAMPTZ, node), T.TIMESTAMPTZ


# -- current date and time ------------------------------------------------------------------------
def _now(b: Binder, node: exp.Expression) -> Typed:
    if b.view:
        raise refuse(f"{node.sql('postgres')} in a materialized view is not supported: each row would keep the "
                      "time of the epoch that computed it", node)
    if isinstance(node, exp.CurrentDate):
        return node, T.DATE
    return exp.CurrentTimestamp(), T.TIMESTAMPTZ


register(
    Function("extract", _extract, (exp.Extract,), forms=("FIELD",)),
    Function("date_part", lambda b, node: date_part(b, node, list(node.expressions)), forms=("FIELD",)),
    Function("date_trunc", _date_trunc, (exp.TimestampTrunc, exp.DateTrunc), forms=("DATE_TRUNC",)),
    Function("date_bin", _date_bin, (exp.DateBin,), forms=("TS_ADD",)),
    Function("to_char", to_char, (exp.TimeToStr,), forms=("FIELD", "DATE_DIFF")),
    Function("now", _now, (exp.CurrentTimestamp,), aliases=("current_timestamp",)),
    Function("current_date", _now, (exp.CurrentDate,)),
    *(Function(name, justify, tuple(getattr(exp, c) for c in [name.title().replace("_", "")] if hasattr(exp, c)))
      for name in JUSTIFY),
)
CONSTRUCTS = {exp.Interval: _interval}

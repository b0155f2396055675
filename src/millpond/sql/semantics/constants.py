"""String constants read as typed values, by PostgreSQL's input rules, when the query is bound:
``'2024-03-05'::date``, ``'t'::boolean``, ``DATE '...'``, ``INTERVAL '1 day 02:00'``,
``TIMESTAMPTZ '2001-01-01 18:00:00+02'`` (an instant: read in millpond's TimeZone, UTC, when it
names no offset).

A constant becomes a literal both engines read alike (an ISO date or timestamp, a plain decimal),
so the engines' own, different string parsers never see PostgreSQL's input syntax.

    >>> interval_parts("1 day 02:00:00")
    (0, 1, 7200000000)
    >>> interval_parts("1.5 months")
    (1, 15, 0)
"""

from __future__ import annotations

import math
import re
from datetime import date
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from sqlglot import exp

from millpond.sql.semantics import intervals, types as T
from millpond.sql.semantics.types import SqlType, refuse

__all__ = ["parse_constant", "bytea_value", "interval_parts", "interval_node", "interval_value", "MICROS_PER_DAY"]

MICROS_PER_DAY = 86_400_000_000


def _q(text: str) -> str:
    return f'"{text}"'  # PostgreSQL quotes the input it could not read so


def parse_constant(text: str, target: SqlType, at: exp.Expression) -> exp.Expression:
    """The string constant ``text`` as a value of ``target``."""
    s = text.strip()
    kind = target.kind
    if target.integer:
        if not re.fullmatch(r"[+-]?\d+", s):
            raise refuse(f"invalid input syntax for type {kind}: {_q(text)}", at, sqlstate="22P02")
        n = int(s)
        bits = {"smallint": 15, "integer": 31, "bigint": 63}[kind]
        if not -(2**bits) <= n < 2**bits:
            raise refuse(f"value {_q(text)} is out of range for type {kind}", at, sqlstate="22003")
        return exp.Cast(this=exp.Literal.number(n), to=T.datatype(target))
    if target.decimal:
        try:
            d = Decimal(s)
        except InvalidOperation:
            raise refuse(f"invalid input syntax for type numeric: {_q(text)}", at, sqlstate="22P02") from None
        if not d.is_finite():
            raise refuse("NUMERIC NaN and Infinity are not supported (Spark and DuckDB decimals have no such "
                         "values); use double precision", at)
        d = d.quantize(Decimal(1).scaleb(-target.scale), rounding=ROUND_HALF_UP)
        if abs(d) >= Decimal(10) ** (target.precision - target.scale):
            raise refuse(f"numeric field overflow: {text!r} does not fit {target}", at)
        return exp.Cast(this=exp.Literal.number(format(d, "f")), to=T.datatype(target))
    if target.float:
        low = s.lower()
        special = {"nan": "NaN", "infinity": "Infinity", "+infinity": "Infinity", "-infinity": "-Infinity",
                   "inf": "Infinity", "+inf": "Infinity", "-inf": "-Infinity"}
        if low in special:
            return exp.Cast(this=exp.Literal.string(special[low]), to=T.datatype(target))
        try:
            value = float(s)
        except ValueError:
            raise refuse(f"invalid input syntax for type {kind}: {_q(text)}", at, sqlstate="22P02") from None
        if math.isinf(value):
            raise refuse(f"{_q(text)} is out of range for type {kind}", at, sqlstate="22003")
        return exp.Cast(this=exp.Literal.string(repr(value)), to=T.datatype(target))
    if kind == "boolean":
        return exp.Boolean(this=_boolean(s, text, at))
    if kind == "date":
        m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", s)
        if not m:
            raise refuse(f"invalid input syntax for type date: {_q(text)} (millpond reads the ISO form YYYY-MM-DD)", at,
                         sqlstate="22007")
        try:
            date(*map(int, m.groups()))
        except ValueError:  # PostgreSQL's words: a month 13, a February 30th
            raise refuse(f"date/time field value out of range: {_q(text)}", at, sqlstate="22008") from None
        return exp.Cast(this=exp.Literal.string("{}-{:02d}-{:02d}".format(*map(int, m.groups()))),
                        to=T.datatype(T.DATE))
    if kind == "timestamp":
        return exp.Cast(this=exp.Literal.string(_timestamp(s, text, at)), to=T.datatype(T.TIMESTAMP))
    if kind == "time without time zone":
        m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?", s)
        if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59 or int(m.group(3) or 0) > 59:
            raise refuse(f"invalid input syntax for type time: {_q(text)} (use HH:MM[:SS[.ffffff]])", at, sqlstate="22007")
        h, mi, sec, frac = m.groups()
        value = f"{int(h):02d}:{int(mi):02d}:{int(sec or 0):02d}" + (f".{frac.ljust(6, '0')}" if frac else "")
        return exp.Cast(this=exp.Literal.string(value), to=T.datatype(T.TIME))
    if kind == "timestamp with time zone":
        return exp.Cast(this=exp.Literal.string(_timestamptz(s, text, at)), to=T.datatype(T.TIMESTAMPTZ))
    if kind == "interval":
        return interval_node(*interval_parts(s, at))
    if kind == "text":
        return exp.Literal.string(text)
    if kind == "bytea":  # its bytes as hex digits: UNHEX reads them alike in Spark and DuckDB
        return exp.Unhex(this=exp.Literal.string(bytea_value(text, at).hex()))
    raise refuse(f"constants of type {target} are not supported", at)


def bytea_value(text: str, at: exp.Expression | None = None) -> bytes:
    r"""PostgreSQL's BYTEA input: the hex format (``\x0a0b``) or the escape format (``abc``, ``\\``
    for a backslash, ``\141`` for a byte in octal).

    >>> bytea_value(r"\x0a0B"), bytea_value(r"a\\b\141")
    (b'\n\x0b', b'a\\ba')
    """
    if text.startswith("\\x"):
        digits = re.sub(r"\s", "", text[2:])
        bad = re.search(r"[^0-9a-fA-F]", digits)
        if bad:
            raise refuse(f'invalid hexadecimal digit: "{bad.group()}"', at, sqlstate="22023")
        if len(digits) % 2:
            raise refuse("invalid hexadecimal data: odd number of digits", at, sqlstate="22023")
        return bytes.fromhex(digits)
    out, i = bytearray(), 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif text[i + 1:i + 2] == "\\":
            out.append(92)
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", text[i + 1:i + 4]):
            out.append(int(text[i + 1:i + 4], 8))
            i += 4
        else:
            raise refuse("invalid input syntax for type bytea", at, sqlstate="22P02")
    return bytes(out)


def _boolean(s: str, text: str, at: exp.Expression) -> bool:
    low = s.lower()
    trues, falses = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
    if low and any(t.startswith(low) for t in trues) and not any(f.startswith(low) for f in falses):
        return True
    if low and any(f.startswith(low) for f in falses) and not any(t.startswith(low) for t in trues):
        return False
    raise refuse(f"invalid input syntax for type boolean: {_q(text)}", at, sqlstate="22P02")


def _timestamp(s: str, text: str, at: exp.Expression, kind: str = "timestamp") -> str:
    m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?)?", s)
    if not m:
        raise refuse(f"invalid input syntax for type {kind}: {_q(text)} (millpond reads the ISO form YYYY-MM-DD "
                     f"HH:MM:SS[.ffffff]{'[+HH:MM]' if kind != 'timestamp' else ''})", at, sqlstate="22007")
    y, mo, d, h, mi, sec, frac = m.groups()
    out = f"{int(y):04d}-{int(mo):02d}-{int(d):02d} {int(h or 0):02d}:{int(mi or 0):02d}:{int(sec or 0):02d}"
    return out + (f".{frac.ljust(6, '0')}" if frac else "")


_ZONE = re.compile(r"\s*(?:(z|utc|gmt)|([+-])(\d{1,2})(?::?(\d{2}))?)$", re.IGNORECASE)


def _timestamptz(s: str, text: str, at: exp.Expression) -> str:
    """A TIMESTAMPTZ constant as the UTC instant it names, ``YYYY-MM-DD HH:MM:SS[.ffffff]+00:00``
    (an offset both engines read, whatever their session time zone)."""
    from datetime import datetime, timedelta

    zone = _ZONE.search(s) if not re.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}", s) else None
    offset = timedelta(0)
    if zone is not None:
        s = s[:zone.start()]
        if zone.group(2):
            sign = -1 if zone.group(2) == "-" else 1
            offset = sign * timedelta(hours=int(zone.group(3)), minutes=int(zone.group(4) or 0))
    elif re.search(r"[a-zA-Z]{2,}|/", s.split(" ", 1)[-1] if " " in s else ""):
        raise refuse(f"timestamptz constant {text!r}: a time zone name is not supported; write an offset "
                     "(+02:00) or UTC", at)
    local = datetime.fromisoformat(_timestamp(s.strip(), text, at, "timestamp with time zone"))
    instant = local - offset
    out = instant.strftime("%Y-%m-%d %H:%M:%S") + (f".{instant.microsecond:06d}" if instant.microsecond else "")
    return out + "+00:00"


_UNITS = {  # unit -> (months, days, microseconds) per 1
    "microsecond": (0, 0, 1), "millisecond": (0, 0, 1000), "second": (0, 0, 10**6), "minute": (0, 0, 60 * 10**6),
    "hour": (0, 0, 3600 * 10**6), "day": (0, 1, 0), "week": (0, 7, 0), "month": (1, 0, 0), "year": (12, 0, 0),
    "decade": (120, 0, 0), "century": (1200, 0, 0), "millennium": (12000, 0, 0),
}
_ALIASES = {
    "us": "microsecond", "usec": "microsecond", "usecs": "microsecond", "microseconds": "microsecond",
    "ms": "millisecond", "msec": "millisecond", "msecs": "millisecond", "milliseconds": "millisecond",
    "s": "second", "sec": "second", "secs": "second", "seconds": "second",
    "m": "minute", "min": "minute", "mins": "minute", "minutes": "minute",
    "h": "hour", "hr": "hour", "hrs": "hour", "hours": "hour",
    "d": "day", "days": "day", "w": "week", "weeks": "week",
    "mon": "month", "mons": "month", "months": "month",
    "y": "year", "yr": "year", "yrs": "year", "years": "year", "decades": "decade",
    "centuries": "century", "millennia": "millennium", "millenniums": "millennium",
}


def interval_parts(text: str, at: exp.Expression | None = None) -> tuple[int, int, int]:
    """PostgreSQL's interval input (``'1 day 02:00'``, ``'90 minutes'``, ``'1 year 2 mons'``,
    ``'3 days ago'``) as (months, days, microseconds), fractions spilled down as PostgreSQL does."""
    s = text.strip().lower()
    ago = s.endswith(" ago")
    if ago:
        s = s[:-4].strip()
    months, days, micros = 0, Decimal(0), Decimal(0)
    tokens = s.split()
    i = 0
    if not tokens:
        raise refuse(f"invalid input syntax for type interval: {_q(text)}", at, sqlstate="22007")
    while i < len(tokens):
        tok = tokens[i]
        clock = re.fullmatch(r"([+-]?)(\d+):(\d{1,2})(?::(\d{1,2}(?:\.\d{1,6})?))?", tok)
        if clock:
            sign = -1 if clock.group(1) == "-" else 1
            secs = int(clock.group(2)) * 3600 + int(clock.group(3)) * 60 + Decimal(clock.group(4) or 0)
            micros += sign * secs * 10**6
            i += 1
            continue
        number = re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)", tok)
        if number and i + 1 == len(tokens):  # a number alone: seconds ('90' is 00:01:30)
            micros += Decimal(tok) * 10**6
            i += 1
            continue
        if number and re.fullmatch(r"[+-]?\d+", tok) and re.fullmatch(r"[+-]?\d+:.*", tokens[i + 1]):
            days += int(tok)  # '1 02:00:00': days before a time of day
            i += 1
            continue
        if not number or i + 1 >= len(tokens):
            raise refuse(f"invalid input syntax for type interval: {_q(text)} (use e.g. '1 day 02:00:00', "
                         "'90 minutes', '1 year 2 mons')", at, sqlstate="22007")
        unit = tokens[i + 1].rstrip(",")
        unit = _ALIASES.get(unit, unit)
        if unit not in _UNITS:
            raise refuse(f"invalid input syntax for type interval: {_q(text)} (unknown unit {tokens[i + 1]!r})", at,
                         sqlstate="22007")
        value = Decimal(tok)
        um, ud, uu = _UNITS[unit]
        if um:
            whole = int(value * um)
            months += whole
            days += (value * um - whole) * 30  # PostgreSQL spills a fraction of a month as 30-day days
        elif ud:
            days += value * ud
        else:
            micros += value * uu
        i += 2
    whole_days = int(days)
    micros += (days - whole_days) * MICROS_PER_DAY
    micros_i = int(micros.to_integral_value(rounding=ROUND_HALF_UP))
    sign = -1 if ago else 1
    return sign * months, sign * whole_days, sign * micros_i


def interval_node(months: int, days: int, micros: int) -> exp.Expression:
    return intervals.constant(months, days, micros)


def interval_value(node: exp.Expression) -> tuple[int, int, int] | None:
    """The (months, days, microseconds) of a constant interval node, or None."""
    return intervals.value(node)

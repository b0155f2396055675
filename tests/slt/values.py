"""Values as sqllogictest compares them.

Every engine's answer is first turned into PostgreSQL's text output of each value (None for NULL):
PostgreSQL gives it as is (``COPY … TO STDOUT``), millpond's Arrow values go through
:func:`pg_text`. Then each value is rendered by its column's type letter (:func:`render`), and
rows are sorted as the query's sort mode says (:func:`arrange`).

    >>> [render(pg_text(v), "T") for v in (None, "", True, 2.50, dt.datetime(2024, 3, 5, 0, 7, 9, 100000))]
    ['NULL', '(empty)', 't', '2.5', '2024-03-05 00:07:09.1']
    >>> pg_text(dt.timedelta(days=21, seconds=86399)), pg_text(pa.MonthDayNano([14, -3, 1500000000]))
    ('21 days 23:59:59', '1 year 2 mons -3 days +00:00:01.5')
    >>> [render(t, "R") for t in ("1.5000000000000000", "2", "-0.0001")], render("4.0000000000", "I")
    (['1.500', '2.000', '0.000'], '4')
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from decimal import Decimal, InvalidOperation

import numpy as np
import pyarrow as pa

__all__ = ["pg_text", "interval_text", "arrow_rows", "copy_decode", "copy_encode", "render", "arrange", "values_hash"]

Row = list  # of str | None (PostgreSQL's text of each value, None for NULL)


# -- millpond's values as PostgreSQL prints them ---------------------------------------------------
def _shortest(digits: str, *, precision: int) -> str:
    """PostgreSQL's float output (shortest exact digits): positional when the decimal exponent is
    in [-4, precision), else ``d.ddde+XX`` (``precision`` 15 for float8, 6 for float4)."""
    sign = "-" if digits.startswith("-") else ""
    digits = digits.lstrip("-")
    d = Decimal(digits)
    t = d.as_tuple()
    mantissa = "".join(map(str, t.digits)).rstrip("0") or "0"
    point = len(t.digits) + t.exponent  # digits before the decimal point
    if d == 0:
        return sign + "0"
    e = point - 1
    if -4 <= e < precision:
        return sign + format(d.normalize(), "f")
    body = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{sign}{body}e{'-' if e < 0 else '+'}{abs(e):02d}"


def _float(value: float, *, single: bool) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if single:
        return _shortest(np.format_float_positional(np.float32(value), unique=True, trim="-"), precision=6)
    return _shortest(repr(value), precision=15)


def _timestamp(value: dt.datetime) -> str:
    """``2024-03-05 00:07:09.1``; a time zone's value in UTC with ``+00`` (the oracle's TimeZone)."""
    zone = ""
    if value.tzinfo is not None:
        value, zone = value.astimezone(dt.timezone.utc), "+00"
    out = value.strftime("%Y-%m-%d %H:%M:%S")
    return out + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "") + zone


def interval_text(months: int, days: int, micros: int) -> str:
    """PostgreSQL's interval output (IntervalStyle postgres): ``1 year 2 mons -3 days +04:05:06.5``."""
    parts: list[str] = []
    negative = False  # the last field printed was negative: a positive one after it gets a '+'
    years = int(months / 12)
    for value, unit in ((years, "year"), (months - 12 * years, "mon"), (days, "day")):
        if value:
            parts.append(f"{'+' if parts and negative and value > 0 else ''}{value} {unit}{'' if value == 1 else 's'}")
            negative = value < 0
    if micros or not parts:
        sign = "-" if micros < 0 else ("+" if parts and negative else "")
        seconds, fraction = divmod(abs(micros), 1_000_000)
        hours, rest = divmod(seconds, 3600)
        clock = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
        parts.append(clock + (f".{fraction:06d}".rstrip("0") if fraction else ""))
    return " ".join(parts)


def _duration(value: dt.timedelta) -> str:
    """A duration as PostgreSQL prints ``timestamp - timestamp``: whole days, then the time, with one sign."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    days = int(micros / 86_400_000_000)
    return interval_text(0, days, micros - days * 86_400_000_000)


def pg_text(value: object, arrow_type: pa.DataType | None = None) -> str | None:
    """PostgreSQL's text output of a value millpond returned (None for NULL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return _float(value, single=arrow_type is not None and pa.types.is_float32(arrow_type))
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        return _timestamp(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _duration(value)
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value.months, value.days, value.nanoseconds // 1000)
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return str(value)


def arrow_rows(table: pa.Table) -> list[Row]:
    """The rows of ``table`` as PostgreSQL's text, by column position (names may repeat)."""
    columns = [_nested(table, i) if pa.types.is_nested(col.type) and not _struct_of_scalars_kept(col.type) else
               [pg_text(v, col.type) for v in col.to_pylist()] for i, col in enumerate(table.columns)]
    return [list(r) for r in zip(*columns)] if columns else []


def _struct_of_scalars_kept(t: pa.DataType) -> bool:
    """An interval or a quotient: a struct millpond uses for a scalar PostgreSQL type."""
    return pa.types.is_struct(t) and t.num_fields and t.field(0).name in ("months", "pg_numeric")


def _nested(table: pa.Table, i: int) -> list[str | None]:
    """An array's, record's or map's text as millpond's wire sends it (the PostgreSQL side of a
    record checks it)."""
    from millpond.serve.pgtext import rows

    return [None if r[i] is None else r[i].decode() for r in rows(table)]


# -- PostgreSQL's COPY text format -----------------------------------------------------------------
_UNESCAPE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_ESCAPE = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out, k = [], 0
    while k < len(field):
        c = field[k]
        if c == "\\" and k + 1 < len(field):
            nxt = field[k + 1]
            if nxt in "01234567":
                j = k + 1
                while j < min(len(field), k + 4) and field[j] in "01234567":
                    j += 1
                out.append(chr(int(field[k + 1:j], 8)))
                k = j
                continue
            out.append(_UNESCAPE.get(nxt, nxt))
            k += 2
            continue
        out.append(c)
        k += 1
    return "".join(out)


def copy_decode(line: str) -> Row:
    """One line of ``COPY … TO STDOUT`` (text format): tab-separated, ``\\N`` is NULL."""
    return [None if f == "\\N" else _unescape(f) for f in line.split("\t")]


def copy_encode(row: Row) -> str:
    """One line for ``COPY … FROM STDIN`` (text format)."""
    return "\t".join("\\N" if v is None else "".join(_ESCAPE.get(c, c) for c in v) for v in row)


# -- rendering and sorting -------------------------------------------------------------------------
def _number(text: str) -> Decimal | float | None:
    try:
        return Decimal(text)
    except InvalidOperation:
        low = text.lower()
        return float(low.replace("infinity", "inf")) if low in ("nan", "infinity", "-infinity") else None


def render(text: str | None, letter: str) -> str:
    """A value as the expected block writes it: ``NULL``; ``(empty)`` for an empty string; for
    ``R`` a number with 3 decimals; for ``I`` an integral number as an integer; else the text."""
    if text is None:
        return "NULL"
    if letter in "IR":
        n = _number(text.strip())
        if isinstance(n, float):  # NaN, ±Infinity
            return "NaN" if math.isnan(n) else ("Infinity" if n > 0 else "-Infinity")
        if n is not None and letter == "R":
            out = f"{float(n):.3f}"
            return "0.000" if out == "-0.000" else out
        if n is not None and n == n.to_integral_value():
            return str(int(n))
    return text if text != "" else "(empty)"


def arrange(rows: list[Row], types: str, sort: str) -> list[list[str]]:
    """Render every value, then order as ``sort`` says: ``nosort`` as given, ``rowsort`` rows by
    their rendered values, ``valuesort`` every value on its own (one value per row)."""
    rendered = [[render(v, types[k] if k < len(types) else "T") for k, v in enumerate(r)] for r in rows]
    if sort == "rowsort":
        return sorted(rendered)
    if sort == "valuesort":
        return [[v] for v in sorted(v for r in rendered for v in r)]
    return rendered


def values_hash(rows: list[list[str]]) -> str:
    """sqllogictest's hash of a result: md5 over every value followed by a newline."""
    digest = hashlib.md5()
    for row in rows:
        for value in row:
            digest.update(value.encode() + b"\n")
    return digest.hexdigest()

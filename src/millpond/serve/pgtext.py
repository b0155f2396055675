"""Arrow results as PostgreSQL sends them: each column's type OID and each value's text output
(the wire protocol's text format; :mod:`millpond.pgwire` sends them)."""

from __future__ import annotations

import math
from datetime import date, datetime, time as dtime, timedelta
from decimal import Decimal
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pygwire.messages import FieldDescription

from millpond import jsonb
from millpond.engine.numerics import is_quotient
from millpond.serve.display import quotient_texts, texts

__all__ = ["oid", "ARRAY_OIDS", "fields", "rows", "copy_lines", "column_texts", "nested_text"]


# (test of an Arrow type, the PostgreSQL type's OID), first match wins; anything else is text (25)
_OIDS = [(pa.types.is_boolean, 16), (is_quotient, 1700),
         (lambda t: pa.types.is_int8(t) or pa.types.is_int16(t), 21),
         (pa.types.is_int32, 23), (pa.types.is_integer, 20), (pa.types.is_float32, 700),
         (pa.types.is_floating, 701), (pa.types.is_decimal, 1700), (pa.types.is_date, 1082),
         (lambda t: pa.types.is_timestamp(t) and t.tz is None, 1114), (pa.types.is_timestamp, 1184),
         (pa.types.is_time, 1083), (pa.types.is_interval, 1186),
         (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), 17)]


# an array's OID by its element's: bool, bytea, int2, int4, int8, float4, float8, numeric, text, date,
# time, timestamp, timestamptz, interval (a nested array has its element's array OID, as in PostgreSQL)
ARRAY_OIDS = {16: 1000, 17: 1001, 21: 1005, 23: 1007, 20: 1016, 700: 1021, 701: 1022, 1700: 1231, 25: 1009,
              1082: 1182, 1083: 1183, 1114: 1115, 1184: 1185, 1186: 1187, 3802: 3807}
_RECORD = 2249


def oid(t: pa.DataType) -> int:
    """The OID of the PostgreSQL type of Arrow type ``t`` (a STRUCT is a ``record``; a MAP, which
    PostgreSQL has not, is text)."""
    if pa.types.is_map(t):
        return 25
    if _is_jsonb(t):
        return 3802
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_type
        while pa.types.is_list(inner) or pa.types.is_large_list(inner):
            inner = inner.value_type
        return ARRAY_OIDS.get(oid(inner), 1009)
    if pa.types.is_struct(t) and not is_quotient(t) and not _is_interval(t):
        return _RECORD
    return next((o for test, o in _OIDS if test(t)), 25)


def _is_jsonb(t: pa.DataType) -> bool:
    """A JSONB value: as stored (:data:`millpond.jsonb.STRUCT`) or as a query gives it (``arrow.json``)."""
    return jsonb.is_jsonb(t) or (isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.json")


def _is_interval(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and [t.field(i).name for i in range(t.num_fields)] == ["months", "days", "micros"]


def fields(table: pa.Table, formats: list[int] | None = None) -> list[FieldDescription]:
    """The columns' descriptions; ``formats``: each column's format code (0 text, 1 binary)."""
    return [FieldDescription(name=f.name, type_oid=oid(f.type), type_size=-1, type_modifier=-1,
                             format_code=formats[i] if formats else 0) for i, f in enumerate(table.schema)]


def rows(table: pa.Table) -> Iterable[list[bytes | None]]:
    """Each row's values as PostgreSQL's text output (the binary format, or either per column:
    :func:`millpond.serve.pgbinary.rows`)."""
    return by_row(table.num_rows, [_texts(table.schema.field(i), table.column(i)) for i in range(table.num_columns)])


def by_row(n: int, columns: list[list[bytes | None]]) -> Iterable[list[bytes | None]]:
    """``n`` rows of the values of ``columns`` (each a column's values)."""
    return (list(row) for row in zip(*columns)) if columns else ([] for _ in range(n))


def column_texts(field: pa.Field, column: pa.ChunkedArray) -> list[bytes | None]:
    return _texts(field, column)


def nested_text(t: pa.DataType, v: object) -> str:
    return _nested_text(t, v)


def _texts(field: pa.Field, column: pa.ChunkedArray) -> list[bytes | None]:
    """A column as PostgreSQL's text output of its values (a quotient's at each value's own display
    scale: :mod:`millpond.serve.display`)."""
    t = column.type
    if _is_jsonb(t):
        return [None if v is None else v.encode() for v in jsonb.texts(
            column if jsonb.is_jsonb(t) else column.cast(t.storage_type))]
    if pa.types.is_boolean(t):
        return [None if v is None else (b"t" if v else b"f") for v in column.to_pylist()]
    if pa.types.is_decimal(t):
        return [None if v is None else v.encode() for v in texts(field, column)]
    if is_quotient(t):  # a quotient as stored (SUBSCRIBE): its PostgreSQL text
        return [None if v is None else v.encode() for v in quotient_texts(column).to_pylist()]
    if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        return [None if v is None else v.encode() for v in pc.cast(column, pa.string()).to_pylist()]
    if _nested(t):
        return [None if v is None else _nested_text(t, v).encode() for v in column.to_pylist()]
    if pa.types.is_floating(t):
        single = pa.types.is_float32(t)
        return [None if v is None else float_text(v, single=single).encode() for v in column.to_pylist()]
    return [None if v is None else _text(v).encode() for v in column.to_pylist()]


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t) or (
        pa.types.is_struct(t) and not is_quotient(t) and not _is_interval(t) and not jsonb.is_jsonb(t))


def _nested_text(t: pa.DataType, v: object) -> str:
    """PostgreSQL's text of an array (``{1,2,NULL}``, ``{{1,2},{3,4}}``, ``{"a b","q\\"x"}``) or a
    composite (``(1,"a b",)``); a MAP as RisingWave writes one (``{a:1,b:NULL}``)."""
    if pa.types.is_map(t):
        return "{" + ",".join(f"{_element(t.key_type, k, '{}:,')}:{_element(t.item_type, x, '{}:,')}" for k, x in v) + "}"
    if pa.types.is_struct(t):
        parts = [_element(t.field(i).type, v[t.field(i).name], '(),', null="") for i in range(t.num_fields)]
        return "(" + ",".join(parts) + ")"
    return "{" + ",".join(_element(t.value_type, x, "{},") for x in v) + "}"


def _element(t: pa.DataType, v: object, special: str, null: str = "NULL") -> str:
    """One element inside an array's (composite's) text: quoted when empty or holding a special
    character, whitespace, a quote or a backslash (and ``NULL`` quoted in an array)."""
    if v is None:
        return null
    if _nested(t) and not pa.types.is_struct(t) and not pa.types.is_map(t) and "{" in special:
        return _nested_text(t, v)  # an array inside an array: as it is
    if pa.types.is_boolean(t):
        text = "t" if v else "f"
    elif jsonb.is_jsonb(t):
        text = v[jsonb.FIELD]
    elif _nested(t):
        text = _nested_text(t, v)
    else:
        text = _text(v)
    if text == "" or text.upper() == "NULL" or any(c in text for c in special + '"\\ \t\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def float_text(v: float, *, single: bool = False) -> str:
    """PostgreSQL's text of a ``double precision`` (``single``: a ``real``): the shortest digits
    that read back as the value, in exponent form below 1e-4 or from 1e15 (1e6 for a real) on, and
    no ``.0`` on a whole number (``3``, ``1e+15``, ``1.6777216e+07``, ``-0``).

    >>> [float_text(x) for x in (3.0, 1e15, 123456789012345.6, 1e-05, -0.0, 100 / 3)]
    ['3', '1e+15', '123456789012345.6', '1e-05', '-0', '33.333333333333336']
    """
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    mantissa, exponent = np.format_float_scientific(np.float32(v) if single else np.float64(v), unique=True,
                                                    trim="-").split("e")
    x = int(exponent)
    if x < -4 or x >= (6 if single else 15):
        return f"{mantissa}e{'-' if x < 0 else '+'}{abs(x):02d}"
    sign, digits = ("-" if mantissa.startswith("-") else ""), mantissa.lstrip("-").replace(".", "")
    whole, fraction = (digits[:x + 1].ljust(x + 1, "0"), digits[x + 1:]) if x >= 0 else ("0", "0" * (-x - 1) + digits)
    return sign + whole + ("." + fraction if fraction else "")


def _text(v: object) -> str:
    if isinstance(v, float):
        return float_text(v)
    if isinstance(v, datetime):  # PostgreSQL prints a fraction of a second without trailing zeros
        text = v.replace(tzinfo=None, microsecond=0).isoformat(sep=" ") + _fraction(v.microsecond)
        return text + "+00" if v.tzinfo is not None else text
    if isinstance(v, dtime):
        return v.replace(microsecond=0).isoformat() + _fraction(v.microsecond)
    if isinstance(v, (date, Decimal)):
        return str(v)
    if isinstance(v, timedelta):
        return _interval(0, v.days, v.seconds * 1_000_000 + v.microseconds)
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if hasattr(v, "months") and hasattr(v, "nanoseconds"):  # pyarrow's MonthDayNano
        return _interval(v.months, v.days, v.nanoseconds // 1000)
    return str(v)


def _fraction(micros: int) -> str:
    return f".{micros:06d}".rstrip("0") if micros else ""


def _interval(months: int, days: int, micros: int) -> str:
    """PostgreSQL's ``IntervalStyle = postgres`` text of an interval."""
    parts = []
    years, months = divmod(months, 12) if months >= 0 else (-((-months) // 12), -((-months) % 12))
    for n, unit in ((years, "year"), (months, "mon"), (days, "day")):
        if n:
            parts.append(f"{n} {unit}{'s' if abs(n) != 1 else ''}")
    if micros or not parts:
        sign = "-" if micros < 0 else ""
        micros = abs(micros)
        h, rest = divmod(micros, 3_600_000_000)
        m, rest = divmod(rest, 60_000_000)
        s, us = divmod(rest, 1_000_000)
        parts.append(f"{sign}{h:02d}:{m:02d}:{s:02d}" + (f".{us:06d}".rstrip("0") if us else ""))
    return " ".join(parts)


def copy_lines(table: pa.Table) -> list[bytes]:
    """Rows in ``COPY ... TO STDOUT``'s text format: tab-separated, ``\\N`` for NULL, backslash,
    tab and newline escaped; one line (ending in a newline) per row."""
    out = []
    for row in rows(table):
        out.append(b"\t".join(b"\\N" if v is None else _copy_escape(v) for v in row) + b"\n")
    return out


def _copy_escape(value: bytes) -> bytes:
    return value.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\r", b"\\r")

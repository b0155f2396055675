"""Arrow results in PostgreSQL's binary format, for a client that asks for it (psycopg's
``cursor(binary=True)``, a JDBC driver): each value as PostgreSQL's ``typsend`` writes it, for the
type OID :func:`millpond.serve.pgtext.oid` gives its column.

Numbers, booleans, dates, times and timestamps are packed from the column's values; a numeric is
PostgreSQL's base-10000 digits of its text (at its display scale); an array carries its
dimensions and element OID, a record its fields' OIDs; ``jsonb`` is its text after version byte 1;
text, a map's text and ``bytea`` are their bytes.

    >>> import pyarrow as pa
    >>> column(pa.field("n", pa.int32()), pa.chunked_array([pa.array([1, None], pa.int32())]))
    [b'\\x00\\x00\\x00\\x01', None]
    >>> numeric("-12.50")
    b'\\x00\\x02\\x00\\x00@\\x00\\x00\\x02\\x00\\x0c\\x13\\x88'
"""

from __future__ import annotations

import struct
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Iterable

import pyarrow as pa

from millpond import jsonb
from millpond.serve import pgtext

__all__ = ["column", "numeric"]

_EPOCH_DATE = date(2000, 1, 1)
_EPOCH = datetime(2000, 1, 1)
_EPOCH_TZ = datetime(2000, 1, 1, tzinfo=timezone.utc)


def rows(table: pa.Table, formats: list[int] | None = None) -> Iterable[list[bytes | None]]:
    """Each row's values as PostgreSQL sends them: text, or binary where ``formats`` says 1."""
    if not formats or not any(formats):
        return pgtext.rows(table)
    return pgtext.by_row(table.num_rows, [(column if formats[i] else pgtext.column_texts)(
        table.schema.field(i), table.column(i)) for i in range(table.num_columns)])


def column(field: pa.Field, col: pa.ChunkedArray) -> list[bytes | None]:
    """The binary form of each value of a result column (None for NULL)."""
    t, oid = col.type, pgtext.oid(col.type)
    if oid in (1700, 25, 3802) and not pa.types.is_list(t):  # from the text PostgreSQL would send
        texts = pgtext.column_texts(field, col)
        if oid == 1700:
            return [None if v is None else numeric(v.decode()) for v in texts]
        return [None if v is None else (b"\x01" + v if oid == 3802 else v) for v in texts]
    return [None if v is None else value(t, v) for v in col.to_pylist()]


def value(t: pa.DataType, v: Any) -> bytes:
    """One value of Arrow type ``t`` (as ``to_pylist`` gives it)."""
    oid = pgtext.oid(t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _array(t, v)
    if oid == 2249:
        return _record(t, v)
    if oid == 16:
        return b"\x01" if v else b"\x00"
    if oid in (21, 23, 20):
        return struct.pack({21: ">h", 23: ">i", 20: ">q"}[oid], v)
    if oid in (700, 701):
        return struct.pack(">f" if oid == 700 else ">d", v)
    if oid == 17:
        return bytes(v)
    if oid == 1082:
        return struct.pack(">i", (v - _EPOCH_DATE).days)
    if oid in (1114, 1184):
        delta = v - (_EPOCH_TZ if v.tzinfo is not None else _EPOCH)
        return struct.pack(">q", (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)
    if oid == 1083:
        return struct.pack(">q", ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond)
    if oid == 1186:
        return _interval(v)
    if oid == 1700:
        if isinstance(v, Decimal):
            return numeric(format(v, "f"))
        return numeric(pgtext.column_texts(pa.field("v", t), pa.chunked_array([pa.array([v], t)]))[0].decode())
    if oid == 3802:
        return b"\x01" + (v[jsonb.FIELD] if isinstance(v, dict) else v).encode()
    if pa.types.is_map(t):
        return pgtext.nested_text(t, v).encode()
    return (v if isinstance(v, str) else str(v)).encode()


def _interval(v: Any) -> bytes:
    if isinstance(v, dict):  # as stored: months, days, micros
        return struct.pack(">qii", v["micros"], v["days"], v["months"])
    if hasattr(v, "nanoseconds"):  # pyarrow's MonthDayNano
        return struct.pack(">qii", v.nanoseconds // 1000, v.days, v.months)
    return struct.pack(">qii", v.seconds * 1_000_000 + v.microseconds, v.days, 0)  # a timedelta


def numeric(text: str) -> bytes:
    """PostgreSQL's binary numeric of a number's text (its display scale is its digits after the point)."""
    if text == "NaN":
        return struct.pack(">hhHh", 0, 0, 0xC000, 0)
    sign = 0x4000 if text.startswith("-") else 0
    whole, _, fraction = text.lstrip("-+").partition(".")
    whole = whole.lstrip("0")
    whole = whole.rjust(-(-len(whole) // 4) * 4, "0")
    padded = fraction.ljust(-(-len(fraction) // 4) * 4, "0")
    digits = [int(whole[i:i + 4]) for i in range(0, len(whole), 4)] + \
        [int(padded[i:i + 4]) for i in range(0, len(padded), 4)]
    weight = len(whole) // 4 - 1
    while digits and digits[0] == 0:
        digits.pop(0)
        weight -= 1
    while digits and digits[-1] == 0:
        digits.pop()
    if not digits:
        weight, sign = 0, 0
    return struct.pack(f">hhHh{len(digits)}h", len(digits), weight, sign, len(fraction), *digits)


def _array(t: pa.DataType, v: list) -> bytes:
    """An array: its dimensions (nested lists must be rectangular, as PostgreSQL's are), whether it
    holds a NULL, its element OID, then each element."""
    dims, inner, items = [], t, [v]
    while pa.types.is_list(inner) or pa.types.is_large_list(inner):
        sizes = {len(x) for x in items if x is not None}
        if len(sizes) > 1 or (items and None in items and dims):
            raise ValueError("an array of arrays of different lengths (or with a NULL array inside) has no "
                             "PostgreSQL binary form: ask for text results")
        n = sizes.pop() if sizes else 0
        dims.append(n)
        items = [x for xs in items for x in xs]
        inner = inner.value_type
        if n == 0:
            dims = [0]
            break
    elements = [None if x is None else value(inner, x) for x in items] if dims != [0] else []
    out = [struct.pack(">iii", 0 if dims == [0] else len(dims), any(e is None for e in elements), pgtext.oid(inner))]
    if dims != [0]:
        out += [struct.pack(">ii", n, 1) for n in dims]
    out += [struct.pack(">i", -1) if e is None else struct.pack(">i", len(e)) + e for e in elements]
    return b"".join(out)


def _record(t: pa.StructType, v: dict) -> bytes:
    out = [struct.pack(">i", t.num_fields)]
    for i in range(t.num_fields):
        f = t.field(i)
        x = v[f.name]
        data = None if x is None else value(f.type, x)
        out.append(struct.pack(">ii", pgtext.oid(f.type), -1 if data is None else len(data)) + (data or b""))
    return b"".join(out)


"""Quotients out of a query: an Arrow decimal column, and PostgreSQL's text of each value.

A quotient (a NUMERIC whose display scale is its value's own: ``/`` of numerics, ``AVG`` of
integers and numerics; :mod:`millpond.engine.numerics`) reaches a query's result as its
PostgreSQL text. The result holds it as ``decimal128(38, s)``, ``s`` the largest display scale of
the column's values, each value exact (its digits beyond its own scale are zeros). When the
values' display scales differ, the field's metadata :data:`SCALES` holds each value's (int16,
little-endian, one per row): :func:`texts` prints each value at its own scale, as PostgreSQL does
(``millpond serve`` and the shell print through it); a single-scale column's values are their
own text (``str()`` of the Decimal).

    >>> quotients = pa.array([{"pg_numeric": "1.5000000000000000", "pg_divisor": None},
    ...     {"pg_numeric": "94263296", "pg_divisor": "3"}, None])  # the second not divided yet
    >>> f, col = to_decimal("avg", pa.chunked_array([quotients]))
    >>> f.type, texts(f, col)
    (Decimal128Type(decimal128(38, 16)), ['1.5000000000000000', '31421098.666666666667', None])

A column whose values need more than 38 digits at the largest scale (a quotient above 10^20 beside
one below 10^-16) keeps the largest scale that fits: its smaller values are rounded to it and
printed padded with zeros.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from millpond.engine.numerics import is_quotient
from millpond.pgnumeric import divide

__all__ = ["SCALES", "quotient_texts", "to_decimal", "texts", "as_texts"]

SCALES = b"millpond.display_scales"
_DIGITS = 38


def quotient_texts(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A quotient column's PostgreSQL texts (:mod:`millpond.engine.numerics`). A query's are
    divided; a stored one not divided yet (a view's rows read by ``SUBSCRIBE``) is divided here,
    value by value: only to print it."""
    if not column.num_chunks:
        return pa.chunked_array([], pa.string())
    text = pc.cast(pc.struct_field(column, [0]), pa.string())
    divisor = pc.cast(pc.struct_field(column, [1]), pa.string())
    if divisor.null_count == len(divisor):
        return text
    return pa.chunked_array([pa.array([t if d is None or t is None else divide(t, d)
                                       for t, d in zip(text.to_pylist(), divisor.to_pylist())], pa.string())])


def to_decimal(name: str, column: pa.ChunkedArray) -> tuple[pa.Field, pa.ChunkedArray]:
    """A quotient column (``struct<pg_numeric, pg_divisor>``) as a decimal field and column."""
    text = quotient_texts(column)
    point = pc.find_substring(text, ".")
    length = pc.utf8_length(text)
    scales = pc.if_else(pc.greater_equal(point, 0), pc.subtract(pc.subtract(length, point), 1), 0)
    negative = pc.cast(pc.starts_with(text, "-"), pa.int32())
    whole = pc.subtract(pc.if_else(pc.greater_equal(point, 0), point, length), negative)
    most, widest = pc.max(scales).as_py() or 0, pc.max(whole).as_py() or 1
    scale = max(0, min(most, _DIGITS - widest))
    decimal = pa.decimal128(_DIGITS, scale)
    if scale == most:
        values = pc.cast(text, decimal)
    else:  # too wide at the largest scale: rounded to the one that fits
        quantum, wide = Decimal(1).scaleb(-scale), Context(prec=2 * _DIGITS)
        values = pa.chunked_array([pa.array([None if t is None else Decimal(t).quantize(quantum, ROUND_HALF_UP, wide)
                                             for t in text.to_pylist()], decimal)], decimal)
    own = scales.fill_null(scale)
    metadata = None
    if pc.min(own).as_py() != pc.max(own).as_py() or scale != most:
        metadata = {SCALES: np.asarray(own.to_numpy(zero_copy_only=False), dtype="<i2").tobytes()}
    return pa.field(name, decimal, metadata=metadata), values


def texts(field: pa.Field, column: pa.ChunkedArray) -> list[str | None]:
    """PostgreSQL's text of each value of a decimal column (None for NULL): at each value's own
    display scale where the field's metadata gives them (:data:`SCALES`), else at the column's."""
    # a Decimal printed positionally (Arrow's cast to string writes 1E-10 from an adjusted exponent below -6)
    plain = [None if v is None else format(v, "f") for v in column.to_pylist()]
    own = (field.metadata or {}).get(SCALES)
    if own is None or len(own) != 2 * len(plain):
        return plain
    scale = field.type.scale
    return [None if t is None else _at(t, scale, int(s)) for t, s in zip(plain, np.frombuffer(own, dtype="<i2"))]


def _at(text: str, scale: int, own: int) -> str:
    """``text`` (``scale`` digits after the point) printed with ``own`` digits after it."""
    if own < scale:
        return text[:len(text) - (scale - own) - (1 if own == 0 else 0)]
    if own > scale:
        return text + ("" if scale else ".") + "0" * (own - scale)
    return text


def as_texts(table: pa.Table) -> pa.Table:
    """``table`` with each decimal column as the text of its values (for printing: a Decimal's
    ``str()`` is ``0E-20`` for zero at scale 20), and each quotient as stored (a ``SUBSCRIBE``'s
    rows) as its text."""
    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type):
            table = table.set_column(i, pa.field(f.name, pa.string(), f.nullable),
                                     pa.array(texts(f, table.column(i)), pa.string()))
        elif is_quotient(f.type):
            table = table.set_column(i, pa.field(f.name, pa.string(), f.nullable), quotient_texts(table.column(i)))
    return table


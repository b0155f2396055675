"""PostgreSQL's numeric division on decimal texts, in Python (a base module: no millpond imports).

A quotient (a NUMERIC whose display scale is its value's own; :mod:`millpond.engine.numerics`)
is the struct ``{pg_numeric, pg_divisor}`` of PostgreSQL texts. :func:`divide` is PostgreSQL's
``numeric_div`` of two texts; :func:`divide_arrays` is it over Arrow columns, DuckDB's
:data:`UDF` in millpond's queries (:mod:`millpond.duck` registers it), and printing divides a
stored quotient with it (:mod:`millpond.serve.display`).

    >>> divide("94263296", "3"), divide("-1", "3"), divide("5", "2")
    ('31421098.666666666667', '-0.33333333333333333333', '2.5000000000000000')
"""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa

__all__ = ["FIELD", "DIVISOR", "QUOTIENT", "UDF", "MIN_SIG_DIGITS", "MAX_DISPLAY_SCALE", "divide", "divide_arrays"]

FIELD = "pg_numeric"
DIVISOR = "pg_divisor"
QUOTIENT = pa.struct([(FIELD, pa.string()), (DIVISOR, pa.string())])
UDF = "mp_numeric_div"  # DuckDB's MP_NUMERIC_DIV in millpond's queries: divide_arrays
MIN_SIG_DIGITS = 16  # NUMERIC_MIN_SIG_DIGITS
MAX_DISPLAY_SCALE = 1000  # NUMERIC_MAX_DISPLAY_SCALE


def divide(a: str, b: str) -> str:
    """PostgreSQL's text of ``a::numeric / b::numeric`` for operand texts (``b`` not zero): the
    scale of ``select_div_scale``, rounded half away from zero, exact on the operands' digits."""
    x, y = Decimal(a), Decimal(b)

    def weight(v: Decimal) -> tuple[int, int]:  # (weight, first digit) in base-10000 digits
        if v == 0:
            return 0, 0
        w = v.copy_abs().adjusted() // 4
        return w, int(v.copy_abs().scaleb(-4 * w))
    (w1, d1), (w2, d2) = weight(x), weight(y)
    r = min(max(MIN_SIG_DIGITS - 4 * (w1 - w2 - (1 if d1 <= d2 else 0)), len(a.partition(".")[2]),
                len(b.partition(".")[2])), MAX_DISPLAY_SCALE)
    (_, xd, xe), (_, yd, ye) = x.as_tuple(), y.as_tuple()
    num, den, shift = int("".join(map(str, xd))), int("".join(map(str, yd))), r + xe - ye
    num, den = (num * 10 ** shift, den) if shift >= 0 else (num, den * 10 ** -shift)
    q, rest = divmod(num, den)
    digits = str(q + (1 if 2 * rest >= den else 0)).rjust(r + 1, "0")
    sign = "-" if (x < 0) != (y < 0) and digits.strip("0") else ""
    return sign + digits[:len(digits) - r] + ("." + digits[len(digits) - r:] if r else "")


def divide_arrays(a: pa.Array, b: pa.Array) -> pa.StructArray:
    """:data:`UDF` (a DuckDB Arrow function, :mod:`millpond.duck`): the quotients of two columns of
    operand texts, row by row (a query's returned rows only); NULL where either is NULL, ``division
    by zero`` as in PostgreSQL."""
    texts = []
    for x, y in zip(a.to_pylist(), b.to_pylist()):  # per row: Python's exact integers do the digits
        if x is None or y is None:
            texts.append(None)
        elif Decimal(y) == 0:
            raise ZeroDivisionError("division by zero")
        else:
            texts.append(divide(x, y))
    text = pa.array(texts, pa.string())
    return pa.StructArray.from_arrays([text, pa.nulls(len(text), pa.string())], fields=list(QUOTIENT),
                                      mask=text.is_null())

"""PostgreSQL's assignment: a value stored into a column of another type, converted as an INSERT
or UPDATE converts it — on every write path (SQL, ``db.insert``, wire parameters, files tables,
the log's writers: :func:`millpond.log.conform.conform` calls :func:`assign`), vectorized over
Arrow.

What converts (PostgreSQL's assignment casts), and the errors PostgreSQL gives:

- numbers into numbers: an integer into ``NUMERIC(p,s)`` (``numeric field overflow`` when it does
  not fit); a NUMERIC rounded half away from zero to the column's scale, or to an integer; a float
  rounded half to even to an integer, and into a NUMERIC read as its 15 significant digits (6 for
  a REAL, as PostgreSQL reads it) then rounded half away from zero; ``smallint out of range``,
  ``integer out of range``, ``bigint out of range``, ``value out of range: overflow``;
- dates and timestamps into each other (a timestamp's date, a date's midnight), a timestamp's
  time of day into TIME, a TIME into an INTERVAL and an INTERVAL's time of day into TIME;
- a value into a text column as PostgreSQL prints it (:mod:`millpond.log.assign_text`);
- text into any scalar column by that type's input rules, as PostgreSQL reads a quoted literal,
  a parameter or a COPY field (:mod:`millpond.log.assign_text`);
- arrays element by element.

Anything else is refused as PostgreSQL refuses it (SQLSTATE 42804): a boolean into an integer
column, an integer into a date column.

    >>> assign(pa.chunked_array([[5, 7]]), pa.decimal128(10, 2)).to_pylist()
    [Decimal('5.00'), Decimal('7.00')]
    >>> assign(pa.chunked_array([[2.5, 3.5]]), pa.int32()).to_pylist()
    [2, 4]
"""

from __future__ import annotations

from decimal import Decimal
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from millpond.log import assign_text
from millpond.log.intervals import INTERVAL, to_interval
from millpond.log.kinds import NAMES, Unassignable, bounds, first, kind

__all__ = ["assign", "kind", "Unassignable", "first"]

_DAY_US = 86_400_000_000


def assign(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """``col`` as values of ``target``, converted as PostgreSQL assigns them, or :class:`Unassignable`."""
    if pa.types.is_dictionary(col.type):  # pandas' categories, Parquet's dictionary pages
        col = col.cast(col.type.value_type)
    if col.type.equals(target):
        return col
    src, dst = kind(col.type), kind(target)
    if src == "null":
        return pa.chunked_array([pa.nulls(len(col), target)], target)
    if dst == "text" and src != "text":
        return assign_text.to_text(col, src)
    if src == "text" and dst != "text":
        col = assign_text.from_text(col, target, dst)  # a NUMERIC's exact value: the rule below rounds it
        if col.type.equals(target):
            return col
        src = kind(col.type)
    rule = _RULES.get((src, dst))
    if rule is None:
        if src == dst:  # records, maps, units of one family: Arrow's cast, checked value by value
            return _arrow_cast(col, target)
        raise Unassignable(f"PostgreSQL does not assign a value of type {NAMES.get(src, src)} to a column of "
                           f"type {NAMES.get(dst, dst)} (convert the values first)", "42804")
    return rule(col, target)


def _arrow_cast(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    try:
        return pc.cast(col, target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise Unassignable(str(exc).split("\n")[0], "42804", _first_bad_row(col, target)) from None


def _first_bad_row(col: pa.ChunkedArray, target: pa.DataType) -> int | None:
    """The first row whose value does not cast: a binary search over prefixes (log n casts)."""
    def casts(n: int) -> bool:
        try:
            pc.cast(col.slice(0, n), target, safe=True)
            return True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
    if casts(len(col)) or not casts(0):
        return None
    lo, hi = 0, len(col)  # casts(lo) holds, casts(hi) fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if casts(mid):
            lo = mid
        else:
            hi = mid
    return lo


# -- numbers ----------------------------------------------------------------------------------------
def _range_name(t: pa.DataType) -> str:
    return {16: "smallint", 32: "integer", 64: "bigint"}.get(t.bit_width, str(t)) if pa.types.is_signed_integer(t) \
        else str(t)


def _digits(t: pa.DataType) -> int:
    """Decimal digits an integer type's values may have."""
    return len(str(max(abs(b) for b in bounds(t))))


def _out_of_range(target: pa.DataType, mask: pa.ChunkedArray) -> None:
    row = first(mask)
    if row is not None:
        raise Unassignable(f"{_range_name(target)} out of range", "22003", row)


def _int_to_int(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    lo, hi = bounds(target)
    slo, shi = bounds(col.type)
    if slo < lo:
        _out_of_range(target, pc.less(col, pa.scalar(lo, col.type)))
    if shi > hi:
        _out_of_range(target, pc.greater(col, pa.scalar(hi, col.type)))
    return pc.cast(col, target, safe=False)


def _widen(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A decimal column one digit wider (rounding up to the next power of ten always fits)."""
    t = col.type
    if t.precision < 38:
        wider = pa.decimal128(t.precision + 1, t.scale)
    else:
        wider = pa.decimal256(min(t.precision + 1, 76), t.scale)
    return pc.cast(col, wider)


def _numeric_to_int(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if col.type.scale > 0:  # half away from zero, as PostgreSQL rounds a numeric
        col = pc.round(_widen(col), 0, round_mode="half_towards_infinity")
    integer_digits = col.type.precision - col.type.scale
    if integer_digits > 18:  # may not fit int64: compare as decimals first
        lo, hi = bounds(pa.int64())
        _out_of_range(target, pc.or_(pc.less(col, pa.scalar(Decimal(lo), col.type)),
                                     pc.greater(col, pa.scalar(Decimal(hi), col.type))))
    return _int_to_int(pc.cast(col, pa.int64(), safe=False), target)


def _float_to_int(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    rounded = pc.round(col, 0, round_mode="half_to_even")  # rint, as PostgreSQL rounds a float
    lo, hi = bounds(target)
    ok = pc.and_(pc.greater_equal(rounded, float(lo)), pc.less(rounded, float(hi) + 1))  # NaN never is
    _out_of_range(target, pc.invert(ok))
    return pc.cast(rounded, target, safe=False)


def _overflow(target: pa.DataType, row: int, detail: str | None = None) -> Unassignable:
    p, s = target.precision, target.scale
    detail = detail or f"must round to an absolute value less than {'1' if p == s else f'10^{p - s}'}"
    return Unassignable(f"numeric field overflow (a field with precision {p}, scale {s} {detail})", "22003", row)


def _int_to_numeric(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    p, s = target.precision, target.scale
    digits = _digits(col.type)
    if p - s < digits:  # 10^(p-s) is within the source type's range
        limit = 10 ** (p - s)
        bad = pc.greater_equal(col, pa.scalar(limit, col.type))
        if pa.types.is_signed_integer(col.type):
            bad = pc.or_(bad, pc.less_equal(col, pa.scalar(-limit, col.type)))
        row = first(bad)
        if row is not None:
            raise _overflow(target, row)
    exact = pa.decimal128(digits + s, s) if digits + s <= 38 else pa.decimal256(digits + s, s)
    return pc.cast(pc.cast(col, exact), target)  # every value fits: checked above


def _numeric_to_numeric(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    p, s = target.precision, target.scale
    if col.type.scale > s:  # half away from zero, as PostgreSQL rounds a numeric to a scale
        col = pc.round(_widen(col), s, round_mode="half_towards_infinity")
    if col.type.precision - col.type.scale > p - s:
        limit = pa.scalar(Decimal(10) ** (p - s), col.type)
        row = first(pc.greater_equal(pc.abs(col), limit))
        if row is not None:
            raise _overflow(target, row)
    return pc.cast(col, target)


def _float_to_numeric(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """A float's digits as PostgreSQL reads them (``%.15g``; ``%.6g`` of a REAL), rounded half away
    from zero to the column's scale."""
    p, s = target.precision, target.scale
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    x = arr.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False)
    for bad, detail in ((np.isnan(x), None), (np.isinf(x), "cannot hold an infinite value")):
        if (bad & valid).any():
            row = int(np.argmax(bad & valid))
            if detail is None:
                raise Unassignable("NUMERIC NaN is not supported (Spark and DuckDB decimals have no such value)",
                                   "0A000", row)
            raise _overflow(target, row, detail)
    sig = 15 if arr.type == pa.float64() else 6  # DBL_DIG, FLT_DIG
    a = np.abs(x)
    zero = a == 0
    e = np.floor(np.log10(np.where(zero, 1, a))).astype(np.int64)
    a = a.astype(np.longdouble)
    e -= (_ten(e) > a) & ~zero  # log10 may be off by one at a power of ten
    e += (_ten(e + 1) <= a) & ~zero
    shift = sig - 1 - e  # the digits as an integer of `sig` digits: m * 10^-shift
    m = np.rint(a * _ten(shift)).astype(np.int64)  # half to even, as printf rounds
    carry = m == 10 ** sig
    m, shift = np.where(carry, m // 10, m), np.where(carry, shift - 1, shift)
    over = ~zero & valid & (sig - shift > p - s)  # more integer digits than the column has
    cut = np.clip(shift - s, 0, 18)  # the digits below the scale, rounded half away from zero
    unit = 10 ** cut
    q = np.where(shift > s, m // unit + (2 * (m % unit) >= unit), m)  # at scale s, times 10^zeros
    zeros = np.where(shift < s, s - shift, 0)
    q, zeros = np.where(zero, 0, q), np.where(zero, 0, zeros)
    over |= valid & (q >= 10 ** min(p, 18)) & (zeros == 0) & (p <= 18)
    if over.any():
        raise _overflow(target, int(np.argmax(over)))
    negative = x < 0
    if not (valid & (zeros > 17 - np.floor(np.log10(np.maximum(q, 1))))).any():  # every value fits 18 digits
        unscaled = np.where(negative, -1, 1) * q * 10 ** np.where(valid, zeros, 0)
        words = np.stack([unscaled, unscaled >> 63], axis=1)  # decimal128: two's complement, little-endian
        out = pa.Array.from_buffers(target, len(arr), [arr.buffers()[0] if arr.null_count else None,
                                                       pa.py_buffer(words.tobytes())],
                                    null_count=arr.null_count, offset=0) if arr.offset == 0 else None
        if out is not None:
            return pa.chunked_array([out], target)
    digits = pc.binary_join_element_wise(pc.cast(pa.array(q), pa.string()), pc.binary_repeat("0", pa.array(zeros)), "")
    signed = pc.if_else(pa.array(negative), pc.binary_join_element_wise("-", digits, ""), digits)
    unscaled = pc.cast(pc.if_else(pa.array(valid), signed, pa.scalar(None, pa.string())), pa.decimal128(p, 0))
    out = pa.Array.from_buffers(target, len(unscaled), unscaled.buffers(), null_count=unscaled.null_count,
                                offset=unscaled.offset)  # the same unscaled integers, at scale s
    return pa.chunked_array([out], target)


_POWERS = np.longdouble(10) ** np.arange(-400, 401).astype(np.longdouble)


def _ten(k: np.ndarray) -> np.ndarray:
    """10^k as long doubles, exactly where they can be (up to 10^27), from a table."""
    return _POWERS[np.clip(k, -400, 400) + 400]


def _to_float(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    out = pc.cast(col, target, safe=False)
    if target.bit_width < 64 and kind(col.type) != "integer":
        wide = pc.cast(col, pa.float64(), safe=False)
        finite = pc.is_finite(wide)
        _float_range(pc.and_(finite, pc.invert(pc.is_finite(out))), "value out of range: overflow")
        _float_range(pc.and_(pc.not_equal(wide, 0), pc.equal(out, 0)), "value out of range: underflow")
    return out


def _float_range(mask: pa.ChunkedArray, reason: str) -> None:
    row = first(mask)
    if row is not None:
        raise Unassignable(reason, "22003", row)


# -- dates and times ----------------------------------------------------------------------------------
def _temporal(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_timestamp(col.type) and col.type.unit == "ns":  # PostgreSQL keeps microseconds
        col = pc.round_temporal(col, 1, "microsecond")
    if pa.types.is_time(col.type) and col.type.unit == "ns":
        micros = pc.round(pc.divide(pc.cast(pc.cast(col, pa.int64()), pa.float64()), 1000.0), 0,
                          round_mode="half_to_even")
        col = pc.cast(pc.cast(micros, pa.int64()), pa.time64("us"))
    return pc.cast(col, target, safe=False)


def _time_to_interval(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    micros = pc.cast(_temporal(col, pa.time64("us")), pa.int64()).combine_chunks()
    zeros = pa.array(np.zeros(len(micros), dtype=np.int32))
    return pa.chunked_array([pa.StructArray.from_arrays([zeros, zeros, micros], fields=list(INTERVAL),
                                                        mask=micros.is_null())], INTERVAL)


def _interval_to_time(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    micros = pc.struct_field(to_interval(col), 2).combine_chunks()
    day = np.mod(micros.fill_null(0).to_numpy(zero_copy_only=False), _DAY_US)  # the time of day, as interval_time
    out = pa.array(day, pa.int64(), mask=micros.is_null().to_numpy(zero_copy_only=False))
    return pa.chunked_array([pc.cast(pc.cast(out, pa.time64("us")), target)])


# -- arrays -------------------------------------------------------------------------------------------
def _array(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    arr = col.combine_chunks()
    if not pa.types.is_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_field))
    if not pa.types.is_list(target):
        return _arrow_cast(pa.chunked_array([arr]), target)
    offsets = arr.offsets
    try:
        values = assign(pa.chunked_array([arr.values], arr.type.value_type), target.value_type).combine_chunks()
    except Unassignable as exc:  # the row holding the element at fault
        if exc.row is not None:
            exc.row = int(np.searchsorted(offsets.to_numpy(), exc.row, side="right") - 1)
        raise
    out = pa.ListArray.from_arrays(offsets, values, type=target, mask=arr.is_null() if arr.null_count else None)
    return pa.chunked_array([out], target)


def _record(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """A record field by field: by name when the names are the column's, else by position (a
    ``ROW(...)``'s fields ``f1``, ``f2``... as PostgreSQL assigns a row to a composite column)."""
    arr = col.combine_chunks()
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    wanted = [target.field(i).name for i in range(target.num_fields)]
    if sorted(names) != sorted(wanted) and len(names) != len(wanted):
        raise Unassignable(f"a record of {len(names)} fields is not assigned to a record of {len(wanted)} (its "
                           f"fields: {', '.join(wanted)})", "42804")
    order = [names.index(n) for n in wanted] if sorted(names) == sorted(wanted) else range(len(wanted))
    fields = [assign(pa.chunked_array([arr.field(i)], arr.type.field(i).type), target.field(k).type).combine_chunks()
              for k, i in enumerate(order)]
    out = pa.StructArray.from_arrays(fields, fields=list(target), mask=arr.is_null() if arr.null_count else None)
    return pa.chunked_array([out], target)


_NUMBER = ("integer", "numeric", "float")
_RULES: dict[tuple[str, str], Callable[[pa.ChunkedArray, pa.DataType], pa.ChunkedArray]] = {
    ("integer", "integer"): _int_to_int, ("numeric", "integer"): _numeric_to_int, ("float", "integer"): _float_to_int,
    ("integer", "numeric"): _int_to_numeric, ("numeric", "numeric"): _numeric_to_numeric,
    ("float", "numeric"): _float_to_numeric,
    **{(n, "float"): _to_float for n in _NUMBER},
    **{(a, b): _temporal for a in ("date", "timestamp", "timestamptz") for b in ("date", "timestamp", "timestamptz")},
    ("timestamp", "time"): _temporal, ("timestamptz", "time"): _temporal, ("time", "time"): _temporal,
    ("time", "interval"): _time_to_interval, ("interval", "time"): _interval_to_time,
    ("array", "array"): _array, ("record", "record"): _record,
}

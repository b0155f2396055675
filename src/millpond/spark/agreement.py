"""Where DuckDB computes what Spark computes: the expressions a Python task may evaluate itself
(in DuckDB, :func:`cannot_raise`) and be sure the values, and so the rows a later epoch retracts,
are Spark's — the fused tasks (:mod:`millpond.spark.fusing`) and a small epoch's whole plan in one
task (:mod:`millpond.spark.local_plan`) make rows that Spark's stages retract, and the other way
round. Everything else is Spark's to evaluate.

Exactness is inferred as types (:func:`numeric`): an integer or DECIMAL expression is safe where
both engines give it the same type and exact value — Spark's decimal precision rules (a product
has one more digit than DuckDB's; past 38 digits Spark keeps a scale of at least 6 and rounds
the rest half away from zero, :func:`_rounded_product`) decide which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa
from sqlglot import exp

from millpond import casemap
from millpond.engine.expressions import is_mp

__all__ = ["cannot_raise", "numeric", "arrow_type", "Exact"]


# what a fused task's DuckDB evaluates: nodes that raise no data error (an integer overflow of
# +, -, * excepted: fused.py reports it as Spark does) and round nothing: no division, but a
# remainder by a positive literal; of string functions, those both count or map alike (the case
# mapping is DuckDB's in both: millpond.casemap); casts and DECIMAL arithmetic only where every value is exact
# (:func:`numeric`), date_trunc and EXTRACT's integer fields of a TIMESTAMP column (wall-clock
# fields in both engines), and a TIMESTAMP column plus an interval of days and time
_SAFE = (exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE,
         exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Is, exp.In, exp.Between, exp.Case, exp.If, exp.Coalesce,
         exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.DataType, exp.DataTypeParam,
         exp.DPipe,  # text || text (NULL with a NULL in both; other operands arrive cast, checked as casts)
         exp.Nullif,  # CASE WHEN a = b THEN NULL ELSE a END in both
         exp.StartsWith)


def cannot_raise(e: exp.Expression, types: Mapping[str, pa.DataType] | None = None) -> bool:
    """Whether DuckDB evaluates ``e`` as Spark does, raising nothing Spark would not (``types``:
    the Arrow types of the columns, where known: casts and DECIMAL arithmetic need them)."""
    for n in e.walk():
        if isinstance(n, exp.Mod):
            if not (isinstance(n.expression, exp.Literal) and n.expression.is_int and int(n.expression.this) > 0):
                return False
        elif isinstance(n, exp.IntDiv):  # an integer over a positive literal: truncated toward zero in both
            # (DuckDB's //, Spark's div), never by zero, never past the range
            if not (_positive(n.expression) and (x := numeric(n.this, types or {})) is not None and x.integer):
                return False
        elif isinstance(n, exp.Cast):
            if not (isinstance(n.this, exp.Null) or _temporal(n, types or {}) or _integer_to_double(n, types or {})
                    or _count_to_int(n) or (types is not None and numeric(n, types) is not None)
                    or (n.to.this in _TEXT_TYPES and numeric(n.this, types or {}) is not None)):  # plain digits
                return False
        elif is_mp(n, "NUMERIC_DEFER"):  # a quotient's operands kept (texts; division by zero raised by both)
            pass
        elif is_mp(n, "NUMERIC_VALUE"):  # PostgreSQL's quotient (exact in both), rounded half away from zero
            if numeric(n, types or {}) is None:
                return False
        elif isinstance(n, exp.Anonymous) and n.name.upper() == "SUBSTRING":  # code points in both, from 1 on
            if not (len(n.expressions) == 3 and all(isinstance(x, exp.Literal) and x.is_int and int(x.this) >= i
                                                    for i, x in zip((1, 0), n.expressions[1:]))):
                return False
        elif isinstance(n, exp.Anonymous) and n.name.upper() == "SPLIT_PART":  # PostgreSQL's fields in both
            # ('' past the last; checked against Spark): an empty delimiter is none to Spark, every character
            # to DuckDB, and a negative position counts from the end in Spark only
            if not (len(n.expressions) == 3 and isinstance(d := n.expressions[1], exp.Literal) and d.is_string
                    and d.this and _positive(n.expressions[2])):
                return False
        elif isinstance(n, exp.Like):  # a pattern of % and other characters: no escape, no _ (one character of
            # what: a UTF-16 unit in Java, a code point in DuckDB)
            p = n.expression
            if not (isinstance(p, exp.Literal) and p.is_string and "_" not in p.this and "\\" not in p.this):
                return False
        elif isinstance(n, exp.Escape):
            if not isinstance(n.this, exp.Like):
                return False
        elif isinstance(n, exp.Anonymous) and n.name.upper() in ("LPAD", "RPAD"):  # to_char's padding: code points,
            # cut on the right past the width, in both (checked against Spark); a fill of one character given
            if not (len(n.expressions) == 3 and isinstance(f := n.expressions[2], exp.Literal) and f.is_string
                    and len(f.this) == 1 and _positive(n.expressions[1])):
                return False
        elif any(is_mp(n, f) for f in _SAME_MP) or (isinstance(n, exp.Anonymous) and n.name.upper() in _SAME):
            pass
        elif isinstance(n, (exp.Add, exp.Sub, exp.Mul)):
            operands = [numeric(x, types or {}) for x in (n.this, n.expression)]
            if any(o is not None and not o.integer for o in operands) and numeric(n, types or {}) is None and not (
                    isinstance(n.parent, exp.Cast) and numeric(n.parent, types or {}) is not None):
                return False
        elif is_mp(n, "FIELD"):
            if numeric(n, types or {}) is None:
                return False
        elif is_mp(n, "ADD_INTERVAL"):  # a TIMESTAMP plus days and time: microseconds added in both (months:
            # each engine's calendar, not checked here)
            ts, months = n.expressions[0], n.expressions[1]
            if not (isinstance(ts, exp.Column) and types and types.get(ts.name) == pa.timestamp("us")
                    and isinstance(months, exp.Literal) and months.this == "0"):
                return False
        elif is_mp(n, "DATE_TRUNC"):
            arg = n.expressions[1] if len(n.expressions) == 2 else None
            if not (isinstance(arg, exp.Column) and types and (t := types.get(arg.name)) is not None
                    and pa.types.is_timestamp(t) and t.tz is None):
                return False
        elif not isinstance(n, _SAFE):
            return False
    return True


# functions both engines compute alike whatever their arguments: COALESCE; the text functions,
# checked over NULLs, empty strings, combining characters, emoji and multi-character arguments
# (``length`` counts code points in both); internal calls (``MP_...``): position/strpos,
# trim/btrim/ltrim/rtrim, concat, reverse (code points: DuckDB's own REVERSE reverses grapheme
# clusters, so engine/expressions spells it out), and the case mapping, DuckDB's SQL in both
# (millpond.casemap)
_SAME = ("COALESCE", "LENGTH", "CONCAT_WS", "REPLACE", "TRANSLATE", "MD5")
_SAME_MP = ("STRPOS", "TRIM", "CONCAT", "REVERSE", *casemap.FUNCTIONS)


def _count_to_int(n: exp.Cast) -> bool:
    """A string's length (code points in both engines; Spark's an INT, DuckDB's a BIGINT) cast to an
    integer type: exact (a string holds fewer than 2**31 of them)."""
    return isinstance(n.this, exp.Anonymous) and n.this.name.upper() == "LENGTH" and \
        n.to.this in (exp.DataType.Type.INT, exp.DataType.Type.BIGINT)


def _integer_to_double(n: exp.Cast, types: Mapping[str, pa.DataType]) -> bool:
    """An integer cast to DOUBLE (a percentile's argument): both engines round to the nearest
    double, ties to even (exact below 2**53). Not a DECIMAL: Spark's ``BigDecimal.doubleValue`` is
    correctly rounded, DuckDB's division by a power of ten may be a unit in the last place off."""
    inner = numeric(n.this, types)
    return n.to.this == exp.DataType.Type.DOUBLE and inner is not None and inner.integer


def _positive(e: exp.Expression) -> bool:
    """An integer literal of at least 1 (or its cast)."""
    while isinstance(e, exp.Cast):
        e = e.this
    return isinstance(e, exp.Literal) and e.is_int and int(e.this) >= 1


_TEXT_TYPES = (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR)
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}( \d{2}:\d{2}:\d{2}(\.\d{1,6})?)?")


def _temporal(e: exp.Cast, types: Mapping[str, pa.DataType]) -> bool:
    """Whether the cast ``e`` is one both engines make alike: an ISO date or timestamp literal
    (``DATE '1995-03-15'``), a DATE to a TIMESTAMP (its midnight)."""
    inner, to = e.this, e.to.this
    text = inner.this if isinstance(inner, exp.Literal) and inner.is_string else None
    if to == exp.DataType.Type.DATE:
        return text is not None and _DATE_TEXT.fullmatch(text) is not None
    if to == exp.DataType.Type.TIMESTAMPNTZ:
        return _TIMESTAMP_TEXT.fullmatch(text) is not None if text is not None else _dated(inner, types)
    return False


def _dated(e: exp.Expression, types: Mapping[str, pa.DataType]) -> bool:
    """Whether ``e`` is a DATE column or literal."""
    if isinstance(e, exp.Column):
        return (t := types.get(e.name)) is not None and pa.types.is_date32(t)
    return isinstance(e, exp.Cast) and e.to.this == exp.DataType.Type.DATE and _temporal(e, types)


@dataclass(frozen=True)
class Exact:
    """A type every value of an integer or DECIMAL expression fits exactly: ``precision`` digits,
    ``scale`` of them after the point; ``integer``: an integer type's (its overflow is Spark's
    error, which fused.py reports as Spark does)."""

    precision: int
    scale: int
    integer: bool = False


_FIELDS = ("year", "quarter", "month", "day", "doy", "hour", "minute")  # spelled alike in both engines (engine/expressions.py)
_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # an integer type's (by bits) largest value's digits
_INTEGER_TYPES = {exp.DataType.Type.SMALLINT: 16, exp.DataType.Type.INT: 32, exp.DataType.Type.BIGINT: 64}


def arrow_type(e: exp.Expression, types: Mapping[str, pa.DataType]) -> pa.DataType | None:
    """The Arrow type of ``e``'s values where it is known here: a column's, or an exact DECIMAL's."""
    if isinstance(e, exp.Column):
        return types.get(e.name)
    exact = numeric(e, types)
    return pa.decimal128(exact.precision, exact.scale) if exact is not None and not exact.integer else None


def numeric(e: exp.Expression, types: Mapping[str, pa.DataType]) -> Exact | None:
    """The exact type of the integer or DECIMAL expression ``e`` (columns typed by ``types``), as
    both engines compute it — a cast neither narrows the integer digits nor the scale, a sum or a
    product needs at most 38 digits — or None (not such an expression, or one that may round or
    overflow)."""
    if isinstance(e, (exp.Paren, exp.Neg)):
        return numeric(e.this, types)
    if isinstance(e, exp.Column):
        t = types.get(e.name)
        if t is not None and pa.types.is_integer(t):
            return Exact(_DIGITS[t.bit_width], 0, True)
        return Exact(t.precision, t.scale) if t is not None and pa.types.is_decimal(t) else None
    if isinstance(e, exp.Literal) and e.is_number and e.this.lstrip("-").replace(".", "", 1).isdigit():
        whole, _, fraction = e.this.lstrip("-").partition(".")
        digits = len(whole.lstrip("0"))  # 0.908: no digit before the point
        return Exact(max(digits + len(fraction), 1), len(fraction), not fraction and digits <= 18)
    if is_mp(e, "FIELD") and len(e.expressions) == 2:  # EXTRACT's integer fields of a TIMESTAMP: the same calendar
        unit, arg = e.expressions
        t = types.get(arg.name) if isinstance(arg, exp.Column) else None
        if isinstance(arg, exp.Cast) and arg.to.this == exp.DataType.Type.TIMESTAMPNTZ and _dated(arg.this, types):
            t = pa.timestamp("us")  # a DATE's midnight
        if unit.name in _FIELDS and t is not None and pa.types.is_timestamp(t) and t.tz is None:
            return Exact(10, 0, True)
        return None
    if is_mp(e, "NUMERIC_VALUE") and len(e.expressions) == 3 and all(
            isinstance(x, exp.Literal) and x.is_int for x in e.expressions[1:]):  # a quotient as DECIMAL(p,s)
        return Exact(int(e.expressions[1].this), int(e.expressions[2].this))
    if isinstance(e, exp.IntDiv) and _positive(e.expression):  # an integer's quotient: within its range
        inner = numeric(e.this, types)
        return inner if inner is not None and inner.integer else None
    if isinstance(e, exp.Cast) and (wide := _rounded_product(e, types)) is not None:
        return wide
    if isinstance(e, exp.Cast):
        inner, to = numeric(e.this, types), e.to
        if inner is None:
            return None
        if to.this == exp.DataType.Type.DECIMAL and len(to.expressions) == 2:
            p, s = (int(x.this.this) for x in to.expressions)
            fits = inner.precision - inner.scale <= p - s and inner.scale <= s
            return Exact(p, s) if fits else None
        bits = _INTEGER_TYPES.get(to.this)
        # an integer to an integer type that holds its every value
        fits = bits is not None and inner.integer and inner.precision <= _DIGITS[bits]
        return Exact(_DIGITS[bits], 0, True) if fits else None
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul)):
        a, b = numeric(e.this, types), numeric(e.expression, types)
        if a is None or b is None:
            return None
        if a.integer and b.integer:
            return Exact(max(a.precision, b.precision), 0, True)
        if isinstance(e, exp.Mul):  # Spark's precision of a product: one more digit than DuckDB's
            p, s = a.precision + b.precision + 1, a.scale + b.scale
        else:
            s = max(a.scale, b.scale)
            p = max(a.precision - a.scale, b.precision - b.scale) + s + 1
        # wider than 38 digits: both engines keep a scale of at most 6 (Spark's minimum adjusted scale)
        # and raise where a value does not fit DECIMAL(38,s)
        return Exact(p, s) if p <= 38 else Exact(38, s) if s <= 6 else None
    if isinstance(e, (exp.Case, exp.If, exp.Coalesce)):  # the branches' values, in a type that holds each
        if isinstance(e, exp.Case):
            values = [x.args.get("true") for x in e.args.get("ifs") or []] + [e.args.get("default")]
        elif isinstance(e, exp.If):
            values = [e.args.get("true"), e.args.get("false")]
        else:
            values = [e.this, *e.expressions]
        kinds = [numeric(v, types) for v in values if v is not None and not isinstance(v, exp.Null)]
        if not kinds or None in kinds:
            return None
        s = max(k.scale for k in kinds)
        p = max(k.precision - k.scale for k in kinds) + s
        return Exact(p, s, all(k.integer for k in kinds)) if p <= 38 else None
    return None


def _rounded_product(e: exp.Cast, types: Mapping[str, pa.DataType]) -> Exact | None:
    """A product of more than 38 digits and a scale over 6 cast to the type Spark gives it
    (DECIMAL(38, max(38 - its integer digits, 6)), the product rounded half away from zero): DuckDB
    computes it exactly with its whole scale, then the cast rounds alike (an overflow raises in both)."""
    to = e.to
    if not (isinstance(e.this, exp.Mul) and to.this == exp.DataType.Type.DECIMAL and len(to.expressions) == 2):
        return None
    a, b = numeric(e.this.this, types), numeric(e.this.expression, types)
    if a is None or b is None:
        return None
    p, s = a.precision + b.precision + 1, a.scale + b.scale
    target = tuple(int(x.this.this) for x in to.expressions)
    return Exact(*target) if p > 38 and s > 6 and s <= 38 and target == (38, max(38 - (p - s), 6)) else None

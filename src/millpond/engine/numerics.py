"""PostgreSQL's NUMERIC with its display scale, as engine SQL.

PostgreSQL's NUMERIC keeps a display scale per value: a quotient gets at least 16 significant
digits (``1::numeric / 3`` is ``0.33333333333333333333``, ``5::numeric / 2`` is
``2.5000000000000000``), so a column of quotients has no single scale. An Arrow decimal, Spark's
and DuckDB's DECIMAL have one per column. So a NUMERIC whose display scale is the value's own
(:attr:`~millpond.sql.semantics.types.SqlType.dynamic`: a quotient, an ``AVG`` of integers or
numerics) is carried in both engines, in state and in a view's rows as *PostgreSQL's text* in a
struct, ``STRUCT<pg_numeric: STRING, pg_divisor: STRING>`` (:data:`FIELD`, :data:`DIVISOR`): the
text holds the value and its display scale at once, whatever the value's size. With a divisor the
quotient is not divided yet: its value is ``pg_numeric / pg_divisor`` (two operand texts). Spark
keeps a quotient so (dividing costs it ~30 us a row, and a view's AVG rarely needs its digits
there: reads divide it, in DuckDB); DuckDB divides at once. A query's result holds the divided
text (``MP_NUMERIC_FINAL``), as an Arrow decimal (:mod:`millpond.serve.display`).

The internal calls (:mod:`millpond.engine.expressions` expands them):

- ``MP_NUMERIC_DIV(a, b)``: PostgreSQL's ``numeric_div`` of two operand texts (plain decimal
  notation, ``-12.50``, ``7``; their display scale is their number of digits after the point):
  the result scale of ``select_div_scale`` (src/backend/utils/adt/numeric.c) — at least 16
  significant digits by an estimate of the quotient's weight in base-10000 digits, no less than
  either operand's display scale — and the quotient rounded half away from zero to it, computed
  exactly on the operands' digits (:func:`divide`; Spark: :func:`defer`, the operands kept);
  DuckDB calls the Python function :data:`UDF` instead (:func:`millpond.pgnumeric.divide` on each
  row; :mod:`millpond.duck` registers it, a test oracle its own reference): DuckDB bound the SQL's
  nested lambdas in time growing with their depth (~0.1 s per division, seconds for a query of a
  few), and a query divides only the rows it returns;
- ``MP_NUMERIC_OF(text)``: the struct of a text (a fixed-scale decimal or an integer printed);
- ``MP_NUMERIC_TEXT(x)``: the text (divided); ``MP_NUMERIC_FINAL(x)``: the struct divided;
  ``MP_NUMERIC_VALUE(x, p, s)``: the value as DECIMAL(p,s);
- ``MP_NUMERIC_NEG(x)``: ``-x`` (zero stays unsigned, as PostgreSQL prints it); ``MP_NUMERIC_ABS(x)``.

Each step binds its intermediate values once with a one-element array transform (a ``let``: Spark's
``TRANSFORM(ARRAY(v), x -> ...)[0]``, DuckDB's ``LIST_TRANSFORM([v], lambda x: ...)[1]``), so
the SQL grows linearly with nesting. Spark's division (a view that needs a quotient's value in
Spark: a comparison, a cast) works on digit strings and 38-digit integers (DECIMAL(38,0)): one
exact division where the digits fit, else a long division of :data:`STEPS` chunks of digits at
most: a divisor of 38 significant digits, a quotient of more than 38, or a dividend too long for
the steps (a divisor of more than ~30 significant digits) is the error ``numeric division needs
more than 38 digits`` there — PostgreSQL, and DuckDB's function, compute it.

    >>> print(numeric_of(["'1.5'"], "duckdb"))
    CASE WHEN '1.5' IS NULL THEN NULL ELSE STRUCT_PACK(pg_numeric := '1.5', pg_divisor := CAST(NULL AS VARCHAR)) END
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from millpond.pgnumeric import DIVISOR, FIELD, MAX_DISPLAY_SCALE, MIN_SIG_DIGITS, QUOTIENT, UDF

__all__ = ["FIELD", "DIVISOR", "TOO_WIDE", "UDF", "QUOTIENT", "is_quotient", "divide", "defer", "numeric_of",
           "text_of", "final", "value_of", "negate", "absolute"]

DIGITS = 38  # of the engines' integers
CHUNK = 31  # digits per step: Spark divides DECIMAL(38,0)s exactly to 32 digits (DECIMAL(38,6))
STEPS = 8  # of the long division
TOO_WIDE = "numeric division needs more than 38 digits"


def is_quotient(t: pa.DataType) -> bool:
    """``t`` is the Arrow type of a quotient (``struct<pg_numeric: string, pg_divisor: string>``)."""
    return pa.types.is_struct(t) and [t.field(i).name for i in range(t.num_fields)] == [FIELD, DIVISOR] and all(
        pa.types.is_string(t.field(i).type) or pa.types.is_large_string(t.field(i).type) for i in range(2))


@dataclass(frozen=True)
class _Dialect:
    """The few spellings the two engines differ in."""

    name: str

    @property
    def spark(self) -> bool:
        return self.name == "spark"


    def let(self, value: str, var: str, body: str) -> str:
        """``body`` with ``var`` bound to ``value`` (evaluated once)."""
        if self.spark:
            return f"TRANSFORM(ARRAY({value}), {var} -> {body})[0]"
        return f"LIST_TRANSFORM([{value}], lambda {var}: {body})[1]"

    def struct(self, **fields: str) -> str:
        if self.spark:
            return "NAMED_STRUCT(" + ", ".join(f"'{k}', {v}" for k, v in fields.items()) + ")"
        return "STRUCT_PACK(" + ", ".join(f"{k} := {v}" for k, v in fields.items()) + ")"

    def field(self, value: str, name: str) -> str:
        return f"{value}.{name}" if self.spark else f"STRUCT_EXTRACT({value}, '{name}')"

    def integer(self, digits: str) -> str:  # Spark's division only (DuckDB's is UDF)
        return f"CAST({digits} AS DECIMAL(38,0))"

    def quotient(self, n: str, d: str) -> str:
        """``n div d`` of non-negative integers (Spark's decimal quotient is exact when it is one)."""
        return f"CAST(({n} - {n} % {d}) / {d} AS DECIMAL(38,0))"

    def text(self, value: str) -> str:
        return f"CAST({value} AS {'STRING' if self.spark else 'VARCHAR'})"

    def quotient_of(self, text: str, divisor: str | None = None) -> str:
        """The struct of a quotient's text (and divisor: not divided yet). In Spark a cast makes its
        fields nullable, as every quotient's are (a view's schema is the one its first rows had)."""
        value = self.struct(**{FIELD: text, DIVISOR: divisor or self.text("NULL")})
        return f"CAST({value} AS STRUCT<{FIELD}: STRING, {DIVISOR}: STRING>)" if self.spark else value

    def error(self, message: str) -> str:
        return f"{'RAISE_ERROR' if self.spark else 'error'}('{message}')"

    def floor4(self, e: str) -> str:
        """``floor(e / 4)`` of an integer."""
        return f"CAST(FLOOR(({e}) / 4.0) AS INT)"


def _operand(d: _Dialect, t: str, p: str) -> dict[str, str]:
    """The parts of operand text ``t``, named with prefix ``p``: its sign, display scale and digits
    without leading zeros (empty for zero)."""
    unsigned = f"REPLACE({t}, '-', '')"
    return {
        f"{p}_neg": f"(SUBSTRING({t}, 1, 1) = '-')",
        f"{p}_scale": f"CASE WHEN INSTR({t}, '.') = 0 THEN 0 ELSE LENGTH({t}) - INSTR({t}, '.') END",
        f"{p}_digits": f"TRIM(LEADING '0' FROM REPLACE({unsigned}, '.', ''))",
    }


def _weight(d: _Dialect, v: str, p: str) -> tuple[str, str]:
    """(weight, first digit) of the operand ``p`` bound in ``v``, in PostgreSQL's base-10000 digits
    (0 and 0 for zero): the leading decimal digit is 10^e, e = digits - 1 - scale."""
    l, sc = d.field(v, f"{p}_digits"), d.field(v, f"{p}_scale")
    e = f"(LENGTH({l}) - 1 - {sc})"
    w = d.floor4(e)
    first = f"CAST(RPAD({l}, CAST({e} - 4 * {w} + 1 AS INT), '0') AS INT)"
    return f"CASE WHEN {l} = '' THEN 0 ELSE {w} END", f"CASE WHEN {l} = '' THEN 0 ELSE {first} END"


def divide(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_DIV(a, b)``: PostgreSQL's quotient of the operand texts ``a[0] / a[1]``, as the
    struct (NULL if either is NULL; ``division by zero`` as in PostgreSQL)."""
    d = _Dialect(dialect)
    if not d.spark:
        return f"{UDF}({a[0]}, {a[1]})"
    f = d.field
    # 1. the operands, bound once
    body1 = d.let(d.struct(**_operand(d, f("s", "a"), "a"), **_operand(d, f("s", "b"), "b")), "o", _scale(d))
    checked = (f"CASE WHEN {f('s', 'a')} IS NULL OR {f('s', 'b')} IS NULL THEN NULL "
               f"WHEN {_is_zero(f('s', 'b'))} THEN {d.error('division by zero')} "
               f"ELSE {d.quotient_of(body1)} END")
    return d.let(d.struct(a=a[0], b=a[1]), "s", checked)


def defer(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_DIV(a, b)`` not divided yet: the struct of the two operand texts (NULL if either
    is NULL; ``division by zero`` now, as in PostgreSQL)."""
    d = _Dialect(dialect)
    f = d.field
    checked = (f"CASE WHEN {f('s', 'a')} IS NULL OR {f('s', 'b')} IS NULL THEN NULL "
               f"WHEN {_is_zero(f('s', 'b'))} THEN {d.error('division by zero')} "
               f"ELSE {d.quotient_of(f('s', 'a'), f('s', 'b'))} END")
    return d.let(d.struct(a=a[0], b=a[1]), "s", checked)


def _is_zero(t: str) -> str:
    return f"REPLACE(REPLACE(REPLACE({t}, '-', ''), '.', ''), '0', '') = ''"


def _scale(d: _Dialect) -> str:
    """2. the result scale and the shift of the digits; over ``o`` (the operands' parts)."""
    f = d.field
    w1, fd1 = _weight(d, "o", "a")
    w2, fd2 = _weight(d, "o", "b")
    # PostgreSQL: if the first digits are equal, assume the dividend is the smaller
    qweight = f"({w1} - {w2} - CASE WHEN {fd1} <= {fd2} THEN 1 ELSE 0 END)"
    r = (f"LEAST(GREATEST({MIN_SIG_DIGITS} - {qweight} * 4, {f('o', 'a_scale')}, {f('o', 'b_scale')}, 0), "
         f"{MAX_DISPLAY_SCALE})")
    parts = d.struct(
        neg=f"({f('o', 'a_neg')} <> {f('o', 'b_neg')})", r=r,
        a_sig=f"TRIM(TRAILING '0' FROM {f('o', 'a_digits')})", b_sig=f"TRIM(TRAILING '0' FROM {f('o', 'b_digits')})",
        a_zeros=f"(LENGTH({f('o', 'a_digits')}) - LENGTH(TRIM(TRAILING '0' FROM {f('o', 'a_digits')})))",
        b_zeros=f"(LENGTH({f('o', 'b_digits')}) - LENGTH(TRIM(TRAILING '0' FROM {f('o', 'b_digits')})))",
        a_scale=f("o", "a_scale"), b_scale=f("o", "b_scale"))
    return d.let(parts, "p", _digits(d))


def _digits(d: _Dialect) -> str:
    """3. the dividend and divisor as integers whose quotient is the result's digits: |a| is
    a_sig * 10^(a_zeros - a_scale), |b| likewise, so |a / b| * 10^r is a_sig / b_sig * 10^k."""
    f = d.field
    k = f"({f('p', 'r')} + {f('p', 'a_zeros')} - {f('p', 'a_scale')} - {f('p', 'b_zeros')} + {f('p', 'b_scale')})"
    am, bm = f("p", "a_sig"), f("p", "b_sig")
    n = f"RPAD({am}, CAST(LENGTH({am}) + GREATEST({k}, 0) AS INT), '0')"
    den = f"RPAD({bm}, CAST(LENGTH({bm}) + GREATEST(-{k}, 0) AS INT), '0')"
    parts = d.struct(neg=f("p", "neg"), r=f("p", "r"), zero=f"({am} = '')", n=n, d=den)
    return d.let(parts, "q", _round(d))


def _round(d: _Dialect) -> str:
    """4. the digit strings ``n`` over ``d``: one exact division where it fits 38 digits (and its
    quotient 31), else a long division of :data:`STEPS` chunks of digits at most; the quotient
    rounded half away from zero, and its text with the point ``r`` digits from the right."""
    f = d.field
    n, den, r = f("q", "n"), f("q", "d"), f("q", "r")
    # a chunk: the remainder (< divisor) followed by c digits of n stays under 10^38, and its
    # quotient (< 10^c) under 10^31 (Spark's exact decimal quotient)
    chunk = f"CAST(LEAST({CHUNK}, {DIGITS} - LENGTH({den})) AS INT)"
    wide = (f"LENGTH({den}) >= {DIGITS} OR LENGTH({n}) - LENGTH({den}) + 1 > {DIGITS} OR "
            f"LENGTH({n}) > {STEPS} * {chunk}")
    state = d.struct(n=n, d=d.integer(den), c=chunk, q=d.integer("0"), m=d.integer("0"), p="CAST(1 AS INT)")
    for i in range(STEPS):
        state = d.let(state, f"x{i}", _step(d, f"x{i}"))
    # rounded half away from zero: 2 * rest >= divisor, without doubling a 38-digit rest
    stepped = d.let(state, "x", f"{f('x', 'q')} + CASE WHEN {f('x', 'm')} >= {f('x', 'd')} - {f('x', 'm')} "
                                f"THEN 1 ELSE 0 END")
    # most quotients (an AVG's: a short divisor) take one exact division; the steps cost ~10 us a row in Spark
    once = d.let(d.struct(n=d.integer(n), d=d.integer(den)), "y", d.let(
        d.struct(q=d.quotient(f("y", "n"), f("y", "d")), m=f"{f('y', 'n')} % {f('y', 'd')}", d=f("y", "d")), "x",
        f"{f('x', 'q')} + CASE WHEN {f('x', 'm')} >= {f('x', 'd')} - {f('x', 'm')} THEN 1 ELSE 0 END"))
    single = f"LENGTH({n}) <= {DIGITS} AND LENGTH({n}) - LENGTH({den}) < {CHUNK}"
    digits = f"CASE WHEN {single} THEN {once} ELSE {stepped} END"
    text = d.let(d.text(digits), "t", _point(d, "t", r))
    signed = f"CASE WHEN {f('q', 'neg')} AND NOT ({_is_zero('t')}) THEN CONCAT('-', t) ELSE t END"
    placed = d.let(text, "t", signed)
    zero = _point(d, "'0'", r)
    return (f"CASE WHEN {f('q', 'zero')} THEN {zero} "
            f"WHEN {wide} THEN {d.error(TOO_WIDE)} ELSE {placed} END")


def _step(d: _Dialect, v: str) -> str:
    """One step of the long division over state ``v`` (digits ``n``, divisor ``d``, chunk size
    ``c``, quotient ``q``, remainder ``m``, next position ``p``): the next ``c`` digits of ``n``
    (fewer at its end, none once it is consumed)."""
    f = d.field
    take = f"CAST(LEAST({f(v, 'c')}, LENGTH({f(v, 'n')}) - {f(v, 'p')} + 1) AS INT)"
    power = d.integer(f"RPAD('1', {take} + 1, '0')")
    x = f"{f(v, 'm')} * {power} + {d.integer(f'SUBSTRING({f(v, chr(110))}, {f(v, chr(112))}, {take})')}"
    nxt = d.let(x, "y", d.struct(n=f(v, "n"), d=f(v, "d"), c=f(v, "c"),
                                 q=d.integer(f"{f(v, 'q')} * {power} + {d.quotient('y', f(v, 'd'))}"),
                                 m=d.integer(f"y % {f(v, 'd')}"), p=f"CAST({f(v, 'p')} + {take} AS INT)"))
    return f"CASE WHEN {f(v, 'p')} > LENGTH({f(v, 'n')}) THEN {v} ELSE {nxt} END"


def _point(d: _Dialect, digits: str, r: str) -> str:
    """The integer text ``digits`` with its last ``r`` digits after a point (zeros in front as needed)."""
    padded = f"LPAD({digits}, CAST(GREATEST(LENGTH({digits}), {r} + 1) AS INT), '0')"
    return d.let(padded, "z", f"CASE WHEN {r} = 0 THEN z ELSE CONCAT(SUBSTRING(z, 1, LENGTH(z) - {r}), '.', "
                              f"SUBSTRING(z, LENGTH(z) - {r} + 1)) END")


def numeric_of(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_OF(text)``: the struct of a text (NULL for NULL)."""
    d = _Dialect(dialect)
    return f"CASE WHEN {a[0]} IS NULL THEN NULL ELSE {d.quotient_of(a[0])} END"


def _divided(d: _Dialect, v: str) -> str:
    """The text of the quotient bound to ``v`` (not NULL): its own, or its operands divided."""
    f = d.field
    return (f"CASE WHEN {f(v, DIVISOR)} IS NULL THEN {f(v, FIELD)} "
            f"ELSE {d.field(divide([f(v, FIELD), f(v, DIVISOR)], d.name), FIELD)} END")


def text_of(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_TEXT(x)``: PostgreSQL's text of the value."""
    d = _Dialect(dialect)
    return d.let(a[0], "v", f"CASE WHEN v IS NULL THEN NULL ELSE {_divided(d, 'v')} END")


def final(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_FINAL(x)``: the struct divided (a query's result holds the text)."""
    d = _Dialect(dialect)
    return d.let(a[0], "v", f"CASE WHEN v IS NULL THEN NULL ELSE {d.quotient_of(_divided(d, 'v'))} END")


def value_of(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_VALUE(x, p, s)``: the value as DECIMAL(p,s) (rounded half away from zero when
    its text has more digits)."""
    return f"CAST({text_of(a[:1], dialect)} AS DECIMAL({a[1]},{a[2]}))"


def _signed(d: _Dialect, a: str, change: str) -> str:
    """``a``'s quotient with ``change`` (an expression of ``t``) made to its text, or, not divided
    yet, to its dividend once the divisor's sign is moved there (``a / -b`` is ``-a / b``): ``-x``
    and ``abs(x)`` leave a quotient undivided."""
    f = d.field
    num, div = f("v", FIELD), f("v", DIVISOR)
    moved = (f"CASE WHEN SUBSTRING({div}, 1, 1) = '-' THEN (CASE WHEN SUBSTRING({num}, 1, 1) = '-' "
             f"THEN SUBSTRING({num}, 2) ELSE CONCAT('-', {num}) END) ELSE {num} END")
    body = d.let(moved, "t", d.quotient_of(change, f"REPLACE({div}, '-', '')"))  # a NULL divisor stays NULL
    return d.let(a, "v", f"CASE WHEN v IS NULL THEN NULL ELSE {body} END")


def negate(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_NEG(x)``: ``-x``; zero stays ``0.00`` (PostgreSQL has no negative zero)."""
    d = _Dialect(dialect)
    return _signed(d, a[0], f"CASE WHEN SUBSTRING(t, 1, 1) = '-' THEN SUBSTRING(t, 2) WHEN {_is_zero('t')} THEN t "
                            "ELSE CONCAT('-', t) END")


def absolute(a: list[str], dialect: str) -> str:
    """``MP_NUMERIC_ABS(x)``: ``abs(x)``."""
    d = _Dialect(dialect)
    return _signed(d, a[0], "CASE WHEN SUBSTRING(t, 1, 1) = '-' THEN SUBSTRING(t, 2) ELSE t END")



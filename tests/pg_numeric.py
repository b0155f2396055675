"""PostgreSQL's NUMERIC text, computed in Python for the oracles: a quotient's display scale
(``select_div_scale`` in src/backend/utils/adt/numeric.c) and value, independent of the engine
SQL millpond generates (:mod:`millpond.engine.numerics`), and a view's numeric columns as text.

    >>> divide("1", "3"), divide("5", "2"), divide("15000", "10000"), divide("0", "3")
    ('0.33333333333333333333', '2.5000000000000000', '1.50000000000000000000', '0.00000000000000000000')
    >>> average(sum_=3, count=2), average(sum_=Decimal("3.75"), count=2), average(sum_=None, count=0)
    ('1.5000000000000000', '1.8750000000000000', None)
"""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa

__all__ = ["divide", "average", "text", "column_texts", "quotients_as_decimals", "register", "averages_as_text"]


def _scale(text: str) -> int:
    return len(text.partition(".")[2])


def _weight(value: Decimal) -> tuple[int, int]:
    """(weight, first digit) in PostgreSQL's base-10000 digits; (0, 0) for zero."""
    if value == 0:
        return 0, 0
    weight = value.copy_abs().adjusted() // 4
    return weight, int(value.copy_abs().scaleb(-4 * weight))


def divide(a: str, b: str) -> str:
    """PostgreSQL's ``a::numeric / b::numeric`` printed, from the operands' texts."""
    x, y = Decimal(a), Decimal(b)
    if y == 0:
        raise ZeroDivisionError("division by zero")
    (w1, d1), (w2, d2) = _weight(x), _weight(y)
    qweight = w1 - w2 - (1 if d1 <= d2 else 0)
    rscale = min(max(16 - 4 * qweight, _scale(a), _scale(b), 0), 1000)
    # exactly: |x / y| * 10^rscale as a ratio of integers, rounded half away from zero
    (_, xd, xe), (_, yd, ye) = x.as_tuple(), y.as_tuple()
    num = int("".join(map(str, xd)) or "0")
    den = int("".join(map(str, yd)) or "0")
    shift = rscale + xe - ye
    num, den = (num * 10**shift, den) if shift >= 0 else (num, den * 10**-shift)
    q, rest = divmod(num, den)
    q += 1 if 2 * rest >= den else 0
    digits = str(q).rjust(rscale + 1, "0")
    out = digits[:len(digits) - rscale] + ("." + digits[len(digits) - rscale:] if rscale else "")
    negative = (x < 0) != (y < 0) and q != 0
    return ("-" if negative else "") + out


def register(con) -> None:  # noqa: ANN001
    """Give an oracle's DuckDB connection the function millpond's DuckDB SQL divides numerics with
    (``millpond.pgnumeric.UDF``), computed by :func:`divide` here: the oracle's quotients are this
    module's (checked against PostgreSQL in ``tests/engine/test_numerics.py``), not millpond's."""
    from duckdb.sqltypes import VARCHAR
    import duckdb

    from millpond.pgnumeric import DIVISOR, FIELD, QUOTIENT, UDF

    def quotients(a: pa.Array, b: pa.Array) -> pa.StructArray:
        text = pa.array([None if x is None or y is None else divide(x, y)
                         for x, y in zip(a.to_pylist(), b.to_pylist())], pa.string())
        return pa.StructArray.from_arrays([text, pa.nulls(len(text), pa.string())], fields=list(QUOTIENT),
                                          mask=text.is_null())
    con.create_function(UDF, quotients, [VARCHAR, VARCHAR], duckdb.struct_type({FIELD: VARCHAR, DIVISOR: VARCHAR}),
                        type="arrow", null_handling="special")


def average(*, sum_: int | Decimal | None, count: int) -> str | None:
    """PostgreSQL's ``avg`` of integers or numerics: the sum over the count (NULL for no rows)."""
    if sum_ is None or count == 0:
        return None
    return divide(str(sum_), str(count))


def text(value: object) -> object:
    """A value as PostgreSQL prints it when it is a number (a Decimal keeps its own scale)."""
    if isinstance(value, Decimal):
        return format(value, "f")
    return value


def column_texts(table: pa.Table) -> pa.Table:
    """``table`` with each NUMERIC column as PostgreSQL's text of its values: a query's decimals
    (a quotient column's values at their own display scale), a quotient as DuckDB computes it from
    millpond's SQL (its text; a stored one divided)."""
    from millpond.engine.numerics import is_quotient
    from millpond.serve.display import quotient_texts, texts

    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type):
            table = table.set_column(i, pa.field(f.name, pa.string()), pa.array(texts(f, table.column(i)), pa.string()))
        elif is_quotient(f.type):
            table = table.set_column(i, pa.field(f.name, pa.string()), quotient_texts(table.column(i)))
    return table


def quotients_as_decimals(table: pa.Table) -> pa.Table:
    """``table`` with each quotient (its text, as DuckDB computes it from millpond's SQL) as a
    decimal column, as a query's result has it."""
    from millpond.serve.display import to_decimal
    from millpond.engine.numerics import is_quotient

    for i, f in enumerate(table.schema):
        if is_quotient(f.type):
            table = table.set_column(i, *to_decimal(f.name, table.column(i)))
    return table


def averages_as_text(sql: str) -> str:
    """DuckDB query ``sql`` with each ``AVG(x)`` of integers as PostgreSQL's numeric quotient of the
    exact sum and the count, as PostgreSQL prints it (a VARCHAR; on a connection :func:`register`
    gave the division): an oracle's plain DuckDB SQL (DuckDB averages integers as doubles) compared
    with millpond's AVG as PostgreSQL prints it."""
    import sqlglot
    from sqlglot import exp

    from millpond.pgnumeric import FIELD, UDF

    def average(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Avg):
            return node
        x = node.this.sql("duckdb")
        total, count = f"CAST(CAST(SUM({x}) AS HUGEINT) AS VARCHAR)", f"CAST(COUNT({x}) AS VARCHAR)"
        return exp.Var(this=f"STRUCT_EXTRACT({UDF}({total}, {count}), '{FIELD}')")
    return sqlglot.parse_one(sql, read="duckdb").transform(average).sql("duckdb")

"""PostgreSQL's numeric quotient as engine SQL (:mod:`millpond.engine.numerics`): Spark and DuckDB
print exactly what PostgreSQL prints for a few hundred quotients of drawn operands — integers,
fractions of every scale, zeros, powers of ten, first base-10000 digits equal (where PostgreSQL's
scale estimate is one digit group off), divisors of 20 to 30 significant digits (several steps of
the long division) — by way of an independent Python reference (:mod:`tests.pg_numeric`), itself
checked against a PostgreSQL server. And a query's decimal column prints each quotient at its own
display scale (:mod:`millpond.serve.display`).
"""

from __future__ import annotations

import random
import subprocess
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from millpond import duck
from millpond.engine.numerics import DIVISOR, FIELD, TOO_WIDE, defer, divide, text_of
from millpond.serve.display import SCALES, quotient_texts, texts, to_decimal
from tests import pg
from tests.pg_numeric import divide as reference


def _number(rng: random.Random) -> str:
    sign = "-" if rng.random() < 0.3 else ""
    if rng.random() < 0.08:
        return "0" + ("." + "0" * rng.randint(1, 4) if rng.random() < 0.5 else "")
    whole_digits = rng.choice([0, 1, 1, 2, 3, 4, 5, 8, 9, 12, 16, 19])
    scale = rng.choice([0, 0, 0, 1, 2, 4, 6, 10])
    whole = str(rng.randint(10 ** (whole_digits - 1), 10 ** whole_digits - 1)) if whole_digits else "0"
    if whole_digits > 1 and rng.random() < 0.2:  # a power of ten times a digit
        whole = whole[0] + "0" * (whole_digits - 1)
    fraction = "".join(rng.choice("0123456789") for _ in range(scale))
    if scale and rng.random() < 0.2:
        fraction = "0" * (scale - 1) + rng.choice("123456789")
    return sign + whole + ("." + fraction if scale else "")


def _pairs() -> list[tuple[str, str]]:
    rng = random.Random(5)
    drawn = [(_number(rng), _number(rng)) for _ in range(500)]
    fixed = [("1", "3"), ("5", "2"), ("5", "5"), ("6", "5"), ("1.5", "1"), ("3", "2"), ("15000", "10000"),
             ("0", "3"), ("-1", "3"), ("7", "0.001"), ("1", "30000"), ("9999", "10000"), ("10000", "9999"),
             ("-0.5", "2"), ("0.00005", "3"), ("123456789012345678", "7"), ("3", "1000000000000000000000000000000"),
             ("94263296", "3"), ("1", "0.333333333333333333333333333333")]
    return [(a, b) for a, b in drawn + fixed if Decimal(b) != 0]


PAIRS = _pairs()


def test_the_drawn_quotients_cover_the_hard_cases():
    assert sum(1 for a, b in PAIRS if len(b.replace("-", "").replace(".", "").strip("0")) >= 20) >= 10
    assert sum(1 for a, b in PAIRS if Decimal(a) == 0) >= 10
    assert len({reference(a, b).partition(".")[2].__len__() for a, b in PAIRS}) >= 10  # many display scales


def test_the_reference_divides_as_postgresql():
    reason = pg.unavailable()
    if reason:
        pytest.skip(f"{reason}: the Python reference was not checked against PostgreSQL")
    script = "\n".join(f"SELECT ('{a}'::numeric / '{b}'::numeric)::text;" for a, b in PAIRS)
    with pg.server() as server:
        out = subprocess.run(server.psql(), input=script, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = out.stdout.splitlines()
    assert len(got) == len(PAIRS)
    wrong = [(a, b, want, reference(a, b)) for (a, b), want in zip(PAIRS, got) if reference(a, b) != want]
    assert not wrong, wrong[:5]


def _values_sql(dialect: str) -> str:
    values = ", ".join(f"({i}, '{a}', '{b}')" for i, (a, b) in enumerate(PAIRS))
    return f"SELECT i, {divide(['t.a', 't.b'], dialect)} AS q FROM VALUES {values} AS t(i, a, b)"


def test_duckdb_divides_as_postgresql_with_millpond_s_function():
    """millpond's DuckDB (``millpond.duck``) divides with a Python function (``millpond.pgnumeric``:
    SQL like Spark's took DuckDB ~0.1 s a division to bind); same answers as PostgreSQL, NULLs,
    ``division by zero``, and no 38-digit limit (PostgreSQL has none)."""
    values = ", ".join(f"({i}, '{a}', '{b}')" for i, (a, b) in enumerate(PAIRS))
    con = duck.cursor()
    try:
        got = dict(con.sql(f"SELECT i, {divide(['t.a', 't.b'], 'duckdb')}.{FIELD} FROM (VALUES {values}) "
                           "AS t(i, a, b)").fetchall())
        assert [got[i] for i in range(len(PAIRS))] == [reference(a, b) for a, b in PAIRS]

        def q(a: str, b: str) -> list:
            return con.sql(f"SELECT {divide([a, b], 'duckdb')}").fetchall()
        assert q("NULL", "'0'") == [(None,)] and q("'1'", "NULL") == [(None,)]
        with pytest.raises(duckdb.Error, match="division by zero"):
            q("'1'", "'0.000'")
        wide = "1.2345678901234567890123456789012345678"
        assert q("'1'", f"'{wide}'")[0][0][FIELD] == reference("1", wide)
    finally:
        con.close()


def test_spark_divides_as_postgresql(spark):
    got = {r.i: r.q[FIELD] for r in spark.sql(_values_sql("spark")).collect()}
    wrong = [(a, b, got[i], reference(a, b)) for i, (a, b) in enumerate(PAIRS) if got[i] != reference(a, b)]
    assert not wrong, wrong[:5]


def test_too_many_digits_for_spark_s_division_is_an_error_that_says_so(spark):
    with pytest.raises(Exception, match=TOO_WIDE):  # a divisor of 38 significant digits
        spark.sql(f"SELECT {divide(['1', chr(39) + '1.2345678901234567890123456789012345678' + chr(39)], 'spark')}"
                  ).collect()


QUOTIENT = pa.struct([(FIELD, pa.string()), (DIVISOR, pa.string())])


def _quotients(texts: list[str | None], divisors: list[str | None] | None = None) -> pa.ChunkedArray:
    divisors = divisors or [None] * len(texts)
    return pa.chunked_array([pa.array([None if t is None else {FIELD: t, DIVISOR: d} for t, d in zip(texts, divisors)],
                                      QUOTIENT)])


def test_a_query_column_prints_each_quotient_at_its_own_scale():
    quotients = ["1.5000000000000000", "0.33333333333333333333", "-31421098.666666666667", None, "7"]
    f, col = to_decimal("q", _quotients(quotients))
    assert f.type == pa.decimal128(38, 20) and SCALES in f.metadata
    assert [None if v is None else Decimal(v) for v in quotients] == col.to_pylist()
    assert texts(f, col) == quotients
    one, col1 = to_decimal("q", _quotients(["2.5000000000000000"]))
    assert one.metadata is None and format(col1[0].as_py(), "f") == "2.5000000000000000"


def test_a_column_too_wide_for_38_digits_keeps_the_scale_that_fits():
    wide = ["123456789012345678901234.5", "0.000000000000000000012345678901234567890"]
    f, col = to_decimal("q", _quotients(wide))
    assert f.type == pa.decimal128(38, 14)  # 24 digits before the point
    assert texts(f, col) == ["123456789012345678901234.5", "0.000000000000000000000000000000000000000"]


def test_a_quotient_kept_undivided_reads_as_divided(spark):
    """Spark keeps a quotient's operands (``defer``); DuckDB, and Python for printing, divide them."""
    pairs = PAIRS[:60]
    rows = spark.sql(_values_sql("spark").replace(divide(["t.a", "t.b"], "spark"), defer(["t.a", "t.b"], "spark"))
                     ).collect()
    kept = {r.i: (r.q[FIELD], r.q[DIVISOR]) for r in rows}
    assert all(kept[i] == (a, b) for i, (a, b) in enumerate(pairs))
    values = ", ".join(f"({i}, {{'{FIELD}': '{a}', '{DIVISOR}': '{b}'}})" for i, (a, b) in enumerate(pairs))
    con = duck.cursor()
    try:
        got = dict(con.sql(f"SELECT i, {text_of(['t.q'], 'duckdb')} FROM (VALUES {values}) AS t(i, q)").fetchall())
    finally:
        con.close()
    assert [got[i] for i in range(len(pairs))] == [reference(a, b) for a, b in pairs]
    printed = quotient_texts(_quotients([a for a, _ in pairs], [b for _, b in pairs])).to_pylist()
    assert printed == [reference(a, b) for a, b in pairs]

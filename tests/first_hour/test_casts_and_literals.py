"""Values of one type stored into columns of another convert as PostgreSQL assigns them, on every
write path; literals of every column type work in INSERT, in views (Spark) and in queries (DuckDB).

The issue's reproductions: ``INSERT INTO items VALUES (1, 5)`` into a ``NUMERIC(10,2)`` column was
refused (``expects DECIMAL(10,2), got int32``), as were ``UPDATE ... SET price = 1``, a psycopg
integer parameter, ``db.insert`` of a pandas integer column and ``INSERT INTO t(n INT) VALUES
(2.6)``; ``'\\x0a0b'::bytea`` was refused (``constants of type bytea are not supported``).

``assignment_matrix.txt`` holds PostgreSQL's answer for each (value type x column type): millpond
must give it through SQL and through ``db.insert`` of the same value as Arrow (every other write
path goes through the same conversion); the lines are checked against a live server when one is
installed (skipped, saying so, when none is).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
import subprocess
from decimal import Decimal
from pathlib import Path

import pandas as pd
import polars as pl
import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from millpond.errors import MillpondError, SchemaError, SqlError
from millpond.log.assign import Unassignable, assign
from millpond.serve import pgtext
from tests import pg

MATRIX = Path(__file__).with_name("assignment_matrix.txt")
COLUMNS = {"smallint": "SMALLINT", "integer": "INT", "bigint": "BIGINT", "numeric(10,2)": "NUMERIC(10,2)",
           "real": "REAL", "double precision": "DOUBLE PRECISION", "text": "TEXT", "boolean": "BOOLEAN", "date": "DATE",
           "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ", "time": "TIME", "interval": "INTERVAL",
           "bytea": "BYTEA", "jsonb": "JSONB", "integer[]": "INT[]"}
TARGETS = list(COLUMNS)


def _load() -> list[tuple[str, str, str]]:
    cases = []
    for line in MATRIX.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        left, _, want = line.partition("  =>  ")
        target, _, source = left.partition("  <-  ")
        cases.append((target.strip(), source.strip(), json.loads(want) if want.startswith('"') else want))
    return cases


CASES = _load()

# where millpond answers otherwise, on purpose (docs/sql.md, "Assignment casts"): (column, value) -> why
DIFFERS = {
    ("text", "2.6::float8"): "a float's text is refused (PostgreSQL's shortest digits): cast it to NUMERIC first",
    ("text", "2.675::float8"): "as above",
    ("text", "2.5::real"): "as above",
    ("text", "ARRAY[1,2]"): "an array's text is not written into a text column",
    ("text", "ARRAY[1,2]::bigint[]"): "as above",
    ("time", "'\\x0a0b'"): "PostgreSQL reads \\x0a0b as a time zone (22023); millpond: invalid input syntax (22007)",
}


def _same(target: str, want: str, got: str) -> bool:
    """``got`` (millpond's stored text, or ``ERROR <SQLSTATE>: ...``) is PostgreSQL's ``want``."""
    if want.startswith("ERROR") or got.startswith("ERROR"):
        return want.split(":")[0] == got.split(":")[0]  # the same SQLSTATE
    if target in ("real", "double precision") and "NULL" not in (want, got):  # the wire's float text is its own
        return math.isclose(float(want), float(got), rel_tol=1e-6)
    return want == got


def _stored(db, cases: list[tuple[str, str, str]], write) -> dict[int, str]:  # noqa: ANN001
    """Each case written by ``write(k, column, case)`` into a row of its own of ``m``: the stored
    value's wire text, or ``ERROR <SQLSTATE>: <message>``."""
    db.sql("CREATE TABLE m (k INT PRIMARY KEY, " + ", ".join(f"c{i} {t}" for i, t in enumerate(COLUMNS.values())) + ")")
    got = {}
    for k, case in enumerate(cases):
        try:
            write(k, f"c{TARGETS.index(case[0])}", case)
        except MillpondError as exc:
            got[k] = f"ERROR {exc.sqlstate}: {exc}"
    db.flush()
    stored = {int(r[0]): r for r in pgtext.rows(db.sql("SELECT * FROM m"))}
    for k, (target, _, _) in enumerate(cases):
        if k not in got:
            value = stored[k][1 + TARGETS.index(target)]
            got[k] = "NULL" if value is None else value.decode()
    return got


def _report(cases: list[tuple[str, str, str]], got: dict[int, str], differs: dict) -> None:
    wrong = []
    for k, (target, source, want) in enumerate(cases):
        if (target, source) in differs:
            if not got[k].startswith("ERROR"):  # millpond refuses these by name
                wrong.append(f"{target} <- {source}: {differs[(target, source)]}, but it stored {got[k]!r}")
        elif not _same(target, want, got[k]):
            wrong.append(f"{target} <- {source}: PostgreSQL {want!r}, millpond {got[k]!r}")
    assert not wrong, f"{len(wrong)} of {len(cases)} assignments differ from PostgreSQL:\n" + "\n".join(wrong)


def test_sql_assignments_are_postgresql_s(open_db):
    db = open_db(parallelism=1)
    got = _stored(db, CASES, lambda k, col, case: db.sql(f"INSERT INTO m (k, {col}) VALUES ({k}, {case[1]})"))
    _report(CASES, got, DIFFERS)


# the matrix's SQL values as Arrow values (a string is text read by the column's input rules, as a
# quoted literal, a parameter or a COPY field is)
ARROW = {
    "5": pa.array([5], pa.int32()), "3000000000": pa.array([3000000000], pa.int64()),
    "5::smallint": pa.array([5], pa.int16()), "2.5": pa.array([Decimal("2.5")], pa.decimal128(2, 1)),
    "-2.5": pa.array([Decimal("-2.5")], pa.decimal128(2, 1)),
    "2147483647.5": pa.array([Decimal("2147483647.5")], pa.decimal128(11, 1)),
    "99999999.995": pa.array([Decimal("99999999.995")], pa.decimal128(11, 3)),
    "2.6::float8": pa.array([2.6]), "2.675::float8": pa.array([2.675]), "2.5::real": pa.array([2.5], pa.float32()),
    "'3'": pa.array(["3"]), "' 12 '": pa.array([" 12 "]), "'2.675'": pa.array(["2.675"]), "'abc'": pa.array(["abc"]),
    "'t'": pa.array(["t"]), "true": pa.array([True]), "NULL": pa.array([None], pa.null()),
    "DATE '2024-03-05'": pa.array([dt.date(2024, 3, 5)]),
    "TIMESTAMP '2024-03-05 12:34:56.5'": pa.array([dt.datetime(2024, 3, 5, 12, 34, 56, 500000)]),
    "TIMESTAMPTZ '2024-03-05 12:34:56+02'": pa.array([dt.datetime(2024, 3, 5, 10, 34, 56)], pa.timestamp("us", "UTC")),
    "TIME '12:34'": pa.array([dt.time(12, 34)], pa.time64("us")),
    "INTERVAL '1 day 02:00'": pa.array([pa.MonthDayNano([0, 1, 7200 * 10**9])], pa.month_day_nano_interval()),
    "'\\x0a0b'::bytea": pa.array([b"\n\x0b"]), "'\\x0a0b'": pa.array(["\\x0a0b"]),
    "ARRAY[1,2]": pa.array([[1, 2]], pa.list_(pa.int32())), "ARRAY[1,2]::bigint[]": pa.array([[1, 2]], pa.list_(pa.int64())),
    "'{1,2}'": pa.array(["{1,2}"]),
}
ARROW_DIFFERS = {  # and where Arrow values differ from SQL's
    **DIFFERS,
    ("text", "INTERVAL '1 day 02:00'"): "an interval's text is written in SQL only (INSERT ... SELECT iv)",
    **{(t, s): "an interval or an array is read from text in SQL only (an INSERT's string constant)"
       for t in ("interval", "integer[]") for s in ARROW if s.startswith("'")},
}


def test_arrow_assignments_are_postgresql_s(open_db):
    """``db.insert`` of each matrix value as Arrow (the path of pandas, polars, Spark DataFrames, files
    tables, wire parameters and the log's writers) stores what PostgreSQL stores."""
    db = open_db(parallelism=1)
    cases = [c for c in CASES if c[1] in ARROW]
    assert len(cases) >= 400

    def write(k: int, col: str, case: tuple[str, str, str]) -> None:
        db.insert("m", _row(db, k, col, ARROW[case[1]]))
    _report(cases, _stored(db, cases, write), ARROW_DIFFERS)


def _row(db, k: int, col: str, value: pa.Array) -> pa.Table:  # noqa: ANN001
    """One row of ``m``: key ``k``, ``value`` in ``col``, NULL elsewhere."""
    schema = db.catalog.tables["m"].schema
    return pa.table({f.name: (pa.array([k], pa.int32()) if f.name == "k" else value if f.name == col
                              else pa.nulls(1, f.type)) for f in schema})


def test_the_matrix_is_postgresql_s_own():
    reason = pg.unavailable()
    if reason:
        pytest.skip(f"{reason}: the matrix was not checked against PostgreSQL (millpond was, by the tests above)")
    script = ["CREATE TEMP TABLE m (" + ", ".join(f"c{i} {t}" for i, t in enumerate(TARGETS)) + ");",
              """CREATE FUNCTION pg_temp.try(col text, src text, OUT res text) AS $$
              BEGIN
                DELETE FROM m;
                EXECUTE format('INSERT INTO m(%I) VALUES (%s)', col, src);
                EXECUTE format('SELECT CASE WHEN %I IS NULL THEN ''NULL'' ELSE format(''%%s'', %I) END FROM m', col, col)
                  INTO res;
              EXCEPTION WHEN others THEN res := 'ERROR ' || SQLSTATE || ': ' || SQLERRM;
              END $$ LANGUAGE plpgsql;"""]
    script += [f"SELECT {k}, pg_temp.try('c{TARGETS.index(t)}', '{s.replace(chr(39), chr(39) * 2)}');"
               for k, (t, s, _) in enumerate(CASES)]
    with pg.server() as server:
        out = subprocess.run([*server.psql(), "-F", "\x1f"], input="\n".join(script), capture_output=True,
                             text=True, timeout=300, check=True).stdout
    answers = dict(line.split("\x1f", 1) for line in out.splitlines())
    wrong = [f"{t} <- {s}: PostgreSQL says {answers[str(k)]!r}, the matrix {want!r}"
             for k, (t, s, want) in enumerate(CASES) if answers[str(k)] != want]
    assert not wrong, "\n".join(wrong)


# -- the write paths ------------------------------------------------------------------------------
def test_the_issue_s_statements(open_db):
    db = open_db()
    db.sql("CREATE TABLE items (id BIGINT PRIMARY KEY, price NUMERIC(10,2)); CREATE TABLE t (n INT)")
    db.sql("INSERT INTO items VALUES (1, 5)")
    db.sql("INSERT INTO items VALUES (3, 7), (4, 10.50)")
    db.sql("INSERT INTO t VALUES (2.6), (-2.5), (2.5)")  # numeric to integer: half away from zero
    db.flush()
    db.sql("UPDATE items SET price = 1 WHERE id = 3")
    db.sql("UPDATE items SET price = price * 1.005 WHERE id = 4")  # 10.5525 rounds to 10.55
    db.flush()
    assert db.sql("SELECT id, price FROM items ORDER BY id").to_pylist() == [
        {"id": 1, "price": Decimal("5.00")}, {"id": 3, "price": Decimal("1.00")}, {"id": 4, "price": Decimal("10.55")}]
    assert sorted(db.sql("SELECT n FROM t").column("n").to_pylist()) == [-3, 3, 3]
    with pytest.raises(SchemaError, match=r"table 'items': column 'price' expects DECIMAL\(10,2\), got int32 at row 1 "
                                          r"\(value 123456789\): numeric field overflow") as err:
        db.sql("INSERT INTO items VALUES (5, 1), (6, 123456789)")
    assert err.value.sqlstate == "22003"
    with pytest.raises(SchemaError, match=r"column 'n' expects INT, got int64 at row 0 \(value 3000000000\): "
                                          r"integer out of range") as err:
        db.sql("INSERT INTO t VALUES (3000000000)")
    assert err.value.sqlstate == "22003"
    with pytest.raises(SqlError, match='column "n" is of type integer but expression is of type text') as err:
        db.sql("INSERT INTO t SELECT CAST(id AS TEXT) FROM items")
    assert err.value.sqlstate == "42804"
    db.flush()
    assert db.sql("SELECT count(*) AS n FROM items").column("n").to_pylist() == [3]  # nothing of a refused batch


def test_db_insert_of_pyarrow_pandas_and_polars_columns(open_db):
    db = open_db()
    db.sql("CREATE TABLE items (id BIGINT PRIMARY KEY, price NUMERIC(10,2), qty INT, day DATE, paid BOOLEAN)")
    db.insert("items", pa.table({"id": [1, 2], "price": pa.array([5, 7], pa.int32()), "qty": [2.5, 3.5],
                                 "day": ["2024-03-05", " 2024-03-06 "], "paid": ["yes", "off"]}))
    db.insert("items", pd.DataFrame({"id": [3, 4], "price": [2.675, 1.005], "qty": [4, 5],
                                     "day": pd.to_datetime(["2024-03-07 23:59", "2024-03-08 00:00"]), "paid": [True, None]}))
    db.insert("items", pl.DataFrame({"id": [5], "price": ["9.995"], "qty": [Decimal("-2.5")], "day": [None],
                                     "paid": ["t"]}))
    db.flush()
    assert [tuple(r.values()) for r in db.sql("SELECT * FROM items ORDER BY id").to_pylist()] == [
        (1, Decimal("5.00"), 2, dt.date(2024, 3, 5), True),  # a float half to even, as PostgreSQL's float8 -> int
        (2, Decimal("7.00"), 4, dt.date(2024, 3, 6), False),
        (3, Decimal("2.68"), 4, dt.date(2024, 3, 7), True),  # 2.675 read as its 15 digits, then half away from zero
        (4, Decimal("1.01"), 5, dt.date(2024, 3, 8), None),
        (5, Decimal("10.00"), -3, None, True)]  # a numeric half away from zero
    with pytest.raises(SchemaError, match=r"column 'price' expects DECIMAL\(10,2\), got int64 at row 1 .*"
                                          r"numeric field overflow") as err:
        db.insert("items", pd.DataFrame({"id": [6, 7], "price": [1, 10**8], "qty": [1, 1],
                                         "day": [None, None], "paid": [None, None]}))
    assert err.value.sqlstate == "22003"
    with pytest.raises(SchemaError, match=r"column 'paid' expects BOOLEAN, got int64: PostgreSQL does not assign "
                                          r"a value of type integer to a column of type boolean") as err:
        db.insert("items", pl.DataFrame({"id": [8], "price": [1], "qty": [1], "day": [None], "paid": [1]}))
    assert err.value.sqlstate == "42804"


def test_a_psycopg_parameter_over_millpond_serve(open_db):
    db = open_db()
    db.sql("CREATE TABLE items (id BIGINT PRIMARY KEY, price NUMERIC(10,2), label BYTEA)")
    db.sql("CREATE TABLE counts (id BIGINT PRIMARY KEY, n INT)")
    server = db.serve(port=0)
    try:
        with psycopg.connect(host="127.0.0.1", port=server.port, user="anyone", dbname="millpond",
                             autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (%s, %s, %s)", (1, 5, b"\n\x0b"))
            conn.execute("INSERT INTO items (id, price) VALUES (%s, %s)", (2, "2.675"))
            with pytest.raises(psycopg.Error) as err:
                conn.execute("INSERT INTO items (id, price) VALUES (%s, %s)", (3, 10**9))
            assert err.value.sqlstate == "22003" and "numeric field overflow" in str(err.value)
            # a float parameter is a float8: into an integer it rounds half to even, as PostgreSQL's does
            conn.execute("INSERT INTO counts VALUES (%s, %s), (%s, %s)", (1, 2.5, 2, 3.5))
            conn.execute("FLUSH")
            assert conn.execute("SELECT id, price, label FROM items ORDER BY id").fetchall() == [
                (1, Decimal("5.00"), b"\n\x0b"), (2, Decimal("2.68"), None)]
            assert conn.execute("SELECT id, n FROM counts ORDER BY id").fetchall() == [(1, 2), (2, 4)]
    finally:
        server.close()


def test_a_files_table_of_integers_into_numeric(open_db, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    pacsv.write_csv(pa.table({"id": [1, 2], "price": [5, 12]}), folder / "a.csv")  # read as int64
    db = open_db()
    db.sql(f"CREATE TABLE items (id BIGINT PRIMARY KEY, price NUMERIC(10,2)) "
           f"WITH (connector = 'files', path = '{folder}', format = 'csv')")
    db.flush()
    assert db.sql("SELECT id, price FROM items ORDER BY id").to_pylist() == [
        {"id": 1, "price": Decimal("5.00")}, {"id": 2, "price": Decimal("12.00")}]


# -- literals of every column type ----------------------------------------------------------------
LITERALS = ["'\\x0a0b'::bytea", "'abc'::bytea", "'a\\\\b\\141'::bytea", "''::bytea", "TIME '12:34'",
            "'12:34:56.5'::time", "'{\"b\": 1, \"a\": [1, 2.50]}'::jsonb", "ARRAY[1,2]", "'{1,2}'::int[]",
            "'{{1,2},{3,4}}'::int[][]", "'{\"a b\",NULL}'::text[]", "ROW(1, 'a b')", "ROW(1, NULL, 2.5)",
            "INTERVAL '1 day 02:00'", "'1 mon 3 days'::interval"]


def test_literals_in_views_and_queries_are_postgresql_s(open_db):
    """Each literal in a view (Spark) and in a query (DuckDB) prints as PostgreSQL prints it."""
    pg.check_expressions(open_db(), "", "", LITERALS)


def test_record_and_map_literals_in_views_queries_and_inserts(open_db):
    db = open_db()
    db.sql("CREATE TABLE one (k INT PRIMARY KEY, s STRUCT<a INT, b VARCHAR>, m MAP(VARCHAR, INT), b BYTEA)")
    db.sql("INSERT INTO one VALUES (1, '(1,\"x y\")', '{a:1,b:NULL}', '\\x0a0b')")
    db.sql("INSERT INTO one VALUES (2, ROW(2, 'y'), NULL, 'abc')")  # a row's fields by position
    literals = {"'(1,x)'::STRUCT<a INT, b VARCHAR>": "(1,x)", "'{a:1,b:NULL}'::MAP(VARCHAR, INT)": "{a:1,b:NULL}",
                "'{}'::MAP(VARCHAR, INT)": "{}"}
    for i, e in enumerate(literals):
        db.sql(f"CREATE MATERIALIZED VIEW e{i} AS SELECT {e} AS v FROM one WHERE k = 1")
    db.flush()
    for i, (e, want) in enumerate(literals.items()):
        assert [v.decode() for (v,) in pgtext.rows(db.sql(f"SELECT v FROM e{i}"))] == [want], e
        assert [v.decode() for (v,) in pgtext.rows(db.sql(f"SELECT {e} AS v FROM one WHERE k = 1"))] == [want], e
    rows = [[None if v is None else v.decode() for v in r] for r in pgtext.rows(db.sql("SELECT * FROM one ORDER BY k"))]
    assert rows == [["1", '(1,"x y")', "{a:1,b:NULL}", "\\x0a0b"], ["2", "(2,y)", None, "\\x616263"]]
    with pytest.raises(SqlError, match=r'malformed record literal: "\(1\)": too few columns') as err:
        db.sql("INSERT INTO one (k, s) VALUES (3, '(1)')")
    assert err.value.sqlstate == "22P02"
    with pytest.raises(SqlError, match='invalid hexadecimal digit: "z"') as err:
        db.sql("INSERT INTO one (k, b) VALUES (3, '\\xzz')")
    assert err.value.sqlstate == "22023"


def test_floats_into_numeric_are_read_as_postgresql_reads_them():
    """A float into NUMERIC(p,s): its 15 significant digits (6 of a REAL), as PostgreSQL's
    ``float8_numeric`` prints them (``%.15g``), rounded half away from zero to the scale; any scale,
    magnitude and sign, and the row that overflows."""
    decimal.getcontext().prec = 120
    rng = random.Random(7)
    for _ in range(300):
        values = [rng.choice([rng.uniform(-1, 1) * 10 ** rng.randint(-20, 25), round(rng.uniform(-100, 100), 3),
                              rng.randint(-10**9, 10**9) / 8]) for _ in range(20)] + [None]
        p = rng.randint(1, 38)
        s = rng.randint(0, p)
        real = rng.random() < 0.2
        arr = pa.array(values, pa.float32() if real else pa.float64()).slice(rng.randint(0, 3))
        want = [None if v is None else Decimal(("%.6g" if real else "%.15g") % v).quantize(
            Decimal(1).scaleb(-s), rounding=decimal.ROUND_HALF_UP) for v in arr.to_pylist()]
        over = [i for i, w in enumerate(want) if w is not None and abs(w) >= Decimal(10) ** (p - s)]
        try:
            assert assign(pa.chunked_array([arr]), pa.decimal128(p, s)).to_pylist() == want, (p, s, real)
            assert not over, f"no overflow for {arr[over[0]]} into numeric({p},{s})"
        except Unassignable as exc:
            assert over and exc.row == over[0] and exc.reason.startswith("numeric field overflow"), (p, s, exc)

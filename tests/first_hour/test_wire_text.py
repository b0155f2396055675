"""What psql shows is what PostgreSQL shows: a ``double precision`` or ``real`` prints its shortest
digits, a whole number without ``.0`` (``date_part`` gave ``3.0`` where PostgreSQL gives ``3``), and
exponents from 1e15 (1e6 for a real) on — in a query (DuckDB) and from a view (Spark) alike,
compared with a PostgreSQL server's text for the same values."""

from __future__ import annotations

import subprocess

import pytest

from tests import pg

VALUES = ["3::float8", "-(0::float8)", "1e15::float8", "1e16::float8", "123456789012345.6::float8", "0.0001::float8",
          "0.00001::float8", "(100::float8 / 3)", "1.5::float4", "1.1::float4", "3::float4", "1e7::float4",
          "16777216::float4", "999999::float4", "12345.678::float4", "'NaN'::float8", "'-Infinity'::float8",
          "date_part('month', TIMESTAMP '2024-03-05 10:00')", "avg(x)"]

# PostgreSQL 15's text of each of VALUES (over t(x) = 1, 2, 3 and 6)
EXPECTED = ["3", "-0", "1e+15", "1e+16", "123456789012345.6", "0.0001", "1e-05", "33.333333333333336", "1.5", "1.1",
            "3", "1e+07", "1.6777216e+07", "999999", "12345.678", "NaN", "-Infinity", "3", "3"]


def _psql(args: list[str], sql: str) -> list[str]:
    done = subprocess.run(args, input=sql, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_psql_shows_floats_as_postgresql_does(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, x DOUBLE)")
    db.sql("INSERT INTO t VALUES (1, 1), (2, 2), (3, 3), (4, 6)")
    items = ", ".join(f"{v} AS c{i}" for i, v in enumerate(VALUES))
    db.sql(f"CREATE MATERIALIZED VIEW shown AS SELECT {items} FROM t")
    db.flush()
    server = db.serve(port=0)
    try:
        psql = ["psql", "-h", "127.0.0.1", "-p", str(server.port), "-U", "u", "-d", "d", "-X", "-A", "-t", "-q",
                "-F", "|", "-v", "ON_ERROR_STOP=1"]
        query = _psql(psql, f"SELECT {items} FROM t;")[0].split("|")
        view = _psql(psql, "SELECT * FROM shown;")[0].split("|")
    finally:
        server.close()
    assert query == EXPECTED
    assert view == EXPECTED
    if (reason := pg.unavailable()) is not None:
        pytest.skip(f"millpond's text is checked; PostgreSQL's own is not: {reason}")
    with pg.server() as server:
        out = _psql([*server.psql(), "-F", "|"], f"CREATE TABLE t (k int, x float8); INSERT INTO t VALUES "
                                                 f"(1, 1), (2, 2), (3, 3), (4, 6); SELECT {items} FROM t;")
    assert out[-1].split("|") == EXPECTED

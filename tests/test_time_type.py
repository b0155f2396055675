"""TIME columns (time of day, microseconds): in from SQL, Arrow and Spark, compared, grouped, ordered
and cast as PostgreSQL does — views checked against DuckDB after every epoch, expressions against a
PostgreSQL server."""

from __future__ import annotations

import datetime
import random

import duckdb
import pyarrow as pa
import pytest

from millpond import MillpondError
from millpond.serve import pgtext
from tests import pg

VIEWS = {
    "late": "SELECT k, t, t > '12:00'::time AS pm FROM s WHERE t IS NOT NULL",
    "by_time": "SELECT t, count(*) AS c FROM s GROUP BY t",
    "span": "SELECT g, min(t) AS lo, max(t) AS hi, count(DISTINCT t) AS n FROM s GROUP BY g",
    "of_ts": "SELECT k, CAST(ts AS TIME) AS tt FROM s",
}


def _time(rng: random.Random) -> datetime.time | None:
    if rng.random() < 0.1:
        return None
    return datetime.time(rng.randrange(24), rng.choice([0, 30, 59]), rng.choice([0, 1]), rng.choice([0, 250000, 7]))


def test_views_over_times_equal_duckdb_after_every_epoch(open_db):
    db = open_db()
    db.sql("CREATE TABLE s (k INT PRIMARY KEY, g INT, t TIME, ts TIMESTAMP)")
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    rng = random.Random(3)
    current: dict[int, dict] = {}
    schema = pa.schema([("k", pa.int32()), ("g", pa.int32()), ("t", pa.time64("us")), ("ts", pa.timestamp("us"))])
    oracle = duckdb.connect()
    for epoch in range(6):
        batch = {k: {"k": k, "g": rng.randrange(3), "t": _time(rng),
                     "ts": datetime.datetime(2024, 1, 1, rng.randrange(24), rng.randrange(60), 0, rng.choice([0, 5]))}
                 for k in rng.sample(range(30), rng.randint(3, 10))}
        gone = [k for k in current if rng.random() < 0.2 and k not in batch]
        db.insert("s", pa.Table.from_pylist(list(batch.values()), schema=schema))
        if gone:
            db.sql(f"DELETE FROM s WHERE k IN ({', '.join(map(str, gone))})")
        current.update(batch)
        for k in gone:
            del current[k]
        db.flush()
        oracle.register("s", pa.Table.from_pylist(list(current.values()), schema=schema))
        for name, sql in VIEWS.items():
            got = sorted(map(repr, db.sql(f"SELECT * FROM {name}").to_pylist()))
            want = sorted(map(repr, oracle.sql(sql).to_arrow_table().to_pylist()))
            assert got == want, f"epoch {epoch}, view {name}"
    assert db.sql("SELECT t FROM s WHERE t IS NOT NULL ORDER BY t LIMIT 1").schema.field("t").type.bit_width == 64


def test_times_from_spark_and_on_the_wire(open_db, spark):
    db = open_db()
    db.sql("CREATE TABLE s (k INT PRIMARY KEY, t TIME); CREATE MATERIALIZED VIEW v AS SELECT * FROM s")
    df = spark.createDataFrame(pa.table({"k": pa.array([1, 2], pa.int32()),
                                         "t": pa.array([datetime.time(8, 30, 0, 500000), None], pa.time64("us"))}))
    db.insert("s", df)
    db.flush()
    result = db.sql("SELECT * FROM v ORDER BY k")
    assert [pgtext.oid(f.type) for f in result.schema] == [23, 1083]
    assert list(pgtext.rows(result)) == [[b"1", b"08:30:00.5"], [b"2", None]]
    assert db.sql("DESCRIBE v").to_pylist()[1]["type"] == "TIME"


EXPRESSIONS = ["'08:30'::time", "'23:59:59.250'::time", "'08:30'::time < '9:00'::time",
               "CAST('2024-05-01 10:11:12.5'::timestamp AS time)", "'12:00'::time = '12:00:00.000'::time",
               "t", "t > '07:00'"]


def test_time_operations_give_postgresql_s_answers(open_db):
    pg.check_expressions(open_db(), "t TIME", "'07:05:00.125'", EXPRESSIONS)


def test_a_time_that_is_not_one_is_refused(open_db):
    db = open_db()
    db.sql("CREATE TABLE s (k INT PRIMARY KEY, t TIME)")
    with pytest.raises(MillpondError, match="invalid input syntax for type time"):
        db.sql("SELECT '25:00'::time")
    with pytest.raises(MillpondError, match=r'invalid input syntax for type time: "noon" .*\(line 1, column 26\)'):
        db.sql("INSERT INTO s VALUES (1, 'noon')")  # read as a time where it is written, as PostgreSQL reads it

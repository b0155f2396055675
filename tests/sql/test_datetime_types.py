"""INTERVAL and TIMESTAMPTZ columns, stored and computed, through materialized views: GROUP BY an
interval (``'24 hours'`` and ``'1 day'`` are one group), MIN/MAX/SUM/AVG/count(DISTINCT) of intervals,
DISTINCT, PostgreSQL's text output, instants with offsets — over inserts, updates and deletes. After
each change every view equals the same query answered ad hoc (DuckDB) and, where a PostgreSQL server
is installed, PostgreSQL's answer to the same statements.

Which member of a group of equal intervals PostgreSQL shows is its choice (the first it hashed);
millpond shows the one with the fewest months, then days. Those columns compare by span, the rest by
PostgreSQL's text.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from decimal import Decimal

import pyarrow as pa
import pytest

from millpond.errors import SqlError
from tests.slt.values import interval_text

try:
    from tests import pg
except ImportError:  # the PostgreSQL helper is not there: the DuckDB comparison still runs
    pg = None

SCHEMA = "CREATE TABLE ev (k INT, d INTERVAL, at TIMESTAMPTZ, started TIMESTAMP)"
PG_SCHEMA = "CREATE TABLE ev (k integer, d interval, at timestamptz, started timestamp);"

# view -> (query, columns compared by span: a group's interval, whichever member it shows)
VIEWS = {
    "by_d": ("SELECT d, count(*) AS n, min(at) AS first_at, max(at) AS last_at FROM ev GROUP BY d", {"d"}),
    "ranges": ("SELECT k % 2 AS g, min(d) AS lo, max(d) AS hi, sum(d) AS total, avg(d) AS mean, "
               "count(DISTINCT d) AS nd, max(at) AS last_at FROM ev GROUP BY k % 2", {"lo", "hi"}),
    "distinct_d": ("SELECT DISTINCT d FROM ev", {"d"}),
    "detail": ("SELECT k, d, d::text AS d_text, at, at::text AS at_text, at - started AS waited, "
               "date_trunc('hour', at) AS hour, at + d AS due, EXTRACT(EPOCH FROM d) AS secs, justify_hours(d) AS jh, "
               "at > TIMESTAMP '2024-03-05 08:30:00' AND d < INTERVAL '2 days' AS soon FROM ev", set()),
}

STEPS = [
    """INSERT INTO ev VALUES (1, '1 day', '2024-03-05 10:00:00+02', '2024-03-05 07:30:00'),
       (2, '24 hours', '2024-03-05 08:00:00+00', '2024-03-04 08:00:00'),
       (3, '1 mon', '2024-03-01 00:00:00-05', '2024-02-28 00:00:00'),
       (4, '30 days', '2024-03-06 12:00:00Z', NULL),
       (5, '-1 days +02:00:00', NULL, '2024-03-05 00:00:00'),
       (6, NULL, '2024-03-07 23:59:59.5+00', '2024-03-07 00:00:00'),
       (7, '90 minutes', '2024-03-05 09:00:00+00', '2024-03-05 09:00:00')""",
    "UPDATE ev SET d = d + INTERVAL '1 hour', at = at + INTERVAL '1 day' WHERE k IN (1, 3)",
    "DELETE FROM ev WHERE k = 2 OR d = INTERVAL '-22 hours'",
    """INSERT INTO ev VALUES (8, '25 hours', '2024-03-08 00:00:00+05:30', '2024-03-07 12:00:00'),
       (9, '1 day 01:00:00', '2024-02-29 23:00:00-01', '2024-02-29 23:00:00'),
       (10, '1 mon 2 days', '2024-03-05 08:30:00.25+00', '2024-03-05 08:30:00')""",
]


# -- PostgreSQL's text of a value ----------------------------------------------------------------
def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, pa.MonthDayNano):
        return interval_text(value.months, value.days, value.nanoseconds // 1000)
    if isinstance(value, dt.datetime):
        utc = value.tzinfo is not None
        value = value.astimezone(dt.timezone.utc) if utc else value
        fraction = f".{value.microsecond:06d}".rstrip("0") if value.microsecond else ""
        return value.strftime("%Y-%m-%d %H:%M:%S") + fraction + ("+00" if utc else "")
    return str(value)


_UNITS = {"year": 12 * 30 * 86_400_000_000, "mon": 30 * 86_400_000_000, "day": 86_400_000_000}


def _span(text: str | None) -> int | None:
    """An interval's span in microseconds (a month is 30 days), from PostgreSQL's text."""
    if text is None:
        return None
    total = sum(int(n) * _UNITS[u] for n, u in re.findall(r"([+-]?\d+) (year|mon|day)s?", text))
    clock = re.search(r"([+-]?)(\d+):(\d\d):(\d\d(?:\.\d+)?)$", text)
    if clock:
        micros = (int(clock.group(2)) * 3600 + int(clock.group(3)) * 60) * 10**6 + int(Decimal(clock.group(4)) * 10**6)
        total += -micros if clock.group(1) == "-" else micros
    return total


def _rows(table: pa.Table, by_span: set[str]) -> list[tuple]:
    cols = table.column_names
    out = []
    for row in table.to_pylist():
        out.append(tuple(_span(_text(row[c])) if c in by_span else _text(row[c]) for c in cols))
    return sorted(out, key=lambda r: tuple((v is not None, str(v)) for v in r))


# -- PostgreSQL ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def postgres():
    """``psql`` arguments for a throwaway PostgreSQL server, or None when none can be started."""
    if pg is None or pg.unavailable():
        yield None
        return
    with pg.server() as server:
        yield server.psql()


def _pg_rows(psql: list[str], statements: list[str], query: str, columns: list[str], by_span: set[str]) -> list[tuple]:
    """The rows PostgreSQL answers ``query`` with after ``statements``, as PostgreSQL's text."""
    select = ", ".join(f"{c}::text AS {c}" for c in columns)
    script = "\n".join(["BEGIN;", PG_SCHEMA, *(s + ";" for s in statements),
                        f"SELECT coalesce(json_agg(x), '[]') FROM (SELECT {select} FROM ({query}) q) x;", "ROLLBACK;"])
    out = subprocess.run(psql, input=script, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    booleans = {"true": "t", "false": "f"}  # bool::text spells them out; the value's text is t/f
    rows = [tuple(_span(r[c]) if c in by_span else booleans.get(r[c], r[c]) for c in columns) for r in got]
    return sorted(rows, key=lambda r: tuple((v is not None, str(v)) for v in r))


def test_interval_and_timestamptz_columns_through_views(open_db, postgres):
    db = open_db(parallelism=1)
    db.sql(SCHEMA)
    for name, (query, _) in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    done: list[str] = []
    for step in STEPS:
        db.sql(step)
        done.append(step)
        db.flush()
        for name, (query, by_span) in VIEWS.items():
            view = db.sql(f"SELECT * FROM {name}")
            assert _rows(view, by_span) == _rows(db.sql(query), by_span), f"{name} after: {step}"
            if postgres is not None:
                want = _pg_rows(postgres, done, query, view.column_names, by_span)
                assert _rows(view, by_span) == want, f"{name} differs from PostgreSQL after: {step}"
        if len(done) == 1:  # '1 day' and '24 hours' are one group, '1 mon' and '30 days' another
            groups = {(_text(r["d"]), r["n"]) for r in db.sql("SELECT * FROM by_d").to_pylist()}
            assert ("24:00:00", 2) in groups and ("30 days", 2) in groups, groups  # the fewest months, then days
            assert db.sql("SELECT count(*) AS c FROM distinct_d").column("c").to_pylist() == [5]  # with NULL
    # what a user gets back: month_day_nano intervals, UTC instants
    detail = db.sql("SELECT * FROM detail WHERE k = 8")
    assert detail.schema.field("d").type == pa.month_day_nano_interval()
    assert detail.schema.field("at").type == pa.timestamp("us", tz="UTC")
    row = detail.to_pylist()[0]
    assert row["d"] == pa.MonthDayNano([0, 0, 25 * 3600 * 10**9]) and row["d_text"] == "25:00:00"
    assert row["at"] == dt.datetime(2024, 3, 7, 18, 30, tzinfo=dt.timezone.utc)
    assert row["at_text"] == "2024-03-07 18:30:00+00" and _text(row["waited"]) == "06:30:00"


def test_a_timestamp_difference_keeps_its_days(open_db):
    """``b - a`` is ``21 days 23:59:59`` (not ``527:59:59``), in a view and a SELECT."""
    db = open_db(parallelism=1)
    db.sql("CREATE TABLE ts (a TIMESTAMP, b TIMESTAMP)")
    db.sql("INSERT INTO ts VALUES ('2022-07-19 12:31:23', '2022-08-10 12:31:22')")
    db.sql("CREATE MATERIALIZED VIEW m AS SELECT b - a AS d, (b - a)::text AS t, a - b AS back FROM ts")
    db.flush()
    want = [{"d": pa.MonthDayNano([0, 21, 86_399 * 10**9]), "t": "21 days 23:59:59",
             "back": pa.MonthDayNano([0, -21, -86_399 * 10**9])}]
    assert db.sql("SELECT * FROM m").to_pylist() == want
    assert db.sql("SELECT b - a AS d, (b - a)::text AS t, a - b AS back FROM ts").to_pylist() == want


def test_what_is_refused_is_refused_by_name(open_db):
    db = open_db(parallelism=1)
    db.sql("CREATE TABLE r (d INTERVAL, s VARCHAR, at TIMESTAMPTZ)")
    refused = {
        "SELECT d FROM r ORDER BY d LIMIT 3": "ORDER BY an INTERVAL with LIMIT",
        "SELECT DISTINCT ON (d) d, s FROM r ORDER BY d, s": "DISTINCT ON an INTERVAL",
        "SELECT s::interval AS x FROM r": "casting text to interval",
        "SELECT s::timestamptz AS x FROM r": "casting text to timestamp with time zone",
        "SELECT greatest(d, d) AS x FROM r": "greatest of intervals",
        "SELECT sum(DISTINCT d) AS x FROM r": "sum(DISTINCT interval)",
    }
    for query, message in refused.items():
        with pytest.raises(SqlError, match=re.escape(message)):
            db.sql(f"CREATE MATERIALIZED VIEW bad AS {query}")
    with pytest.raises(Exception, match="INTERVAL"):
        db.sql("CREATE TABLE bad (d INTERVAL DAY TO SECOND)")
    assert "bad" not in db.catalog.views and "bad" not in db.catalog.tables


def test_a_large_append_reads_timestamptz_and_intervals_through_the_log_source(open_db):
    """An epoch reading more than ``DRIVER_READ_ROWS`` records goes through the log's
    Spark data source, whose Arrow schema failed on a TIMESTAMPTZ column (Spark's TIMESTAMP)."""
    from millpond.spark.build import DRIVER_READ_ROWS

    db = open_db(parallelism=1)
    db.sql("CREATE TABLE z (k INT, t TIMESTAMPTZ, d INTERVAL)")
    db.sql("CREATE MATERIALIZED VIEW first AS SELECT t FROM z WHERE k < 2")
    aggregates = "SELECT count(*) AS n, max(t) AS hi, sum(d) AS total, max(d) AS longest FROM z"
    db.sql(f"CREATE MATERIALIZED VIEW agg AS {aggregates}")
    n = DRIVER_READ_ROWS + 10
    base = dt.datetime(2001, 1, 1, 18, tzinfo=dt.timezone.utc)
    instants = [base + dt.timedelta(seconds=i) for i in range(n)]
    db.insert("z", pa.table({"k": pa.array(range(n), pa.int32()), "t": pa.array(instants, pa.timestamp("us", tz="UTC")),
                             "d": pa.array([dt.timedelta(minutes=i) for i in range(n)])}))  # Python timedeltas
    db.flush()
    assert sorted(db.sql("SELECT t FROM first").column("t").to_pylist()) == instants[:2]
    query = "SELECT n, hi, total::text AS total, longest::text AS longest FROM {}"
    got = db.sql(query.format("agg")).to_pylist()
    assert got == db.sql(query.format(f"({aggregates}) q")).to_pylist()
    last = n - 1  # minutes: a timedelta is read as days and the time under a day
    assert got[0]["hi"] == base + dt.timedelta(seconds=last)
    assert got[0]["longest"] == interval_text(0, last // 1440, (last % 1440) * 60_000_000)


def test_timestamptz_means_utc_whatever_spark_s_session_time_zone(open_db, spark, tmp_path):
    """millpond's TimeZone is UTC: a view computes the same in a Spark session set to another zone
    (around its DST changes), and agrees with the ad-hoc SELECT."""
    query = """SELECT k, t, t::text AS s, t::timestamp AS w, t::date AS d, date_trunc('day', t) AS day,
                      t + INTERVAL '1 day' AS next_day, EXTRACT(HOUR FROM t) AS h, to_char(t, 'YYYY-MM-DD HH24:MI') AS c,
                      t - ts AS lag, ts::timestamptz AS tt, t > ts AS later FROM z"""
    answers = []
    zone = spark.conf.get("spark.sql.session.timeZone")
    try:
        for session_zone in ("UTC", "America/New_York"):
            spark.conf.set("spark.sql.session.timeZone", session_zone)
            db = open_db(parallelism=1, path=str(tmp_path / session_zone.replace("/", "-")))
            db.sql("CREATE TABLE z (k INT, t TIMESTAMPTZ, ts TIMESTAMP)")
            db.sql("""INSERT INTO z VALUES (1, '2024-03-10 06:30:00+00', '2024-03-10 01:30:00'),
                                           (2, '2024-11-03 01:59:59.5-04', '2024-11-03 23:00:00')""")
            db.sql(f"CREATE MATERIALIZED VIEW v AS {query}")
            db.flush()
            view = sorted(db.sql("SELECT * FROM v").to_pylist(), key=lambda r: r["k"])
            assert view == sorted(db.sql(query).to_pylist(), key=lambda r: r["k"])
            answers.append(view)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert answers[0] == answers[1]
    assert [r["s"] for r in answers[0]] == ["2024-03-10 06:30:00+00", "2024-11-03 05:59:59.5+00"]
    assert [_text(r["lag"]) for r in answers[0]] == ["05:00:00", "-17:00:00.5"]

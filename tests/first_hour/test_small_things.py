"""Small things a new user meets in the first hour: ``SHOW SINKS`` after a restart and in a
read-only open, the types psql's ``\\d`` prints, ``millpond pipeline run``'s counts, the claims of
docs/limits.md. Each test failed on main before its fix (issue: first contact)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import millpond
from tests import pg


def _sinks(db: millpond.Database) -> dict[str, tuple]:
    return {r["name"]: (r["epoch"], r["lag"], r["error"]) for r in db.sql("SHOW SINKS").to_pylist()}


def test_show_sinks_reads_the_epoch_back_after_a_restart_and_in_a_read_only_open(open_db, root, tmp_path):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE TABLE other (x INT)")
    db.sql("INSERT INTO t VALUES (1, 10)")
    db.flush()
    db.sql(f"CREATE SINK s FROM t WITH (connector = 'deltalake', location = '{tmp_path / 'out'}', type = 'upsert')")
    db.sql("INSERT INTO t VALUES (2, 20)")
    db.flush()
    written = db.epoch
    assert _sinks(db) == {"s": (written, 0, None)}
    db.close()

    again = open_db()  # a restart: no epoch has run in this process yet
    assert _sinks(again) == {"s": (written, 0, None)}
    reader = millpond.connect(root, read_only=True)
    try:
        assert _sinks(reader) == {"s": (written, 0, None)}
        again.sql("INSERT INTO other VALUES (1)")  # an epoch that does not change t: kept under the root
        again.flush()
        again.sql("INSERT INTO t VALUES (3, 30)")
        again.flush()
        now = again.epoch
        assert now > written + 1
        assert _sinks(again) == {"s": (now, 0, None)}
        assert _sinks(reader) == {"s": (now, 0, None)}  # the reader follows the writer's target
    finally:
        reader.close()


# psql's \d of a table and two views of every column type, as PostgreSQL 15 prints it (-A -t: name,
# type, collation, nullable, default); a live server, where one starts, is asked too
DESCRIBED_SQL = """
CREATE TABLE t (k INT PRIMARY KEY, b BOOLEAN, s SMALLINT, i INT, big BIGINT, r REAL, d DOUBLE PRECISION,
  txt TEXT, by BYTEA, j JSONB, dt DATE, tm TIME, ts TIMESTAMP, tz TIMESTAMPTZ, iv INTERVAL, n NUMERIC(10,2),
  ia INT[], ta TEXT[]);
CREATE MATERIALIZED VIEW per_k AS SELECT k, avg(i) AS ai, avg(n) AS an, avg(big) AS ab, avg(d) AS ad,
  sum(i) AS si, sum(n) AS sn, count(*) AS c, max(txt) AS mt, max(ts) AS mts, max(dt) AS mdt, max(tm) AS mtm,
  max(tz) AS mtz, sum(iv) AS siv, min(s) AS ms FROM t GROUP BY k;
CREATE MATERIALIZED VIEW rows_of AS SELECT k, by, j, ia, ta, i / 2 AS half, n / 3 AS third, n * 2 AS twice, iv, r
  FROM t;
"""
DESCRIBED = {
    "t": ["k|integer||not null|", "b|boolean|||", "s|smallint|||", "i|integer|||", "big|bigint|||", "r|real|||",
          "d|double precision|||", "txt|text|||", "by|bytea|||", "j|jsonb|||", "dt|date|||",
          "tm|time without time zone|||", "ts|timestamp without time zone|||", "tz|timestamp with time zone|||",
          "iv|interval|||", "n|numeric(10,2)|||", "ia|integer[]|||", "ta|text[]|||"],
    "per_k": ["k|integer|||", "ai|numeric|||", "an|numeric|||", "ab|numeric|||", "ad|double precision|||",
              "si|bigint|||", "sn|numeric|||", "c|bigint|||", "mt|text|||", "mts|timestamp without time zone|||",
              "mdt|date|||", "mtm|time without time zone|||", "mtz|timestamp with time zone|||", "siv|interval|||",
              "ms|smallint|||"],
    "rows_of": ["k|integer|||", "by|bytea|||", "j|jsonb|||", "ia|integer[]|||", "ta|text[]|||", "half|integer|||",
                "third|numeric|||", "twice|numeric|||", "iv|interval|||", "r|real|||"],
}


def _described(psql: list[str], sql: str = "") -> dict[str, list[str]]:
    script = sql + "".join(f"\\d {name}\n\\echo --\n" for name in DESCRIBED)
    done = subprocess.run(psql, input=script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    parts = done.stdout.split("--\n")
    return {name: [line for line in part.splitlines() if line] for name, part in zip(DESCRIBED, parts)}


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (Debian's postgresql-client) is installed by make setup")
def test_psql_describes_every_column_type_by_postgresql_s_name(open_db):
    db = open_db()
    db.sql(DESCRIBED_SQL)
    with db.serve(port=0) as server:
        mine = _described(["psql", "-h", "127.0.0.1", "-p", str(server.port), "-U", "anyone", "-d", "millpond",
                           "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"])
    assert mine == DESCRIBED
    if pg.unavailable() is None:
        with pg.server() as postgres:
            assert _described(postgres.psql(), DESCRIBED_SQL) == DESCRIBED

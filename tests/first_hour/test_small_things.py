"""Small things a new user meets in the first hour: ``SHOW SINKS`` after a restart and in a
read-only open, the types psql's ``\\d`` prints, ``millpond pipeline run``'s counts, the claims of
docs/limits.md. Each test failed on main before its fix (issue: first contact)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import millpond
from millpond import pipelines
from tests import pg
from tests.conftest import rows


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


LIMITS = Path(__file__).resolve().parents[2] / "docs" / "limits.md"
SHOP = """name: shop
configuration:
  min_id: "2"
  label: "from the spec"
libraries:
  - glob:
      include: transformations/**
"""
SHOP_FILES = {
    "transformations/ids.py": "from pyspark import pipelines as dp\n\n\n@dp.materialized_view\ndef ids():\n"
                              "    return spark.range(5).selectExpr('id', f\"'{spark.conf.get('label')}' AS label\")\n",
    "transformations/big.sql": "CREATE MATERIALIZED VIEW big AS SELECT id, label FROM ids WHERE id >= ${min_id}",
}


def _shop(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (folder / "spark-pipeline.yml").write_text(SHOP)
    return folder / "spark-pipeline.yml"


def _sentences(text: str) -> list[str]:
    return [" ".join(s.split()) for s in re.split(r"(?<=[.;])\s+|\n- ", text)]


def test_limits_md_says_python_materialized_views_and_configuration_run_as_they_do(open_db, tmp_path):
    """A Python materialized view and the spec's ``configuration`` (``${key}`` in SQL,
    ``spark.conf.get`` in Python) run, as docs/pipelines.md says: docs/limits.md says so too."""
    db = open_db()
    pipelines.run(db, pipelines.load(_shop(tmp_path, SHOP_FILES)))
    assert sorted(db.sql("SELECT id, label FROM big").to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "label": "from the spec"} for i in (2, 3, 4)]
    stale = [s for s in _sentences(LIMITS.read_text()) if "not run" in s and
             ("materialized view" in s or "configuration" in s or "streaming tables only" in s)]
    assert not stale, stale


def test_limits_md_says_a_flow_s_table_log_is_truncated_and_the_flow_stays_right(open_db, monkeypatch):
    """A keyed table a flow reads has its log truncated below what every consumer read (the flow
    stays equal to its query recomputed); a key-less table's log is compacted: docs/limits.md no
    longer says millpond never truncates a log, nor that log compaction does not exist."""
    from millpond.engine import upkeep

    monkeypatch.setattr(upkeep, "TRUNCATE_FLUSH_RECORDS", 0)  # a pass truncates however few records
    db = open_db()
    db.sql("""SET retention = '2 epochs';
              CREATE TABLE m (id INT PRIMARY KEY, host VARCHAR, ts TIMESTAMP, cpu DOUBLE);
              CREATE FLOW per_min SINK TO per_min_out AS SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute,
                count(*) AS n, sum(cpu) AS s FROM m GROUP BY host, minute""")
    query = ("SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute, count(*) AS n, sum(cpu) AS s "
             "FROM m GROUP BY host, minute")
    truncated = {}
    for i in range(8):
        db.sql("INSERT INTO m VALUES " + ", ".join(
            f"({i * 10 + j}, 'h{j % 2}', TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '{(i * 10 + j) % 5} minutes', {j}.5)"
            for j in range(10)))
        db.flush()
        if i % 4 == 3:
            db.runtime.log.flush()
            truncated.update(db.runtime.truncate_logs())
        assert rows(db.sql("SELECT host, minute, n, s FROM per_min_out")) == rows(db.sql(query))
    assert truncated.get("m", 0) > 0
    limits = " ".join(LIMITS.read_text().split())
    assert "never truncates a table's log" not in limits and "until log compaction exists" not in limits


def test_pipeline_run_and_dry_run_count_every_dataset_in_the_singular_or_the_plural(open_db, tmp_path):
    """The init project's shape: a Python materialized view and a SQL one are 2 datasets (the
    Python one was not counted: "1 datasets"); one row, one flow, one dataset are singular."""
    spec = _shop(tmp_path, {**SHOP_FILES, "transformations/ids.py": SHOP_FILES["transformations/ids.py"].replace(
        "spark.range(5)", "spark.range(1)")})
    project = pipelines.load(spec)
    checked = pipelines.check(project, set())
    assert checked[0] == "pipeline 'shop': 2 datasets", checked
    assert "  ids (Python, transformations/ids.py): run with Spark" in checked, checked
    db = open_db()
    ran = pipelines.run(db, project)
    assert ran[0] == "pipeline 'shop': 2 datasets", ran
    assert "  recomputed ids (transformations/ids.py, 1 row)" in ran, ran
    assert ran[-1] == f"committed 1 epoch; last epoch {db.epoch}", ran
    (tmp_path / "transformations" / "ids.py").unlink()
    (tmp_path / "transformations" / "big.sql").write_text("CREATE MATERIALIZED VIEW big AS SELECT id FROM t")
    assert pipelines.check(pipelines.load(spec), {"t"})[0] == "pipeline 'shop': 1 dataset"


def test_generate_series_in_from_is_postgresql_s_in_queries_and_dml(open_db):
    """``generate_series(start, stop [, step])`` in FROM: inclusive, a step either way, the column
    named as PostgreSQL names it, integer unless a bound needs bigint; it loads a table and feeds
    DML; a zero step and a view over it are refused by name."""
    db = open_db()
    cases = {
        "SELECT * FROM generate_series(1, 3)": [{"generate_series": i} for i in (1, 2, 3)],
        "SELECT x FROM generate_series(-1, 1) AS x": [{"x": i} for i in (-1, 0, 1)],
        "SELECT t.y * 2 AS d FROM generate_series(10, 1, -4) AS t(y)": [{"d": d} for d in (20, 12, 4)],
        "SELECT count(*) AS n, sum(g) AS s FROM generate_series(1, 100000) g": [{"n": 100000, "s": 5000050000}],
        "SELECT a.x, b.y FROM generate_series(1, 2) a(x), generate_series(5, 6) AS b(y) WHERE a.x + b.y > 6 "
        "ORDER BY 1, 2": [{"x": 1, "y": 6}, {"x": 2, "y": 5}, {"x": 2, "y": 6}],
        "SELECT * FROM generate_series(3, 1)": [],
    }
    for sql, want in cases.items():
        assert db.sql(sql).to_pylist() == want, sql
    assert str(db.sql("SELECT * FROM generate_series(1, 2) g").schema.field("g").type) == "int32"
    big = db.sql("SELECT * FROM generate_series(1, 5000000000, 2000000000) AS g")
    assert str(big.schema.field("g").type) == "int64" and big.column("g").to_pylist() == [1, 2000000001, 4000000001]
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v TEXT); "
           "INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 6) AS i; FLUSH; "
           "DELETE FROM t WHERE k IN (SELECT x FROM generate_series(2, 6, 2) AS x); FLUSH")
    assert rows(db.sql("SELECT * FROM t")) == [(1, "v1"), (3, "v3"), (5, "v5")]
    with pytest.raises(millpond.SqlError, match="step size cannot equal zero") as e:
        db.sql("SELECT * FROM generate_series(1, 3, 0)")
    assert e.value.sqlstate == "22023"
    with pytest.raises(millpond.SqlError, match="generate_series takes integer constants"):
        db.sql("SELECT * FROM generate_series(1, (SELECT 3))")
    with pytest.raises(millpond.SqlError, match="generate_series in a materialized view is not supported"):
        db.sql("CREATE MATERIALIZED VIEW v AS SELECT * FROM generate_series(1, 3)")

"""A folder is a source (``WITH (connector = 'files', ...)``): every file that appears is taken in
once, in arrival order, in every format; views over such tables equal DuckDB over all the files'
rows after every epoch; a bad file is named and skipped while the next ones come in; a SIGKILL
between a file's record and its append loses and doubles nothing."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import millpond
from millpond import SqlError
from tests.conftest import rows


def _sorted(table_rows: list[tuple]) -> list[tuple]:
    return sorted(table_rows, key=lambda r: tuple((v is not None, v) for v in r))


def _write(folder: Path, name: str, table: pa.Table, fmt: str) -> None:
    """A file written under a temporary name and renamed: a reader never sees it half written."""
    tmp = folder / f".{name}.tmp"
    if fmt == "parquet":
        pq.write_table(table, tmp)
    elif fmt == "csv":
        pcsv.write_csv(table, tmp)
    else:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    os.replace(tmp, folder / name)
    time.sleep(0.01)  # distinct modification times: arrival order


@pytest.mark.parametrize("in_tasks", [False, True], ids=["driver", "spark_tasks"])
def test_tables_read_from_folders_equal_duckdb_after_every_epoch(open_db, root, tmp_path, monkeypatch, in_tasks):
    """``in_tasks``: the cluster's path (``MILLPOND_DRIVER_RECORDS=0``): Spark tasks read the files,
    a bad one refused by name as the driver refuses it."""
    if in_tasks:
        from millpond.spark import executor

        monkeypatch.setitem(executor.DRIVER_RECORDS, "local", 0)
    rng = random.Random(3)
    folders = {f: tmp_path / f for f in ("ev", "kv", "js")}
    for f in folders.values():
        f.mkdir()
    db = open_db()
    db.sql(f"""
        CREATE TABLE ev (g VARCHAR, v INT) WITH (connector = 'files', path = '{folders['ev']}', format = 'parquet');
        CREATE TABLE kv (k INT PRIMARY KEY, g VARCHAR, v BIGINT)
          WITH (connector = 'files', path = '{folders['kv']}/*.csv', format = 'csv');
        CREATE TABLE js (g VARCHAR, w DOUBLE) APPEND ONLY WITH (connector = 'files', path = '{folders['js']}', format = 'json');
        CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM ev GROUP BY g;
        CREATE MATERIALIZED VIEW joined AS SELECT kv.g, count(*) AS n, sum(ev.v) AS s FROM kv JOIN ev ON kv.g = ev.g GROUP BY kv.g;
        CREATE MATERIALIZED VIEW wsum AS SELECT g, sum(w) AS w FROM js GROUP BY g;
    """)
    duck = duckdb.connect()
    duck.execute("CREATE TABLE ev (g VARCHAR, v INT); CREATE TABLE kv (k INT PRIMARY KEY, g VARCHAR, v BIGINT); "
                 "CREATE TABLE js (g VARCHAR, w DOUBLE)")
    n = 0
    for step in range(6):
        if step == 3:  # a restart: the files taken are not taken again
            db.close()
            db = open_db()
            restarted_at = n
        for _ in range(rng.randint(0, 2)):
            ev = pa.table({"g": [rng.choice(["a", "b", None]) for _ in range(20)],
                           "v": pa.array([rng.randint(0, 99) for _ in range(20)], pa.int32())})
            _write(folders["ev"], f"ev-{n}.parquet", ev, "parquet")
            duck.register("f", ev)
            duck.execute("INSERT INTO ev SELECT * FROM f")
            kv = pa.table({"k": pa.array([rng.randint(1, 6) for _ in range(3)], pa.int32()),
                           "g": [rng.choice("abc") for _ in range(3)], "v": pa.array([n, n + 1, n + 2], pa.int64())})
            kv = pa.Table.from_pylist(list({r["k"]: r for r in kv.to_pylist()}.values()), schema=kv.schema)
            _write(folders["kv"], f"kv-{n}.csv", kv, "csv")
            _write(folders["kv"], f"kv-{n}.txt", kv, "csv")  # not matched by the glob
            duck.register("f", kv)
            duck.execute("INSERT OR REPLACE INTO kv SELECT * FROM f")
            js = pa.table({"g": [rng.choice("xy") for _ in range(4)], "w": [rng.random() for _ in range(4)]})
            _write(folders["js"], f"js-{n}.json", js, "json")
            duck.register("f", js)
            duck.execute("INSERT INTO js SELECT * FROM f")
            n += 1
        if step == 2:  # a bad file: named, skipped; the next ones still come in
            bad = pa.table({"g": ["a"], "v": ["not a number"]})
            _write(folders["ev"], f"ev-bad-{n}.parquet", bad, "parquet")
        db.flush()
        for view, sql in {"per_g": "SELECT g, count(*), sum(v), max(v) FROM ev GROUP BY g",
                          "joined": "SELECT kv.g, count(*), sum(ev.v) FROM kv JOIN ev ON kv.g = ev.g GROUP BY kv.g",
                          "ev": "SELECT * FROM ev", "kv": "SELECT * FROM kv"}.items():
            assert rows(db.sql(f"SELECT * FROM {view}")) == _sorted(duck.execute(sql).fetchall()), f"step {step}: {view}"
        got = {g: w for g, w in rows(db.sql("SELECT * FROM wsum"))}
        want = dict(duck.execute("SELECT g, sum(w) FROM js GROUP BY g").fetchall())
        assert got.keys() == want.keys() and all(abs(got[g] - want[g]) < 1e-9 for g in want), f"step {step}: wsum"
        if step >= 2:
            status = {r["name"]: r for r in db.sql("SHOW TABLES").to_pylist()}
            assert "ev-bad-" in status["ev"]["error"] and "not a number" in status["ev"]["error"]
            assert status["kv"]["error"] is None and status["kv"]["source"].startswith("connector=files format=csv")
    assert n >= 4
    tasks = db.runtime.sources.tasks()
    if in_tasks:  # every file since the restart (three tables') read by a task, nothing left staged
        assert tasks.stats["parts"] == 3 * (n - restarted_at) > 0, tasks.stats
        assert not db.runtime.coordinator.store.list("sources/staging/"), "staged parts left behind"
    else:
        assert tasks is None


def test_files_table_options_are_checked(open_db, tmp_path):
    db = open_db()
    for options, message in [
        (f"connector = 'files', path = '{tmp_path}'", "needs format = 'parquet', 'csv' or 'json'"),
        (f"connector = 'files', path = '{tmp_path}', format = 'avro'", "got 'avro'"),
        ("connector = 'files', format = 'csv'", "needs path ="),
        (f"connector = 'kinesis', path = '{tmp_path}', format = 'csv'", "connector must be one of 'files', 'kafka'"),
        (f"connector = 'kafka', path = '{tmp_path}', format = 'csv'", "unknown option 'path' for connector 'kafka'"),
        ("connector = 'files', path = 's3:///x', format = 'csv'", "names no bucket"),
        (f"path = '{tmp_path}', format = 'csv'", "need a connector"),
    ]:
        with pytest.raises(SqlError, match=message):
            db.sql(f"CREATE TABLE t (a INT) WITH ({options})")
    assert not db.catalog.tables


WORKER = """
import sys, millpond
db = millpond.connect(sys.argv[1], parallelism=1, interval=None)
if "ev" not in db.catalog.tables:
    db.sql(f"CREATE TABLE ev (g VARCHAR, v INT) WITH (connector = 'files', path = '{sys.argv[2]}', format = 'parquet');"
           "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g")
db.flush()
"""


def test_a_sigkill_between_a_files_record_and_its_append_takes_it_once(open_db, root, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    all_rows = []
    for i in range(4):
        t = pa.table({"g": ["a", "b"], "v": pa.array([i, 10 * i], pa.int32())})
        _write(folder, f"ev-{i}.parquet", t, "parquet")
        all_rows += t.to_pylist()
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "MILLPOND_CRASH_AT": "files.after_record:3",
           "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    proc = subprocess.run([sys.executable, "-c", WORKER, root, str(folder)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -9, f"the worker was not killed: {proc.stderr[-2000:]}"
    db = open_db()
    db.flush()  # the third file, recorded but not appended, is appended now; the fourth is taken as new
    assert rows(db.sql("SELECT * FROM ev")) == _sorted([(r["g"], r["v"]) for r in all_rows])
    assert rows(db.sql("SELECT * FROM per_g")) == [("a", 4, 6), ("b", 4, 60)]
    assert len(list((Path(root) / "files").rglob("*.json"))) == 4


@pytest.mark.parametrize("in_tasks", [False, True], ids=["driver", "spark_tasks"])
def test_a_folder_on_object_storage_is_a_source(spark, s3_url, s3_options, tmp_path, monkeypatch, in_tasks):
    """Files under ``s3://…`` (read with the root's storage options), by folder and by glob; a new
    file is taken once, a restart takes none again, a bad one is refused by name. ``in_tasks``:
    Spark tasks read them (the cluster's path), with the same options."""
    import boto3

    if in_tasks:
        from millpond.spark import executor

        monkeypatch.setitem(executor.DRIVER_RECORDS, "local", 0)

    s3 = boto3.client("s3", endpoint_url=s3_options["endpoint"], region_name="us-east-1", aws_access_key_id="k",
                      aws_secret_access_key="s")
    folder = f"in-{tmp_path.name}"

    def put(name: str, table: pa.Table | bytes) -> None:
        if isinstance(table, pa.Table):
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            table = sink.getvalue().to_pybytes()
        s3.put_object(Bucket="pond", Key=f"{folder}/{name}", Body=table)

    root = f"{s3_url}/{tmp_path.name}"
    db = millpond.connect(root, spark=spark, parallelism=2, interval=None, storage_options=s3_options)
    try:
        db.sql(f"CREATE TABLE ev (g VARCHAR, v INT) WITH (connector = 'files', path = 's3://pond/{folder}/', "
               "format = 'parquet');"
               f"CREATE TABLE only_a (g VARCHAR, v INT) WITH (connector = 'files', path = 's3://pond/{folder}/a*.parquet', "
               "format = 'parquet');"
               "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g")
        put("a1.parquet", pa.table({"g": ["x", "y"], "v": pa.array([1, 2], pa.int32())}))
        put("_SUCCESS", b"")
        db.flush()
        put("b1.parquet", pa.table({"g": ["x"], "v": pa.array([10], pa.int32())}))
        put("bad.parquet", b"not parquet")
        db.flush()
        assert _sorted([tuple(r.values()) for r in db.sql("SELECT * FROM per_g").to_pylist()]) == [
            ("x", 2, 11), ("y", 1, 2)]
        assert db.sql("SELECT count(*) AS n FROM only_a").to_pylist() == [{"n": 2}]
        status = {r["name"]: r for r in db.sql("SHOW TABLES").to_pylist()}
        assert "bad.parquet" in str(status["ev"])
        tasks = db.runtime.sources.tasks()
        assert (tasks is not None and tasks.stats["parts"] == 4) == in_tasks  # ev's 3 files, only_a's 1
    finally:
        db.close()
    again = millpond.connect(root, spark=spark, parallelism=2, interval=None, storage_options=s3_options)
    try:
        put("c1.parquet", pa.table({"g": ["y"], "v": pa.array([5], pa.int32())}))
        again.flush()
        assert _sorted([tuple(r.values()) for r in again.sql("SELECT * FROM per_g").to_pylist()]) == [
            ("x", 2, 11), ("y", 2, 7)]
    finally:
        again.close()

"""A Delta Lake table is a source (``WITH (connector = 'deltalake', location = ...)``), as delta-rs
writes it: its snapshot, then each version — appends, and updates and deletes from the change data
feed or from the files a version removed and added — with every view equal to DuckDB over the
Delta table itself after every epoch; a key-less table stops at a delete with a clear error; a
SIGKILL between appends loses and doubles nothing."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from millpond import SqlError
from tests.conftest import rows
from tests.delta_vectors import delete_positions


def _sorted(table_rows: list[tuple]) -> list[tuple]:
    return sorted(table_rows, key=lambda r: tuple((v is not None, v) for v in r))


def _oracle(sql: str, location: str, scanned: bool = False) -> list[tuple]:
    """DuckDB over the Delta table, as delta-rs's pyarrow dataset reads it (``scanned``: as its own
    engine does, deletion vectors applied)."""
    con = duckdb.connect()
    table = DeltaTable(location)
    con.register("d", pa.table(table.scan().read_all()) if scanned else table.to_pyarrow_table())
    return _sorted([tuple(r) for r in con.execute(sql).fetchall()])


def _check(db, location: str, scanned: bool = False) -> None:  # noqa: ANN001
    """``orders`` and ``per_region`` equal to DuckDB over the Delta table."""
    assert rows(db.sql("SELECT * FROM orders")) == _oracle("SELECT id, region, amount FROM d", location, scanned)
    assert rows(db.sql("SELECT * FROM per_region")) == _oracle(
        "SELECT region, count(*), sum(amount) FROM d GROUP BY region", location, scanned)


def _batch(rng: random.Random, keys: range) -> pa.Table:
    return pa.table({"id": pa.array(list(keys), pa.int64()),
                     "region": [rng.choice(["eu", "us", "ap"]) for _ in keys],
                     "amount": pa.array([rng.randrange(1000) for _ in keys], pa.int64())})


@pytest.mark.parametrize("feed,in_tasks", [(True, False), (True, True), (False, False), (False, True)],
                         ids=["change_data_feed", "change_data_feed_read_in_spark_tasks", "file_diff",
                              "file_diff_read_in_spark_tasks"])
def test_a_delta_tables_versions_are_followed_with_updates_and_deletes(open_db, tmp_path, monkeypatch, feed, in_tasks):
    """``in_tasks``: the cluster's path (``MILLPOND_DRIVER_RECORDS=0``): Spark tasks read the files."""
    if in_tasks:
        from millpond.spark import executor

        monkeypatch.setitem(executor.DRIVER_RECORDS, "local", 0)
    from millpond.connectors.delta import DeltaReader

    change_files, found = DeltaReader._change_files, []  # the versions whose change files tasks read
    monkeypatch.setattr(DeltaReader, "_change_files", lambda *a: found.append(change_files(*a)) or found[-1])
    location = str(tmp_path / "orders")
    rng = random.Random(3)
    write_deltalake(location, _batch(rng, range(0, 200)), partition_by=["region"],
                    configuration={"delta.enableChangeDataFeed": "true"} if feed else None)
    db = open_db()
    db.sql(f"CREATE TABLE orders (PRIMARY KEY (id)) WITH (connector = 'deltalake', location = '{location}')")
    assert [c.name for c in db.catalog.tables["orders"].columns] == ["id", "region", "amount"]
    db.sql("CREATE MATERIALIZED VIEW per_region AS SELECT region, count(*) AS n, sum(amount) AS total "
           "FROM orders GROUP BY region")
    next_id = 200
    for step in range(5):
        db.flush()
        _check(db, location)
        dt = DeltaTable(location)
        what = step % 4
        if what == 0:
            write_deltalake(location, _batch(rng, range(next_id, next_id + 30)), mode="append")
            next_id += 30
        elif what == 1:
            dt.update({"amount": "amount + 1"}, predicate=f"id < {rng.randrange(50, 150)}")
        elif what == 2:
            dt.delete(f"id % 7 = {rng.randrange(7)}")
        else:
            dt.optimize.compact()  # files rewritten, rows unchanged
    db.flush()
    assert rows(db.sql("SELECT * FROM per_region")) == _oracle(
        "SELECT region, count(*), sum(amount) FROM d GROUP BY region", location)
    status = db.sql("SELECT split, position, lag FROM millpond_sources").to_pylist()
    assert status == [{"split": location, "position": DeltaTable(location).version(), "lag": 0}]
    tasks = db.runtime.sources.tasks()
    if in_tasks:  # the snapshot's 3 partition files, then each version's added and removed files
        assert tasks.stats["parts"] >= 3 + 2 and tasks.stats["rows"] >= 200, tasks.stats
        assert not db.runtime.coordinator.store.list("sources/staging/"), "staged parts left behind"
        assert (len([f for f in found if f]) >= 2) == feed, found  # an update's and a delete's feed
    else:
        assert tasks is None


@pytest.mark.parametrize("in_tasks", [False, True], ids=["driver", "spark_tasks"])
def test_deletion_vectors_are_applied(open_db, tmp_path, monkeypatch, in_tasks):
    """A table whose writer deletes rows by deletion vectors (Spark's Delta, Databricks: the file
    kept, its deleted rows' positions in a vector; tests/delta_vectors.py writes them): the snapshot
    reads each file without the rows its vector marks, and a version that gives a file a vector, or
    a larger one, removes those rows; a later rewrite of the file (delta-rs's DELETE) too."""
    if in_tasks:
        from millpond.spark import executor

        monkeypatch.setitem(executor.DRIVER_RECORDS, "local", 0)
    location = str(tmp_path / "orders")
    rng = random.Random(5)
    write_deltalake(location, _batch(rng, range(0, 300)), partition_by=["region"])
    files = {a["path"]: a["num_records"] for a in pa.table(DeltaTable(location).get_add_actions(flatten=True)).to_pylist()}
    deleted: dict[str, set[int]] = {p: set() for p in files}

    def delete_some() -> None:
        path = rng.choice(sorted(files))
        deleted[path] |= set(rng.sample(range(files[path]), 5))
        delete_positions(location, {path: sorted(deleted[path])})

    delete_some()  # before the table is read: its snapshot has a vector
    db = open_db()
    db.sql(f"CREATE TABLE orders (PRIMARY KEY (id)) WITH (connector = 'deltalake', location = '{location}')")
    db.sql("CREATE MATERIALIZED VIEW per_region AS SELECT region, count(*) AS n, sum(amount) AS total "
           "FROM orders GROUP BY region")
    next_id = 300
    for step in range(5):
        db.flush()
        _check(db, location, scanned=True)
        delete_some()
        if step % 2:
            write_deltalake(location, _batch(rng, range(next_id, next_id + 20)), mode="append")
            next_id += 20
    DeltaTable(location).delete("amount < 100")  # files with vectors rewritten without the rows
    db.flush()
    _check(db, location, scanned=True)
    assert sum(len(v) for v in deleted.values()) >= 25 and len(rows(db.sql("SELECT * FROM orders"))) < 340
    if in_tasks:
        assert db.runtime.sources.tasks().stats["parts"] >= 3 + 5


def test_a_keyless_tables_deletion_vector_stops_it(open_db, tmp_path):
    location = str(tmp_path / "events")
    write_deltalake(location, pa.table({"g": ["a", "b", "c"], "v": pa.array([1, 2, 3], pa.int32())}))
    db = open_db()
    db.sql(f"CREATE TABLE ev WITH (connector = 'deltalake', location = '{location}')")
    db.sql("CREATE MATERIALIZED VIEW s AS SELECT g, sum(v) AS total FROM ev GROUP BY g")
    db.flush()
    path = pa.table(DeltaTable(location).get_add_actions(flatten=True)).column("path")[0].as_py()
    delete_positions(location, {path: [1]})
    with pytest.warns(Warning, match="deletes or updates 1 rows"):
        db.flush()
    assert rows(db.sql("SELECT * FROM s")) == [("a", 1), ("b", 2), ("c", 3)]  # stopped before the delete


def test_a_keyless_delta_table_takes_appends_and_stops_at_a_delete(open_db, tmp_path):
    location = str(tmp_path / "events")
    write_deltalake(location, pa.table({"g": ["a", "b"], "v": pa.array([1, 2], pa.int32())}))
    db = open_db()
    db.sql(f"CREATE TABLE ev WITH (connector = 'deltalake', location = '{location}')")
    db.sql("CREATE MATERIALIZED VIEW s AS SELECT g, sum(v) AS total FROM ev GROUP BY g")
    write_deltalake(location, pa.table({"g": ["a"], "v": pa.array([10], pa.int32())}), mode="append")
    db.flush()
    assert rows(db.sql("SELECT * FROM s")) == [("a", 11), ("b", 2)]
    DeltaTable(location).delete("g = 'b'")
    write_deltalake(location, pa.table({"g": ["c"], "v": pa.array([5], pa.int32())}), mode="append")
    with pytest.warns(Warning, match="create it with a PRIMARY KEY"):
        db.flush()
    assert rows(db.sql("SELECT * FROM s")) == [("a", 11), ("b", 2)]  # stopped before the delete
    errors = db.sql("SELECT kind, error FROM millpond_source_errors").to_pylist()
    assert errors[0]["kind"] == "stopped" and "version 2" in errors[0]["error"]


def test_delta_source_columns_are_checked(open_db, tmp_path):
    location = str(tmp_path / "t")
    write_deltalake(location, pa.table({"a": pa.array([1], pa.int64()), "b": ["x"]}))
    db = open_db()
    for sql, message in [
        (f"CREATE TABLE x (a BIGINT, c TEXT) WITH (connector = 'deltalake', location = '{location}')",
         "column 'c' is not in the Delta table"),
        (f"CREATE TABLE x (a INT) WITH (connector = 'deltalake', location = '{location}')",
         "column 'a' is INT here but BIGINT in the Delta table"),
        (f"CREATE TABLE x WITH (connector = 'deltalake', location = '{tmp_path / 'nothing'}')",
         "no Delta table at"),
        (f"CREATE TABLE x WITH (connector = 'deltalake', location = '{location}', bogus = '1')",
         "unknown option 'bogus'"),
        ("CREATE TABLE x WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '127.0.0.1:1')",
         "needs at least one column"),
    ]:
        with pytest.raises(SqlError, match=message):
            db.sql(sql)
    assert not db.catalog.tables
    db.sql(f"CREATE TABLE x (b TEXT) WITH (connector = 'deltalake', location = '{location}')")  # some columns
    db.flush()
    assert rows(db.sql("SELECT * FROM x")) == [("x",)]


WORKER = r"""
import sys, millpond
db = millpond.connect(sys.argv[1], parallelism=1, interval=None)
if "ev" not in db.catalog.tables:
    db.sql(f"CREATE TABLE ev (PRIMARY KEY (id)) WITH (connector = 'deltalake', location = '{sys.argv[2]}');"
           "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g")
db.flush()
"""


@pytest.mark.slow  # two worker processes, each starting Spark (make slow, which CI runs)
@pytest.mark.parametrize("point,in_tasks", [("delta.before_append:2", False), ("delta.after_append:2", False),
                                            ("delta.after_append:2", True)],
                         ids=["before_append", "after_append", "after_append_read_in_spark_tasks"])
def test_a_sigkill_between_versions_loses_and_doubles_nothing(open_db, root, tmp_path, point, in_tasks):
    location = str(tmp_path / "ev")
    write_deltalake(location, pa.table({"id": pa.array([0, 1], pa.int64()), "g": ["a", "b"], "v": [1, 2]}))
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    subprocess.run([sys.executable, "-c", WORKER, root, location], env=env, check=True, timeout=600)
    for i in range(3):  # three versions to read in the next epoch: the kill lands after the first
        write_deltalake(location, pa.table({"id": pa.array([10 + i], pa.int64()), "g": ["a"], "v": [10]}), mode="append")
    DeltaTable(location).update({"v": "v + 100"}, predicate="id = 1")
    crash = {"MILLPOND_CRASH_AT": point, **({"MILLPOND_DRIVER_RECORDS": "0"} if in_tasks else {})}  # files: tasks
    proc = subprocess.run([sys.executable, "-c", WORKER, root, location], env={**env, **crash},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, f"the worker was not killed: {proc.stderr[-2000:]}"
    db = open_db()
    db.flush()
    assert rows(db.sql("SELECT id, g, v FROM ev")) == _oracle("SELECT id, g, v FROM d", location)
    assert rows(db.sql("SELECT * FROM per_g")) == _oracle("SELECT g, count(*), sum(v) FROM d GROUP BY g", location)

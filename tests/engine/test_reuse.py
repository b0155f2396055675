"""What an epoch keeps from the ones before: a view's DataFrame built once and re-run, and its
tasks shipped to Spark's workers once (unpickled once per Python worker), with the views exact."""

from __future__ import annotations

import pickle

import pyarrow as pa
from pyspark import cloudpickle

from millpond.spark import executor, inputs
from millpond.spark.task import Packed, Slots, Task
from tests.conftest import rows


def test_a_view_built_once_is_re_run_by_later_epochs(open_db, monkeypatch):
    """Every range through the data source: after its first epoch a view's DataFrame is re-run,
    not built (its tasks take the epoch, attempt and state levels from the job's descriptor), and
    the views stay exact through inserts, deletes, a change of the epoch's shape and a restart."""
    monkeypatch.setattr(inputs, "DRIVER_READ_ROWS", 0)
    db = open_db(parallelism=2)
    db.sql("CREATE TABLE t (k INT, v INT); CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR); "
           "CREATE MATERIALIZED VIEW per AS SELECT d.name, COUNT(*) AS n, SUM(t.v) AS s, MAX(t.v) AS hi "
           "FROM t JOIN d ON t.k % 10 = d.k GROUP BY d.name; "
           "CREATE MATERIALIZED VIEW big AS SELECT k, v FROM t WHERE v > 50")
    db.insert("d", pa.table({"k": pa.array(range(10), pa.int32()), "name": [f"n{i % 4}" for i in range(10)]}))
    kept: list[dict] = []

    def check() -> None:
        groups: dict[str, list[int]] = {}
        for r in kept:
            groups.setdefault(f"n{(r['k'] % 10) % 4}", []).append(r["v"])
        assert rows(db.sql("SELECT * FROM per")) == sorted((g, len(vs), sum(vs), max(vs)) for g, vs in groups.items())
        assert rows(db.sql("SELECT * FROM big")) == sorted((r["k"], r["v"]) for r in kept if r["v"] > 50)

    for i in range(6):
        size = 300 if i != 3 else 40  # epoch 3 has another shape (one task): built anew, then re-run again
        batch = pa.table({"k": pa.array(range(i * 1000, i * 1000 + size), pa.int32()),
                          "v": pa.array([(k * 37) % 101 for k in range(i * 1000, i * 1000 + size)], pa.int32())})
        db.insert("t", batch)
        kept += batch.to_pylist()
        if i == 4:
            db.sql("DELETE FROM t WHERE v > 90")
            kept = [r for r in kept if r["v"] <= 90]
        db.flush()
        check()
    assert db.runtime.coordinator.executor.stats["reused"] >= 4  # epochs 2, 5 (and 4's view over t)
    db.close()
    db = open_db(parallelism=2)
    db.insert("t", pa.table({"k": pa.array([7], pa.int32()), "v": pa.array([99], pa.int32())}))
    kept.append({"k": 7, "v": 99})
    db.flush()
    check()


def test_a_stage_of_several_views_ships_each_task_apart(open_db, monkeypatch):
    """On a cluster's path several views' one-stage tasks are one UDF that every Spark task of the
    stage receives whole: each view's task is pickled apart, a Spark task unpickles the one its
    slot runs, and a Python worker keeps it for the next epoch's; the views stay exact."""
    monkeypatch.setattr(executor, "DRIVER_RECORDS", dict.fromkeys(("local", "cluster"), 0))  # every epoch a Spark job
    shipped: list = []
    stages_of = executor.SparkExecutor._stages
    monkeypatch.setattr(executor.SparkExecutor, "_stages", lambda self, stages: shipped.append(stages) or stages_of(self, stages))
    db = open_db(parallelism=2)
    db.sql("CREATE TABLE t (k INT, v INT); "
           "CREATE MATERIALIZED VIEW per AS SELECT k % 4 AS g, COUNT(*) AS n, MAX(v) AS hi FROM t GROUP BY k % 4; "
           "CREATE MATERIALIZED VIEW big AS SELECT k, v FROM t WHERE v > 50")
    kept = []
    for i in range(3):
        batch = pa.table({"k": pa.array(range(i * 100, i * 100 + 100), pa.int32()),
                          "v": pa.array([(k * 37) % 101 for k in range(i * 100, i * 100 + 100)], pa.int32())})
        db.insert("t", batch)
        kept += batch.to_pylist()
        db.flush()
        groups: dict[int, list[int]] = {}
        for r in kept:
            groups.setdefault(r["k"] % 4, []).append(r["v"])
        assert rows(db.sql("SELECT * FROM per")) == sorted((g, len(vs), max(vs)) for g, vs in groups.items())
        assert rows(db.sql("SELECT * FROM big")) == sorted((r["k"], r["v"]) for r in kept if r["v"] > 50)
    stages = shipped[-1]
    assert len(stages) == 2 and all(isinstance(t, Task) for t, _ in stages)
    command = cloudpickle.dumps(Slots(stages))  # what PySpark ships with every task of the stage
    one, two = pickle.loads(command), pickle.loads(command)  # two Spark tasks in one Python worker
    assert all(isinstance(t, Packed) for t, _ in one.stages)
    assert [n for _, n in one.stages] == [n for _, n in stages]
    for (packed, _), (again, _), (task, _) in zip(one.stages, two.stages, stages):
        assert len(packed.blob) < len(command)  # a task's own bytes, not the stage's
        assert packed.task() is again.task()  # unpickled once per worker
        assert packed.task().identity() == task.identity()


def test_on_a_local_master_the_largest_stage_decides_whether_an_epoch_runs_here(open_db, monkeypatch):
    """Three views each reading an epoch's 300 records run in this process when each stage reads
    at most ``DRIVER_RECORDS["local"]`` (here 400, below the 900 they read together: the threads hold
    at once what Spark's Python workers would), and as a Spark job when one reads more (200)."""
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT); "
           "CREATE MATERIALIZED VIEW per AS SELECT k % 4 AS g, COUNT(*) AS n, MAX(v) AS hi FROM t GROUP BY k % 4; "
           "CREATE MATERIALIZED VIEW big AS SELECT k, v FROM t WHERE v > 50; "
           "CREATE MATERIALIZED VIEW tot AS SELECT COUNT(*) AS n, SUM(v) AS s FROM t")
    kept, stats = [], db.runtime.coordinator.executor.stats
    for i, bound in enumerate((400, 200, 400)):
        monkeypatch.setitem(executor.DRIVER_RECORDS, "local", bound)
        batch = pa.table({"k": pa.array(range(i * 300, i * 300 + 300), pa.int32()),
                          "v": pa.array([(k * 37) % 101 for k in range(i * 300, i * 300 + 300)], pa.int32())})
        here = stats["here"]
        db.insert("t", batch)
        kept += batch.to_pylist()
        db.flush()
        assert stats["here"] == here + (bound == 400), (i, bound)
        groups: dict[int, list[int]] = {}
        for r in kept:
            groups.setdefault(r["k"] % 4, []).append(r["v"])
        assert rows(db.sql("SELECT * FROM per")) == sorted((g, len(vs), max(vs)) for g, vs in groups.items())
        assert rows(db.sql("SELECT * FROM big")) == sorted((r["k"], r["v"]) for r in kept if r["v"] > 50)
        assert db.sql("SELECT * FROM tot").to_pylist() == [{"n": len(kept), "s": sum(r["v"] for r in kept)}]

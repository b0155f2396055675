"""A view created over tables that already hold data gives the same result as one created first."""

from tests import workload


def test_view_created_late_is_backfilled_from_the_log(open_db):
    db = open_db()
    db.sql(workload.TABLES)
    db.sql(f"CREATE MATERIALIZED VIEW early AS {workload.VIEWS['stats']}")
    ref = workload.Reference()
    plan = workload.steps(21, 16)
    for step in plan[:10]:
        workload.apply(db, step)
        ref.apply(step)
    db.flush()
    db.sql(f"CREATE MATERIALIZED VIEW late AS {workload.VIEWS['stats']}")
    db.flush()
    assert workload.norm(db.sql("SELECT * FROM late")) == workload.norm(db.sql("SELECT * FROM early"))
    for step in plan[10:]:
        workload.apply(db, step)
        ref.apply(step)
    db.flush()
    want = ref.query(workload.VIEWS["stats"])
    assert want, "the workload should leave rows in the view"
    assert workload.norm(db.sql("SELECT * FROM late")) == want
    assert workload.norm(db.sql("SELECT * FROM early")) == want


def test_delete_without_where_and_drop_view_keeps_others(open_db):
    db = open_db()
    db.sql(workload.TABLES)
    db.sql("CREATE MATERIALIZED VIEW per_user AS " + workload.VIEWS["per_user"])
    db.sql("CREATE MATERIALIZED VIEW thirds AS " + workload.VIEWS["thirds"])
    first = workload.steps(1, 1)[0]
    assert first.kind == "insert"
    db.insert("visit", first.payload)
    db.flush()
    assert db.sql("SELECT * FROM per_user").num_rows > 0
    db.sql("DROP MATERIALIZED VIEW thirds")
    db.sql("DELETE FROM visit")
    db.flush()
    assert db.sql("SELECT * FROM visit").num_rows == 0
    assert db.sql("SELECT * FROM per_user").num_rows == 0
    assert sorted(db.catalog.views) == ["per_user"]


def test_a_late_view_and_flow_read_a_keyed_tables_rows_not_its_whole_log(open_db):
    """Batch mode: the first epoch of a new view or flow reads a keyed table as its committed rows
    plus the log appended since, however many updates and deletes the log holds before them."""
    import random

    import duckdb
    import pyarrow as pa

    from tests.conftest import canonical

    db, ref, rng = open_db(), duckdb.connect(), random.Random(11)

    def duck(sql: str) -> list:
        return ref.execute(sql).fetchall()

    for run in (db.sql, duck):
        run("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT)")

    def change(i: int) -> None:
        ks = [rng.randrange(60) for _ in range(25)]
        rows = pa.table({"k": pa.array(sorted(set(ks)), pa.int32()),
                         "g": pa.array([rng.randrange(5) for _ in set(ks)], pa.int32()),
                         "v": pa.array([rng.randrange(-50, 50) for _ in set(ks)], pa.int32())})
        db.sql(f"DELETE FROM t WHERE k % 7 = {i % 7}")
        duck(f"DELETE FROM t WHERE k % 7 = {i % 7}")
        db.sql("DELETE FROM t WHERE k IN (" + ", ".join(map(str, rows.column("k").to_pylist())) + ")")
        db.insert("t", rows)
        ref.register("incoming", rows)
        duck("INSERT OR REPLACE INTO t SELECT * FROM incoming")
        ref.unregister("incoming")
        db.sql(f"UPDATE t SET v = v + 1 WHERE g = {i % 5}")
        duck(f"UPDATE t SET v = v + 1 WHERE g = {i % 5}")

    for i in range(8):
        change(i)
        db.flush()
    view = "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM t GROUP BY g"
    flow = "SELECT g, count(*) AS n, min(v) AS lo, sum(v) AS s FROM t GROUP BY g"
    db.sql(f"CREATE MATERIALIZED VIEW late AS {view}")
    db.sql(f"CREATE FLOW f SINK TO per_g AS {flow}")
    change(8)  # appended, not yet in an epoch: the new consumers read it from the log
    table = db.catalog.tables["t"]
    committed = db.runtime.coordinator.manifest.offsets[f"o{table.id}"][table.channel]
    end = db.runtime.channel(table).end
    held = duck("SELECT count(*) FROM t")[0][0]
    assert committed > 3 * held, "the workload should leave a log much longer than the table"
    report = db.runtime.run_epoch()
    assert report.rows_in["late"] == report.rows_in["f"] == end - committed  # the log after the rows, not all of it
    for i in range(9, 13):
        assert canonical(db.sql("SELECT * FROM late")) == canonical(ref.sql(view).to_arrow_table())
        assert canonical(db.sql("SELECT * FROM per_g")) == canonical(ref.sql(flow).to_arrow_table())
        change(i)
        db.flush()


def test_a_bad_row_a_late_view_reads_in_batch_mode_is_named(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    db.sql("INSERT INTO t VALUES (1, 5), (2, 0), (3, 2)")
    db.flush()
    db.sql("INSERT INTO t VALUES (4, 1)")
    db.sql("CREATE MATERIALIZED VIEW inv AS SELECT k, 10 / v AS x FROM t")
    db.sql("CREATE MATERIALIZED VIEW fine AS SELECT count(*) AS n FROM t")
    db.flush()
    assert db.sql("SELECT * FROM fine").to_pylist() == [{"n": 4}]
    error = db.sql("SELECT error FROM millpond_views WHERE name = 'inv'").column("error").to_pylist()[0]
    assert "division by zero" in error.lower() and "t: one of its rows at epoch 1" in error, error


def test_a_first_epoch_gets_tasks_for_the_committed_rows_it_reads(open_db, monkeypatch):
    """Batch mode reads a table's rows, not its log: the epoch's tasks follow those rows too (one
    task per ``ROWS_PER_TASK``, up to the parallelism), not only the few new records."""
    import pyarrow as pa

    from millpond.engine.coordinator import ROWS_PER_TASK

    db = open_db(parallelism=2)
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
    n = ROWS_PER_TASK + 5_000
    db.insert("t", pa.table({"k": pa.array(range(n), pa.int64()), "v": pa.array([k % 7 for k in range(n)], pa.int64())}))
    db.flush()
    executor, seen = db.runtime.coordinator.executor, []
    run = executor.run

    def watched(job, *args, **kwargs):  # noqa: ANN001, ANN202
        seen.append(job.parallelism)
        return run(job, *args, **kwargs)

    monkeypatch.setattr(executor, "run", watched)
    db.sql("CREATE MATERIALIZED VIEW per_v AS SELECT v, count(*) AS n FROM t GROUP BY v")
    db.flush()
    assert seen == [2], "the first epoch reads n committed rows: two tasks"
    db.insert("t", pa.table({"k": pa.array([n], pa.int64()), "v": pa.array([0], pa.int64())}))
    db.flush()
    assert seen[-1] == 1, "one new record: one task"
    counts = dict(zip(*db.sql("SELECT v, n FROM per_v").to_pydict().values()))
    assert counts == {v: sum(1 for k in range(n) if k % 7 == v) + (v == 0) for v in range(7)}


def test_groups_estimate_from_a_sample():
    """Duj1 from a random 1% of the rows: groups of one row, of four, of thirty, and four groups."""
    import numpy as np
    import pyarrow as pa

    from millpond.spark.inputs import groups_estimate

    rows, rng = 2_000_000, np.random.default_rng(7)
    for size in (1, 4, 30, rows // 4):
        sample = rng.choice(np.arange(rows) // size, rows // 100, replace=False)
        estimate = groups_estimate(pa.table({"g": sample}), 0.01)
        assert 0.8 <= estimate / (rows // size) <= 1.25, (size, estimate)


def test_a_first_epoch_combines_before_its_exchange_only_where_groups_are_few(open_db, monkeypatch):
    """On Spark's path, a first epoch over a loaded table combines an aggregate's delta per group
    before the exchange (an aggregation and a shuffle of its own) only when a sample of the table
    says its groups are far fewer than its rows; the answers are the same either way."""
    import duckdb
    import pyarrow as pa

    from millpond.spark import executor, inputs

    for where in ("local", "cluster"):
        monkeypatch.setitem(executor.DRIVER_RECORDS, where, 0)
    db = open_db(parallelism=2)
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, few INT, many BIGINT, x BIGINT)")
    n = 120_000
    t = pa.table({"k": pa.array(range(n), pa.int64()), "few": pa.array([k % 5 for k in range(n)], pa.int32()),
                  "many": pa.array([k // 2 for k in range(n)], pa.int64()), "x": pa.array([k % 11 for k in range(n)], pa.int64())})
    db.insert("t", t)
    db.flush()
    said = []
    reduces = inputs.Inputs.reduces

    def watched(self, node):  # noqa: ANN001, ANN202
        said.append((self.consumer.name, reduces(self, node)))
        return said[-1][1]

    monkeypatch.setattr(inputs.Inputs, "reduces", watched)
    db.sql("CREATE MATERIALIZED VIEW by_few AS SELECT few, count(*) AS n, sum(x) AS s FROM t WHERE x > 1 GROUP BY few")
    db.sql("CREATE MATERIALIZED VIEW by_many AS SELECT many, count(*) AS n, sum(x) AS s FROM t GROUP BY many")
    db.flush()
    assert dict(said) == {"by_few": True, "by_many": False}, said
    for view, query in (("by_few", "SELECT few, count(*) AS n, sum(x) AS s FROM t WHERE x > 1 GROUP BY few"),
                        ("by_many", "SELECT many, count(*) AS n, sum(x) AS s FROM t GROUP BY many")):
        want = sorted(duckdb.sql(query).fetchall())
        assert sorted(tuple(r.values()) for r in db.sql(f"SELECT * FROM {view}").to_pylist()) == want, view
    db.sql("DELETE FROM t WHERE k < 1000")
    db.flush()
    want = sorted(duckdb.sql("SELECT many, count(*), sum(x) FROM t WHERE k >= 1000 GROUP BY many").fetchall())
    assert sorted(tuple(r.values()) for r in db.sql("SELECT * FROM by_many").to_pylist()) == want

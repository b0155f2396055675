"""millpond on a real Spark cluster (``make cluster``): a standalone master with two workers, the
root on S3 (a moto server), the driver in this process. Tasks (epochs' stateful stages, log scans,
compaction) run in the executors' Python workers and read and write the root themselves, with the
storage options millpond ships to them.

Every view is checked against DuckDB recomputing its SQL over its own copy of the base tables
after every epoch: the seed example, then Nexmark's q4 (a join and two aggregations) and q17,
their AVG compared as PostgreSQL prints it (a numeric quotient).
The last test SIGKILLs one worker's executor JVM while an epoch's job runs:
Spark retries the lost tasks (and recomputes the shuffle output that died with the executor), the
epoch commits once, and the views still equal the oracle (a bid applied twice or lost would show
in q17's COUNT and SUM per auction).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import duckdb
import pyarrow as pa
import pytest

import millpond
from millpond.store.compaction import Policy
from tests.cluster.conftest import EXECUTORS, executor_count, wait_for_executors
from tests.cluster.standalone import Standalone
from tests.conftest import canonical, rows, same_rows
from tests import pg_numeric
from tests.pg_numeric import column_texts
from tests.test_seed import SCHEMA as SEED_SCHEMA

pytestmark = pytest.mark.cluster


class Oracle:
    """DuckDB's own copy of the base tables; ``check`` compares views with their SQL run here."""

    def __init__(self, ddl: str):
        self.con = duckdb.connect()
        self.con.execute(ddl)

    def insert(self, table: str, data: pa.Table) -> None:
        keyed = self.con.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? "
                                 "AND constraint_type = 'PRIMARY KEY'", [table]).fetchall()[0][0]
        self.con.register("incoming", data)
        self.con.execute(f'INSERT {"OR REPLACE " if keyed else ""}INTO "{table}" SELECT * FROM incoming')
        self.con.unregister("incoming")

    def sql(self, text: str) -> None:
        self.con.execute(text)

    def check(self, db: millpond.Database, views: dict[str, str], tables: tuple[str, ...] = ()) -> None:
        for name in tables:
            assert rows(db.sql(f'SELECT * FROM "{name}"')) == rows(self.con.sql(f'SELECT * FROM "{name}"').to_arrow_table()), \
                f"table {name} differs from DuckDB at epoch {db.epoch}"
        for name, query in views.items():
            got, want = rows(db.sql(f'SELECT * FROM "{name}"')), rows(self.con.sql(query).to_arrow_table())
            assert got == want, f"view {name} differs from DuckDB at epoch {db.epoch}:\n{got[:20]}\n{want[:20]}"


def _root(s3_url: str) -> str:
    return f"{s3_url}/cluster-{uuid.uuid4().hex[:8]}"


def _flush_one(db: millpond.Database) -> None:
    """Flush; the input was appended before, so exactly one epoch runs."""
    before, started = db.epoch, time.monotonic()
    reports = db.flush()
    print(f"epoch {db.epoch}: {time.monotonic() - started:.1f} s")
    assert [r.epoch for r in reports] == [before + 1]


def _session_alive(spark) -> bool:  # noqa: ANN001
    return not spark.sparkContext._jsc.sc().isStopped() and spark.range(5).count() == 5


# -- the seed example ---------------------------------------------------------------------------
def test_seed_example_on_a_standalone_cluster(cluster_spark, s3_url, s3_options):
    assert cluster_spark.sparkContext.master.startswith("spark://")
    assert executor_count(cluster_spark) == EXECUTORS
    root = _root(s3_url)
    ref = Oracle(SEED_SCHEMA.split("CREATE MATERIALIZED VIEW")[0])
    view = {"result": SEED_SCHEMA.split(" AS", 1)[1].strip().rstrip(";")}
    db = millpond.connect(root, spark=cluster_spark, parallelism=4, interval=None, storage_options=s3_options,
                          compaction="spark")  # compaction tasks on the executors, too
    db.runtime.coordinator.state.policy = Policy(l0_trigger=2)
    try:
        db.sql(SEED_SCHEMA)
        info = "INSERT INTO info VALUES ('Apple','Fruit'),('Banana','Fruit'),('Carrot','Vegetable'),('Potato','Vegetable')"
        visits = pa.table({"product": ["Apple", "Apple", "Carrot", "Banana", "Potato"],
                           "user": ["Alice", "Bob", "Bob", "Alice", "Eve"],
                           "length": pa.array([10, 20, 50, 40, 60], pa.int32())})
        db.sql(info)
        db.insert("visit", visits)
        ref.sql(info)
        ref.insert("visit", visits)
        _flush_one(db)
        ref.check(db, view, ("info", "visit"))
        assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 40), ("Vegetable", 60)]
        for step in ["""DELETE FROM visit WHERE product = 'Banana' AND "user" = 'Alice'""",
                     "UPDATE info SET category = 'Vegetable' WHERE product = 'Apple'",
                     "UPDATE info SET category = 'Fruit' WHERE product = 'Carrot'"]:
            db.sql(step)
            ref.sql(step)
            _flush_one(db)
            ref.check(db, view, ("info", "visit"))
        assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 50), ("Vegetable", 60)]
        state = db.runtime.coordinator.state
        state.compact()
        assert state.stats["compactions"] > 0 and state.stats["compaction_failures"] == 0
        # the view changed in place on the cluster, its swap's change kept on S3 for a subscriber
        before = db.epoch
        new = view["result"].replace("MAX(length)", "MIN(length)")
        assert new != view["result"]
        db.sql(f"ALTER MATERIALIZED VIEW result AS {new}")
        _flush_one(db)
        ref.check(db, {"result": new}, ("info", "visit"))
        assert rows(db.read("result", epoch=before)) == [("Fruit", 50), ("Vegetable", 60)]  # the old definition's
        net: dict = {}
        for change in db.subscribe("result", before, snapshot=True, timeout=0.5):
            for r in change.to_pylist():
                net[(r["category"], r["max_length"])] = net.get((r["category"], r["max_length"]), 0) + r["_w"]
        assert sorted(k for k, w in net.items() if w) == rows(db.sql("SELECT * FROM result"))
        assert rows(db.sql("SELECT * FROM result")) != [("Fruit", 50), ("Vegetable", 60)]
        # columns added in place, the root on S3: the executors' reads of the rows and records from
        # before fill the defaults in; a view made after reads them, the one made before does not
        for step in ["ALTER TABLE visit ADD COLUMN device TEXT DEFAULT 'web'",
                     "ALTER TABLE info ADD COLUMN tier INT DEFAULT 1",
                     """INSERT INTO visit (product, "user", length, device) VALUES ('Apple', 'Zoe', 70, 'app')""",
                     "UPDATE info SET tier = 2 WHERE category = 'Fruit'"]:
            db.sql(step)
            ref.sql(step)
        per_device = ("SELECT v.device, i.tier, count(*) AS n, sum(v.length) AS total FROM visit v "
                      "JOIN info i ON v.product = i.product GROUP BY v.device, i.tier")
        db.sql(f"CREATE MATERIALIZED VIEW per_device AS {per_device}")
        _flush_one(db)
        ref.check(db, {"result": new, "per_device": per_device}, ("info", "visit"))
        state.compact()
        ref.check(db, {"result": new, "per_device": per_device}, ("info", "visit"))
        # a view backfilled in bounded epochs on the executors: the keyed info's rows in parts (slices
        # of key hashes read from S3), the key-less visit's log a capped range an epoch, inserts going on
        db.sql("SET backfill_rows = 3")
        db.sql(f"CREATE MATERIALIZED VIEW per_device_again AS {per_device}")
        epochs = 0
        while not db.runtime.populated("per_device_again"):
            step = f"""INSERT INTO visit (product, "user", length, device) VALUES ('Potato', 'U{epochs}', {epochs}, 'app')"""
            db.sql(step)
            ref.sql(step)
            db.runtime.run_epoch()
            epochs += 1
            assert epochs < 20, db.runtime.filling("per_device_again")
        assert epochs >= 2
        ref.check(db, {"result": new, "per_device": per_device, "per_device_again": per_device}, ("info", "visit"))
        swapped = rows(db.sql("SELECT * FROM result"))
    finally:
        db.close()
    assert _session_alive(cluster_spark), "millpond stopped a Spark session it did not start"
    again = millpond.connect(root, spark=cluster_spark, parallelism=2, interval=None, storage_options=s3_options)
    try:
        assert rows(again.sql("SELECT * FROM result")) == swapped
        assert sorted(map(tuple, again.table("result").collect())) == swapped
    finally:
        again.close()
    assert _session_alive(cluster_spark)


def test_a_relative_local_root_on_a_shared_filesystem(cluster_spark, tmp_path, monkeypatch):
    """A folder root works on a cluster only on a filesystem every worker mounts at the same path
    (here: one machine). Executors work in their own directories, so a relative root must reach
    them resolved (it used to reach them as given: state written under the workers' work dirs,
    and the view silently empty)."""
    monkeypatch.chdir(tmp_path)
    db = millpond.connect("pond", spark=cluster_spark, parallelism=2, interval=None)
    try:
        db.sql("CREATE TABLE t (k VARCHAR, v INT); CREATE MATERIALIZED VIEW s AS SELECT k, SUM(v) AS total FROM t GROUP BY k")
        db.insert("t", pa.table({"k": ["a", "a", "b"], "v": pa.array([1, 2, 3], pa.int32())}))
        _flush_one(db)
        assert rows(db.sql("SELECT * FROM s")) == [("a", 3), ("b", 3)]
    finally:
        db.close()
    assert (tmp_path / "pond" / "sst").is_dir()
    assert _session_alive(cluster_spark)


# -- a Delta table read in parallel tasks --------------------------------------------------------
def test_a_delta_tables_files_are_read_by_the_executors(cluster_spark, s3_url, s3_options):
    """A Delta table on S3 as a source: the snapshot's files and each later version's added and
    removed files are read by Spark tasks on the executors (a part per file), which stage them under
    the root; the driver appends the staged parts (it never opens a Parquet file of the table). The
    table and a view equal DuckDB over the Delta table after every epoch."""
    from deltalake import DeltaTable, write_deltalake

    port = s3_options["endpoint"].rsplit(":", 1)[1]
    storage = {"aws_endpoint_url": f"http://127.0.0.1:{port}", "aws_access_key_id": "k", "aws_secret_access_key": "s",
               "aws_region": "us-east-1", "aws_allow_http": "true", "aws_s3_allow_unsafe_rename": "true"}
    location = f"s3://pond/delta-{uuid.uuid4().hex[:8]}"

    def batch(ids: range) -> pa.Table:
        return pa.table({"id": pa.array(list(ids), pa.int64()), "region": [("eu", "us", "ap")[i % 3] for i in ids],
                         "amount": pa.array([i * 7 % 1000 for i in ids], pa.int64())})

    for start in range(0, 4000, 1000):  # four versions: the snapshot has 12 files (3 partitions each)
        write_deltalake(location, batch(range(start, start + 1000)), partition_by=["region"], mode="append",
                        storage_options=storage)

    def check(db: millpond.Database) -> None:
        con = duckdb.connect()
        con.register("d", DeltaTable(location, storage_options=storage).to_pyarrow_table())
        for sql, want in [("SELECT * FROM orders", "SELECT id, region, amount FROM d"),
                          ("SELECT * FROM per_region", "SELECT region, count(*), sum(amount) FROM d GROUP BY region")]:
            assert rows(db.sql(sql)) == rows(con.sql(want).to_arrow_table()), f"{sql} differs at epoch {db.epoch}"

    db = millpond.connect(_root(s3_url), spark=cluster_spark, parallelism=2, interval=None, storage_options=s3_options)
    try:
        options = ", ".join(f"storage.{k} = '{v}'" for k, v in storage.items())
        db.sql(f"CREATE TABLE orders (PRIMARY KEY (id)) WITH (connector = 'deltalake', location = '{location}', "
               f"{options})")
        db.sql("CREATE MATERIALIZED VIEW per_region AS SELECT region, count(*) AS n, sum(amount) AS total "
               "FROM orders GROUP BY region")
        db.flush()
        check(db)
        tasks = db.runtime.sources.tasks()
        assert tasks is not None and tasks.stats["parts"] == 12 and tasks.stats["rows"] == 4000, tasks.stats
        write_deltalake(location, batch(range(4000, 4500)), partition_by=["region"], mode="append",
                        storage_options=storage)
        DeltaTable(location, storage_options=storage).update({"amount": "amount + 1"}, predicate="id < 1500")
        db.flush()
        check(db)
        assert tasks.stats["parts"] > 12 + 3 and tasks.stats["jobs"] >= 3, tasks.stats
        assert not db.runtime.coordinator.store.list("sources/staging/"), "staged parts left behind"
    finally:
        db.close()
    assert _session_alive(cluster_spark)


def test_a_kafka_topics_partitions_are_read_by_the_executors(cluster_spark, s3_url, s3_options, kafka):
    """A Kafka topic as a table (upserts by key, tombstones delete): each partition with new messages
    is read and decoded by a Spark task on an executor; the driver asks the broker for offsets and
    appends the staged rows. The table and a view equal DuckDB over what was produced after every
    epoch."""
    import json
    import random

    topic = kafka.topic(f"cluster_{uuid.uuid4().hex[:6]}", partitions=3)
    db = millpond.connect(_root(s3_url), spark=cluster_spark, parallelism=2, interval=None, storage_options=s3_options)
    try:
        db.sql(f"CREATE TABLE acct (id INT, owner TEXT, balance BIGINT, PRIMARY KEY (id)) WITH (connector = 'kafka', "
               f"topic = '{topic}', properties.bootstrap.server = '{kafka.bootstrap}') FORMAT UPSERT ENCODE JSON")
        db.sql("CREATE MATERIALIZED VIEW per_owner AS SELECT owner, count(*) AS n, sum(balance) AS b FROM acct "
               "GROUP BY owner")
        rng, state = random.Random(5), {}
        for _ in range(3):
            messages: dict[int, list] = {0: [], 1: [], 2: []}
            for _ in range(300):
                k = rng.randrange(200)
                if k in state and rng.random() < 0.2:
                    messages[k % 3].append((str(k), None))
                    del state[k]
                else:
                    state[k] = {"id": k, "owner": rng.choice("abcd"), "balance": rng.randrange(100)}
                    messages[k % 3].append((str(k), json.dumps(state[k])))
            for p, found in messages.items():
                kafka.produce(topic, [v for _, v in found], keys=[k for k, _ in found], partition=p)
            db.flush()
            con = duckdb.connect()
            con.register("c", pa.Table.from_pylist(list(state.values()), schema=pa.schema(
                [("id", pa.int32()), ("owner", pa.string()), ("balance", pa.int64())])))
            assert rows(db.sql("SELECT * FROM acct")) == rows(con.sql("SELECT * FROM c").to_arrow_table())
            assert rows(db.sql("SELECT * FROM per_owner")) == rows(
                con.sql("SELECT owner, count(*), sum(balance) FROM c GROUP BY owner").to_arrow_table())
        tasks = db.runtime.sources.tasks()
        assert tasks is not None and tasks.stats["jobs"] >= 3 and tasks.stats["parts"] >= 9, tasks.stats
    finally:
        db.close()
    assert _session_alive(cluster_spark)


# -- Nexmark -------------------------------------------------------------------------------------
VIEWS = ("q4", "q17", "q7", "q5")  # q4: a join, then two aggregations; q17: COUNT and SUM per auction (a doubled
# bid shows); q7: a window's maximum joined back to the bids; q5: a window's counts joined to their maximum
# (every view's big epoch is one stage of tasks that read the log, windows included: an executor is
# killed while it runs)
EVENTS = 4_000  # per small epoch
BIG_EPOCH = 260_000  # events of the epoch that loses an executor: four stateful tasks per stage
BUSY = 0.5  # seconds both executors run the big epoch's tasks before one is killed, if none has finished


class NexmarkOracle:
    """DuckDB over every event inserted so far, running the views' queries."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        pg_numeric.register(self.con)  # the AVGs' quotients (averages_as_text): the tests' reference
        self.sent: dict[str, list[pa.Table]] = {}

    def insert(self, db: millpond.Database, events: dict[str, pa.Table]) -> None:
        for name, table in events.items():
            db.insert(name, table)
            self.sent.setdefault(name, []).append(table)
            self.con.register(name, pa.concat_tables(self.sent[name]))

    def check(self, db: millpond.Database) -> None:
        from millpond import nexmark

        for name in VIEWS:
            # numerics as PostgreSQL prints them: AVG is a numeric quotient (16 significant digits at least)
            got = canonical(column_texts(db.sql(f"SELECT * FROM {name}")))
            sql = pg_numeric.averages_as_text(nexmark.duckdb_sql(nexmark.QUERIES[name]))
            want = canonical(column_texts(self.con.sql(sql).to_arrow_table()))
            assert want, f"{name} is empty in DuckDB: the check would check nothing"
            assert same_rows(got, want), (f"{name} differs from DuckDB at epoch {db.epoch}: {len(got)} rows, DuckDB "
                                      f"{len(want)}; only in millpond: {[r for r in got if r not in want][:3]}, "
                                      f"only in DuckDB: {[r for r in want if r not in got][:3]}")


# -- an executor killed mid-epoch -----------------------------------------------------------------
class ExecutorKiller(threading.Thread):
    """SIGKILLs the executor JVM of ``worker`` once a stage runs tasks on both executors and some
    of its tasks still wait behind them, or a stage has finished since :meth:`start` (its shuffle
    output is on both executors), or some tasks of the stage under way have (or both executors
    have run its tasks for :data:`BUSY` seconds), then records
    the jobs that run until :attr:`done` is set. (With adaptive execution every shuffle stage is a
    job of its own, so this watches stages, not one job.)"""

    def __init__(self, spark, cluster: Standalone, worker: int, timeout: float = 300.0):  # noqa: ANN001
        super().__init__(daemon=True, name="executor-killer")
        self.spark, self.cluster, self.worker = spark, cluster, cluster.workers[worker]
        self.timeout = timeout
        self.done = threading.Event()
        self.killed: int | None = None  # the executor's pid
        self.jobs: set[int] = set()  # the jobs seen running
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        deadline = time.monotonic() + self.timeout
        watched: set[int] = set()
        both: float | None = None  # since when tasks run on both executors
        while not self.done.is_set() and time.monotonic() < deadline:
            self.jobs.update(tracker.getActiveJobsIds())
            active = [s for s in map(tracker.getStageInfo, tracker.getActiveStageIds()) if s]
            if self.killed is None:
                finished = any(s and s.numTasks and s.numCompletedTasks == s.numTasks
                               for s in map(tracker.getStageInfo, watched - {s.stageId for s in active}))
                watched.update(s.stageId for s in active)
                # an epoch of one stage (every view's tasks read the log themselves): once some of its
                # tasks are done and others run on both executors, or both have run for BUSY seconds
                # (the listener's counts lag: a fast machine's stage can end before they show a task done)
                finished = finished or any(s.numCompletedTasks > 0 for s in active)
                busy = [s for s in active if s.numActiveTasks >= EXECUTORS]
                both = both if both is not None and busy else (time.monotonic() if busy else None)
                # tasks still waiting behind the running ones: the killed executor's task must run again
                # (killed as a stage's last tasks end, nothing fails: seen once here after reads got faster)
                waiting = any(s.numTasks > s.numCompletedTasks + s.numActiveTasks for s in busy)
                if busy and (waiting or finished or time.monotonic() - both >= BUSY):
                    pids = self.cluster.executor_pids(self.worker)
                    assert len(pids) == 1, f"{self.worker.name} runs executors {pids}"
                    self.cluster.track()  # its Python workers, checked for leaks at the end
                    os.kill(pids[0], signal.SIGKILL)
                    self.killed = pids[0]
            time.sleep(0.02)


def _stage_retries(spark, jobs: set[int]) -> list[tuple[int, int, int]]:  # noqa: ANN001
    """(stage, attempt, failed tasks) of the jobs' stages that failed tasks or ran again."""
    tracker = spark.sparkContext.statusTracker()
    stages = {i for j in jobs if (info := tracker.getJobInfo(j)) for i in info.stageIds}
    return sorted((s.stageId, s.currentAttemptId, s.numFailedTasks) for s in map(tracker.getStageInfo, stages)
                  if s and (s.currentAttemptId > 0 or s.numFailedTasks > 0))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_nexmark_after_every_epoch_and_an_executor_killed_mid_epoch(cluster, cluster_spark, s3_url, s3_options):
    from millpond import nexmark

    db = millpond.connect(_root(s3_url), spark=cluster_spark, parallelism=4, interval=None, storage_options=s3_options)
    try:
        db.sql(";\n".join(nexmark.DDL))
        for name in VIEWS:
            db.sql(f"CREATE MATERIALIZED VIEW {name} AS {nexmark.QUERIES[name]}")
        ref = NexmarkOracle()
        first = 0
        for _ in range(3):
            ref.insert(db, nexmark.generate(first, EVENTS, seed=7))
            first += EVENTS
            _flush_one(db)
            ref.check(db)

        # a big epoch (four stateful tasks per stage); worker 0's executor dies while its job runs
        epoch = db.epoch
        ref.insert(db, nexmark.generate(first, BIG_EPOCH, seed=7))
        first += BIG_EPOCH
        killer = ExecutorKiller(cluster_spark, cluster, worker=0)
        killer.start()
        started = time.monotonic()
        try:
            reports = db.flush()
        finally:
            killer.done.set()
            killer.join()
        took = time.monotonic() - started
        assert killer.error is None, f"the killer failed: {killer.error!r}"
        assert killer.killed is not None, f"the epoch ({took:.1f} s) ended before an executor could be killed"
        assert not _alive(killer.killed)
        retried = _stage_retries(cluster_spark, killer.jobs)
        assert retried, "no stage of the epoch's job failed a task or ran again: the kill was not felt"
        assert [r.epoch for r in reports] == [epoch + 1], "the epoch must commit once, as one epoch"
        ref.check(db)  # exactly once: q17's COUNT and SUM per auction would show a bid applied twice or lost
        print(f"\nkilled executor pid {killer.killed}; the epoch took {took:.1f} s (jobs {sorted(killer.jobs)}); "
              f"(stage, attempt, failed tasks) of the stages that failed tasks or ran again: {retried}")

        # the worker starts a new executor; the next epoch runs on both again
        deadline = time.monotonic() + 120
        while not cluster.executor_pids(cluster.workers[0]) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert cluster.executor_pids(cluster.workers[0]), f"worker 0 started no new executor:\n{cluster.logs()}"
        wait_for_executors(cluster_spark, EXECUTORS, cluster)
        ref.insert(db, nexmark.generate(first, EVENTS, seed=7))
        _flush_one(db)
        ref.check(db)
    finally:
        db.close()
    assert _session_alive(cluster_spark)

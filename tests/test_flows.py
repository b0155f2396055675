"""Flows (``CREATE FLOW``, :mod:`millpond.sql.flows`): continuous time-window aggregations written
into sink tables. Each sink is checked after every FLUSH against DuckDB's GROUP BY over all the
source rows, under random inserts (late rows for old windows among them), updates and deletes, a
restart at another parallelism, and a flow over another flow's sink; a failed sink append after the
commit is settled exactly once; the statements' errors name what is wrong."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import duckdb
import pyarrow as pa
import pytest

from millpond import CatalogError, MillpondError, SqlError, StorageError
from millpond.engine import flow_targets
from millpond.engine.reads import consolidate_rows
from millpond.engine.flows import cluster_floor
from millpond.store.compaction import Policy
from millpond.store.state_table import StateTable
from tests import workload

SOURCE = "CREATE TABLE metrics (id INT PRIMARY KEY, host TEXT, ts TIMESTAMP, cpu DOUBLE)"
SCHEMA = pa.schema([("id", pa.int32()), ("host", pa.string()), ("ts", pa.timestamp("us")), ("cpu", pa.float64())])
T0 = datetime(2026, 1, 1)

# flow -> (CREATE FLOW, the oracle over the source table; DuckDB runs it with PostgreSQL's meaning)
FLOWS = {
    "per_min": ("""CREATE FLOW per_min SINK TO cpu_1m COMMENT 'per host and minute' AS
                   SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute, avg(cpu) AS avg_cpu,
                          max(cpu) AS max_cpu, min(cpu) AS min_cpu, sum(cpu) AS total, count(*) AS n
                   FROM metrics WHERE cpu >= 0 GROUP BY host, minute""",
                """SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute, avg(cpu) AS avg_cpu,
                          max(cpu) AS max_cpu, min(cpu) AS min_cpu, sum(cpu) AS total, count(*) AS n
                   FROM metrics WHERE cpu >= 0 GROUP BY host, minute"""),
    # a flow of a flow: 10-minute rollups of the 1-minute sink
    "per_10min": ("""CREATE FLOW per_10min SINK TO cpu_10m AS
                     SELECT host, date_bin(INTERVAL '10 minutes', minute) AS bucket, max(max_cpu) AS hi, sum(n) AS n
                     FROM cpu_1m GROUP BY host, bucket""",
                  """SELECT host, date_bin(INTERVAL '10 minutes', ts) AS bucket, max(cpu) AS hi, count(*)::numeric AS n
                     FROM metrics WHERE cpu >= 0 GROUP BY host, bucket"""),
    # TUMBLE-style bucketing, keyed by the window alone; approx_count_distinct counts exactly
    "tumbling": ("""CREATE FLOW tumbling SINK TO per_5m AS
                    SELECT window_start, count(*) AS n, approx_count_distinct(host) AS hosts
                    FROM TUMBLE(metrics, ts, INTERVAL '5 minutes') GROUP BY window_start""",
                 """SELECT date_bin(INTERVAL '5 minutes', ts) AS window_start, count(*) AS n, count(DISTINCT host) AS hosts
                    FROM metrics GROUP BY 1"""),
    # exact percentiles per host and 10 minutes
    "spread": ("""CREATE FLOW spread SINK TO cpu_pct AS
                  SELECT host, date_bin(INTERVAL '10 minutes', ts) AS bucket,
                         percentile_cont(0.9) WITHIN GROUP (ORDER BY cpu) AS p90,
                         percentile_disc(0.5) WITHIN GROUP (ORDER BY cpu DESC) AS median
                  FROM metrics GROUP BY host, bucket""",
               """SELECT host, date_bin(INTERVAL '10 minutes', ts) AS bucket,
                         percentile_cont(0.9) WITHIN GROUP (ORDER BY cpu) AS p90,
                         percentile_disc(0.5) WITHIN GROUP (ORDER BY cpu DESC) AS median
                  FROM metrics GROUP BY host, bucket"""),
}
SINKS = {"per_min": "cpu_1m", "per_10min": "cpu_10m", "tumbling": "per_5m", "spread": "cpu_pct"}


class Source:
    """The source rows as the oracle keeps them, and random changes to them."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.con = duckdb.connect()
        self.con.execute(SOURCE)
        self.next_id, self.now = 0, 0  # minutes since T0: "now" advances; late rows go back in time

    def step(self, db) -> None:  # noqa: ANN001
        kind = self.rng.choice(["insert", "insert", "insert", "update", "delete"])
        if kind == "insert" or self.next_id == 0:
            self.now += self.rng.randrange(0, 3)
            n = self.rng.randrange(1, 30)
            minutes = [self.now - (self.rng.randrange(1, 40) if self.rng.random() < 0.1 else 0) for _ in range(n)]
            rows = pa.table({
                "id": list(range(self.next_id, self.next_id + n)),
                "host": [self.rng.choice(["a", "b", "c"]) for _ in range(n)],
                "ts": [T0 + timedelta(minutes=m, seconds=self.rng.randrange(60)) for m in minutes],
                "cpu": [None if self.rng.random() < 0.05 else round(self.rng.uniform(-5, 100), 2) for _ in range(n)],
            }, schema=SCHEMA)
            self.next_id += n
            db.insert("metrics", rows)
            self.con.register("incoming", rows)
            self.con.execute("INSERT INTO metrics SELECT * FROM incoming")
            self.con.unregister("incoming")
            return
        lo = self.rng.randrange(self.next_id)
        hi = lo + self.rng.randrange(1, 6)
        sql = (f"UPDATE metrics SET cpu = cpu + {self.rng.randrange(1, 20)}, ts = ts - INTERVAL '1 minute' "
               f"WHERE id >= {lo} AND id < {hi}" if kind == "update" else
               f"DELETE FROM metrics WHERE id >= {lo} AND id < {hi}")
        db.sql(sql)
        self.con.execute(sql)

    def oracle(self, sql: str) -> list[tuple]:
        ref = workload.Reference.__new__(workload.Reference)
        ref.con = self.con
        return ref.query(sql)


def _mismatches(db, source: Source, flows) -> list[str]:  # noqa: ANN001
    return [f"{name}: got {workload.norm(db.sql(f'SELECT * FROM {SINKS[name]}'))[:5]}, want "
            f"{source.oracle(FLOWS[name][1])[:5]}"
            for name in flows if workload.norm(db.sql(f"SELECT * FROM {SINKS[name]}")) != source.oracle(FLOWS[name][1])]


def test_sinks_match_duckdb_after_every_flush_through_a_restart(open_db, tmp_path):
    path = str(tmp_path / "flows")
    db = open_db(path=path)
    db.sql(SOURCE)
    source = Source(seed=7)
    for _ in range(3):  # rows before the flows exist: their first epoch reads them all
        source.step(db)
    for name in FLOWS:
        db.sql(FLOWS[name][0])
    for i in range(10):
        if i == 5:  # a restart at another parallelism: the flows' state is read back, nothing refilled
            db.close()
            db = open_db(path=path, parallelism=1)
        for _ in range(source.rng.randrange(1, 4)):
            source.step(db)
        db.flush()
        assert not _mismatches(db, source, FLOWS), (i, _mismatches(db, source, FLOWS))
    shown = db.sql("SHOW FLOWS")
    assert shown.column("name").to_pylist() == ["per_10min", "per_min", "spread", "tumbling"]
    assert shown.column("sink").to_pylist() == ["cpu_10m", "cpu_1m", "cpu_pct", "per_5m"]
    assert shown.column("key").to_pylist() == ["host, bucket", "host, minute", "host, bucket", "window_start"]
    assert shown.column("comment").to_pylist() == [None, "per host and minute", None, None]


def test_a_sink_is_a_table_keyed_by_the_group_keys(open_db, spark, root):
    db = open_db()
    db.sql(SOURCE)
    db.sql(FLOWS["per_min"][0])
    described = {r["name"]: r for r in db.sql("DESCRIBE cpu_1m").to_pylist()}
    assert described["host"]["description"] == "primary key" and described["minute"]["description"] == "primary key"
    assert (described["minute"]["type"], described["n"]["type"], described["kind"]["description"],
            described["written by"]["description"]) == ("TIMESTAMP", "BIGINT", "table", "flow per_min")
    db.insert("metrics", {"id": [1, 2], "host": ["a", "a"], "ts": [T0, T0 + timedelta(seconds=30)], "cpu": [1.0, 3.0]})
    reports = db.flush()
    assert [list(r.changes) for r in reports][0] == ["per_min"]  # the flow's changes, as a view's
    # a view over the sink sees the flow's rows, one epoch after the flow wrote them
    db.sql("CREATE MATERIALIZED VIEW busy AS SELECT host, sum(n) AS n FROM cpu_1m GROUP BY host")
    db.insert("metrics", {"id": [3], "host": ["a"], "ts": [T0 + timedelta(minutes=1)], "cpu": [5.0]})
    db.flush()
    assert workload.norm(db.sql("SELECT * FROM busy")) == [("a", 3)]
    assert workload.norm(db.sql("SELECT host, minute, avg_cpu, n FROM cpu_1m")) == [
        ("a", T0, 2.0, 2), ("a", T0 + timedelta(minutes=1), 5.0, 1)]
    # from Spark, the sink's log is the flow's changelog: rows with _w = +1 / -1
    log = spark.read.format("millpond").option("root", root).option("channel", "cpu_1m").load()
    net = log.groupBy("host", "minute", "avg_cpu", "n").sum("_w").where("`sum(_w)` <> 0").collect()
    assert sorted((r["host"], r["minute"], r["avg_cpu"], r["n"], r["sum(_w)"]) for r in net) == [
        ("a", T0, 2.0, 2, 1), ("a", T0 + timedelta(minutes=1), 5.0, 1, 1)]


def test_only_the_flow_writes_its_sink(open_db):
    db = open_db()
    db.sql(SOURCE)
    db.sql(FLOWS["per_min"][0])
    for sql in ("INSERT INTO cpu_1m VALUES ('a', '2026-01-01', 1, 1, 1, 1, 1)", "DELETE FROM cpu_1m",
                "UPDATE cpu_1m SET n = 0"):
        with pytest.raises(CatalogError, match=r"table 'cpu_1m' is the sink of flow 'per_min': only the flow writes"):
            db.sql(sql)
    with pytest.raises(CatalogError, match=r"cannot drop 'cpu_1m': it is the sink of flow 'per_min'"):
        db.sql("DROP TABLE cpu_1m")
    with pytest.raises(CatalogError, match=r"cannot drop or replace 'metrics' because other objects depend on it: flows per_min read it"):
        db.sql("DROP TABLE metrics")
    source = Source(seed=5)
    for _ in range(4):
        source.step(db)
    db.flush()
    kept = db.sql("SELECT * FROM cpu_1m")
    assert kept.num_rows and workload.norm(kept) == source.oracle(FLOWS["per_min"][1])
    db.sql("DROP FLOW per_min")  # the sink, a table of its own now, has the rows its log adds up to
    assert workload.norm(db.sql("SELECT * FROM cpu_1m")) == workload.norm(kept)
    db.sql("DROP FLOW IF EXISTS per_min")
    with pytest.raises(CatalogError, match=r'flow "per_min" does not exist'):
        db.sql("DROP FLOW per_min")
    db.sql("INSERT INTO cpu_1m VALUES ('a', '2020-01-01', 1, 1, 1, 1, 1)")  # the sink stays, a table like any
    db.flush()
    assert db.sql("SELECT count(*) AS n FROM cpu_1m").column("n").to_pylist() == [kept.num_rows + 1]
    with pytest.raises(CatalogError, match=r"sink table 'cpu_1m' already holds rows; a sink holds only its flow's rows: "
                                           r"DELETE FROM cpu_1m first"):
        db.sql(FLOWS["per_min"][0])
    db.sql("DELETE FROM cpu_1m")
    db.sql(FLOWS["per_min"][0])  # an empty table may become a sink again
    db.flush()
    assert workload.norm(db.sql("SELECT * FROM cpu_1m")) == source.oracle(FLOWS["per_min"][1])


@pytest.mark.parametrize("sql,error,needle", [
    ("CREATE FLOW f SINK TO s AS SELECT host, cpu FROM metrics", SqlError,
     r"flow 'f': a flow aggregates: its SELECT needs a GROUP BY"),
    ("CREATE FLOW f SINK TO s AS SELECT count(*) AS n FROM metrics GROUP BY host", SqlError,
     r"GROUP BY host must also be an output column"),
    ("CREATE FLOW f SINK TO s EXPIRE AFTER INTERVAL '1 hour' AS SELECT host, count(*) FROM metrics GROUP BY host",
     SqlError, r"EXPIRE AFTER needs a time window among the group keys"),
    ("CREATE FLOW f SINK TO s EXPIRE AFTER INTERVAL '1 month' AS SELECT ts, count(*) FROM metrics GROUP BY ts",
     SqlError, r"EXPIRE AFTER takes a positive interval constant .*\(months have no fixed length\), got INTERVAL '1 month'"),
    ("CREATE FLOW f SINK TO s EXPIRE AFTER AS SELECT ts, count(*) FROM metrics GROUP BY ts",
     SqlError, r"EXPIRE AFTER takes an interval"),
    ("CREATE FLOW f AS SELECT host, count(*) FROM metrics GROUP BY host", SqlError, r"expected SINK TO table"),
    ("CREATE FLOW f SINK TO s TRIGGER AFTER 0 ROWS AS SELECT host, count(*) FROM metrics GROUP BY host", SqlError,
     r"TRIGGER AFTER takes a positive whole number of rows, e.g. TRIGGER AFTER 10000 ROWS"),
    ("CREATE FLOW f SINK TO s TRIGGER AFTER 1000 AS SELECT host, count(*) FROM metrics GROUP BY host", SqlError,
     r"TRIGGER AFTER takes a positive whole number of rows"),
    ("CREATE FLOW f SINK TO s AS SELECT host, count(*) AS n FROM metrics GROUP BY host ORDER BY n", SqlError,
     r"ORDER is not supported in a flow"),
    ("CREATE FLOW f SINK TO s AS SELECT host, count(*) AS n FROM nowhere GROUP BY host", MillpondError, r"nowhere"),
    ("CREATE FLOW f SINK TO metrics AS SELECT host, count(*) AS n FROM metrics GROUP BY host", SqlError,
     r"flow 'f' reads 'metrics', which its own sink 'metrics' feeds: flows may not form a cycle"),
    ("CREATE FLOW f SINK TO other AS SELECT host, count(*) AS n FROM metrics GROUP BY host", CatalogError,
     r"sink table 'other' has columns \(host VARCHAR, n INT\); the flow writes \(host VARCHAR, n BIGINT\)"),
    ("CREATE FLOW f SINK TO keyed AS SELECT host, count(*) AS n FROM metrics GROUP BY host", CatalogError,
     r"sink table 'keyed' has primary key \(none\); the flow's group keys are \(host\)"),
])
def test_create_flow_errors_name_the_problem(open_db, sql, error, needle):
    db = open_db()
    db.sql(SOURCE)
    db.sql("CREATE TABLE other (host TEXT PRIMARY KEY, n INT)")
    db.sql("CREATE TABLE keyed (host TEXT, n BIGINT)")
    with pytest.raises(error, match=needle):
        db.sql(sql)
    assert db.sql("SHOW FLOWS").num_rows == 0
    assert sorted(db.sql("SHOW TABLES").column("name").to_pylist()) == ["keyed", "metrics", "other"]


def test_flows_may_not_form_a_cycle_through_each_other(open_db):
    db = open_db()
    db.sql("CREATE TABLE a (k INT, v INT)")
    db.sql("CREATE FLOW f1 SINK TO b AS SELECT k, count(*) AS n FROM a GROUP BY k")
    with pytest.raises(SqlError, match=r"flow 'f2' reads 'b', which its own sink 'a' feeds"):
        db.sql("CREATE FLOW f2 SINK TO a AS SELECT k, count(*) AS n FROM b GROUP BY k")
    db.sql("CREATE FLOW IF NOT EXISTS f1 SINK TO b AS SELECT k, count(*) AS n FROM a GROUP BY k")
    with pytest.raises(CatalogError, match=r'relation "f1" already exists\nHINT:  \'f1\' is a flow'):
        db.sql("CREATE FLOW f1 SINK TO c AS SELECT k, count(*) AS n FROM a GROUP BY k")
    with pytest.raises(CatalogError, match=r"table 'b' is already the sink of flow 'f1'"):
        db.sql("CREATE FLOW f3 SINK TO b AS SELECT k, count(*) AS n FROM a GROUP BY k")


def _log_rows(db, sink: str) -> list[tuple]:  # noqa: ANN001
    """What the sink's log adds up to (what views over the sink and Spark readers of it see)."""
    rt = db.runtime
    records = rt.channel(rt.catalog.tables[sink]).read(0, None)
    return workload.norm(consolidate_rows(records).drop_columns(["_row_id", "_w"]))


def test_a_sink_append_lost_after_the_commit_is_settled_once(open_db, monkeypatch, tmp_path):
    """The epoch commits, then writing the sink's log fails (as a crash there would leave it): the
    sink's rows are the flow's, so reads are right at once; the next epoch — or the next process —
    gives the log exactly the changes it is owed, and the flow over it catches up."""
    path = str(tmp_path / "settle")
    db = open_db(path=path)
    db.sql(SOURCE)
    db.sql(FLOWS["per_min"][0])
    db.sql(FLOWS["per_10min"][0])
    source = Source(seed=3)
    source.step(db)
    db.flush()
    assert _log_rows(db, "cpu_1m") == source.oracle(FLOWS["per_min"][1])
    real = flow_targets.FlowTargets.append

    def broken(self, table, flow, change, epoch):  # noqa: ANN001
        raise OSError("storage unreachable")

    monkeypatch.setattr(flow_targets.FlowTargets, "append", broken)
    source.step(db)
    with pytest.raises(StorageError, match="storage unreachable"):
        db.flush()
    monkeypatch.setattr(flow_targets.FlowTargets, "append", real)
    assert not _mismatches(db, source, ["per_min"])  # the commit happened: the sink's rows are the flow's
    assert _log_rows(db, "cpu_1m") != source.oracle(FLOWS["per_min"][1])  # its log is behind
    db.close()
    db = open_db(path=path)
    db.flush()  # settles, then the flow over the sink reads what its log received
    assert _log_rows(db, "cpu_1m") == source.oracle(FLOWS["per_min"][1])
    assert not _mismatches(db, source, ["per_min", "per_10min"])
    db.flush()
    db.close()
    db = open_db(path=path)  # settled once: a second open owes nothing
    source.step(db)
    db.flush()
    assert _log_rows(db, "cpu_1m") == source.oracle(FLOWS["per_min"][1])
    assert not _mismatches(db, source, ["per_min", "per_10min"])


EXPIRING = """CREATE FLOW recent SINK TO cpu_recent EXPIRE AFTER INTERVAL '5 minutes' AS
              SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute, max(cpu) AS hi, count(*) AS n
              FROM metrics GROUP BY host, minute"""
EXPIRING_ORACLE = """SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute, max(cpu) AS hi, count(*) AS n
                     FROM metrics GROUP BY host, minute"""


def test_expired_windows_keep_their_rows_and_late_changes_are_counted(open_db, tmp_path):
    """Windows within EXPIRE AFTER of the watermark equal DuckDB's GROUP BY; an expired window's
    sink rows never change again, whatever arrives for it; the dropped changes are counted."""
    path = str(tmp_path / "expiring")

    def opened():  # no compaction runs until the test asks for one (in the background it may drop
        db = open_db(path=path)  # the expired windows' files before the test reads them)
        db.runtime.coordinator.state.policy = Policy(l0_trigger=1 << 30, l0_stall=1 << 30)
        return db

    db = opened()
    db.sql(SOURCE)
    db.sql(EXPIRING)
    source = Source(seed=11)
    frozen: dict[datetime, list[tuple]] = {}  # window -> its sink rows when it was first seen expired
    for i in range(12):
        if i == 6:
            db.close()
            db = opened()
        for _ in range(source.rng.randrange(1, 4)):
            source.step(db)
            db.flush()  # an epoch per step: files enough for the compaction below to merge
        flow = db.sql("SHOW FLOWS").to_pylist()[0]
        assert flow["expire_after"] == {"months": 0, "days": 0, "micros": 300_000_000}
        oldest = flow["watermark"] - timedelta(minutes=5)
        got, want = workload.norm(db.sql("SELECT * FROM cpu_recent")), source.oracle(EXPIRING_ORACLE)
        assert [r for r in got if r[1] >= oldest] == [r for r in want if r[1] >= oldest], i
        for window in {r[1] for r in got if r[1] < oldest}:
            rows = [r for r in got if r[1] == window]
            assert frozen.setdefault(window, rows) == rows, (i, window)
    assert frozen, "the workload should expire windows"
    assert flow["expired"] > 0, "the workload should send late rows to expired windows"
    assert workload.norm(db.sql("SELECT * FROM cpu_recent")) != source.oracle(EXPIRING_ORACLE)  # they were dropped
    # the expired windows' aggregation state goes when compaction merges its files; their rows stay
    rt = db.runtime
    f = rt._by_name["recent"]
    groups = f"o{f.object_id}.n{f.merge.aggregate.node_id}.groups"
    floor = rt.coordinator.manifest.expiry[groups]
    micros = int((flow["watermark"] - timedelta(minutes=5) - datetime(1970, 1, 1)) / timedelta(microseconds=1))
    assert floor == [f.merge.time_group, micros, cluster_floor(micros)]  # its state is in window order

    def windows() -> set:
        table = StateTable(rt.coordinator.store, rt.coordinator.manifest.state(groups), f.merge.aggregate.group)
        return set(table.scan()[f.merge.time_group].to_list())

    expired = {w for w in windows() if w < oldest}
    assert expired  # before a compaction reaches them
    sink = workload.norm(db.sql("SELECT * FROM cpu_recent"))
    rt.coordinator.state.policy = Policy()
    rt.coordinator.state.compact()
    levels = rt.coordinator.manifest.state(groups)
    assert all(r.min_kh >= floor[2] or r.max_kh - floor[2] > floor[2] - r.min_kh for lv in levels.levels for r in lv)
    left = {w for w in windows() if w < oldest}  # in L0 or a file mostly above the floor
    assert windows() - left and len(left) < len(expired), (len(left), len(expired))
    assert workload.norm(db.sql("SELECT * FROM cpu_recent")) == sink
    source.step(db)
    db.flush()  # triggers go on over the compacted state
    got, want = workload.norm(db.sql("SELECT * FROM cpu_recent")), source.oracle(EXPIRING_ORACLE)
    assert [r for r in got if r[1] >= oldest] == [r for r in want if r[1] >= oldest]


def test_a_failing_flow_sits_out_and_says_why(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT)")
    db.sql("CREATE FLOW bad SINK TO ratios AS SELECT k, sum(10 / v) AS r FROM t GROUP BY k")
    db.sql("CREATE FLOW good SINK TO counts AS SELECT k, count(*) AS n FROM t GROUP BY k")
    db.sql("INSERT INTO t VALUES (1, 5)")
    db.flush()
    db.sql("INSERT INTO t VALUES (1, 0), (2, 1)")
    db.flush()
    flows = {r["name"]: r for r in db.sql("SHOW FLOWS").to_pylist()}
    assert flows["good"]["error"] is None
    assert flows["bad"]["error"].startswith("flow 'bad' failed at epoch ")
    assert "division by zero" in flows["bad"]["error"] and "t: k=1, v=0" in flows["bad"]["error"]
    assert workload.norm(db.sql("SELECT * FROM counts")) == [(1, 2), (2, 1)]
    assert workload.norm(db.sql("SELECT * FROM ratios")) == [(1, 2)]  # as of its last good epoch
    db.sql("DROP FLOW bad")
    db.sql("INSERT INTO t VALUES (2, 2)")
    db.flush()
    assert workload.norm(db.sql("SELECT * FROM counts")) == [(1, 2), (2, 2)]


def test_a_data_error_above_the_aggregation_fails_the_flow_alone(open_db):
    """Expressions over the aggregates run where the flow's trigger merges them (the driver, in
    DuckDB with PostgreSQL's meaning): a division by zero there fails that flow alone, as in Spark."""
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT)")
    db.sql("CREATE FLOW bad SINK TO per_k AS SELECT k, 100 / sum(v) AS r FROM t GROUP BY k")
    db.sql("CREATE FLOW good SINK TO counts AS SELECT k, count(*) AS n FROM t GROUP BY k")
    db.sql("INSERT INTO t VALUES (1, 5)")
    db.flush()
    db.sql("INSERT INTO t VALUES (1, -5), (2, 1)")
    db.flush()
    flows = {r["name"]: r for r in db.sql("SHOW FLOWS").to_pylist()}
    assert "division by zero (SQLSTATE 22012)" in flows["bad"]["error"], flows["bad"]["error"]
    assert flows["good"]["error"] is None
    assert workload.norm(db.sql("SELECT * FROM per_k")) == [(1, 20)]  # as of its last good epoch
    assert workload.norm(db.sql("SELECT * FROM counts")) == [(1, 2), (2, 1)]


def test_a_sink_is_followed_and_read_back_as_its_flow_changes(open_db):
    """A sink keeps no changes of its own while its flow writes it: subscriptions and AS OF read the flow's."""
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT); CREATE FLOW f SINK TO s AS SELECT k, sum(v) AS total FROM t GROUP BY k")
    db.sql("INSERT INTO t VALUES (1, 2), (2, 3)")
    first = db.flush()[0].epoch
    db.sql("INSERT INTO t VALUES (1, 5)")
    db.flush()
    assert workload.norm(db.sql(f"SELECT * FROM s AS OF EPOCH {first}")) == [(1, 2), (2, 3)]
    assert workload.norm(db.sql("SELECT * FROM s")) == [(1, 7), (2, 3)]
    changes = [c.to_pylist() for c in db.runtime.changes("s", first)]
    assert [sorted((r["k"], r["total"], r["_w"]) for r in c) for c in changes] == [[(1, 2, -1), (1, 7, 1)]]


def test_a_read_only_open_reads_sinks_and_refuses_flow_statements(open_db, spark, root):
    import millpond
    from millpond import ReadOnlyError

    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT); CREATE FLOW f SINK TO s AS SELECT k, sum(v) AS total FROM t GROUP BY k")
    db.sql("INSERT INTO t VALUES (1, 2), (1, 3)")
    db.flush()
    reader = millpond.connect(root, spark=spark, read_only=True)
    try:
        assert reader.sql("SELECT * FROM s").to_pylist() == [{"k": 1, "total": 5}]
        assert reader.sql("SHOW FLOWS").column("name").to_pylist() == ["f"]
        for sql, verb in (("DROP FLOW f", "DROP FLOW"),
                          ("CREATE FLOW g SINK TO s2 AS SELECT k, count(*) AS n FROM t GROUP BY k", "CREATE FLOW")):
            with pytest.raises(ReadOnlyError, match=f"the database is open read-only: {verb} is refused"):
                reader.sql(sql)
    finally:
        reader.close()


def test_a_row_threshold_triggers_an_epoch_before_the_interval(spark, root):
    import time

    import millpond

    db = millpond.connect(root, spark=spark, parallelism=2, interval="1h")  # the interval alone would never fire
    try:
        db.sql(SOURCE)
        db.sql("CREATE TABLE quiet (id INT PRIMARY KEY, v INT)")
        db.sql("""CREATE FLOW hot SINK TO per_host TRIGGER AFTER 100 ROWS COMMENT 'early' AS
                  SELECT host, count(*) AS n FROM metrics GROUP BY host""")
        db.sql("CREATE FLOW calm SINK TO calm_sink AS SELECT v, count(*) AS n FROM quiet GROUP BY v")
        assert db.sql("SHOW FLOWS").select(["name", "trigger_rows", "comment"]).to_pylist() == [
            {"name": "calm", "trigger_rows": None, "comment": None},
            {"name": "hot", "trigger_rows": 100, "comment": "early"}]

        def rows(n: int, first: int) -> pa.Table:
            return pa.table({"id": list(range(first, first + n)), "host": ["a", "b"] * (n // 2),
                             "ts": [T0] * n, "cpu": [1.0] * n}, schema=SCHEMA)

        db.insert("quiet", pa.table({"id": list(range(500)), "v": [1] * 500}))  # no threshold: waits for the hour
        db.insert("metrics", rows(60, 0))
        time.sleep(1.0)  # 20 checks of the threshold
        assert db.epoch == 0, "below every threshold, no epoch runs before the interval"
        db.insert("metrics", rows(40, 60))  # 100 unread rows: the loop runs an epoch within a check
        deadline = time.monotonic() + 60
        while db.epoch == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db.epoch >= 1
        assert db.runtime.due() is False
        assert sorted(db.sql("SELECT * FROM per_host").to_pylist(), key=str) == [
            {"host": "a", "n": 50}, {"host": "b", "n": 50}]
    finally:
        db.close()
    db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    try:
        assert db.sql("SHOW FLOWS").column("trigger_rows").to_pylist() == [None, 100]  # kept in the catalog
        assert sorted(db.sql("SELECT * FROM per_host").to_pylist(), key=str) == [
            {"host": "a", "n": 50}, {"host": "b", "n": 50}]
        db.flush()
        assert db.sql("SELECT * FROM calm_sink").to_pylist() == [{"v": 1, "n": 500}]
    finally:
        db.close()

"""Changes out: subscriptions (``db.subscribe``, ``SUBSCRIBE``), time travel (``AS OF``) and
retention, checked against DuckDB recomputing each view over all input after every epoch."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

import duckdb
import pyarrow as pa
import pytest

import millpond
from millpond import paths
from millpond.catalog import Retention
from millpond.errors import MillpondError, RetentionError, SqlError
from tests.conftest import rows
from tests.workload import folded

TABLES = """
CREATE TABLE acct (id INT PRIMARY KEY, owner VARCHAR, balance INT);
CREATE TABLE event (owner VARCHAR, amount INT);
"""
VIEWS = {
    "per_owner": "SELECT owner, count(*) AS n, sum(balance) AS total, max(balance) AS top FROM acct GROUP BY owner",
    "spent": """SELECT a.owner, sum(e.amount) AS spent, count(*) AS events
                FROM acct a JOIN event e ON a.owner = e.owner GROUP BY a.owner""",
    "big": "SELECT id, balance FROM acct WHERE balance > 50",
}
OWNERS = ["ann", "bob", "cy", None]


class Oracle:
    """The input as DuckDB sees it, and each view recomputed over it."""

    def __init__(self):
        self.acct: dict[int, tuple] = {}
        self.event: list[tuple] = []

    def step(self, db, rng: random.Random) -> None:  # noqa: ANN001
        kind = rng.choice(["insert", "insert", "update", "delete", "event", "event_delete"])
        if kind == "insert" or not self.acct and kind in ("update", "delete"):
            new = {rng.randrange(40): (rng.choice(OWNERS), rng.randrange(100)) for _ in range(rng.randrange(1, 6))}
            db.insert("acct", pa.table({"id": pa.array(list(new), pa.int32()),
                                        "owner": [o for o, _ in new.values()],
                                        "balance": pa.array([b for _, b in new.values()], pa.int32())}))
            self.acct.update(new)  # an INSERT of a present key replaces its row (upsert)
        elif kind == "update":
            k = rng.choice(list(self.acct))
            delta = rng.randrange(-30, 30)
            db.sql(f"UPDATE acct SET balance = balance + {delta} WHERE id = {k}")
            owner, balance = self.acct[k]
            self.acct[k] = (owner, balance + delta)
        elif kind == "delete":
            k = rng.choice(list(self.acct))
            db.sql(f"DELETE FROM acct WHERE id = {k}")
            del self.acct[k]
        elif kind == "event":
            new = [(rng.choice(OWNERS), rng.randrange(10)) for _ in range(rng.randrange(1, 5))]
            db.insert("event", pa.table({"owner": [o for o, _ in new], "amount": pa.array([a for _, a in new], pa.int32())}))
            self.event += new
        elif self.event:
            amount = rng.randrange(10)
            db.sql(f"DELETE FROM event WHERE amount = {amount}")
            self.event = [e for e in self.event if e[1] != amount]

    def query(self, sql: str) -> list[tuple]:
        con = duckdb.connect()
        con.register("acct", pa.table({"id": pa.array(list(self.acct), pa.int32()),
                                       "owner": pa.array([o for o, _ in self.acct.values()], pa.string()),
                                       "balance": pa.array([b for _, b in self.acct.values()], pa.int32())}))
        con.register("event", pa.table({"owner": pa.array([o for o, _ in self.event], pa.string()),
                                        "amount": pa.array([a for _, a in self.event], pa.int32())}))
        return rows(con.sql(sql).to_arrow_table())

    def answers(self) -> dict[str, list[tuple]]:
        return {**{v: self.query(sql) for v, sql in VIEWS.items()},
                "acct": self.query("SELECT * FROM acct"), "event": self.query("SELECT * FROM event")}


def _setup(db) -> None:  # noqa: ANN001
    db.sql(TABLES)
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")


def test_subscriptions_and_time_travel_follow_the_oracle(open_db):
    """After every epoch of random inserts, upserts, updates and deletes: each view's and table's
    changes since epoch 0, added up, are its rows as DuckDB computes them; at the end, every epoch
    read back AS OF it (Python and SQL, also a join of two relations at one epoch) is what DuckDB
    computed then."""
    db = open_db()
    _setup(db)
    rng, oracle = random.Random(7), Oracle()
    seen: dict[int, dict[str, list[tuple]]] = {}
    db.flush()
    seen[db.epoch] = oracle.answers()
    for i in range(14):
        for _ in range(rng.randrange(1, 4)):
            oracle.step(db, rng)
        db.flush()
        want = seen[db.epoch] = oracle.answers()
        for name in [*VIEWS, "acct", "event"]:
            assert rows(folded(db, name)) == want[name], (i, name)
        if i == 6:  # restarted: the changes are on the root, not in the process
            db.close()
            db = open_db()
    for epoch, want in seen.items():
        for name in [*VIEWS, "acct", "event"]:
            assert rows(db.read(name, epoch=epoch)) == want[name], (epoch, name)
            assert rows(db.sql(f"SELECT * FROM {name} AS OF EPOCH {epoch}")) == want[name], (epoch, name)
        joined = db.sql(f"""SELECT p.owner, p.total, s.spent FROM per_owner AS OF EPOCH {epoch} p
                            JOIN spent AS OF EPOCH {epoch} AS s ON p.owner = s.owner""")
        expect = {o: t for o, _, t, _ in want["per_owner"]}
        assert rows(joined) == sorted((o, expect[o], sp) for o, sp, _ in want["spent"] if o in expect), epoch
    # a subscription from the middle with its snapshot first adds up to the rows now
    middle = sorted(seen)[len(seen) // 2]
    parts = list(db.subscribe("per_owner", middle, snapshot=True, timeout=0))
    assert parts[0]["_epoch"].to_pylist() == [middle] * parts[0].num_rows and set(parts[0]["_w"].to_pylist()) <= {1}
    assert rows(parts[0].drop_columns(["_w", "_epoch"])) == seen[middle]["per_owner"]
    assert all(p["_epoch"][0].as_py() > middle for p in parts[1:])


def test_subscribe_sql(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE MATERIALIZED VIEW s AS SELECT sum(v) AS total FROM t")
    db.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    db.flush()
    first = db.epoch
    db.sql("UPDATE t SET v = 11 WHERE k = 1")
    db.flush()
    now = db.sql("SUBSCRIBE s")  # the rows now, as inserts
    assert now.to_pylist() == [{"total": 31, "_w": 1, "_epoch": db.epoch}]
    since = db.sql(f"SUBSCRIBE TO s AS OF {first}")  # the rows as of `first`, then what changed after
    assert since.to_pylist() == [{"total": 30, "_w": 1, "_epoch": first}, {"total": 30, "_w": -1, "_epoch": db.epoch},
                                 {"total": 31, "_w": 1, "_epoch": db.epoch}]
    only = db.sql(f"SUBSCRIBE s AS OF EPOCH {first} WITH (SNAPSHOT = false)")
    assert only.to_pylist() == since.to_pylist()[1:]
    empty = db.sql(f"SUBSCRIBE s AS OF {db.epoch} WITH (SNAPSHOT false)")
    assert empty.num_rows == 0 and empty.column_names == ["total", "_w", "_epoch"]
    table = db.sql(f"SUBSCRIBE t AS OF {first} WITH (snapshot = false)")  # a table's changes: its log
    assert rows(table) == [(1, 10, -1, db.epoch), (1, 11, 1, db.epoch)]
    for bad, message in [("SUBSCRIBE (SELECT 1)", "takes the name of a table, view or flow"),
                         ("SUBSCRIBE s AS OF soon", "AS OF takes an epoch number"),
                         ("SUBSCRIBE s WITH (progress = true)", "the only option is SNAPSHOT"),
                         ("SUBSCRIBE nope", 'relation "nope" does not exist'),
                         (f"SUBSCRIBE s AS OF {db.epoch + 5}", "is not committed yet")]:
        with pytest.raises(MillpondError, match=message):
            db.sql(bad)


def test_as_of_timestamp_is_the_last_epoch_committed_before_it(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    marks = {}
    for i in range(3):
        db.sql(f"INSERT INTO t VALUES ({i}, {i})")
        db.flush()
        time.sleep(0.05)
        marks[db.epoch] = datetime.now(timezone.utc)
        time.sleep(0.05)
    for epoch, when in marks.items():
        assert db.runtime.epoch_at(when) == epoch
        got = db.sql(f"SELECT count(*) AS n FROM t AS OF TIMESTAMP '{when.isoformat()}'")
        assert got.to_pylist() == [{"n": len(db.read("t", epoch=epoch))}]
    assert db.sql("SELECT count(*) AS n FROM t AS OF TIMESTAMP now()").to_pylist() == [{"n": 3}]
    with pytest.raises(RetentionError, match="no epoch committed at or before 2001-01-01"):
        db.sql("SELECT * FROM t AS OF TIMESTAMP '2001-01-01 00:00:00'")
    with pytest.raises(MillpondError, match="is not committed yet"):
        db.read("t", epoch=db.epoch + 1)
    with pytest.raises(SqlError, match="not a timestamp"):
        db.sql("SELECT * FROM t AS OF TIMESTAMP 'yesterday-ish'")


def test_retention_drops_old_epochs_and_says_what_is_kept(open_db, root):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE MATERIALIZED VIEW s AS SELECT count(*) AS n FROM t")
    assert db.sql("SHOW retention").to_pylist() == [{"retention": "1 hour"}]  # the default
    db.sql("SET retention = 3")
    counts = {}
    for i in range(6):
        db.sql(f"INSERT INTO t VALUES ({i}, {i})")
        db.flush()
        counts[db.epoch] = i + 1
    feed = db.runtime.coordinator.changes
    assert feed.oldest() == db.epoch - 2  # the last 3 epochs
    with pytest.raises(RetentionError, match=f"oldest epoch kept is {db.epoch - 2}") as caught:
        list(db.subscribe("s", 0, timeout=0))
    assert caught.value.oldest == db.epoch - 2
    assert len(list(db.subscribe("s", db.epoch - 3, timeout=0))) == 3  # from the oldest on: every change
    assert db.read("s", epoch=db.epoch - 3).to_pylist() == [{"n": counts[db.epoch - 3]}]
    with pytest.raises(RetentionError, match=f"earliest epoch readable is {db.epoch - 3}"):
        db.read("s", epoch=db.epoch - 4)
    with pytest.raises(SqlError, match="retention is a number of epochs"):
        db.sql("SET retention = 'a fortnight'")
    db.sql("SET retention = '2 days'")
    db.close()
    again = open_db()  # the setting is the root's (in the catalog), not the session's
    assert again.sql("SHOW retention").to_pylist() == [{"retention": "2 days"}]
    again.sql("SET retention = default")
    assert again.sql("SHOW retention").to_pylist() == [{"retention": "1 hour"}]
    # a span: an epoch stays while it is younger than the span (here, a clock a day ahead)
    keep = again.runtime.coordinator.changes
    last = again.epoch
    assert keep.collect(Retention(seconds=3600), last, time.time()) == 0
    assert keep.collect(Retention(seconds=3600), last, time.time() + 86_400) == 2  # all but the last
    assert keep.oldest() == last


def test_a_pinned_epoch_stays_readable_past_the_retention(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); SET retention = 1")
    db.sql("INSERT INTO t VALUES (1, 1)")
    db.flush()
    pinned = db.epoch
    with db.runtime.coordinator.state.pin(pinned):  # a reader of the rows as of `pinned`
        for i in range(2, 5):
            db.sql(f"INSERT INTO t VALUES ({i}, {i})")
            db.flush()
        assert db.read("t", epoch=pinned).to_pylist() == [{"k": 1, "v": 1}]
    db.sql("INSERT INTO t VALUES (9, 9)")
    db.flush()  # released: the next retention pass drops what only the pin kept
    with pytest.raises(RetentionError):
        db.read("t", epoch=pinned)


def test_an_epoch_reads_no_changes_file_on_the_driver_until_its_report_is_asked(open_db, monkeypatch):
    """A view's tasks write its changes; the epoch (its history row included) only names the files:
    the driver reads them when the report's changes are asked for, once."""
    from millpond.engine.changefeed import ChangeFeed

    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW f AS SELECT k, v FROM t WHERE v > 1")
    reads = []
    real = ChangeFeed.read
    monkeypatch.setattr(ChangeFeed, "read", lambda self, change: reads.append(change) or real(self, change))
    db.sql("INSERT INTO t VALUES (1, 1), (2, 2), (3, 3)")
    (report,) = db.flush()
    assert reads == [] and "f" in report.changes and report.changes.rows("f") == 2
    assert sorted(report.changes["f"].column("k").to_pylist()) == [2, 3] and len(reads) == 1
    report.changes["f"]
    assert len(reads) == 1
    assert db.sql("SELECT rows_out FROM millpond_epochs WHERE name = 'f' ORDER BY epoch DESC LIMIT 1"
                  ).column("rows_out").to_pylist() == [2]


def test_changes_of_an_epoch_that_never_commits_are_never_read(open_db, monkeypatch):
    """Files written for an epoch whose commit fails are invisible, and its replay (over more
    input) replaces them: a subscriber sees each epoch once, with what was committed."""
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE MATERIALIZED VIEW s AS SELECT sum(v) AS total FROM t")
    db.sql("INSERT INTO t VALUES (1, 1)")
    db.flush()
    state = db.runtime.coordinator.state
    real = state.commit

    def fail(*args, **kwargs):  # noqa: ANN002, ANN003
        raise MillpondError("storage unreachable (injected)")

    monkeypatch.setattr(state, "commit", fail)
    db.sql("INSERT INTO t VALUES (2, 100)")
    with pytest.raises(MillpondError, match="injected"):
        db.flush()
    failed = db.epoch + 1
    store = db.runtime.coordinator.store
    assert paths.changes_epoch_key(failed) in store.list(paths.CHANGES_EPOCHS_PREFIX)  # written, not committed
    assert list(db.subscribe("s", db.epoch, timeout=0)) == []
    monkeypatch.setattr(state, "commit", real)
    db.sql("INSERT INTO t VALUES (3, 1000)")
    db.flush()
    assert db.epoch == failed
    (change,) = list(db.subscribe("s", failed - 1, timeout=0))
    assert change.to_pylist() == [{"total": 1, "_w": -1, "_epoch": failed}, {"total": 1101, "_w": 1, "_epoch": failed}]


def test_a_failed_or_dropped_view_ends_its_subscription_with_the_reason(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE MATERIALIZED VIEW q AS SELECT k, 10 / v AS r FROM t")
    db.sql("INSERT INTO t VALUES (1, 5)")
    db.flush()
    sub = db.subscribe("q", timeout=0)
    assert next(sub).to_pylist() == [{"k": 1, "r": 2, "_w": 1, "_epoch": db.epoch}]
    db.sql("INSERT INTO t VALUES (2, 0)")
    db.flush()
    with pytest.raises(MillpondError, match="view .q. failed at epoch .*division by zero"):
        next(sub)
    db.sql("DROP MATERIALIZED VIEW q")
    with pytest.raises(MillpondError, match='relation "q" does not exist'):
        list(db.subscribe("q", 0, timeout=0))


def test_a_flows_changes_add_up_to_its_sink(open_db):
    db = open_db()
    db.sql("""CREATE TABLE r (host VARCHAR, ts TIMESTAMP, cpu DOUBLE);
              CREATE FLOW per_min SINK TO cpu_1m AS SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute,
                     count(*) AS n, max(cpu) AS top FROM r GROUP BY host, minute""")
    rng = random.Random(5)
    for i in range(4):
        values = ", ".join(f"('h{rng.randrange(3)}', TIMESTAMP '2026-01-01 00:0{rng.randrange(4)}:00', {rng.random():.3f})"
                           for _ in range(6))
        db.sql(f"INSERT INTO r VALUES {values}")
        if i == 2:
            db.sql("DELETE FROM r WHERE host = 'h1'")
        db.flush()
    assert rows(folded(db, "per_min")) == rows(db.read("cpu_1m"))
    assert rows(folded(db, "cpu_1m")) == rows(db.read("cpu_1m"))  # the sink table's own changes too
    with pytest.raises(MillpondError, match="keeps its rows in its sink table 'cpu_1m'"):
        list(db.subscribe("per_min", timeout=0))


SUBSCRIBER = """
import json, sys, millpond
db = millpond.connect(sys.argv[1], read_only=True)
for change in db.subscribe("per_owner", 0, timeout=float(sys.argv[2])):
    print(json.dumps(change.to_pylist()), flush=True)
"""


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_a_subscriber_in_another_process_follows_background_epochs(spark, root):
    """A read-only process subscribed from epoch 0 receives every epoch the writer's background
    loop commits, once, in order, while it commits them; added up, they are the view."""
    db = millpond.connect(root, spark=spark, parallelism=2, interval=0.2)
    try:
        _setup(db)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
        # its idle timeout outlasts an epoch of a loaded machine (6 s did not, once, beside make chaos)
        proc = subprocess.Popen([sys.executable, "-c", SUBSCRIBER, root, "15"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        rng, oracle = random.Random(3), Oracle()
        for _ in range(8):
            oracle.step(db, rng)
            time.sleep(0.3)
        db.flush()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        changes = [json.loads(line) for line in out.splitlines()]
        epochs = [c[0]["_epoch"] for c in changes]
        assert epochs == sorted(set(epochs)) and len(epochs) >= 2, epochs
        net: dict[tuple, int] = {}
        for change in changes:
            for r in change:
                key = (r["owner"], r["n"], r["total"], r["top"])
                net[key] = net.get(key, 0) + r["_w"]
        assert sorted((k for k, w in net.items() for _ in range(w)), key=lambda r: tuple((v is not None, v) for v in r)) \
            == oracle.query(VIEWS["per_owner"])
    finally:
        db.close()


def test_a_view_read_from_spark_as_a_stream_and_as_a_snapshot(open_db, spark, root, tmp_path):
    """A Spark streaming query over a view's changes, stopped and restarted from its checkpoint,
    takes every epoch's changes once (also when Spark lost the commit of its last batch and
    replays it); a batch read is the committed rows, or the rows as of an epoch."""
    db = open_db()
    _setup(db)
    rng, oracle = random.Random(11), Oracle()
    ck, got = str(tmp_path / "ck"), {}

    def collect(df, batch_id):  # noqa: ANN001
        got[batch_id] = [r.asDict() for r in df.collect()]  # keyed by batch id: a replay replaces

    def run() -> None:
        (spark.readStream.format("millpond").option("root", root).option("view", "per_owner")
         .option("maxEpochsPerTrigger", 2).load()
         .writeStream.foreachBatch(collect).option("checkpointLocation", ck).trigger(availableNow=True)
         .start().awaitTermination(120))

    marks = {}
    for round_ in range(3):
        for _ in range(3):
            oracle.step(db, rng)
            db.flush()
            marks[db.epoch] = oracle.query(VIEWS["per_owner"])
        run()
        if round_ == 1:  # Spark lost its commit record of the last batch: it replays that batch
            commits = sorted((p for p in (tmp_path / "ck" / "commits").iterdir() if p.name.isdigit()),
                             key=lambda p: int(p.name))
            commits[-1].unlink()
            (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    changes = [r for batch in got.values() for r in batch]
    epochs = sorted({r["_epoch"] for r in changes})
    assert epochs == [e for e in epochs if e <= db.epoch] and len(got) >= 5  # at most 2 epochs per batch
    net: dict[tuple, int] = {}
    for r in changes:
        key = (r["owner"], r["n"], r["total"], r["top"])
        net[key] = net.get(key, 0) + r["_w"]
    assert sorted((k for k, w in net.items() for _ in range(w)),
                  key=lambda r: tuple((v is not None, v) for v in r)) == oracle.query(VIEWS["per_owner"])
    now = spark.read.format("millpond").option("root", root).option("view", "per_owner").load()
    assert now.columns == ["owner", "n", "total", "top", "_w", "_epoch"]
    assert rows(pa.Table.from_pylist([r.asDict() for r in now.drop("_w", "_epoch").collect()])) \
        == oracle.query(VIEWS["per_owner"])
    first = min(marks)
    then = spark.read.format("millpond").option("root", root).option("view", "per_owner").option("epoch", first).load()
    assert {r._epoch for r in then.collect()} <= {first}
    assert rows(pa.Table.from_pylist([r.asDict() for r in then.drop("_w", "_epoch").collect()])) == marks[first]
    with pytest.raises(Exception, match="written by its query only"):
        now.write.format("millpond").option("root", root).option("view", "per_owner").mode("append").save()


COLLECTOR = """
import sys, millpond
db = millpond.connect(sys.argv[1], parallelism=1, interval=None)
if "t" not in db.catalog.tables:
    db.sql("SET retention = 2; CREATE TABLE t (k INT PRIMARY KEY, v INT); "
           "CREATE MATERIALIZED VIEW s AS SELECT v, count(*) AS n FROM t GROUP BY v")
for i in range(6):
    db.sql(f"INSERT INTO t VALUES ({i}, {i % 3})")
    db.flush()
"""


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_a_sigkill_inside_retention_leaves_every_kept_epoch_readable(open_db, root):
    """Retention drops an epoch's entry before its files: killed between the two, the root keeps
    no epoch whose changes are gone (the other order left one, found by chaos seed 89)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "MILLPOND_CRASH_AT": "changes.between_collect:2",
           "PYTHONPATH": os.pathsep.join([os.path.join(repo, "src"), repo])}
    proc = subprocess.run([sys.executable, "-c", COLLECTOR, root], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -9, f"the worker was not killed: {proc.stderr[-2000:]}"
    db = open_db()
    oldest = db.runtime.coordinator.changes.oldest()
    assert oldest is not None and oldest > 1  # retention ran (and was killed inside) before
    changes = list(db.subscribe("s", oldest - 1, timeout=0))  # every kept epoch's changes, read
    epochs = [c.column("_epoch")[0].as_py() for c in changes]
    assert epochs and epochs == sorted(set(epochs)) and epochs[0] >= oldest, epochs
    # the killed retention left the dropped epoch's files; the next one deletes them
    store = db.runtime.coordinator.store
    left = [k for k in store.list("changes/") if not k.startswith("changes/epochs/") and f"/{oldest - 1:020d}" in k]
    assert left, "the kill inside retention left no files behind: the sweep below checks nothing"
    db.sql("INSERT INTO t VALUES (100, 1)")
    db.flush()  # a commit, and its retention
    kept = db.runtime.coordinator.changes.oldest()
    epochs_of = [int(re.search(r"/(\d{20})(?:\.parquet$|/)", k).group(1)) for k in store.list("changes/")
                 if not k.startswith("changes/epochs/")]
    assert epochs_of and min(epochs_of) >= kept, (min(epochs_of), kept)

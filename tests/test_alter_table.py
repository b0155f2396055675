"""``ALTER TABLE t ADD COLUMN`` (and ``DEFAULT`` in ``CREATE TABLE``): a column is added in one
catalog version and nothing is rewritten; the records and state rows older than it read as its
default, an insert that leaves it out gets its default, and the views made before it keep their
columns and rows — checked against DuckDB over a model of the table after every epoch, through the
log's WAL and Parquet files, state compaction, Spark's scan of a large range and a reopen."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

import millpond
from millpond.errors import MillpondError
from millpond.store.compaction import Policy

SMALL = Policy(l0_trigger=2, l0_stall=6, base_level_bytes=20_000, level_ratio=2, target_file_bytes=8_000)

OLD_VIEWS = {  # made before the columns are added: their columns and rows are the old ones
    "star": "SELECT * FROM t",
    "per_g": "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g",
}
ORACLE = {"star": "SELECT k, g, v FROM t"}  # a view's * is the columns it was created over
NEW_VIEWS = {  # made after: they read the new columns, old rows with their defaults
    "star2": "SELECT * FROM t",
    "per_c": "SELECT c, count(*) AS n, sum(d) AS sd, sum(v) AS s FROM t GROUP BY c",
    "joined": "SELECT a.c, count(*) AS n FROM t a JOIN t b ON a.g = b.g AND a.c = b.c GROUP BY a.c",
}


class Model:
    """The table's rows, kept in Python: the oracle's input."""

    def __init__(self) -> None:
        self.rows: dict[int, dict] = {}
        self.columns = ["k", "g", "v"]

    def table(self) -> pa.Table:
        cols = {c: [r.get(c) for r in self.rows.values()] for c in self.columns}
        types = {"k": pa.int64(), "g": pa.int64(), "v": pa.int64(), "c": pa.string(), "d": pa.int64()}
        return pa.table({c: pa.array(v, types[c]) for c, v in cols.items()})

    def query(self, sql: str) -> list[tuple]:
        con = duckdb.connect()
        con.register("t", self.table())
        return _sorted(con.sql(sql).fetchall())


def _sorted(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=lambda r: tuple((v is not None, v) for v in r))


def _got(db: millpond.Database, sql: str) -> list[tuple]:
    return _sorted([tuple(r.values()) for r in db.sql(sql).to_pylist()])


def _check(db: millpond.Database, model: Model, views: dict[str, str], where: str) -> None:
    assert _got(db, "SELECT * FROM t") == model.query("SELECT * FROM t"), where
    for name, sql in views.items():
        assert _got(db, f"SELECT * FROM {name}") == model.query(ORACLE.get(name, sql)), f"{where}: view {name}"


def _step(db: millpond.Database, model: Model, rng: random.Random, keyed: bool, added: bool, next_k: list[int]) -> None:
    """Random inserts (some leaving the new columns out), updates and deletes, applied to both."""
    for _ in range(rng.randrange(1, 4)):
        action = rng.random()
        if action < 0.5 or len(model.rows) < 5:
            n = rng.randrange(1, 40)
            ks = list(range(next_k[0], next_k[0] + n))
            next_k[0] += n
            rows = [{"k": k, "g": rng.randrange(4), "v": rng.randrange(100)} for k in ks]
            if added and rng.random() < 0.5:  # with the new columns
                for r in rows:
                    r["c"], r["d"] = rng.choice(["x", "y", None]), rng.choice([None, rng.randrange(10)])
                db.insert("t", pa.table({c: pa.array([r[c] for r in rows], pa.string() if c == "c" else pa.int64())
                                         for c in ("k", "g", "v", "c", "d")}))
            elif added and rng.random() < 0.5:  # SQL naming some columns: the others get their defaults
                db.sql("INSERT INTO t (k, g, v) VALUES " + ", ".join(f"({r['k']}, {r['g']}, {r['v']})" for r in rows))
                for r in rows:
                    r["c"], r["d"] = "x", None
            else:  # an old producer's batch: the old columns only
                db.insert("t", pa.table({c: pa.array([r[c] for r in rows], pa.int64()) for c in ("k", "g", "v")}))
                if added:
                    for r in rows:
                        r["c"], r["d"] = "x", None
            model.rows.update({r["k"]: r for r in rows})
        elif action < 0.75:
            m = rng.randrange(2, 6)
            if added and rng.random() < 0.5:
                db.sql(f"UPDATE t SET c = 'u{m}', d = k % 7 WHERE k % {m} = 0")
                for r in model.rows.values():
                    if r["k"] % m == 0:
                        r["c"], r["d"] = f"u{m}", r["k"] % 7
            else:
                db.sql(f"UPDATE t SET v = v + 1 WHERE k % {m} = 1")
                for r in model.rows.values():
                    if r["k"] % m == 1:
                        r["v"] += 1
        else:
            m = rng.randrange(5, 12)
            db.sql(f"DELETE FROM t WHERE k % {m} = 2")
            model.rows = {k: r for k, r in model.rows.items() if k % m != 2}


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_added_columns_read_as_their_default_and_views_made_before_keep_their_rows(spark, root, keyed):
    db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    db.runtime.coordinator.state.policy = SMALL  # state files merge often: old files with new ones
    rng, model, next_k = random.Random(11 if keyed else 12), Model(), [0]
    db.sql(f"CREATE TABLE t (k BIGINT{' PRIMARY KEY' if keyed else ''}, g BIGINT, v BIGINT)")
    for name, sql in OLD_VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    for i in range(4):
        _step(db, model, rng, keyed, False, next_k)
        db.flush()
        _check(db, model, OLD_VIEWS, f"before, epoch {i}")
    db.runtime.log.flush()  # the old records in Parquet files too, beside the WAL's

    db.sql("ALTER TABLE t ADD COLUMN c TEXT DEFAULT 'x', ADD COLUMN IF NOT EXISTS d BIGINT")
    model.columns += ["c", "d"]
    for r in model.rows.values():
        r["c"], r["d"] = "x", None
    assert db.sql("SELECT * FROM t").column_names == ["k", "g", "v", "c", "d"]
    assert db.sql("SELECT * FROM star").column_names == ["k", "g", "v"]  # its * meant the columns then
    _check(db, model, OLD_VIEWS, "right after the ALTER, before an epoch")
    for name, sql in NEW_VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    views = {**OLD_VIEWS, **NEW_VIEWS}
    for i in range(8):
        _step(db, model, rng, keyed, True, next_k)
        db.flush()
        _check(db, model, views, f"after, epoch {i}")
        if i == 3:
            db.runtime.log.flush()
    state = db.runtime.coordinator.state
    state.compact()
    if keyed:
        assert state.stats["compactions"] > 0
        rows_state = next(c.rows_state for c in db.runtime.consumers if c.name == "t")
        assert rows_state in state.manifest.defaults  # what compaction fills older files with
    _check(db, model, views, "compacted")
    db.close()

    again = millpond.connect(root, spark=spark, parallelism=2, interval=None)  # plans checked against their SQL
    try:
        _check(again, model, views, "reopened")
        _step(again, model, rng, keyed, True, next_k)
        again.flush()
        _check(again, model, views, "reopened, one more epoch")
    finally:
        again.close()


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_a_view_made_after_the_column_reads_a_large_old_range_through_spark(open_db, keyed):
    """A backfill over more rows than the driver reads itself: Spark's tasks scan the log's pieces
    (a key-less table) or the rows state, sampled first for its groups (a keyed one), all older than
    the column, and fill its default in."""
    db = open_db()
    db.sql(f"CREATE TABLE t (k BIGINT{' PRIMARY KEY' if keyed else ''}, g BIGINT)")
    n = 90_000 if keyed else 30_000
    db.insert("t", pa.table({"k": pa.array(range(n), pa.int64()), "g": pa.array([i % 3 for i in range(n)], pa.int64())}))
    db.flush()
    db.sql("ALTER TABLE t ADD COLUMN w DOUBLE PRECISION DEFAULT 1.5, ADD COLUMN label TEXT DEFAULT 'old'")
    db.insert("t", pa.table({"k": pa.array([n], pa.int64()), "g": pa.array([0], pa.int64()),
                             "w": pa.array([2.0]), "label": pa.array(["new"])}))
    db.sql("CREATE MATERIALIZED VIEW per_label AS SELECT label, g, count(*) AS n, sum(w) AS sw FROM t GROUP BY label, g")
    db.flush()
    got = _sorted([tuple(r.values()) for r in db.sql("SELECT * FROM per_label").to_pylist()])
    third = n // 3
    assert got == [("new", 0, 1, 2.0), ("old", 0, third, 1.5 * third), ("old", 1, third, 1.5 * third),
                   ("old", 2, third, 1.5 * third)]


def test_create_table_defaults_fill_what_an_insert_leaves_out(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, n INT DEFAULT -3, s TEXT DEFAULT 'none' NOT NULL, "
           "at DATE DEFAULT DATE '2024-02-29', span INTERVAL DEFAULT INTERVAL '1 day', ok BOOLEAN DEFAULT true, "
           "plain INT)")
    db.sql("INSERT INTO t (k) VALUES (1)")
    db.sql("INSERT INTO t (k, n, s) VALUES (2, 7, 'given')")
    db.sql("INSERT INTO t VALUES (4, 8)")  # no column list: the first two columns (PostgreSQL's rule)
    db.sql("INSERT INTO t SELECT 6")  # a query's one column: the first
    db.insert("t", pa.table({"k": pa.array([3], pa.int32()), "plain": pa.array([9], pa.int32())}))
    with pytest.raises(MillpondError, match=r"lacks \['plain'\]"):  # a column without a DEFAULT is not left out
        db.insert("t", pa.table({"k": pa.array([5], pa.int32())}))
    db.flush()
    got = db.sql("SELECT k, n, s, CAST(at AS TEXT) AS at, CAST(span AS TEXT) AS span, ok, plain FROM t ORDER BY k").to_pylist()
    assert [tuple(r.values()) for r in got] == [
        (1, -3, "none", "2024-02-29", "1 day", True, None),
        (2, 7, "given", "2024-02-29", "1 day", True, None),
        (3, -3, "none", "2024-02-29", "1 day", True, 9),
        (4, 8, "none", "2024-02-29", "1 day", True, None),
        (6, -3, "none", "2024-02-29", "1 day", True, None),
    ]


def test_what_add_column_refuses_names_the_problem(open_db, tmp_path):
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT); CREATE TABLE e (k INT); CREATE TABLE p (k INT PRIMARY KEY)")
    db.sql(f"CREATE SINK out FROM p WITH (connector = 'deltalake', location = '{tmp_path / 'out'}', type = 'upsert')")
    db.sql("CREATE MATERIALIZED VIEW mv AS SELECT k FROM t")
    db.sql("INSERT INTO t VALUES (1, 1)")
    db.flush()
    cases = [
        ("ALTER TABLE t ADD COLUMN v INT", r'column "v" of relation "t" already exists', "42701"),
        ("ALTER TABLE t ADD COLUMN c TIMESTAMP DEFAULT now()", r"DEFAULT .* is not supported: a default is a constant",
         "0A000"),
        ("ALTER TABLE t ADD COLUMN c INT DEFAULT 'abc'", r"invalid input syntax for type integer", "22P02"),
        ("ALTER TABLE t ADD COLUMN c INT NOT NULL", r'column "c" of relation "t" contains null values', "23502"),
        ("ALTER TABLE t ADD COLUMN _c INT", r"reserved", None),
        ("ALTER TABLE mv ADD COLUMN c INT", r'"mv" is not a table', "42809"),
        ("ALTER TABLE missing ADD COLUMN c INT", r'relation "missing" does not exist', "42P01"),
        ("CREATE TABLE bad (k INT DEFAULT random())", r"DEFAULT .* is not supported", "0A000"),
        ("ALTER TABLE p ADD COLUMN c INT", r"sinks out write its rows out", "2BP01"),
        ("ALTER TABLE t ADD COLUMN c INT PRIMARY KEY", r"a table's primary key is fixed when it is created", "0A000"),
        ("CREATE TABLE bad (k INT UNIQUE)", r"column 'k' of 'bad': UNIQUE is not supported", "0A000"),
        ("CREATE TABLE bad (k INT, CHECK (k > 0))", r"table 'bad': CHECK \(k > 0\) is not supported", "0A000"),
    ]
    for sql, message, state in cases:
        with pytest.raises(MillpondError, match=message) as err:
            db.sql(sql)
        assert state is None or err.value.sqlstate == state, (sql, err.value.sqlstate)
    assert [c.name for c in db.catalog.tables["t"].columns] == ["k", "v"]  # nothing half-added
    db.sql("ALTER TABLE t ADD COLUMN IF NOT EXISTS v INT")  # PostgreSQL skips it
    db.sql("ALTER TABLE IF EXISTS missing ADD COLUMN c INT")
    db.sql("ALTER TABLE e ADD COLUMN c INT NOT NULL")  # a table with no rows yet takes it
    with pytest.raises(MillpondError, match="violates its NOT NULL constraint"):
        db.sql("INSERT INTO e (k) VALUES (1)")
    db.sql("ALTER TABLE t ADD COLUMN c INT DEFAULT 2 * 2 NOT NULL")
    db.flush()
    assert [tuple(r.values()) for r in db.sql("SELECT * FROM t").to_pylist()] == [(1, 1, 4)]
    described = {r[0]: r[1:] for r in (tuple(x.values()) for x in db.sql("DESCRIBE t").to_pylist())}
    assert described["c"] == ("INT", "not null, default 2 * 2")


_ALTER = """
import sys
import millpond
db = millpond.connect(sys.argv[1], parallelism=1, interval=None)
db.sql("ALTER TABLE t ADD COLUMN c TEXT DEFAULT 'was'")
print("NOT KILLED")
"""


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_a_kill_between_the_catalog_and_the_log_is_completed_on_open(spark, root):
    """The catalog version is the ALTER's commit; the table's log channel learns the column after it.
    SIGKILLed in between, the next open gives the channel the column, and older rows read as its
    default."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    db.sql("INSERT INTO t VALUES (1, 1)")
    db.flush()
    db.close()
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MILLPOND_CRASH_AT": "catalog.after_put",
           "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    env.pop("MILLPOND_CRASH_PID", None)
    proc = subprocess.run([sys.executable, "-c", _ALTER, root], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9 and "NOT KILLED" not in proc.stdout, proc.stderr[-2000:]
    from millpond.log import Log
    from millpond.store.objects import open_store

    from millpond.catalog import CatalogStore

    assert [c.name for c in CatalogStore(open_store(root)).load().tables["t"].columns] == ["k", "v", "c"]
    assert "c" not in Log(open_store(root)).channel("t").schema.names  # killed before the channel write
    again = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    try:
        assert "c" in again.runtime.log.channel("t").schema.names
        again.sql("INSERT INTO t VALUES (2, 2, 'now')")
        again.flush()
        assert [tuple(r.values()) for r in again.sql("SELECT * FROM t ORDER BY k").to_pylist()] == \
            [(1, 1, "was"), (2, 2, "now")]
    finally:
        again.close()


def test_a_read_only_process_reads_the_added_column(open_db, root):
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT)")
    db.sql("INSERT INTO t VALUES (1, 1)")
    db.flush()
    db.sql("ALTER TABLE t ADD COLUMN c TEXT DEFAULT 'd'")
    db.sql("INSERT INTO t VALUES (2, 2, 'e')")
    db.flush()
    reader = millpond.connect(root, read_only=True)
    try:
        assert [tuple(r.values()) for r in reader.sql("SELECT * FROM t ORDER BY k").to_pylist()] == \
            [(1, 1, "d"), (2, 2, "e")]
    finally:
        reader.close()


def test_an_index_made_before_a_column_keeps_its_rows_and_new_views_read_the_column_without_it(open_db, spark, root):
    """An index holds the table's columns as it was created: the views that read it go on; a view
    reading the new column joins the table itself (not the index), and both equal DuckDB."""
    from millpond.engine import plan as P

    db = open_db()
    db.sql("CREATE TABLE info (product TEXT PRIMARY KEY, category TEXT); CREATE TABLE visit (id BIGINT PRIMARY KEY, "
           "product TEXT, length INT); CREATE INDEX info_by_product ON info (product)")
    db.sql("INSERT INTO info VALUES ('p1', 'c1'), ('p2', 'c2'); INSERT INTO visit VALUES (1, 'p1', 3), (2, 'p2', 4)")
    old_q = "SELECT i.category, sum(v.length) AS total FROM visit v JOIN info i ON v.product = i.product GROUP BY 1"
    db.sql(f"CREATE MATERIALIZED VIEW old_j AS {old_q}")
    db.flush()
    index_id = db.catalog.indexes["info_by_product"].id
    assert index_id in P.indexes_read(P.decode(db.catalog.views["old_j"].plan))
    db.sql("ALTER TABLE info ADD COLUMN tier INT DEFAULT 1")
    new_q = "SELECT i.tier, sum(v.length) AS total FROM visit v JOIN info i ON v.product = i.product GROUP BY 1"
    db.sql(f"CREATE MATERIALIZED VIEW new_j AS {new_q}")
    assert index_id not in P.indexes_read(P.decode(db.catalog.views["new_j"].plan))
    db.sql("INSERT INTO info VALUES ('p3', 'c1', 2); INSERT INTO visit VALUES (3, 'p3', 5); "
           "UPDATE info SET tier = 3 WHERE product = 'p1'")
    db.flush()

    def oracle(q: str, on: millpond.Database = db) -> list[tuple]:
        con = duckdb.connect()
        con.register("info", on.sql("SELECT * FROM info"))
        con.register("visit", on.sql("SELECT * FROM visit"))
        return _sorted(con.sql(q).fetchall())

    assert oracle("SELECT * FROM info") == [("p1", "c1", 3), ("p2", "c2", 1), ("p3", "c1", 2)]
    for name, q in (("old_j", old_q), ("new_j", new_q)):
        assert _got(db, f"SELECT * FROM {name}") == oracle(q), name
    db.close()
    again = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    try:
        again.sql("INSERT INTO visit VALUES (4, 'p1', 1)")
        again.flush()
        for name, q in (("old_j", old_q), ("new_j", new_q)):
            assert _got(again, f"SELECT * FROM {name}") == oracle(q, again), name
    finally:
        again.close()


def test_a_flow_and_a_view_of_views_made_before_the_column_go_on_and_reopen(spark, root):
    """A flow over the table and a view over a view over it were planned over the old columns: they
    keep them, their stored plans still match their SQL on open, and a view's ALTER made after the
    column may read it."""
    db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    db.sql("CREATE TABLE m (id INT PRIMARY KEY, host TEXT, ts TIMESTAMP, cpu DOUBLE PRECISION)")
    db.sql("CREATE FLOW per_min SINK TO cpu_1m AS SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute, "
           "count(*) AS n FROM m GROUP BY host, minute")
    db.sql("CREATE MATERIALIZED VIEW hosts AS SELECT * FROM m WHERE cpu > 0")
    db.sql("CREATE MATERIALIZED VIEW busy AS SELECT host, count(*) AS n FROM hosts GROUP BY host")
    db.sql("INSERT INTO m VALUES (1, 'a', '2024-01-01 10:00:10', 1.0), (2, 'b', '2024-01-01 10:00:20', 2.0)")
    db.flush()
    db.sql("ALTER TABLE m ADD COLUMN region TEXT DEFAULT 'eu'")
    db.sql("INSERT INTO m VALUES (3, 'a', '2024-01-01 10:00:30', 3.0, 'us')")
    db.sql("ALTER MATERIALIZED VIEW busy AS SELECT host, count(*) AS n FROM hosts WHERE host <> 'b' GROUP BY host")
    db.sql("CREATE MATERIALIZED VIEW per_region AS SELECT region, count(*) AS n FROM m GROUP BY region")
    db.flush()
    db.close()
    again = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    try:
        again.sql("INSERT INTO m (id, host, ts, cpu) VALUES (4, 'b', '2024-01-01 10:01:00', 4.0)")
        again.flush()
        assert _got(again, "SELECT host, n FROM cpu_1m") == [("a", 2), ("b", 1), ("b", 1)]
        assert again.sql("SELECT * FROM hosts").column_names == ["id", "host", "ts", "cpu"]
        assert _got(again, "SELECT * FROM busy") == [("a", 2)]
        assert _got(again, "SELECT * FROM per_region") == [("eu", 3), ("us", 1)]
    finally:
        again.close()


def test_alter_column_defaults_and_not_null_change_later_inserts_only(spark, root):
    """``SET DEFAULT`` / ``DROP DEFAULT`` change what later inserts get, never the stored rows (those
    older than an added column keep its default then); ``SET NOT NULL`` checks every row first,
    ``DROP NOT NULL`` refuses a primary key column; all of it kept over a reopen."""
    db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    db.sql("INSERT INTO t VALUES (1, 1)")
    db.flush()
    db.sql("ALTER TABLE t ADD COLUMN c TEXT DEFAULT 'then'")
    db.sql("ALTER TABLE t ALTER COLUMN c SET DEFAULT 'now'")
    db.sql("INSERT INTO t (k, v) VALUES (2, 2)")
    db.insert("t", pa.table({"k": pa.array([3], pa.int32()), "v": pa.array([3], pa.int32())}))  # an older producer
    db.flush()
    db.sql("ALTER TABLE t ALTER c DROP DEFAULT")
    db.sql("INSERT INTO t (k, v) VALUES (4, 4)")
    want = [(1, 1, "then"), (2, 2, "now"), (3, 3, "now"), (4, 4, None)]
    db.flush()
    assert _got(db, "SELECT * FROM t") == want
    with pytest.raises(MillpondError, match=r'column "c" of relation "t" contains null values') as err:
        db.sql("ALTER TABLE t ALTER COLUMN c SET NOT NULL")
    assert err.value.sqlstate == "23502"
    with pytest.raises(MillpondError, match=r'column "k" is in a primary key'):
        db.sql("ALTER TABLE t ALTER COLUMN k DROP NOT NULL")
    with pytest.raises(MillpondError, match=r'column "zz" of relation "t" does not exist'):
        db.sql("ALTER TABLE t ALTER COLUMN zz SET DEFAULT 1")
    with pytest.raises(MillpondError, match=r"SET DATA TYPE BIGINT' is not supported"):
        db.sql("ALTER TABLE t ALTER COLUMN v TYPE BIGINT")
    db.sql("ALTER TABLE t ALTER COLUMN v SET NOT NULL, ALTER COLUMN v SET DEFAULT 7")
    db.close()
    again = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    try:
        again.sql("INSERT INTO t (k) VALUES (5)")
        with pytest.raises(MillpondError, match="null value in column 'v' violates its NOT NULL constraint"):
            again.sql("INSERT INTO t VALUES (6, NULL)")
        again.sql("ALTER TABLE t ALTER COLUMN v DROP NOT NULL")
        again.sql("INSERT INTO t VALUES (6, NULL)")
        again.flush()
        assert _got(again, "SELECT * FROM t") == _sorted([*want, (5, 7, None), (6, None, None)])
        assert "c" in again.runtime.log.channel("t").schema.names
    finally:
        again.close()

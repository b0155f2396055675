"""Backfills in bounded epochs (:mod:`millpond.engine.filling`): a new view over more input than
``backfill_rows`` fills over several epochs — a keyed table's rows one slice of key hashes an epoch,
a key-less table's log a capped range an epoch — while inserts, updates and deletes go on and the
views already in force keep committing. Until it is filled, reading it, a view or a sink over it and
a subscription are refused (55000, with its progress); once filled, each view equals DuckDB over
all input, and after every later epoch too."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from millpond.errors import MillpondError
from tests.conftest import rows

VIEWS = {
    "per_group": "SELECT g, count(*) AS n, sum(v) AS s FROM o GROUP BY g",
    "joined": "SELECT o.g, count(*) AS n, sum(e.x) AS s FROM o JOIN e ON o.g = e.g GROUP BY o.g",
    "plain": "SELECT k, v FROM o WHERE v % 3 = 0",
    "events": "SELECT g, max(x) AS m, count(*) AS n FROM e GROUP BY g",
}


class Oracle:
    """The tables' rows as the test keeps them, and the views DuckDB computes over them."""

    def __init__(self, rng: random.Random):
        self.rng, self.o, self.e = rng, {}, []

    def tables(self) -> dict[str, pa.Table]:
        ks = sorted(self.o)
        o = pa.table({"k": pa.array(ks, pa.int32()), "g": pa.array([self.o[k][0] for k in ks], pa.int32()),
                      "v": pa.array([self.o[k][1] for k in ks], pa.int64())})
        e = pa.table({"g": pa.array([r[0] for r in self.e], pa.int32()), "x": pa.array([r[1] for r in self.e], pa.int64())})
        return {"o": o, "e": e}

    def view(self, sql: str) -> list[tuple]:
        con = duckdb.connect()
        for name, t in self.tables().items():
            con.register(name, t)
        return rows(con.sql(sql).to_arrow_table())

    def change(self, db, n: int) -> None:  # noqa: ANN001
        """``n`` random inserts, updates and deletes of ``o``, and appends to ``e``."""
        for _ in range(n):
            roll = self.rng.random()
            if roll < 0.4 or not self.o:
                k = self.rng.randrange(100_000)
                g, v = self.rng.randrange(40), self.rng.randrange(1000)
                db.sql(f"INSERT INTO o VALUES ({k}, {g}, {v}) ON CONFLICT (k) DO UPDATE SET g = EXCLUDED.g, v = EXCLUDED.v")
                self.o[k] = (g, v)
            elif roll < 0.7:
                k = self.rng.choice(sorted(self.o))
                v = self.rng.randrange(1000)
                db.sql(f"UPDATE o SET v = {v} WHERE k = {k}")
                self.o[k] = (self.o[k][0], v)
            elif roll < 0.85:
                k = self.rng.choice(sorted(self.o))
                db.sql(f"DELETE FROM o WHERE k = {k}")
                del self.o[k]
            else:
                g, x = self.rng.randrange(40), self.rng.randrange(1000)
                db.sql(f"INSERT INTO e VALUES ({g}, {x})")
                self.e.append((g, x))


def _load(db, oracle: Oracle, keyed: int, keyless: int) -> None:  # noqa: ANN001
    rng = oracle.rng
    ks = rng.sample(range(100_000), keyed)
    o = {k: (rng.randrange(40), rng.randrange(1000)) for k in ks}
    e = [(rng.randrange(40), rng.randrange(1000)) for _ in range(keyless)]
    oracle.o.update(o)
    oracle.e.extend(e)
    t = oracle.tables()
    db.insert("o", t["o"])
    db.insert("e", t["e"])


@pytest.mark.parametrize("parallelism", [1, 2])
def test_views_fill_in_bounded_epochs_and_equal_duckdb(open_db, parallelism):
    db = open_db(parallelism=parallelism)
    oracle = Oracle(random.Random(7 + parallelism))
    db.sql("CREATE TABLE o (k INT PRIMARY KEY, g INT, v BIGINT)")
    db.sql("CREATE TABLE e (g INT, x BIGINT)")
    db.sql("CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(v) AS s FROM o")  # in force before
    _load(db, oracle, 1200, 700)
    db.flush()
    db.sql("SET backfill_rows = 250")
    assert db.sql("SHOW backfill_rows").to_pylist() == [{"backfill_rows": "250"}]
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    epochs, seen_parts, during = 0, set(), None
    while True:
        filling = {name: db.runtime.filling(name) for name in VIEWS}
        if epochs and not any(filling.values()):
            break
        if filling["per_group"] is not None and epochs:
            during = db.runtime.manifest.epoch  # an epoch that committed per_group part-filled
        for name, state in filling.items():
            if state is None:
                continue
            seen_parts.add((name, tuple(state)))
            with pytest.raises(MillpondError, match="has not been populated") as info:
                db.sql(f"SELECT * FROM {name}")
            assert info.value.sqlstate == "55000" and "parts of its backfill read" in (info.value.hint or "")
            with pytest.raises(MillpondError, match="is still filling") as info:
                db.sql(f"CREATE MATERIALIZED VIEW over_{name} AS SELECT * FROM {name}")
            assert info.value.sqlstate == "55000"
            with pytest.raises(MillpondError, match="is still filling"):
                db.sql(f"SUBSCRIBE {name}")
            status = db.sql(f"SELECT status, epoch FROM millpond_views WHERE name = '{name}'").to_pylist()
            assert status == [{"status": "backfilling", "epoch": None}], status
        oracle.change(db, 12)
        report = db.runtime.run_epoch()
        assert report is not None
        epochs += 1
        # the view in force before stays current at every epoch, while the others fill
        assert rows(db.sql("SELECT * FROM total")) == oracle.view("SELECT count(*) AS n, sum(v) AS s FROM o")
        assert epochs < 40, f"still filling after {epochs} epochs: {filling}"
    # the keyed table's 1200 rows at 250 a part: 5 parts; the key-less log's 700+ records: 3+ epochs
    assert ("per_group", (1, 5)) in seen_parts and ("per_group", (4, 5)) in seen_parts, seen_parts
    assert any(n == "events" and p[0] == 1 for n, p in seen_parts), seen_parts
    assert epochs >= 5
    with pytest.raises(MillpondError, match="had not been populated at epoch") as info:  # AS OF inside the fill
        db.sql(f"SELECT * FROM per_group AS OF EPOCH {during}")
    assert info.value.sqlstate == "55000"
    done = db.runtime.manifest.epoch
    assert rows(db.sql(f"SELECT * FROM per_group AS OF EPOCH {done}")) == oracle.view(VIEWS["per_group"])
    for round_ in range(3):  # filled: every later epoch's changes too
        for name, sql in VIEWS.items():
            assert rows(db.sql(f"SELECT * FROM {name}")) == oracle.view(sql), (name, round_)
        oracle.change(db, 20)
        db.flush()
    db.sql("CREATE MATERIALIZED VIEW over_plain AS SELECT count(*) AS n FROM plain")  # allowed once filled
    db.flush()
    assert db.sql("SELECT n FROM over_plain").to_pylist() == [{"n": len(oracle.view(VIEWS["plain"]))}]


def test_a_filling_view_survives_a_restart_and_small_backfills_stay_one_epoch(open_db, root):
    db = open_db()
    oracle = Oracle(random.Random(3))
    db.sql("CREATE TABLE o (k INT PRIMARY KEY, g INT, v BIGINT)")
    db.sql("CREATE TABLE e (g INT, x BIGINT)")
    _load(db, oracle, 600, 100)
    db.flush()
    db.sql("SET backfill_rows = 1000")  # more than the input: one epoch, as before
    db.sql(f"CREATE MATERIALIZED VIEW small AS {VIEWS['per_group']}")
    oracle.change(db, 3)
    assert len(db.flush()) == 1 and db.runtime.filling("small") is None
    db.sql("SET backfill_rows = 100")  # less, but nothing else waits for the epoch: one epoch too
    db.sql(f"CREATE MATERIALIZED VIEW quiet AS {VIEWS['plain']}")
    assert len(db.flush()) == 1 and db.runtime.filling("quiet") is None
    db.sql("SET backfill_rows = 150")
    db.sql(f"CREATE MATERIALIZED VIEW joined AS {VIEWS['joined']}")
    for _ in range(2):
        oracle.change(db, 3)  # other work waits: bounded epochs
        db.runtime.run_epoch()
    parts = db.runtime.filling("joined")[1]
    assert db.runtime.filling("joined") == [2, parts] and parts >= 4  # 600 rows and more at 150 a part
    oracle.change(db, 30)
    db.close()
    again = open_db()  # reopened: the manifest says which part is next (backfill_rows is not needed again)
    assert again.runtime.filling("joined") == [2, parts]
    with pytest.raises(MillpondError, match="still filling"):
        again.sql("CREATE SINK s FROM joined WITH (connector = 'deltalake', location = '/nowhere', type = 'upsert')")
    # the changes made before the restart wait: part 2 alone; then nothing else waits, and the
    # backfill reads all it has left in one epoch
    assert len(again.flush()) == 2
    assert again.runtime.filling("joined") is None
    assert rows(again.sql("SELECT * FROM joined")) == oracle.view(VIEWS["joined"])
    assert rows(again.sql("SELECT * FROM small")) == oracle.view(VIEWS["per_group"])
    assert rows(again.sql("SELECT * FROM quiet")) == oracle.view(VIEWS["plain"])


_FILL = """
import sys
import millpond
db = millpond.connect(sys.argv[1], parallelism=1, interval=None)
db.sql("SET backfill_rows = 200")
db.sql("CREATE MATERIALIZED VIEW joined AS " + sys.argv[2])
for i in range(40):  # a new record of e before every epoch: other work waits, the epochs are bounded
    db.sql(f"INSERT INTO e VALUES ({i % 40}, {i})")
    db.runtime.run_epoch()
print("NOT KILLED")
"""


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_a_sigkill_inside_a_backfill_in_bounded_epochs_goes_on_from_the_last_part_committed(spark, root):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import millpond

    oracle = Oracle(random.Random(11))
    db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    db.sql("CREATE TABLE o (k INT PRIMARY KEY, g INT, v BIGINT)")
    db.sql("CREATE TABLE e (g INT, x BIGINT)")
    _load(db, oracle, 900, 300)
    db.flush()
    db.close()
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MILLPOND_CRASH_AT": "epoch.before_commit:3",  # the third part's epoch, before its commit
           "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    env.pop("MILLPOND_CRASH_PID", None)
    proc = subprocess.run([sys.executable, "-c", _FILL, root, VIEWS["joined"]], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == -9 and "NOT KILLED" not in proc.stdout, proc.stderr[-2000:]
    again = millpond.connect(root, spark=spark, parallelism=2, interval=None)
    try:
        assert again.runtime.filling("joined") == [2, 5]  # 900 rows at 200 a part; two committed
        # the records of e appended before each epoch: the third one's epoch did not commit, but the
        # record is in the log (appended, durable) and the next epoch reads it
        oracle.e += [(i % 40, i) for i in range(3)]
        oracle.change(again, 25)
        again.flush()
        assert again.sql("SELECT count(*) AS n FROM e").to_pylist() == [{"n": len(oracle.e)}]
        assert again.runtime.filling("joined") is None
        assert rows(again.sql("SELECT * FROM joined")) == oracle.view(VIEWS["joined"])
    finally:
        again.close()


def test_an_altered_views_new_definition_fills_in_bounded_epochs_and_swaps_once_filled(open_db):
    db = open_db()
    oracle = Oracle(random.Random(5))
    db.sql("CREATE TABLE o (k INT PRIMARY KEY, g INT, v BIGINT)")
    db.sql("CREATE TABLE e (g INT, x BIGINT)")
    _load(db, oracle, 800, 100)
    db.sql(f"CREATE MATERIALIZED VIEW v AS {VIEWS['per_group']}")
    db.flush()
    db.sql("SET backfill_rows = 200")
    db.sql(f"ALTER MATERIALIZED VIEW v AS {VIEWS['joined']}")
    epochs, statuses, old = 0, set(), {}
    while "v" in db.catalog.replacing:
        # the definition in force stays readable and current while the new one fills beside it
        assert rows(db.sql("SELECT * FROM v")) == oracle.view(VIEWS["per_group"])
        old[db.runtime.manifest.epoch] = oracle.view(VIEWS["per_group"])
        statuses.add(db.sql("SELECT status FROM millpond_views WHERE name = 'v'").to_pylist()[0]["status"])
        oracle.change(db, 5)
        db.runtime.run_epoch()
        epochs += 1
        assert epochs < 30
    assert epochs >= 4, epochs  # 800 rows and more at 200 a part
    assert statuses == {"running"}  # the old definition's status, not its replacement's
    assert rows(db.sql("SELECT * FROM v")) == oracle.view(VIEWS["joined"])  # swapped at the epoch it filled
    for epoch, want in list(old.items())[1:]:  # as of an epoch of the new one's fill: the definition then
        assert rows(db.sql(f"SELECT * FROM v AS OF EPOCH {epoch}")) == want, epoch
    oracle.change(db, 10)
    db.flush()
    assert rows(db.sql("SELECT * FROM v")) == oracle.view(VIEWS["joined"])


@pytest.mark.parametrize("path", ["one_task", "spark"])
def test_keys_of_other_types_fill_in_parts_on_either_path(open_db, monkeypatch, path):
    """A composite key of text and a date, and a decimal key: the parts' slices of the rows state and
    the log records let through are cut by the same key hash (Spark's xxhash64 over the typed key on
    Spark's path, millpond.keyhash in the one task)."""
    import datetime
    import decimal

    from millpond.spark import local_plan

    if path == "spark":
        monkeypatch.setattr(local_plan, "LOCAL_RECORDS", 0)
    db = open_db()
    rng = random.Random(13)
    db.sql("CREATE TABLE a (name VARCHAR, day DATE, v BIGINT, PRIMARY KEY (name, day))")
    db.sql("CREATE TABLE b (price DECIMAL(10, 2) PRIMARY KEY, v BIGINT)")
    a, b = {}, {}
    base = datetime.date(2024, 1, 1)
    for i in range(500):
        a[(f"n{i % 37}-{i}", base + datetime.timedelta(days=i % 300))] = rng.randrange(100)
        b[decimal.Decimal(i * 7) / 100 + decimal.Decimal("0.01")] = rng.randrange(100)
    db.insert("a", pa.table({"name": [k[0] for k in a], "day": [k[1] for k in a], "v": list(a.values())}))
    db.insert("b", pa.table({"price": pa.array(list(b), pa.decimal128(10, 2)), "v": list(b.values())}))
    db.flush()
    db.sql("SET backfill_rows = 120")
    views = {"by_day": "SELECT day, count(*) AS n, sum(v) AS s FROM a GROUP BY day",
             "cheap": "SELECT price, v FROM b WHERE v % 2 = 0"}
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    epochs = 0
    while epochs == 0 or any(db.runtime.filling(n) for n in views):
        for _ in range(6):  # updates and deletes of rows in parts read and not read yet
            key = rng.choice(sorted(a))
            if rng.random() < 0.3:
                db.sql(f"DELETE FROM a WHERE name = '{key[0]}' AND day = DATE '{key[1]}'")
                del a[key]
            else:
                a[key] = rng.randrange(100)
                db.sql(f"UPDATE a SET v = {a[key]} WHERE name = '{key[0]}' AND day = DATE '{key[1]}'")
            price = rng.choice(sorted(b))
            b[price] = rng.randrange(100)
            db.sql(f"UPDATE b SET v = {b[price]} WHERE price = {price}")
        db.runtime.run_epoch()
        epochs += 1
        assert epochs < 30
    assert epochs >= 4
    con = duckdb.connect()
    con.register("a", pa.table({"name": [k[0] for k in a], "day": [k[1] for k in a], "v": pa.array(list(a.values()), pa.int64())}))
    con.register("b", pa.table({"price": pa.array(list(b), pa.decimal128(10, 2)), "v": pa.array(list(b.values()), pa.int64())}))
    for name, sql in views.items():
        assert rows(db.sql(f"SELECT * FROM {name}")) == rows(con.sql(sql).to_arrow_table()), name


def test_a_backfill_gains_on_a_table_written_faster_than_its_budget(open_db):
    """A key-less table appended faster than ``backfill_rows`` an epoch: the backfill's cap grows to
    twice what came since the last epoch, so the view fills (a fixed cap would lag behind forever)."""
    db = open_db()
    db.sql("CREATE TABLE e (g INT, x BIGINT)")
    db.insert("e", pa.table({"g": pa.array([i % 5 for i in range(60)], pa.int32()), "x": pa.array(range(60), pa.int64())}))
    db.flush()
    db.sql("SET backfill_rows = 4")
    db.sql(f"CREATE MATERIALIZED VIEW events AS {VIEWS['events']}")
    written, epochs = list(range(60)), 0
    while not db.runtime.populated("events"):
        more = list(range(len(written), len(written) + 10))  # ten records an epoch, the budget four
        db.insert("e", pa.table({"g": pa.array([i % 5 for i in more], pa.int32()), "x": pa.array(more, pa.int64())}))
        written += more
        db.runtime.run_epoch()
        epochs += 1
        assert epochs < 30, db.runtime.filling("events")
    assert epochs >= 3
    con = duckdb.connect()
    con.register("e", pa.table({"g": pa.array([i % 5 for i in written], pa.int32()), "x": pa.array(written, pa.int64())}))
    assert rows(db.sql("SELECT * FROM events")) == rows(con.sql(VIEWS["events"]).to_arrow_table())

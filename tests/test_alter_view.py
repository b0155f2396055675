"""Views changed in place (``ALTER MATERIALIZED VIEW v AS ...``, ``CREATE OR REPLACE MATERIALIZED
VIEW``): the new definition backfills beside the old one, whose readers keep reading the old rows,
and one catalog version swaps them at the first epoch where the new one is current; a subscriber
receives the swap as the difference between the old rows and the new; ``ALTER ... RENAME``."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import millpond
from millpond.errors import MillpondError


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _oracle(t: pa.Table, query: str) -> list[tuple]:
    con = duckdb.connect()
    con.register("t", t)
    return sorted(con.sql(query).fetchall())


def _insert(db: millpond.Database, rng: random.Random, n: int, start: int) -> None:
    keys = list(range(start, start + n))
    db.insert("t", pa.table({"k": pa.array(keys, pa.int64()), "g": pa.array([rng.randrange(5) for _ in keys],
                                                                              pa.int64()),
                             "v": pa.array([rng.randrange(100) for _ in keys], pa.int64())}))


def test_an_altered_view_is_swapped_in_one_commit_and_subscribers_get_the_difference(open_db):
    db = open_db()
    rng = random.Random(7)
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    _insert(db, rng, 200, 0)
    old_q = "SELECT g, sum(v) AS s FROM t GROUP BY g"
    new_q = "SELECT g, sum(v) AS s FROM t WHERE v % 2 = 0 GROUP BY g"
    db.sql(f"CREATE MATERIALIZED VIEW v AS {old_q}")
    db.flush()
    start = db.epoch
    assert _rows(db.sql("SELECT * FROM v")) == _oracle(db.sql("SELECT * FROM t"), old_q)

    db.sql(f"ALTER MATERIALIZED VIEW v AS {new_q}")
    # until an epoch backfills the new definition, the old one is in force
    assert _rows(db.sql("SELECT * FROM v")) == _oracle(db.sql("SELECT * FROM t"), old_q)
    assert "v (new)" not in db.sql("SHOW MATERIALIZED VIEWS").column(0).to_pylist()
    _insert(db, rng, 50, 200)
    db.sql("DELETE FROM t WHERE k < 20")
    db.flush()
    rows = db.sql("SELECT * FROM t")
    assert _rows(db.sql("SELECT * FROM v")) == _oracle(rows, new_q)
    shown = db.sql("SHOW MATERIALIZED VIEWS").to_pylist()
    assert [r["sql"] for r in shown if r["name"] == "v"] == [f"ALTER MATERIALIZED VIEW v AS {new_q}"]

    # a subscriber from before the swap: the old rows, the old view's changes, then the difference
    # to the new rows; the rows as of then (time travel across the swap) are the old definition's
    followed = pa.concat_tables(list(db.subscribe("v", from_epoch=start, snapshot=True, timeout=0.5)))
    net: dict[tuple, int] = {}
    for r in followed.to_pylist():
        net[(r["g"], r["s"])] = net.get((r["g"], r["s"]), 0) + r["_w"]
    assert sorted(k for k, w in net.items() if w) == _oracle(rows, new_q)
    assert all(w in (0, 1) for w in net.values())
    assert _rows(db.read("v", epoch=start)) == _oracle(db.read("t", epoch=start), old_q)

    # later epochs go on with the new definition alone
    _insert(db, rng, 30, 300)
    db.flush()
    assert _rows(db.sql("SELECT * FROM v")) == _oracle(db.sql("SELECT * FROM t"), new_q)
    assert sorted(c.name for c in db.runtime.consumers) == ["t", "v"]  # the old definition's is gone


def test_a_replace_with_other_columns_and_a_failing_one(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    _insert(db, random.Random(1), 100, 0)
    db.sql("CREATE MATERIALIZED VIEW v AS SELECT g, count(*) AS n FROM t GROUP BY g")
    db.flush()
    start = db.epoch
    db.sql("CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT g, max(v) AS top, min(v) AS low FROM t GROUP BY g")
    db.flush()
    assert db.sql("SELECT * FROM v").column_names == ["g", "top", "low"]
    assert _rows(db.sql("SELECT * FROM v")) == _oracle(db.sql("SELECT * FROM t"),
                                                       "SELECT g, max(v), min(v) FROM t GROUP BY g")
    with pytest.raises(MillpondError, match="altered at epoch .* with other columns"):
        list(db.runtime.changes("v", after=start))
    assert list(db.runtime.changes("v", after=db.epoch)) == []

    # a new definition whose backfill fails on a data error is dropped; the old one stays in force
    db.sql("ALTER MATERIALIZED VIEW v AS SELECT g, max(v) / (min(v) - min(v)) AS top, min(v) AS low FROM t GROUP BY g")
    db.flush()
    assert db.sql("SELECT * FROM v").column_names == ["g", "top", "low"]
    assert not db.catalog.replacing
    assert _rows(db.sql("SELECT * FROM v")) == _oracle(db.sql("SELECT * FROM t"),
                                                       "SELECT g, max(v), min(v) FROM t GROUP BY g")


def test_views_over_an_altered_view_are_rebuilt_over_its_new_rows_in_the_same_swap(open_db):
    db = open_db()
    rng = random.Random(5)
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    _insert(db, rng, 200, 0)
    db.sql("CREATE MATERIALIZED VIEW v AS SELECT g, sum(v) AS s FROM t GROUP BY g")
    db.sql("CREATE MATERIALIZED VIEW w AS SELECT v.g, v.s * 2 AS d FROM v WHERE v.s > 10")
    db.sql("CREATE MATERIALIZED VIEW top AS SELECT max(d) AS m, count(*) AS n FROM w")
    joined = "SELECT t.k % 2 AS p, sum(v.s) AS total, count(*) AS c FROM t JOIN v ON t.g = v.g GROUP BY t.k % 2"
    db.sql(f"CREATE MATERIALIZED VIEW joined AS {joined}")  # a join with it, aggregated (eager planning reads its key)
    db.flush()
    start = db.epoch
    new_v = "SELECT g, sum(v) AS s, count(*) AS c FROM t WHERE k % 2 = 0 GROUP BY g"
    db.sql(f"ALTER MATERIALIZED VIEW v AS {new_v}")
    with pytest.raises(MillpondError, match="reads v, which an ALTER is replacing"):
        db.sql("CREATE MATERIALIZED VIEW x AS SELECT * FROM v")
    # until the swap, all three are the old ones
    old_rows = db.read("t")
    w_old = f"SELECT g, s * 2 FROM ({'SELECT g, sum(v) AS s FROM t GROUP BY g'}) WHERE s > 10"
    assert _rows(db.read("w")) == _oracle(old_rows, w_old)
    _insert(db, rng, 40, 200)
    db.flush()
    rows = db.read("t")
    w_new = f"SELECT g, s * 2 FROM ({new_v}) WHERE s > 10"
    assert _rows(db.read("v")) == _oracle(rows, new_v)
    assert _rows(db.read("w")) == _oracle(rows, w_new)
    assert _rows(db.read("top")) == _oracle(rows, f"SELECT max(d), count(*) FROM ({w_new.replace('s * 2', 's * 2 AS d')})")
    assert sorted(db.catalog.views) == ["joined", "top", "v", "w"] and not db.catalog.replacing
    joined_new = f"SELECT t.k % 2, sum(v.s), count(*) FROM t JOIN ({new_v}) v ON t.g = v.g GROUP BY t.k % 2"
    assert _rows(db.read("joined")) == _oracle(rows, joined_new)
    # a subscriber to the view over it gets the difference too
    followed = pa.concat_tables(list(db.subscribe("w", from_epoch=start, snapshot=True, timeout=0.5)))
    net: dict[tuple, int] = {}
    for r in followed.to_pylist():
        net[(r["g"], r["d"])] = net.get((r["g"], r["d"]), 0) + r["_w"]
    assert sorted(k for k, n in net.items() if n) == _oracle(rows, w_new)
    _insert(db, rng, 40, 300)
    db.sql("DELETE FROM t WHERE k < 50")
    db.flush()
    rows = db.read("t")
    assert _rows(db.read("w")) == _oracle(rows, w_new)
    # the swapped plans are the ones the root opens with (checked against their SQL)
    db.close()
    db = open_db()
    assert _rows(db.read("w")) == _oracle(rows, w_new)
    _insert(db, rng, 10, 400)
    db.flush()
    assert _rows(db.read("w")) == _oracle(db.read("t"), w_new)
    assert _rows(db.read("joined")) == _oracle(db.read("t"), joined_new)
    # a view over it whose query no longer binds refuses the statement, naming it
    with pytest.raises(MillpondError, match=r"cannot alter view 'v': view 'joined' reads it, and its query does not bind"):
        db.sql("ALTER MATERIALIZED VIEW v AS SELECT g, count(*) AS c FROM t GROUP BY g")
    assert not db.catalog.replacing


def test_what_cannot_be_altered_is_refused_by_name(open_db, tmp_path):
    db = open_db()
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    db.sql("CREATE MATERIALIZED VIEW v AS SELECT g, sum(v) AS s FROM t GROUP BY g")
    db.sql(f"CREATE SINK out FROM v WITH (connector = 'deltalake', location = '{tmp_path / 'out'}', type = 'upsert')")
    with pytest.raises(MillpondError, match=r"cannot alter view 'v' with other columns .* sinks out write its rows"):
        db.sql("ALTER MATERIALIZED VIEW v AS SELECT g, count(*) AS n FROM t GROUP BY g")
    db.sql("ALTER MATERIALIZED VIEW v AS SELECT g, sum(v) AS s FROM t WHERE v > 0 GROUP BY g")  # same columns
    with pytest.raises(MillpondError, match="view 'v' is being altered: rename it once"):
        db.sql("ALTER MATERIALIZED VIEW v RENAME TO u")
    with pytest.raises(MillpondError, match=r"cannot rename 't' because other objects depend on it: views v"):
        db.sql("ALTER TABLE t RENAME TO u")  # a view's SQL names it
    with pytest.raises(MillpondError, match=r"ALTER TABLE \.\.\. 'DROP COLUMN v' is not supported"):
        db.sql("ALTER TABLE t DROP COLUMN v")
    db.insert("t", pa.table({"k": [1, 2, 3], "g": [1, 1, 2], "v": [5, -7, 4]}))
    db.flush()  # the new definition backfills (rows with v <= 0 left out), the sink writes the difference
    from deltalake import DeltaTable

    assert _rows(db.read("v")) == [(1, 5), (2, 4)]
    assert _rows(DeltaTable(str(tmp_path / "out")).to_pyarrow_table().select(["g", "s"])) == [(1, 5), (2, 4)]
    with pytest.raises(MillpondError, match='relation "nope" does not exist'):
        db.sql("ALTER MATERIALIZED VIEW nope AS SELECT 1 AS one")
    with pytest.raises(MillpondError, match='"t" is not a materialized view'):
        db.sql("ALTER MATERIALIZED VIEW t AS SELECT 1 AS one")
    with pytest.raises(MillpondError, match=r'syntax error at or near "FROM"'):
        db.sql("ALTER MATERIALIZED VIEW w AS SELECT g, FROM v")
    # CREATE OR REPLACE of a view that does not exist creates it
    db.sql("CREATE OR REPLACE MATERIALIZED VIEW fresh AS SELECT count(*) AS n FROM t")
    db.flush()
    assert db.sql("SELECT * FROM fresh").to_pylist() == [{"n": 3}]


def test_a_view_is_renamed_with_its_rows(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    _insert(db, random.Random(3), 50, 0)
    db.sql("CREATE MATERIALIZED VIEW v AS SELECT g, sum(v) AS s FROM t GROUP BY g")
    db.flush()
    before = _rows(db.sql("SELECT * FROM v"))
    db.sql("ALTER MATERIALIZED VIEW v RENAME TO totals")
    assert _rows(db.sql("SELECT * FROM totals")) == before
    with pytest.raises(MillpondError, match='relation "v" does not exist'):
        db.sql("SELECT * FROM v")
    _insert(db, random.Random(4), 10, 100)
    db.flush()
    assert _rows(db.sql("SELECT * FROM totals")) == _oracle(db.sql("SELECT * FROM t"),
                                                            "SELECT g, sum(v) FROM t GROUP BY g")
    db.sql("CREATE MATERIALIZED VIEW big AS SELECT g FROM totals WHERE s > 100")
    with pytest.raises(MillpondError, match="cannot rename 'totals' because other objects depend on it"):
        db.sql("ALTER MATERIALIZED VIEW totals RENAME TO x")
    with pytest.raises(MillpondError, match='relation "big" already exists'):
        db.sql("ALTER MATERIALIZED VIEW IF EXISTS totals RENAME TO big")
    db.sql("ALTER MATERIALIZED VIEW IF EXISTS gone RENAME TO x")  # nothing to do


_FLUSH = """
import sys
import millpond
db = millpond.connect(sys.argv[1], parallelism=2, interval=None)
db.flush()
print("NOT KILLED")
"""


@pytest.mark.parametrize("point", [
    "epoch.after_commit",  # the new definition's backfill is committed, not swapped in
    pytest.param("alter.before_swap", marks=pytest.mark.slow),  # the change to the new rows kept, no catalog yet
    pytest.param("epoch.before_commit", marks=pytest.mark.slow),  # in the backfill's epoch
    pytest.param("catalog.after_put", marks=pytest.mark.slow),  # the swap's catalog is written
])
def test_a_kill_during_the_backfill_or_at_the_swap_leaves_one_definition(open_db, root, point):
    old_q = "SELECT g, sum(v) AS s, count(*) AS n FROM t GROUP BY g"
    new_q = "SELECT g, sum(v) AS s, count(*) AS n FROM t WHERE k % 3 <> 0 GROUP BY g"
    db = open_db()
    rng = random.Random(11)
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    _insert(db, rng, 300, 0)
    db.sql(f"CREATE MATERIALIZED VIEW v AS {old_q}")
    db.flush()
    start = db.epoch
    db.sql(f"ALTER MATERIALIZED VIEW v AS {new_q}")
    _insert(db, rng, 100, 300)
    db.close()
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MILLPOND_CRASH_AT": point, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    env.pop("MILLPOND_CRASH_PID", None)
    proc = subprocess.run([sys.executable, "-c", _FLUSH, root], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9 and "NOT KILLED" not in proc.stdout, proc.stderr[-2000:]

    db = open_db()
    sql = db.catalog.views["v"].sql  # one definition in force, and its rows are its query's
    assert sql in (f"CREATE MATERIALIZED VIEW v AS {old_q}", f"ALTER MATERIALIZED VIEW v AS {new_q}")
    in_force = old_q if sql.startswith("CREATE") else new_q
    assert _rows(db.read("v")) == _oracle(db.read("t"), in_force)
    db.flush()
    assert db.catalog.views["v"].sql == f"ALTER MATERIALIZED VIEW v AS {new_q}" and not db.catalog.replacing
    assert _rows(db.read("v")) == _oracle(db.read("t"), new_q)
    followed = pa.concat_tables(list(db.subscribe("v", from_epoch=start, snapshot=True, timeout=0.5)))
    net: dict[tuple, int] = {}
    for r in followed.to_pylist():
        net[(r["g"], r["s"], r["n"])] = net.get((r["g"], r["s"], r["n"]), 0) + r["_w"]
    assert sorted(k for k, w in net.items() if w) == _oracle(db.read("t"), new_q)


def test_readers_and_a_subscriber_see_no_gap_and_no_mix_while_a_view_is_altered(open_db):
    import threading

    db = open_db()
    rng = random.Random(9)
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    _insert(db, rng, 400, 0)
    old_q = "SELECT g, sum(v) AS s FROM t GROUP BY g"
    new_q = "SELECT g, sum(v) AS s FROM t WHERE v % 2 = 0 GROUP BY g"
    db.sql(f"CREATE MATERIALIZED VIEW v AS {old_q}")
    db.sql("CREATE MATERIALIZED VIEW w AS SELECT g, s FROM v WHERE s > 0")
    db.flush()
    start, rows = db.epoch, db.read("t")
    old, new = _oracle(rows, old_q), _oracle(rows, new_q)
    assert old != new
    seen, bad, stop = [], [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            got = _rows(db.sql("SELECT v.g, v.s, w.s AS ws FROM v JOIN w ON v.g = w.g"))
            both = [(g, s) for g, s, _ in got]
            if both not in ([r for r in old if r[1] > 0], [r for r in new if r[1] > 0]) or \
                    any(s != ws for _, s, ws in got):
                bad.append(got)
            seen.append(both == [r for r in new if r[1] > 0])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        db.sql(f"ALTER MATERIALIZED VIEW v AS {new_q}")
        db.flush()
        while len(seen) < 3 or not seen[-1]:
            stop.wait(0.05)
    finally:
        stop.set()
        reader.join(60)
    assert not bad, bad[:3]
    assert False in seen and seen[-1]  # read the old rows, then the new ones
    assert seen.index(True) == len(seen) - seen[::-1].index(False)  # once swapped, never the old again
    followed = pa.concat_tables(list(db.subscribe("w", from_epoch=start, snapshot=True, timeout=0.5)))
    net: dict[tuple, int] = {}
    for r in followed.to_pylist():
        net[(r["g"], r["s"])] = net.get((r["g"], r["s"]), 0) + r["_w"]
    assert sorted(k for k, n in net.items() if n) == [r for r in new if r[1] > 0]


def test_a_view_read_before_its_first_epoch_says_so_unless_created_with_background_false(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
    _insert(db, random.Random(2), 20, 0)
    db.flush()
    db.sql("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c FROM t")  # returns at once
    with pytest.raises(MillpondError, match='materialized view "n" has not been populated') as info:
        db.sql("SELECT * FROM n")
    assert info.value.sqlstate == "55000" and "FLUSH" in info.value.hint
    db.sql("CREATE MATERIALIZED VIEW m WITH (background = false) AS SELECT max(v) AS top FROM t")
    assert db.sql("SELECT * FROM m").to_pylist() == [{"top": max(r["v"] for r in db.read("t").to_pylist())}]
    assert db.sql("SELECT * FROM n").to_pylist() == [{"c": 20}]  # its epoch ran too
    db.sql("CREATE OR REPLACE MATERIALIZED VIEW m WITH (background = false) AS SELECT min(v) AS top FROM t")
    assert db.sql("SELECT * FROM m").to_pylist() == [{"top": min(r["v"] for r in db.read("t").to_pylist())}]
    with pytest.raises(MillpondError, match=r"view 'bad' was not filled: view 'bad' failed .* division by zero"):
        db.sql("CREATE MATERIALIZED VIEW bad WITH (background = false) AS SELECT v / (k - k) AS x FROM t")

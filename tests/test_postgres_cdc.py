"""A PostgreSQL table is a table (``WITH (connector = 'postgres-cdc', ...)``), read from a real
PostgreSQL server (Debian's, ``wal_level = logical``; tests/pg.py): a snapshot, then inserts,
updates (a key's own and a key moved) and deletes in random transactions; every view equals DuckDB
over the upstream rows after every epoch; concurrent writers' transactions are never split (a view
of the sum they keep constant never sees another sum); an upstream ALTER TABLE stops that table and
the others go on; a SIGKILL around the append loses and doubles nothing."""

from __future__ import annotations

import getpass
import os
import random
import subprocess
import sys
import threading
import warnings
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from millpond import SqlError
from tests.conftest import rows

COLUMNS = "id INT, name TEXT, amount DECIMAL(12,2), ok BOOLEAN, born DATE, ts TIMESTAMPTZ, score DOUBLE"
UPSTREAM = ("id int PRIMARY KEY, name text, amount numeric(12,2), ok boolean, born date, ts timestamptz, "
            "score double precision, extra text")


def _user(server) -> str:
    return server.user or getpass.getuser()


def _pg(server):
    import psycopg

    return psycopg.connect(host="127.0.0.1", port=server.port, user=_user(server), dbname="postgres", autocommit=True)


def _source(server, name: str, columns: str, table: str, **more: str) -> str:
    extra = "".join(f", {k} = '{v}'" for k, v in more.items())
    return (f"CREATE TABLE {name} ({columns}) WITH (connector = 'postgres-cdc', hostname = '127.0.0.1', "
            f"port = '{server.port}', username = '{_user(server)}', password = '', database.name = 'postgres', "
            f"schema.name = 'public', table.name = '{table}'{extra})")


def _sorted(table_rows) -> list[tuple]:
    return sorted(table_rows, key=lambda r: tuple((v is not None, v) for v in r))


def _upstream(conn, table: str, columns: str) -> pa.Table:
    cur = conn.execute(f"SELECT {columns} FROM {table}")
    names = [d.name for d in cur.description]
    return pa.Table.from_pylist([dict(zip(names, r)) for r in cur.fetchall()]) if cur.rowcount else None


def _oracle(sql: str, **tables: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name, t in tables.items():
        con.register(name, t)
    return _sorted([tuple(r) for r in con.execute(sql).fetchall()])


def _row(rng: random.Random, i: int) -> tuple:
    return (i, rng.choice(["a", "b", "c", None, "", "x,y \"q\"\nz"]), Decimal(rng.randint(-10**6, 10**6)) / 100,
            rng.choice([True, False, None]), f"20{rng.randint(10, 30)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
            f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 1{rng.randint(0, 9)}:00:0{rng.randint(0, 9)}.5+02",
            rng.choice([1.5, -0.25, None, 1e300]), "upstream only")


def _insert(conn, table: str, rows_: list[tuple]) -> None:
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", rows_)


def test_snapshot_then_random_transactions_equal_duckdb_after_every_epoch(open_db, postgres_cdc):
    rng = random.Random(11)
    conn = _pg(postgres_cdc)
    conn.execute(f"CREATE TABLE accounts ({UPSTREAM})")
    _insert(conn, "accounts", [_row(rng, i) for i in range(200)])
    db = open_db()
    db.sql(_source(postgres_cdc, "acc", COLUMNS + ", PRIMARY KEY (id)", "accounts"))
    views = {"by_name": "SELECT name, count(*) AS n, sum(amount) AS total, min(ts) AS earliest FROM {t} GROUP BY name",
             "flags": "SELECT ok, count(*) AS n, max(score) AS top, max(born) AS last FROM {t} GROUP BY ok"}
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql.format(t='acc')}")
    next_id = 200
    for epoch in range(5):
        if epoch:
            for _ in range(rng.randint(1, 6)):  # transactions, each a mix
                with conn.transaction():
                    ids = [r[0] for r in conn.execute("SELECT id FROM accounts").fetchall()]
                    for _ in range(rng.randint(1, 15)):
                        what = rng.random()
                        if what < 0.35 or not ids:
                            _insert(conn, "accounts", [_row(rng, next_id)])
                            ids.append(next_id)
                            next_id += 1
                        elif what < 0.6:
                            conn.execute("UPDATE accounts SET amount = amount + 1, name = %s WHERE id = %s",
                                         (rng.choice(["a", "d", None]), rng.choice(ids)))
                        elif what < 0.7:  # the row moves to another key
                            old = ids.pop(rng.randrange(len(ids)))
                            conn.execute("UPDATE accounts SET id = %s WHERE id = %s", (next_id, old))
                            ids.append(next_id)
                            next_id += 1
                        elif what < 0.8:  # deleted and inserted again in one transaction
                            old = rng.choice(ids)
                            conn.execute("DELETE FROM accounts WHERE id = %s", (old,))
                            _insert(conn, "accounts", [_row(rng, old)])
                        else:
                            conn.execute("DELETE FROM accounts WHERE id = %s", (ids.pop(rng.randrange(len(ids))),))
        db.flush()
        want = _upstream(conn, "accounts", "id, name, amount, ok, born, ts, score")
        assert _sorted(rows(db.sql("SELECT * FROM acc"))) == _oracle("SELECT * FROM w", w=want), f"epoch {epoch}"
        for name, sql in views.items():
            assert _sorted(rows(db.sql(f"SELECT * FROM {name}"))) == _oracle(sql.format(t="w"), w=want), name
    status = db.sql("SHOW SOURCES").to_pylist()
    assert [(s["table_name"], s["connector"]) for s in status] == [("acc", "postgres-cdc")]
    assert status[0]["split"].startswith("public.accounts (slot millpond_acc_") and status[0]["lag"] >= 0


def test_concurrent_writers_transactions_are_never_split(open_db, postgres_cdc):
    """Writers move money between accounts, one transfer per transaction: every epoch's view of the
    total sees the same total, and the accounts equal the upstream ones once the writers stop."""
    conn = _pg(postgres_cdc)
    conn.execute("CREATE TABLE ledger (id int PRIMARY KEY, balance bigint NOT NULL)")
    conn.execute("INSERT INTO ledger SELECT g, 1000 FROM generate_series(1, 50) g")
    db = open_db()
    db.sql(_source(postgres_cdc, "ledger", "id INT, balance BIGINT, PRIMARY KEY (id)", "ledger"))
    db.sql("CREATE MATERIALIZED VIEW total AS SELECT sum(balance) AS s, count(*) AS n FROM ledger")
    stop = threading.Event()

    def writer(seed: int) -> None:
        rng, c = random.Random(seed), _pg(postgres_cdc)
        while not stop.is_set():
            a, b = rng.sample(range(1, 51), 2)
            amount = rng.randint(1, 50)
            try:
                with c.transaction():
                    c.execute("UPDATE ledger SET balance = balance - %s WHERE id = %s", (amount, a))
                    c.execute("UPDATE ledger SET balance = balance + %s WHERE id = %s", (amount, b))
            except Exception:  # noqa: BLE001 - a deadlock between writers: that transfer is not made
                pass

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(6):
            db.flush()
            assert rows(db.sql("SELECT * FROM total")) == [(50_000, 50)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    db.flush()
    want = _upstream(conn, "ledger", "id, balance")
    assert _sorted(rows(db.sql("SELECT * FROM ledger"))) == _oracle("SELECT * FROM w", w=want)
    assert db.sql("SELECT sum(rows) AS r FROM millpond_sources").to_pylist()[0]["r"] > 50


def test_create_checks_the_upstream_table(open_db, postgres_cdc):
    conn = _pg(postgres_cdc)
    conn.execute("CREATE TABLE checked (id bigint PRIMARY KEY, v numeric(8,3), t text)")
    db = open_db()
    cases = {"id BIGINT, nope TEXT, PRIMARY KEY (id)": "column 'nope' is not a column of public.checked",
             "id INT, PRIMARY KEY (id)": "column 'id' is INT here but bigint upstream",
             "id BIGINT, v DECIMAL(8,2), PRIMARY KEY (id)": "column 'v' is DECIMAL(8,2) here but numeric(8,3)",
             "id BIGINT, t TEXT, PRIMARY KEY (t)": "the primary key (t) must be the upstream table's (id)",
             "id BIGINT, t TEXT": "needs a PRIMARY KEY"}
    for columns, message in cases.items():
        with pytest.raises(SqlError, match=message.replace("(", r"\(").replace(")", r"\)")):
            db.sql(_source(postgres_cdc, "c", columns, "checked"))
    with pytest.raises(SqlError, match="there is no table public.absent"):
        db.sql(_source(postgres_cdc, "c", "id BIGINT, PRIMARY KEY (id)", "absent"))
    with pytest.raises(SqlError, match="unknown option 'tabel.name'"):
        db.sql(_source(postgres_cdc, "c", "id BIGINT, PRIMARY KEY (id)", "checked", **{"tabel.name": "x"}))
    with pytest.raises(SqlError, match="publication 'nopub' does not publish public.checked"):
        db.sql(_source(postgres_cdc, "c", "id BIGINT, PRIMARY KEY (id)", "checked", **{"publication.name": "nopub"}))
    bad = _source(postgres_cdc, "c", "id BIGINT, PRIMARY KEY (id)", "checked").replace(
        f"port = '{postgres_cdc.port}'", "port = '1'")
    with pytest.raises(SqlError, match="cannot connect to PostgreSQL at public.checked on 127.0.0.1:1/postgres"):
        db.sql(bad)
    assert "c" not in {t["name"] for t in db.sql("SHOW TABLES").to_pylist()}  # nothing half made
    db.sql(_source(postgres_cdc, "c", "t TEXT, id BIGINT, PRIMARY KEY (id)", "checked"))  # a subset, in any order
    conn.execute("INSERT INTO checked VALUES (1, 2.5, 'x')")
    db.flush()
    assert rows(db.sql("SELECT * FROM c")) == [("x", 1)]
    shown = next(t for t in db.sql("SHOW TABLES").to_pylist() if t["name"] == "c")
    assert "password=***" in str(shown)  # the password is not shown


def test_an_upstream_alter_stops_that_table_and_the_others_go_on(open_db, postgres_cdc):
    conn = _pg(postgres_cdc)
    conn.execute("CREATE TABLE altered (id int PRIMARY KEY, v int)")
    conn.execute("CREATE TABLE steady (id int PRIMARY KEY, v int)")
    db = open_db()
    db.sql(_source(postgres_cdc, "altered", "id INT, v INT, PRIMARY KEY (id)", "altered"))
    db.sql(_source(postgres_cdc, "steady", "id INT, v INT, PRIMARY KEY (id)", "steady"))
    conn.execute("INSERT INTO altered VALUES (1, 1)")
    db.flush()
    conn.execute("INSERT INTO altered VALUES (2, 2)")  # before the ALTER: taken
    conn.execute("ALTER TABLE altered ADD COLUMN w int")  # a new upstream column: ignored
    conn.execute("INSERT INTO altered VALUES (3, 3, 3)")
    conn.execute("ALTER TABLE altered ALTER COLUMN v TYPE bigint")
    conn.execute("INSERT INTO altered VALUES (4, 4, 4)")
    conn.execute("INSERT INTO steady VALUES (1, 10)")
    with pytest.warns(Warning, match="source tables have errors"):
        db.flush()
    assert rows(db.sql("SELECT * FROM altered ORDER BY id")) == [(1, 1), (2, 2), (3, 3)]
    assert rows(db.sql("SELECT * FROM steady")) == [(1, 10)]
    errors = db.sql("SELECT table_name, kind, error FROM millpond_source_errors").to_pylist()
    assert [(e["table_name"], e["kind"]) for e in errors] == [("altered", "stopped")]
    assert "column 'v' of public.altered changed type upstream" in errors[0]["error"]
    conn.execute("INSERT INTO steady VALUES (2, 20)")
    db.flush()
    assert rows(db.sql("SELECT * FROM steady ORDER BY id")) == [(1, 10), (2, 20)]


def test_drop_table_drops_its_slot(open_db, postgres_cdc):
    conn = _pg(postgres_cdc)
    conn.execute("CREATE TABLE dropped (id int PRIMARY KEY)")
    db = open_db()
    db.sql(_source(postgres_cdc, "dropped", "id INT, PRIMARY KEY (id)", "dropped"))
    db.flush()
    slot = dict(next(t for t in db.catalog.tables.values() if t.name == "dropped").source)["slot.name"]
    assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()[0] == 1
    db.sql("DROP TABLE dropped")
    assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()[0] == 0


def test_an_idle_tables_slot_moves_past_the_servers_other_writes(open_db, postgres_cdc):
    """A table whose upstream rows do not change still lets the server drop its WAL: with no change
    to take there is no epoch to commit, and its slot moves on before the next epoch anyway."""
    conn = _pg(postgres_cdc)
    conn.execute("CREATE TABLE quiet (id int PRIMARY KEY); CREATE TABLE busy (id int PRIMARY KEY, pad text)")
    db = open_db()
    db.sql(_source(postgres_cdc, "quiet", "id INT, PRIMARY KEY (id)", "quiet"))
    db.flush()
    slot = dict(db.catalog.tables["quiet"].source)["slot.name"]

    def confirmed() -> int:
        return conn.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0]

    before = confirmed()
    conn.execute("INSERT INTO busy SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g")
    db.flush()  # no change of quiet's: no epoch has work
    assert confirmed() > before + 1_000_000  # past the other table's ~2 MB of WAL
    assert rows(db.sql("SELECT count(*) FROM quiet")) == [(0,)]


def test_a_restart_of_postgresql_loses_and_doubles_nothing(open_db, postgres_cdc):
    """PostgreSQL restarted under an open table (its connection cut): the epoch meanwhile says so
    (an ``upstream`` error), the next reconnects and goes on from the slot; nothing lost or doubled."""
    conn = _pg(postgres_cdc)
    conn.execute("CREATE TABLE bounced (id int PRIMARY KEY, v int)")
    conn.execute("INSERT INTO bounced SELECT g, g FROM generate_series(1, 100) g")
    db = open_db()
    db.sql(_source(postgres_cdc, "bounced", "id INT, v INT, PRIMARY KEY (id)", "bounced"))
    db.sql("CREATE MATERIALIZED VIEW bounced_sum AS SELECT count(*) AS n, sum(v) AS s FROM bounced")
    db.flush()
    conn.execute("UPDATE bounced SET v = v + 1 WHERE id <= 10")
    postgres_cdc.restart()
    conn = _pg(postgres_cdc)
    conn.execute("DELETE FROM bounced WHERE id > 90")
    for _ in range(2):  # the first may find the old connection cut (an upstream error), the second reconnects
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            db.flush()
    want = _upstream(conn, "bounced", "id, v")
    assert _sorted(rows(db.sql("SELECT * FROM bounced"))) == _oracle("SELECT * FROM w", w=want)
    assert rows(db.sql("SELECT * FROM bounced_sum")) == _oracle("SELECT count(*), sum(v) FROM w", w=want)
    assert db.sql("SELECT count(*) AS n FROM millpond_source_errors").to_pylist() == [{"n": 0}]


WORKER = """
import sys, psycopg, millpond
db = millpond.connect(sys.argv[1], parallelism=1)
db.sql(sys.argv[2])
db.sql("CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g")
db.flush()  # the snapshot
with psycopg.connect(sys.argv[3], autocommit=True) as c:
    c.execute("UPDATE ev SET v = v + 1 WHERE id % 3 = 0; DELETE FROM ev WHERE id % 5 = 0; "
              "INSERT INTO ev SELECT g, 'c', g FROM generate_series(100, 120) g")
db.flush()
"""


@pytest.mark.slow  # worker processes, each starting Spark (make slow, which CI runs)
@pytest.mark.parametrize("point", ["pg.before_append:1", "pg.after_append:1", "pg.before_append:2",
                                   "pg.after_append:2"])
def test_a_sigkill_around_the_append_loses_and_doubles_nothing(open_db, root, postgres_cdc, point):
    conn = _pg(postgres_cdc)
    conn.execute("DROP TABLE IF EXISTS ev; CREATE TABLE ev (id int PRIMARY KEY, g text, v int)")
    conn.execute("INSERT INTO ev SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, g FROM generate_series(1, 60) g")
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "MILLPOND_CRASH_AT": point, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    dsn = f"host=127.0.0.1 port={postgres_cdc.port} user={_user(postgres_cdc)} dbname=postgres"
    create = _source(postgres_cdc, "ev", "id INT, g TEXT, v INT, PRIMARY KEY (id)", "ev")
    proc = subprocess.run([sys.executable, "-c", WORKER, root, create, dsn], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -9, f"the worker was not killed: {proc.stderr[-2000:]}"
    if point.endswith(":1"):  # killed in the snapshot's epoch: the rest of the worker's changes, made here
        conn.execute("UPDATE ev SET v = v + 1 WHERE id % 3 = 0; DELETE FROM ev WHERE id % 5 = 0; "
                     "INSERT INTO ev SELECT g, 'c', g FROM generate_series(100, 120) g")
    db = open_db()
    db.flush()
    conn.execute("INSERT INTO ev VALUES (500, 'a', 1)")  # and the stream goes on from there
    db.flush()
    want = _upstream(conn, "ev", "id, g, v")
    assert _sorted(rows(db.sql("SELECT * FROM ev"))) == _oracle("SELECT * FROM w", w=want)
    assert _sorted(rows(db.sql("SELECT * FROM per_g"))) == _oracle(
        "SELECT g, count(*), sum(v) FROM w GROUP BY g", w=want)
    slots = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'millpond_ev_%'").fetchone()
    assert slots[0] == 1  # a slot made again after a kill in the snapshot replaces the first
    db.sql("DROP MATERIALIZED VIEW per_g")
    db.sql("DROP TABLE ev")  # and its slot, before the next point's run

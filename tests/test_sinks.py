"""Sinks into Delta Lake tables (``CREATE SINK``): the target equals DuckDB recomputing the source
over all input after every epoch, on random inserts, updates and deletes; the target holds each
epoch exactly once through failed writes, restarts and SIGKILLs between millpond's commit and the
target's; errors name the problem."""

from __future__ import annotations

import getpass
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from millpond import MillpondError, SqlError
from millpond.connectors import lake_sinks as targets
from millpond.connectors.kafka_sink import KafkaTarget
from millpond.connectors.postgres_sink import PostgresTarget
from millpond.errors import CatalogError
from tests.conftest import rows
from tests.workload_upstream import folded, kafka_messages

TABLES = """
CREATE TABLE kv (k INT PRIMARY KEY, g VARCHAR, v BIGINT);
CREATE TABLE ev (g VARCHAR, v INT);
"""
VIEWS = {
    "per_g": "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM ev GROUP BY g",
    "joined": "SELECT kv.g, count(*) AS n, sum(ev.v) AS s FROM kv JOIN ev ON kv.g = ev.g GROUP BY kv.g",
    "big": "SELECT g, v FROM ev WHERE v > 50",
}
SINKS = {  # name: (source, type)
    "per_g_out": ("per_g", "upsert"),
    "joined_out": ("joined", "upsert"),
    "kv_out": ("kv", "upsert"),
    "big_log": ("big", "append-only"),
    "per_g_log": ("per_g", "append-only"),
}


def _create(db, out: Path, names=SINKS, connector: str = "deltalake", server=None) -> None:  # noqa: ANN001
    """The sinks, each into its own target; ``server``: the PostgreSQL server or Kafka broker (its
    address kept in ``out`` for the readers below)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        src, kind = SINKS[name]
        if connector == "postgres":
            (out / "postgres").write_text(str(server.port))
            where = (f"hostname = '127.0.0.1', port = '{server.port}', username = '{server.user or getpass.getuser()}', "
                     f"database.name = 'postgres', table.name = '{out.parent.name}_{name}'")
        elif connector == "kafka":
            (out / "kafka").write_text(server.bootstrap)
            where = f"topic = '{out.parent.name}_{name}', properties.bootstrap.server = '{server.bootstrap}'"
        elif connector == "deltalake":
            where = f"location = '{out / name}'"
        else:
            where = (f"catalog.type = 'sql', catalog.uri = 'sqlite:///{out}/catalog.db', warehouse.path = '{out}/wh', "
                     f"database.name = 'd', table.name = '{name}'")
        db.sql(f"CREATE SINK {name} FROM {src} WITH (connector = '{connector}', {where}, type = '{kind}')")


def _pg_rows(out: Path, sql: str) -> list[tuple]:
    import psycopg

    port = int((out / "postgres").read_text())
    with psycopg.connect(host="127.0.0.1", port=port, user=getpass.getuser() if os.geteuid() else "postgres",
                         dbname="postgres") as conn:
        cur = conn.execute(sql)
        return [d.name for d in cur.description], cur.fetchall()


def _kafka_messages(out: Path, topic: str) -> list:
    return kafka_messages((out / "kafka").read_text(), topic)


_READ: dict[str, list] = {}  # topic -> its messages as _target last read them (_written reads them again)


def _kafka_target(out: Path, name: str) -> pa.Table:
    """An upsert sink's topic folded by key (a null value deletes its key), or an append-only
    sink's messages, as rows."""
    topic = f"{out.parent.name}_{name}"
    messages = _READ[topic] = _kafka_messages(out, topic)
    if (SINKS[name][1] if name in SINKS else {"up": "upsert"}.get(name)) == "upsert":
        return folded(messages)
    found = [json.loads(m.value()) for m in messages]
    return pa.Table.from_pylist(found) if found else pa.table({})


def _iceberg(out: Path, name: str):  # noqa: ANN202
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("millpond", uri=f"sqlite:///{out}/catalog.db", warehouse=(out / "wh").as_uri()).load_table(("d", name))


def _target(out: Path, name: str) -> pa.Table:
    """The target's rows, read by the format's own library (or client)."""
    if (out / "postgres").exists():
        names, found = _pg_rows(out, f"SELECT * FROM {out.parent.name}_{name}")
        return pa.Table.from_pylist([dict(zip(names, r)) for r in found]) if found else pa.table({})
    if (out / "kafka").exists():
        return _kafka_target(out, name)
    if (out / "catalog.db").exists():
        return _iceberg(out, name).scan().to_arrow()
    return DeltaTable(str(out / name)).to_pyarrow_table()


def _written(out: Path, name: str, token: str) -> int | None:
    """The epoch the target's last commit recorded for the sink."""
    if (out / "postgres").exists():
        return _pg_rows(out, f"SELECT epoch FROM millpond_sinks WHERE token = '{token}'")[1][0][0]
    if (out / "kafka").exists():
        topic = f"{out.parent.name}_{name}"
        epochs = [int(dict(m.headers())["millpond-epoch"]) for m in _READ.pop(topic, None) or _kafka_messages(out, topic)
                  if dict(m.headers() or []).get("millpond-sink") == token.encode()]
        return max(epochs) if epochs else None
    if (out / "catalog.db").exists():
        return int(_iceberg(out, name).properties[f"millpond.sink.{token}"])
    return DeltaTable(str(out / name)).transaction_version(token)


def _replayed(changes: pa.Table) -> list[tuple]:
    """An append-only sink's changes replayed: each row as often as its inserts outnumber its deletes."""
    cols = [c for c in changes.column_names if c not in ("_op", "_epoch")]
    con = duckdb.connect()
    con.register("c", changes)
    sel = ", ".join(f'"{c}"' for c in cols)
    got = con.execute(f"SELECT {sel}, sum(CASE WHEN _op = 'insert' THEN 1 ELSE -1 END) AS w FROM c GROUP BY ALL").fetchall()
    assert all(r[-1] >= 0 for r in got), "a row deleted more often than inserted"
    return rows(pa.Table.from_pylist([dict(zip(cols, r[:-1])) for r in got for _ in range(r[-1])],
                                     schema=changes.select(cols).schema))


def _check(db, duck, out: Path, where: str, names=SINKS) -> None:  # noqa: ANN001
    for name in names:
        src, kind = SINKS[name]
        sql = VIEWS.get(src, f"SELECT * FROM {src}")
        want = sorted(duck.execute(sql).fetchall(), key=lambda r: tuple((v is not None, v) for v in r))
        target = _target(out, name)
        got = rows(target) if kind == "upsert" else _replayed(target)
        assert got == want, f"{where}: sink {name} ({kind} of {src})"
        _caught_up(db, out, name, where)


def _caught_up(db, out: Path, name: str, where: str) -> None:  # noqa: ANN001
    """The sink holds every epoch: its target records an epoch of the sink's (an epoch that changed
    nothing of its source writes nothing), and the sink knows itself at the last one."""
    sink = db.catalog.sinks[name]
    assert sink.start <= _written(out, name, sink.token) <= db.epoch, where
    assert db.runtime.sinks.progress(sink) == db.epoch, where


def _step(db, duck, rng: random.Random) -> None:  # noqa: ANN001
    ev = [(rng.choice(["a", "b", "c", None]), rng.randint(0, 100)) for _ in range(rng.randint(0, 20))]
    if ev:
        batch = pa.table({"g": [g for g, _ in ev], "v": pa.array([v for _, v in ev], pa.int32())})
        db.insert("ev", batch)
        duck.register("batch", batch)
        duck.execute("INSERT INTO ev SELECT * FROM batch")
    for sql in (f"INSERT INTO kv VALUES ({rng.randint(1, 8)}, '{rng.choice('abcd')}', {rng.randint(0, 9)})",
                f"DELETE FROM ev WHERE v = {rng.randint(0, 100)}",
                f"UPDATE ev SET v = v + 1 WHERE g = '{rng.choice('abc')}' AND v < 20",
                f"DELETE FROM kv WHERE k = {rng.randint(1, 8)}"):
        if rng.random() < 0.5:
            db.sql(sql)
            if sql.startswith("INSERT INTO kv"):  # an upsert: DuckDB replaces the row of the key
                duck.execute(f"DELETE FROM kv WHERE k = {sql.split('(')[1].split(',')[0]}")
            duck.execute(sql)


def _setup(db):  # noqa: ANN001, ANN202
    db.sql(TABLES)
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    duck = duckdb.connect()
    duck.execute("CREATE TABLE kv (k INT PRIMARY KEY, g VARCHAR, v BIGINT); CREATE TABLE ev (g VARCHAR, v INT)")
    return duck


@pytest.mark.parametrize("connector", ["deltalake", "iceberg", "postgres", "kafka"])
def test_sinks_equal_duckdb_after_every_epoch_through_failures_and_a_restart(open_db, root, tmp_path, monkeypatch,
                                                                             connector, request):
    out = tmp_path / "out"
    server = request.getfixturevalue({"postgres": "postgres_cdc", "kafka": "kafka"}[connector]) \
        if connector in ("postgres", "kafka") else None
    rng = random.Random(5)
    db = open_db()
    db.sql("SET retention = 1")  # changes kept for one epoch: a sink that falls behind keeps those it needs
    duck = _setup(db)
    for _ in range(2):  # the sinks are created over views that hold rows already
        _step(db, duck, rng)
    db.flush()
    _create(db, out, connector=connector, server=server)
    _check(db, duck, out, "created")
    for step in range(8):
        if step == 3:  # the targets fail for two epochs: the views go on, the sinks wait and catch up once
            kind = {"deltalake": targets.DeltaTarget, "iceberg": targets.IcebergTarget,
                    "postgres": PostgresTarget, "kafka": KafkaTarget}[connector]
            real = kind.upsert

            def broken(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                raise OSError("the target is unreachable")
            monkeypatch.setattr(kind, "upsert", broken)
        if step == 5:
            status = {r["name"]: r for r in db.sql("SHOW SINKS").to_pylist()}
            assert status["per_g_out"]["error"] == "OSError: the target is unreachable"
            assert status["per_g_out"]["lag"] >= 1 and status["big_log"]["error"] is None
            monkeypatch.setattr(kind, "upsert", real)
        if step == 6:  # a restart: each sink reads the last epoch its target holds, and writes the rest
            db.close()
            _step(db := open_db(), duck, rng)
            db.flush()
            _check(db, duck, out, "after the restart")
            continue
        _step(db, duck, rng)
        db.flush()
        if 3 <= step < 5:
            assert rows(db.sql("SELECT * FROM per_g")) == sorted(
                duck.execute(VIEWS["per_g"]).fetchall(), key=lambda r: tuple((v is not None, v) for v in r))
            _check(db, duck, out, f"step {step}", names=["big_log", "per_g_log"])
            continue
        _check(db, duck, out, f"step {step}")
    status = db.sql("SHOW SINKS").to_pylist()
    assert [(r["name"], r["lag"], r["error"]) for r in status] == [(n, 0, None) for n in sorted(SINKS)]


def test_sink_errors_name_the_problem(open_db, tmp_path):
    db = open_db()
    db.sql(TABLES + "; CREATE MATERIALIZED VIEW big AS SELECT g, v FROM ev WHERE v > 50;"
           "CREATE MATERIALIZED VIEW spans AS SELECT g AS _op, count(*) AS n FROM ev GROUP BY g")
    loc = tmp_path / "t"
    for sql, message in [
        (f"CREATE SINK s FROM big WITH (connector = 'deltalake', location = '{loc}', type = 'upsert')",
         "an upsert sink keeps rows by the key of 'big', and it has none"),
        (f"CREATE SINK s FROM kv WITH (connector = 'jdbc', location = '{loc}', type = 'upsert')",
         "connector must be one of deltalake, iceberg, postgres, kafka, got 'jdbc'"),
        (f"CREATE SINK s FROM kv WITH (connector = 'kafka', location = '{loc}', type = 'upsert')",
         "unknown option 'location' for connector 'kafka'"),
        ("CREATE SINK s FROM kv WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = 'b:9092', "
         "type = 'append-only') FORMAT UPSERT ENCODE JSON", "FORMAT UPSERT needs type = 'upsert'"),
        ("CREATE SINK s FROM kv WITH (connector = 'postgres', type = 'upsert', hostname = 'h', username = 'u', "
         "database.name = 'd')", "connector 'postgres' needs table.name"),
        ("CREATE SINK s FROM kv WITH (connector = 'iceberg', type = 'upsert', catalog.type = 'sql')",
         "an Iceberg sink needs catalog.uri, warehouse.path, database.name, table.name"),
        ("CREATE SINK s FROM kv WITH (connector = 'iceberg', type = 'upsert', catalog.type = 'rest', catalog.uri = 'x', "
         "warehouse.path = 'w', database.name = 'd', table.name = 't')", "catalog.type must be 'sql'"),
        (f"CREATE SINK s FROM kv WITH (connector = 'iceberg', type = 'upsert', location = '{loc}', catalog.type = 'sql', "
         "catalog.uri = 'x', warehouse.path = 'w', database.name = 'd', table.name = 't')",
         "unknown option 'location' for connector 'iceberg'"),
        (f"CREATE SINK s FROM kv WITH (connector = 'deltalake', location = '{loc}')", "type must be 'upsert'"),
        ("CREATE SINK s FROM kv WITH (connector = 'deltalake', type = 'upsert')", "location = '<path or URI>'"),
        (f"CREATE SINK s FROM kv WITH (connector = 'deltalake', location = '{loc}', type = 'upsert', colour = 'b')",
         "unknown option 'colour'"),
        (f"CREATE SINK s FROM nope WITH (connector = 'deltalake', location = '{loc}', type = 'upsert')",
         'relation "nope" does not exist'),
        (f"CREATE SINK s FROM spans WITH (connector = 'deltalake', location = '{loc}', type = 'append-only')",
         "column '_op' is reserved for an append-only sink's changes"),
        ("CREATE SINK s kv", "expected FROM table_or_view"),
    ]:
        with pytest.raises(CatalogError if "nope" in sql else SqlError, match=message):
            db.sql(sql)
    assert not loc.exists() and not db.catalog.sinks
    db.sql(f"INSERT INTO kv VALUES (1, 'a', 2); FLUSH; CREATE SINK s FROM kv WITH (connector = 'deltalake', location = "
           f"'{loc}', type = 'upsert')")
    db.sql(f"CREATE SINK IF NOT EXISTS s FROM kv WITH (connector = 'deltalake', location = '{loc}', type = 'upsert')")
    with pytest.raises(CatalogError, match="sinks s write its rows out; drop them first"):
        db.sql("DROP TABLE kv")
    with pytest.raises(SqlError, match=r"already holds a table \(1 rows\)"):
        db.sql(f"CREATE SINK s2 FROM kv WITH (connector = 'deltalake', location = '{loc}', type = 'upsert')")
    db.sql("DROP SINK s; DROP SINK IF EXISTS s; DROP TABLE kv")  # the target's table stays
    assert DeltaTable(str(loc)).to_pyarrow_table().to_pylist() == [{"k": 1, "g": "a", "v": 2}]
    with pytest.raises(CatalogError, match='sink "s" does not exist'):
        db.sql("DROP SINK s")
    # a target that cannot be written: the sink is not created, and nothing of it is left
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with pytest.raises(MillpondError, match="so the sink was not created"):
        db.sql(f"CREATE SINK s3 FROM big WITH (connector = 'deltalake', location = '{blocked}/x', "
               "type = 'append-only')")
    assert not db.catalog.sinks and db.sql("SHOW SINKS").num_rows == 0


WORKER = """
import sys, millpond, pyarrow as pa
root, out, n, connector, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
db = millpond.connect(root, parallelism=1, interval=None)
if "ev" not in db.catalog.tables:
    db.sql("CREATE TABLE ev (g VARCHAR, v INT); CREATE MATERIALIZED VIEW per_g AS "
           "SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g")
    db.insert("ev", pa.table({"g": ["z"], "v": pa.array([7], pa.int32())}))
    db.flush()
for name, kind in (("up", "upsert"), ("ch", "append-only")):  # after a kill inside one: the same statement again
    where = (f"location = '{out}/{name}'" if connector == "deltalake" else
             f"catalog.type = 'sql', catalog.uri = 'sqlite:///{out}/catalog.db', warehouse.path = '{out}/wh', "
             f"database.name = 'd', table.name = '{name}'" if connector == "iceberg" else target.format(name=name))
    db.sql(f"CREATE SINK IF NOT EXISTS {name} FROM per_g WITH (connector = '{connector}', {where}, type = '{kind}')")
for i in range(n):
    db.insert("ev", pa.table({"g": ["a", "b", None][: 1 + i % 3], "v": pa.array([i, 2 * i, 1][: 1 + i % 3], pa.int32())}))
    db.flush()
db.close()
"""


@pytest.mark.parametrize("connector, point", [  # one in make test, the others in make slow and make chaos
    ("deltalake", "sink.after_commit:4"),
    pytest.param("deltalake", "sink.after_commit:1", marks=pytest.mark.slow),  # inside CREATE SINK: written, no catalog
    pytest.param("deltalake", "sink.before_commit:3", marks=pytest.mark.chaos),
    pytest.param("iceberg", "sink.after_commit:4", marks=pytest.mark.chaos),
    pytest.param("iceberg", "sink.before_commit:3", marks=pytest.mark.chaos),
    pytest.param("postgres", "sink.before_commit:3", marks=pytest.mark.slow),
    pytest.param("postgres", "sink.after_commit:1", marks=pytest.mark.chaos),
    pytest.param("kafka", "sink.after_commit:4", marks=pytest.mark.slow),
    pytest.param("kafka", "sink.before_commit:3", marks=pytest.mark.chaos)])
def test_a_sigkill_around_the_targets_commit_writes_each_epoch_once(open_db, root, tmp_path, connector, point,
                                                                    request):
    out = tmp_path / "out"
    out.mkdir()
    target = ""
    if connector == "postgres":
        server = request.getfixturevalue("postgres_cdc")
        (out / "postgres").write_text(str(server.port))
        target = (f"hostname = '127.0.0.1', port = '{server.port}', username = '{server.user or getpass.getuser()}', "
                  f"database.name = 'postgres', table.name = '{tmp_path.name}_{{name}}'")
    elif connector == "kafka":
        server = request.getfixturevalue("kafka")
        (out / "kafka").write_text(server.bootstrap)
        target = f"topic = '{tmp_path.name}_{{name}}', properties.bootstrap.server = '{server.bootstrap}'"
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "MILLPOND_CRASH_AT": point,
           "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    proc = subprocess.run([sys.executable, "-c", WORKER, root, str(out), "6", connector, target], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, f"the worker was not killed at {point}: {proc.stderr[-2000:]}"
    env.pop("MILLPOND_CRASH_AT")  # the next worker: the same statements, two more epochs
    proc = subprocess.run([sys.executable, "-c", WORKER, root, str(out), "2", connector, target], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the worker after the kill failed: {proc.stderr[-3000:]}"
    db = open_db()
    db.flush()  # recovery: each sink writes what its target misses, once
    duck = duckdb.connect()
    duck.execute("CREATE TABLE ev (g VARCHAR, v INT)")
    duck.register("ev_now", db.sql("SELECT * FROM ev"))
    duck.execute("INSERT INTO ev SELECT * FROM ev_now")
    want = sorted(duck.execute("SELECT g, count(*), sum(v) FROM ev GROUP BY g").fetchall(),
                  key=lambda r: tuple((v is not None, v) for v in r))
    assert want and rows(_target(out, "up")) == want
    changes = _target(out, "ch")
    assert _replayed(changes) == want
    # exactly once: no epoch's changes twice (each (row, op) at most once per epoch)
    con = duckdb.connect()
    con.register("changes", changes)
    per_epoch = con.execute(
        "SELECT count(*) FROM (SELECT g, n, s, _op, _epoch, count(*) AS c FROM changes GROUP BY ALL) WHERE c > 1").fetchone()
    assert per_epoch == (0,)
    for name in ("up", "ch"):
        _caught_up(db, out, name, "after the recovery")


def test_a_broker_without_transactions_takes_keyed_kafka_sinks_idempotently(open_db, kafka, tmp_path, monkeypatch,
                                                                             caplog):
    """Where the broker refuses a transactional producer (faked here: the test broker has them), an
    UPSERT sink writes with an idempotent producer and says so; a PLAIN sink's write fails, saying
    why, and the sink is not created."""
    import confluent_kafka

    class NoTransactions(confluent_kafka.Producer):
        def init_transactions(self, *args):  # noqa: ANN002, ANN202
            raise confluent_kafka.KafkaException("transactions not supported")
    monkeypatch.setattr(confluent_kafka, "Producer", NoTransactions)
    db = open_db()
    db.sql("CREATE TABLE kv (k INT PRIMARY KEY, g VARCHAR, v BIGINT); INSERT INTO kv VALUES (1, 'a', 1), (2, 'b', 2)")
    db.flush()
    topic = f"{tmp_path.name}_notx"
    with caplog.at_level("WARNING", logger="millpond"):
        db.sql(f"CREATE SINK up FROM kv WITH (connector = 'kafka', topic = '{topic}', "
               f"properties.bootstrap.server = '{kafka.bootstrap}', type = 'upsert')")
    assert "refused a transactional producer" in caplog.text and "idempotent producer instead" in caplog.text
    db.sql("DELETE FROM kv WHERE k = 1; INSERT INTO kv VALUES (3, 'c', 3)")
    db.flush()
    assert rows(folded(kafka_messages(kafka.bootstrap, topic))) == [(2, "b", 2), (3, "c", 3)]
    with pytest.raises(MillpondError, match="FORMAT PLAIN Kafka sink writes exactly once only through Kafka"):
        db.sql(f"CREATE SINK ch FROM kv WITH (connector = 'kafka', topic = '{topic}_ch', "
               f"properties.bootstrap.server = '{kafka.bootstrap}', type = 'append-only')")
    assert "ch" not in db.catalog.sinks

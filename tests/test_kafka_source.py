"""A Kafka topic is a table (``WITH (connector = 'kafka', ...) FORMAT ... ENCODE ...``), read from a
real Kafka-API broker (Tansu, tests/tansu.py): plain, upsert and Debezium messages in random mixes
of inserts, updates and deletes over several partitions; every view equals DuckDB over what was
produced after every epoch; a malformed message is named by partition and offset and skipped (or
stops the table); a SIGKILL between a chunk's appends loses and doubles nothing."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from millpond import SqlError
from tests.conftest import rows


def _sorted(table_rows: list[tuple]) -> list[tuple]:
    return sorted(table_rows, key=lambda r: tuple((v is not None, v) for v in r))


def _oracle(sql: str, **tables: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return _sorted([tuple(r) for r in con.execute(sql).fetchall()])


def _kafka_table(kafka, name: str, columns: str, topic: str, tail: str = "", **options: str) -> str:
    extra = "".join(f", {k} = '{v}'" for k, v in options.items())
    return (f"CREATE TABLE {name} ({columns}) WITH (connector = 'kafka', topic = '{topic}', "
            f"properties.bootstrap.server = '{kafka.bootstrap}'{extra}) {tail}")


@pytest.fixture(params=["driver", "spark_tasks"])
def reads(request, monkeypatch):
    """Who reads the partitions: this process, or Spark tasks, each a partition's range (the
    cluster's path, taken here as ``MILLPOND_DRIVER_RECORDS=0`` takes it)."""
    if request.param == "spark_tasks":
        from millpond.spark import executor

        monkeypatch.setitem(executor.DRIVER_RECORDS, "local", 0)
    return request.param


def _check_reads(db, reads: str) -> None:  # noqa: ANN001
    tasks = db.runtime.sources.tasks()
    if reads == "spark_tasks":
        assert tasks is not None and tasks.stats["parts"] > 0, "no partition was read in a Spark task"
        assert not db.runtime.coordinator.store.list("sources/staging/"), "staged parts left behind"
    else:
        assert tasks is None


def test_plain_json_over_partitions_equals_duckdb_after_every_epoch(open_db, kafka, reads):
    topic = kafka.topic(f"plain_orders_{reads}", partitions=3)
    db = open_db()
    db.sql(_kafka_table(kafka, "orders", "id BIGINT, region TEXT, amount DECIMAL(10,2), note TEXT", topic,
                        "FORMAT PLAIN ENCODE JSON").replace(") WITH", ") INCLUDE partition AS part INCLUDE offset "
                                                             "INCLUDE timestamp AS ts INCLUDE key WITH"))
    db.sql("CREATE MATERIALIZED VIEW by_region AS SELECT region, count(*) AS n, sum(amount) AS total "
           "FROM orders GROUP BY region")
    db.sql("CREATE MATERIALIZED VIEW per_part AS SELECT part, count(*) AS n, max(kafka_offset) AS last FROM orders "
           "GROUP BY part")
    rng = random.Random(7)
    produced = []
    for epoch in range(3):
        for p in range(3):
            batch = [{"id": len(produced) + i, "region": rng.choice(["eu", "us", "ap", None]),
                      "amount": round(rng.uniform(0, 100), 2), "extra": "ignored"} for i in range(rng.randint(1, 40))]
            if rng.random() < 0.5:
                batch[0].pop("region")  # a field the message lacks is NULL
            kafka.produce(topic, [json.dumps(r) for r in batch], keys=[f"k{r['id']}" for r in batch], partition=p)
            produced += [{**r, "part": p} for r in batch]
        db.flush()
        want = pa.Table.from_pylist([{"region": r.get("region"), "amount": r["amount"], "part": r["part"]}
                                     for r in produced])
        assert rows(db.sql("SELECT region, n, total FROM by_region")) == _oracle(
            "SELECT region, count(*), CAST(sum(CAST(amount AS DECIMAL(10,2))) AS DECIMAL(38,2)) FROM w GROUP BY region",
            w=want)
        per_part = rows(db.sql("SELECT part, n, last FROM per_part"))
        assert [(p, n) for p, n, _ in per_part] == _oracle("SELECT part, count(*) FROM w GROUP BY part", w=want)
        assert all(last == n - 1 for _, n, last in per_part)  # offsets 0.. n-1: each message once
    keys = rows(db.sql("SELECT id, kafka_key FROM orders"))
    assert keys == _sorted([(r["id"], f"k{r['id']}".encode()) for r in produced])
    assert rows(db.sql("SELECT count(*) FROM orders WHERE ts IS NULL OR ts < now() - interval '1 hour'")) == [(0,)]
    status = db.sql("SELECT split, position, lag, rows FROM millpond_sources WHERE table_name = 'orders'").to_pylist()
    assert [s["split"] for s in status] == [f"{topic}/{p}" for p in range(3)]
    assert sum(s["rows"] for s in status) == len(produced) and all(s["lag"] == 0 for s in status)
    assert db.sql("SHOW SOURCES").num_rows == 3
    _check_reads(db, reads)


def test_upsert_json_with_tombstones_keeps_each_keys_last_value(open_db, kafka, reads):
    topic = kafka.topic(f"upserts_{reads}", partitions=2)
    db = open_db()
    db.sql(_kafka_table(kafka, "acct", "id INT, owner TEXT, balance BIGINT, PRIMARY KEY (id)", topic,
                        "FORMAT UPSERT ENCODE JSON"))
    db.sql("CREATE MATERIALIZED VIEW rich AS SELECT owner, count(*) AS n, sum(balance) AS b FROM acct "
           "WHERE balance > 10 GROUP BY owner")
    rng = random.Random(11)
    state: dict[int, dict] = {}
    for epoch in range(4):
        messages: dict[int, list] = {0: [], 1: []}  # partition -> (key, value) in order
        for _ in range(rng.randint(20, 60)):
            k = rng.randrange(30)
            key = json.dumps({"id": k}) if rng.random() < 0.5 else str(k)  # an object, or the key's value
            if k in state and rng.random() < 0.3:
                messages[k % 2].append((key, None))  # a tombstone deletes
                del state[k]
            else:
                row = {"id": k, "owner": rng.choice("abc"), "balance": rng.randrange(40)}
                messages[k % 2].append((key, json.dumps(row)))
                state[k] = row
        for p, found in messages.items():
            if found:
                kafka.produce(topic, [v for _, v in found], keys=[k for k, _ in found], partition=p)
        db.flush()
        current = pa.Table.from_pylist(list(state.values()), schema=pa.schema(
            [("id", pa.int32()), ("owner", pa.string()), ("balance", pa.int64())]))
        assert rows(db.sql("SELECT * FROM acct")) == _oracle("SELECT * FROM c", c=current)
        assert rows(db.sql("SELECT * FROM rich")) == _oracle(
            "SELECT owner, count(*), sum(balance) FROM c WHERE balance > 10 GROUP BY owner", c=current)
    _check_reads(db, reads)


def test_debezium_change_events_insert_update_and_delete(open_db, kafka):
    topic = kafka.topic("dbz", partitions=1)
    db = open_db()
    db.sql(_kafka_table(kafka, "users", "id INT, name TEXT, age INT, PRIMARY KEY (id)", topic,
                        "FORMAT DEBEZIUM ENCODE JSON"))
    db.sql("CREATE MATERIALIZED VIEW ages AS SELECT age / 10 AS decade, count(*) AS n FROM users GROUP BY age / 10")
    rng = random.Random(5)
    state: dict[int, dict] = {}
    for epoch in range(4):
        events = []
        for _ in range(rng.randint(10, 40)):
            k = rng.randrange(25)
            after = {"id": k, "name": f"u{k}", "age": rng.randrange(80)}
            if k not in state:
                events.append({"before": None, "after": after, "op": rng.choice("cr")})
            elif rng.random() < 0.3:
                events.append({"before": state[k], "after": None, "op": "d"})
                del state[k]
                continue
            elif rng.random() < 0.2 and (new := rng.randrange(25, 60)) not in state:  # the key changes
                after = {**after, "id": new}
                events.append({"before": state.pop(k), "after": after, "op": "u"})
                k = new
            else:
                events.append({"before": state[k], "after": after, "op": "u"})
            state[k] = after
        wrapped = [json.dumps({"schema": {}, "payload": e}) if rng.random() < 0.5 else json.dumps(e) for e in events]
        kafka.produce(topic, wrapped + [None])  # a tombstone after the events: skipped
        db.flush()
        current = pa.Table.from_pylist(list(state.values()), schema=pa.schema(
            [("id", pa.int32()), ("name", pa.string()), ("age", pa.int32())]))
        assert rows(db.sql("SELECT * FROM users")) == _oracle("SELECT * FROM c", c=current)
        assert rows(db.sql("SELECT * FROM ages")) == _oracle(
            "SELECT CAST(trunc(age / 10) AS INT), count(*) FROM c GROUP BY 1", c=current)
    assert db.sql("SELECT * FROM millpond_source_errors").num_rows == 0


def test_csv_and_bytes_encodings(open_db, kafka):
    csv_topic, raw_topic = kafka.topic("csv_in", partitions=1), kafka.topic("raw_in", partitions=2)
    db = open_db()
    db.sql(_kafka_table(kafka, "c", "a INT, b TEXT, d DATE", csv_topic, "FORMAT PLAIN ENCODE CSV (delimiter = ';')"))
    db.sql(_kafka_table(kafka, "r", "payload BYTEA", raw_topic, "FORMAT PLAIN ENCODE BYTES"))
    kafka.produce(csv_topic, ["1;x;2026-01-02", "2;;2026-03-04"])
    kafka.produce(raw_topic, [b"\x00\x01", b"plain"])
    db.flush()
    import datetime as dt

    assert rows(db.sql("SELECT * FROM c")) == [(1, "x", dt.date(2026, 1, 2)), (2, None, dt.date(2026, 3, 4))]
    assert rows(db.sql("SELECT * FROM r")) == _sorted([(b"\x00\x01",), (b"plain",)])
    kafka.produce(raw_topic, [b"new"], partition=1)
    db.flush()
    assert (b"new",) in rows(db.sql("SELECT * FROM r"))
    assert [s["split"] for s in db.sql("SELECT split FROM millpond_sources WHERE table_name = 'r'").to_pylist()] == \
        [f"{raw_topic}/0", f"{raw_topic}/1"]


def test_a_malformed_message_is_skipped_and_named_or_stops_the_table(open_db, kafka, reads):
    skip_topic, stop_topic = kafka.topic(f"bad_skip_{reads}", partitions=2), kafka.topic(f"bad_stop_{reads}", partitions=1)
    db = open_db()
    db.sql(_kafka_table(kafka, "s", "k INT, v INT, PRIMARY KEY (k)", skip_topic, "FORMAT PLAIN ENCODE JSON"))
    db.sql(_kafka_table(kafka, "t", "k INT, v INT", stop_topic, "FORMAT PLAIN ENCODE JSON", on_error="stop"))
    kafka.produce(skip_topic, ['{"k": 1, "v": 1}', "not json", '{"k": 2, "v": "two"}', '{"v": 3}', '{"k": 4, "v": 4}'],
                  partition=1)
    kafka.produce(stop_topic, ['{"k": 1, "v": 1}', '{"k": 2, "v": 2}', "{oops", '{"k": 3, "v": 3}'])
    with pytest.warns(Warning, match="source tables have errors"):
        db.flush()
    assert rows(db.sql("SELECT * FROM s")) == [(1, 1), (4, 4)]
    assert rows(db.sql("SELECT * FROM t")) == [(1, 1), (2, 2)]
    errors = db.sql("SELECT table_name, kind, path, error FROM millpond_source_errors").to_pylist()
    assert [(e["table_name"], e["kind"], e["path"]) for e in errors] == [
        ("s", "message", f"{skip_topic}/1/1"), ("s", "message", f"{skip_topic}/1/2"),
        ("s", "message", f"{skip_topic}/1/3"), ("t", "stopped", f"{stop_topic}/0/2")]
    assert "null" in errors[2]["error"].lower()  # a key without a value: said
    kafka.produce(stop_topic, ['{"k": 5, "v": 5}'])
    db.flush()
    assert rows(db.sql("SELECT * FROM t")) == [(1, 1), (2, 2)]  # stopped: nothing after the bad message
    _check_reads(db, reads)


def test_kafka_table_options_are_checked(open_db, kafka):
    topic = kafka.topic("checked", partitions=1)
    db = open_db()
    bad = {
        "topic": (_kafka_table(kafka, "x", "a INT", "no_such_topic"), "topic 'no_such_topic' is not on broker"),
        "option": (_kafka_table(kafka, "x", "a INT", topic, bogus="1"), "unknown option 'bogus'"),
        "format": (_kafka_table(kafka, "x", "a INT", topic, "FORMAT UPSERT ENCODE JSON"), "needs a primary key"),
        "encode": (_kafka_table(kafka, "x", "a INT", topic, "FORMAT PLAIN ENCODE AVRO"), "ENCODE AVRO is not supported"),
        "bytes": (_kafka_table(kafka, "x", "a INT", topic, "FORMAT PLAIN ENCODE BYTES"), "exactly one BYTEA column"),
        "mode": (_kafka_table(kafka, "x", "a INT", topic, **{"scan.startup.mode": "soon"}), "scan.startup.mode"),
        "client": (_kafka_table(kafka, "x", "a INT", topic, **{"properties.no.such.thing": "1"}),
                   "the Kafka client refuses its properties"),
        "include": (_kafka_table(kafka, "x", "a INT, PRIMARY KEY (a)", topic, "FORMAT UPSERT ENCODE JSON")
                    .replace(") WITH", ") INCLUDE offset WITH"), "INCLUDE goes with FORMAT PLAIN"),
        "broker": ("CREATE TABLE x (a INT) WITH (connector = 'kafka', topic = 't', "
                   "properties.bootstrap.server = '127.0.0.1:1')", "cannot be reached"),
        "connector": ("CREATE TABLE x (a INT) WITH (connector = 'kinesis')", "connector must be one of"),
    }
    for what, (sql, message) in bad.items():
        with pytest.raises(SqlError, match=message):
            db.sql(sql)
        assert "x" not in db.catalog.tables, what


def test_startup_mode_latest_starts_at_the_end_and_keeps_it(open_db, kafka):
    topic = kafka.topic("latest", partitions=1)
    kafka.produce(topic, ['{"a": 1}'])
    kafka.produce(topic, ['{"a": 2}'])  # (its own batch: Tansu's end of a partition is its last batch's first offset + 1)
    db = open_db()
    db.sql(_kafka_table(kafka, "l", "a INT", topic, **{"scan.startup.mode": "latest"}))
    db.flush()
    kafka.produce(topic, ['{"a": 3}'])
    db.flush()
    assert rows(db.sql("SELECT * FROM l")) == [(3,)]


WORKER = r"""
import sys, millpond
db = millpond.connect(sys.argv[1], parallelism=1, interval=None)
if "ev" not in db.catalog.tables:
    db.sql(f"CREATE TABLE ev (g TEXT, v INT) WITH (connector = 'kafka', topic = '{sys.argv[3]}', "
           f"properties.bootstrap.server = '{sys.argv[2]}');"
           "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g")
db.flush()
"""


@pytest.mark.slow  # two worker processes, each starting Spark (make slow, which CI runs)
@pytest.mark.parametrize("point,in_tasks", [("kafka.before_append:2", False), ("kafka.after_append:2", False),
                                            ("kafka.after_append:2", True)],
                         ids=["before_append", "after_append", "after_append_read_in_spark_tasks"])
def test_a_sigkill_between_a_chunks_appends_loses_and_doubles_nothing(open_db, root, kafka, point, in_tasks):
    topic = kafka.topic(f"crash_{point.split('.')[1].split(':')[0]}{'_tasks' if in_tasks else ''}", partitions=3)
    produced = []
    for p in range(3):
        batch = [{"g": "ab"[i % 2], "v": 100 * p + i} for i in range(5 + p)]
        kafka.produce(topic, [json.dumps(r) for r in batch], partition=p)
        produced += batch
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "MILLPOND_CRASH_AT": point, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)]),
           **({"MILLPOND_DRIVER_RECORDS": "0"} if in_tasks else {})}  # the partitions read by Spark tasks
    proc = subprocess.run([sys.executable, "-c", WORKER, root, kafka.bootstrap, topic], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, f"the worker was not killed: {proc.stderr[-2000:]}"
    db = open_db()
    db.flush()  # the partitions appended before the kill are read on from there; the others again
    want = pa.Table.from_pylist(produced)
    assert rows(db.sql("SELECT * FROM ev")) == _oracle("SELECT g, CAST(v AS INT) FROM w", w=want)
    assert rows(db.sql("SELECT * FROM per_g")) == _oracle("SELECT g, count(*), sum(v) FROM w GROUP BY g", w=want)


def test_a_broker_out_of_reach_is_said_and_the_other_tables_go_on(open_db):
    from tests.tansu import Broker

    broker = Broker()  # its own: stopped below
    try:
        topic = broker.topic("gone", partitions=1)
        broker.produce(topic, ['{"a": 1}'])
        db = open_db()
        db.sql(_kafka_table(broker, "k", "a INT", topic))
        db.sql("CREATE TABLE plain_t (a INT)")
        db.sql("CREATE MATERIALIZED VIEW t_sum AS SELECT sum(a) AS s FROM plain_t")
        db.flush()
        broker.stop()
        db.sql("INSERT INTO plain_t VALUES (5)")
        with pytest.warns(Warning, match="source tables have errors"):
            db.flush()  # the broker's answer is waited for 2 s, then again only after a back-off
        assert rows(db.sql("SELECT * FROM t_sum")) == [(5,)]  # the other table went on
        assert rows(db.sql("SELECT * FROM k")) == [(1,)]
        errors = db.sql("SELECT table_name, kind, path FROM millpond_source_errors").to_pylist()
        assert errors == [{"table_name": "k", "kind": "broker", "path": broker.bootstrap}]
        shown = {t["name"]: t["error"] for t in db.sql("SHOW TABLES").to_pylist()}
        assert "broker" in shown["k"] and shown["plain_t"] is None
    finally:
        broker.stop()

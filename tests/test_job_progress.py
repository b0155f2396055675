"""Every long piece of work shows how far it has got in ``SHOW JOBS`` (``progress``), not only a
view's backfill: a Kafka table's catch-up (messages taken of those to the partitions' ends), a
PostgreSQL table's snapshot (its lines of the planner's rows), a sink's first write into PostgreSQL,
Kafka or Delta (its rows handed to the target), a compaction round (the rows of its merges done, or
its Spark tasks). Each test samples ``SHOW JOBS`` every time the work reports progress
(:class:`millpond.progress.Work`) and checks the fractions move from below one to one."""

from __future__ import annotations

import getpass
import json

import pyarrow as pa
import pytest

from millpond.work import Work


def _sampled(monkeypatch, db, kind: str) -> list[float | None]:  # noqa: ANN001
    """``SHOW JOBS``' progress of the jobs of ``kind``, sampled after each report of progress."""
    seen: list[float | None] = []
    for name in ("did", "at"):
        original = getattr(Work, name)

        def spy(self, *args, _original=original):  # noqa: ANN001, ANN002, ANN202
            _original(self, *args)
            seen.extend(j["progress"] for j in db.sql("SHOW JOBS").to_pylist() if j["kind"] == kind)
        monkeypatch.setattr(Work, name, spy)
    return seen


def _rising_to_one(seen: list[float | None]) -> None:
    assert seen, "no progress was reported"
    assert all(p is not None for p in seen), seen
    assert seen == sorted(seen), seen
    assert any(0 < p < 1 for p in seen), seen  # seen part way
    assert seen[-1] == pytest.approx(1.0), seen


def test_a_kafka_catch_up_shows_the_messages_taken_of_those_to_the_ends(open_db, kafka, monkeypatch):
    from millpond.connectors import kafka as connector

    monkeypatch.setattr(connector, "CHUNK", 100)  # four consumes of at most 100 messages
    topic = kafka.topic("progress_catch_up")
    kafka.produce(topic, [json.dumps({"id": i}) for i in range(350)])
    db = open_db()
    seen = _sampled(monkeypatch, db, "source")
    db.sql(f"CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = '{topic}', "
           f"properties.bootstrap.server = '{kafka.bootstrap}') FORMAT PLAIN ENCODE JSON")
    db.sql("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM ev")
    db.flush()
    _rising_to_one(seen)
    assert min(seen) <= 0.5, seen  # the first chunk's share of the 350
    assert db.sql("SELECT n FROM n").to_pylist() == [{"n": 350}]


def test_a_read_in_spark_tasks_and_a_spark_compaction_follow_their_tasks(open_db, kafka, spark, monkeypatch):
    """Where Spark tasks do the work (a cluster's reads of sources, ``compaction = 'spark'``), its
    progress is their job group's tasks done."""
    from millpond.spark import executor
    from millpond.spark.compact import spark_runner
    from millpond.store.compaction import Policy

    monkeypatch.setitem(executor.DRIVER_RECORDS, "local", 0)  # the cluster's path: partitions read in tasks
    followed = []
    original = Work.follow
    monkeypatch.setattr(Work, "follow", lambda self, tasks: (followed.append(tasks), original(self, tasks)))
    topic = kafka.topic("progress_in_tasks", partitions=2)
    for p in range(2):
        kafka.produce(topic, [json.dumps({"id": i}) for i in range(20)], partition=p)
    db = open_db()
    db.sql(f"CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = '{topic}', "
           f"properties.bootstrap.server = '{kafka.bootstrap}') FORMAT PLAIN ENCODE JSON")
    db.sql("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM ev")
    db.flush()
    assert db.sql("SELECT n FROM n").to_pylist() == [{"n": 40}]
    assert followed, "the read in Spark tasks did not say whose tasks it is"
    done, total = followed[0]()
    assert done == total > 0  # its two partitions' tasks, ended

    state = db.runtime.coordinator.state
    state.policy, state.runner = Policy(l0_trigger=40, l0_stall=50), spark_runner(spark)  # none until asked
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
    for i in range(3):
        db.insert("t", pa.table({"k": pa.array(range(i * 10, i * 10 + 10), pa.int32()), "v": pa.array([i] * 10)}))
        db.flush()
    followed.clear()
    state.policy = Policy(l0_trigger=2, l0_stall=50)
    state.compact()
    assert followed, "the compaction in Spark did not say whose tasks it is"
    done, total = followed[0]()
    assert done == total > 0
    assert db.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 30}]


def test_a_postgres_snapshot_shows_its_lines_of_the_planners_rows(open_db, postgres_cdc, monkeypatch):
    import psycopg

    from millpond.connectors import postgres_cdc as connector

    monkeypatch.setattr(connector, "PROGRESS_BYTES", 256)  # its lines counted every 256 bytes

    with psycopg.connect(host="127.0.0.1", port=postgres_cdc.port, user=postgres_cdc.user or getpass.getuser(),
                         dbname="postgres", autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS progress_snap")
        conn.execute("CREATE TABLE progress_snap (id INT PRIMARY KEY, note TEXT)")
        conn.execute("INSERT INTO progress_snap SELECT i, 'line ' || i FROM generate_series(1, 200) i")
        conn.execute("ANALYZE progress_snap")  # the planner's estimate: the 200 rows
    db = open_db()
    seen = _sampled(monkeypatch, db, "source")
    db.sql(f"CREATE TABLE snap (id INT, note TEXT, PRIMARY KEY (id)) WITH (connector = 'postgres-cdc', "
           f"hostname = '127.0.0.1', port = '{postgres_cdc.port}', "
           f"username = '{postgres_cdc.user or getpass.getuser()}', password = '', database.name = 'postgres', "
           "schema.name = 'public', table.name = 'progress_snap')")
    db.sql("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM snap")
    db.flush()
    _rising_to_one(seen)
    assert db.sql("SELECT n FROM n").to_pylist() == [{"n": 200}]


@pytest.mark.parametrize("connector", ["postgres", "kafka", "deltalake", "iceberg"])
def test_a_sinks_first_write_shows_its_rows_written(open_db, connector, request, tmp_path, monkeypatch):
    from millpond.connectors import kafka_sink, lake_sinks, postgres_sink

    monkeypatch.setattr(postgres_sink, "COPY_ROWS", 2)  # five rows: pieces of 2, 2 and 1
    monkeypatch.setattr(kafka_sink, "PROGRESS_MESSAGES", 2)
    monkeypatch.setattr(lake_sinks, "WRITE_BATCH_ROWS", 2)
    monkeypatch.setattr(lake_sinks, "ICEBERG_APPEND_ROWS", 2)
    db = open_db()
    db.sql("CREATE TABLE kv (k INT PRIMARY KEY, v TEXT)")
    db.sql("INSERT INTO kv VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')")
    db.sql("CREATE MATERIALIZED VIEW doubled AS SELECT k, max(v || v) AS vv FROM kv GROUP BY k")
    db.flush()
    if connector == "postgres":
        server = request.getfixturevalue("postgres_cdc")
        where = (f"hostname = '127.0.0.1', port = '{server.port}', username = '{server.user or getpass.getuser()}', "
                 f"database.name = 'postgres', table.name = 'progress_{tmp_path.name}'")
    elif connector == "kafka":
        broker = request.getfixturevalue("kafka")
        where = f"topic = '{broker.topic(f'progress_{tmp_path.name}')}', properties.bootstrap.server = '{broker.bootstrap}'"
    elif connector == "iceberg":
        where = (f"catalog.type = 'sql', catalog.uri = 'sqlite:///{tmp_path}/catalog.db', "
                 f"warehouse.path = '{tmp_path}/wh', database.name = 'd', table.name = 'out'")
    else:
        where = f"location = '{tmp_path / 'out'}'"
    seen = _sampled(monkeypatch, db, "sink")
    db.sql(f"CREATE SINK out FROM doubled WITH (connector = '{connector}', {where}, type = 'upsert')")
    assert seen == pytest.approx([0.4, 0.8, 1.0]), seen
    assert db.sql("SHOW JOBS").num_rows == 0
    db.sql("INSERT INTO kv VALUES (6, 'f')")
    db.flush()
    assert sorted(r["k"] for r in _target(connector, tmp_path, request)) == [1, 2, 3, 4, 5, 6]  # each piece, once


def _target(connector: str, tmp_path, request) -> list[dict]:  # noqa: ANN001
    """The sink's target's rows (a Kafka topic's: its messages folded by key)."""
    if connector == "deltalake":
        from deltalake import DeltaTable

        return DeltaTable(str(tmp_path / "out")).to_pyarrow_table().to_pylist()
    if connector == "iceberg":
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("millpond", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
        return catalog.load_table(("d", "out")).scan().to_arrow().to_pylist()
    if connector == "postgres":
        import psycopg

        server = request.getfixturevalue("postgres_cdc")
        with psycopg.connect(host="127.0.0.1", port=server.port, user=server.user or getpass.getuser(),
                             dbname="postgres") as conn:
            cur = conn.execute(f"SELECT k FROM progress_{tmp_path.name}")
            return [{"k": r[0]} for r in cur.fetchall()]
    from tests.workload_upstream import folded, kafka_messages

    return folded(kafka_messages(request.getfixturevalue("kafka").bootstrap, f"progress_{tmp_path.name}")).to_pylist()


def test_a_compaction_round_shows_the_rows_of_its_merges_done(open_db, monkeypatch):
    """The compaction process (the default runner) answers as each merge ends: a round of merges
    over two tables' states shows the share of their rows merged."""
    from millpond.store.compaction import Policy
    from millpond.store.compactor import CompactionProcess

    db = open_db()
    state = db.runtime.coordinator.state
    assert isinstance(state.runner, CompactionProcess)
    state.policy = Policy(l0_trigger=40, l0_stall=50)  # no compaction until asked
    for name, rows in (("small", 10), ("large", 30)):
        db.sql(f"CREATE TABLE {name} (k INT PRIMARY KEY, v BIGINT)")
    for i in range(3):
        for name, rows in (("small", 10), ("large", 30)):
            db.insert(name, pa.table({"k": pa.array(range(i * rows, (i + 1) * rows), pa.int32()),
                                      "v": pa.array([i] * rows)}))
        db.flush()
    seen = _sampled(monkeypatch, db, "compaction")
    state.policy = Policy(l0_trigger=2, l0_stall=50)  # both tables' states merged, in one round
    state.compact()
    _rising_to_one(seen)
    assert db.sql("SELECT count(*) AS n FROM large").to_pylist() == [{"n": 90}]

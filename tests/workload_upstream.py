"""The crash workload's upstream systems (tests/workload.py): a table read from PostgreSQL by
logical replication and one read from a Kafka topic, each holding the same rows as the files
table's, and sinks into a PostgreSQL table and a Kafka topic — where the chain has a server
(``MILLPOND_TEST_PG = "<port> <user>"``) and a broker (``MILLPOND_TEST_KAFKA``), as the harness
of tests/test_crash.py sets them."""

from __future__ import annotations

import os

import pyarrow as pa

ARRIVALS_VIEW_SQL = "SELECT product, COUNT(*) AS rows_in, SUM(n) AS total FROM arrivals GROUP BY product"

# a table read from PostgreSQL by logical replication (connectors/postgres_cdc.py), where the chain
# has a server (``MILLPOND_TEST_PG = "<port> <user>"``, the harness's): the "file" steps insert the
# same rows upstream, keyed by the file's token and row (ON CONFLICT DO NOTHING: a step run again
# after a kill adds nothing); and a sink of per_user into a PostgreSQL table
SHIPPED = "shipped"
SHIPPED_VIEW = ("shipped_per_product", ARRIVALS_VIEW_SQL.replace("arrivals", SHIPPED))
PG_SINKS = {"per_user_pg": ("per_user", "upsert")}


def pg_server() -> tuple[str, str] | None:
    found = os.environ.get("MILLPOND_TEST_PG")
    return tuple(found.split()) if found else None


def _pg_name(root: str, name: str) -> str:
    import hashlib

    return f"{name}_{hashlib.sha1(root.rstrip('/').encode()).hexdigest()[:10]}"


def _pg_where(root: str, name: str) -> str:
    port, user = pg_server()
    return (f"hostname = '127.0.0.1', port = '{port}', username = '{user}', database.name = 'postgres', "
            f"table.name = '{_pg_name(root, name)}'")


def pg_statement(root: str) -> str:
    return (f"CREATE TABLE {SHIPPED} (id BIGINT, product VARCHAR, n INT, PRIMARY KEY (id)) WITH "
            f"(connector = 'postgres-cdc', {_pg_where(root, SHIPPED)})")


def _pg_connect(options: dict):  # noqa: ANN202
    import psycopg

    return psycopg.connect(host=options["hostname"], port=int(options["port"]), user=options["username"],
                           dbname=options["database.name"], autocommit=True)


def ensure_pg(root: str) -> None:
    """The upstream table the ``shipped`` table reads, unless it is there already."""
    port, user = pg_server()
    with _pg_connect({"hostname": "127.0.0.1", "port": port, "username": user, "database.name": "postgres"}) as c:
        c.execute(f"CREATE TABLE IF NOT EXISTS {_pg_name(root, SHIPPED)} (id bigint PRIMARY KEY, product text, n int)")


# a table read from a Kafka topic (connectors/kafka.py, FORMAT UPSERT: each row keyed by the file's
# token and row, so a step produced again after a kill changes nothing), where the chain has a broker
# (``MILLPOND_TEST_KAFKA`` = its bootstrap address); and a sink of per_user into a topic
STREAMED = "streamed"
STREAMED_VIEW = ("streamed_per_product", ARRIVALS_VIEW_SQL.replace("arrivals", STREAMED))
KAFKA_SINKS = {"per_user_kafka": ("per_user", "upsert")}


def kafka_server() -> str | None:
    return os.environ.get("MILLPOND_TEST_KAFKA") or None


def kafka_statement(root: str) -> str:
    return (f"CREATE TABLE {STREAMED} (id BIGINT PRIMARY KEY, product VARCHAR, n INT) WITH (connector = 'kafka', "
            f"topic = '{_pg_name(root, STREAMED)}', properties.bootstrap.server = '{kafka_server()}') "
            "FORMAT UPSERT ENCODE JSON")


def ensure_kafka(root: str) -> None:
    """The topic the ``streamed`` table reads, unless it is there already."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_server()})
    topic = _pg_name(root, STREAMED)
    if topic not in admin.list_topics(timeout=30).topics:
        admin.create_topics([NewTopic(topic, num_partitions=2)])[topic].result(30)


def _kafka_produce(bootstrap: str, topic: str, rows: list[tuple[int, dict]]) -> None:
    import json

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in rows:
        producer.produce(topic, key=json.dumps({"id": key}).encode(), value=json.dumps({"id": key, **value}).encode())
    assert producer.flush(30) == 0, "messages not delivered"


def kafka_messages(bootstrap: str, topic: str) -> list:
    """A topic's committed messages (``read_committed``), in order per partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10})  # a partition's end at once
    try:
        parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        got, done = [], set()
        while len(done) < len(parts):
            m = consumer.poll(30)
            assert m is not None, f"topic {topic}: no answer"
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                done.add(m.partition())
                continue
            done.discard(m.partition())
            got.append(m)
    finally:
        consumer.close()
    return got


def folded(messages: list) -> pa.Table:
    """An upsert topic's messages folded by key (a null value deletes its key), as rows."""
    import json

    by_key = {}
    for m in messages:
        by_key[m.key()] = None if m.value() is None else json.loads(m.value())
    found = [v for v in by_key.values() if v is not None]
    return pa.Table.from_pylist(found) if found else pa.table({})


def _kafka_rows(bootstrap: str, topic: str) -> pa.Table:
    return folded(kafka_messages(bootstrap, topic))

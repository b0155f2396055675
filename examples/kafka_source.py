"""A Kafka topic in, a view kept over it: orders as JSON messages and account balances as upserts.

An application produces orders (JSON, one per message) to the topic ``orders`` and account
balances keyed by account to ``accounts`` (a message without a value deletes its key's account).
millpond reads both as tables (``CREATE TABLE ... WITH (connector = 'kafka') FORMAT ...``), exactly
once, before every epoch; a view joins them. A malformed message is skipped and named with its
partition and offset in ``millpond_source_errors``; ``SHOW SOURCES`` says how far each partition
is read. Run it against a broker: ``python examples/kafka_source.py [host:port]`` (default
``localhost:9092``; the topics are created when missing).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import warnings

import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import millpond


def show(title: str, table: pa.Table) -> None:
    print(f"\n{title}")
    print(table.to_pandas().to_string(index=False))


def produce(bootstrap: str, topic: str, messages: list[tuple[str | None, str | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    producer.flush(30)


def run(bootstrap: str, root: str, spark=None) -> dict[str, pa.Table]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    missing = [t for t in ("orders", "accounts") if t not in admin.list_topics(timeout=10).topics]
    for future in admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1) for t in missing]).values():
        future.result(30)
    produce(bootstrap, "orders", [(None, json.dumps(o)) for o in [
        {"id": 1, "account": "ada", "amount": 12.5}, {"id": 2, "account": "bob", "amount": 30},
        {"id": 3, "account": "ada", "amount": 7.25}, {"id": 4, "account": "cy", "amount": 5}]])
    produce(bootstrap, "accounts", [(json.dumps({"name": n}), json.dumps({"name": n, "tier": t}))
                                    for n, t in [("ada", "gold"), ("bob", "silver"), ("cy", "silver")]])

    seen = {}
    db = millpond.connect(root, spark=spark, interval=None)
    try:
        db.sql(f"""
            CREATE TABLE orders (id BIGINT, account TEXT, amount DECIMAL(10, 2))
              INCLUDE partition AS part INCLUDE offset
              WITH (connector = 'kafka', topic = 'orders', properties.bootstrap.server = '{bootstrap}')
              FORMAT PLAIN ENCODE JSON;
            CREATE TABLE accounts (name TEXT PRIMARY KEY, tier TEXT)
              WITH (connector = 'kafka', topic = 'accounts', properties.bootstrap.server = '{bootstrap}')
              FORMAT UPSERT ENCODE JSON;
            CREATE MATERIALIZED VIEW per_tier AS
              SELECT a.tier, count(*) AS orders, sum(o.amount) AS total
              FROM orders AS o JOIN accounts AS a ON o.account = a.name GROUP BY a.tier;
        """)
        db.flush()
        seen["first"] = db.sql("SELECT * FROM per_tier ORDER BY tier")
        show("per tier, after the first epoch", seen["first"])

        # bob moves to gold, cy's account is deleted (a tombstone), one more order, and a bad message
        produce(bootstrap, "accounts", [('{"name": "bob"}', json.dumps({"name": "bob", "tier": "gold"})),
                                        ('{"name": "cy"}', None)])
        produce(bootstrap, "orders", [(None, json.dumps({"id": 5, "account": "bob", "amount": 1})), (None, "{oops")])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flush() says the bad message as a warning; shown below instead
            db.flush()
        seen["after"] = db.sql("SELECT * FROM per_tier ORDER BY tier")
        show("per tier, after bob's upgrade, cy's delete and one more order", seen["after"])
        seen["errors"] = db.sql("SELECT table_name, kind, error FROM millpond_source_errors")
        show("what the sources refused", seen["errors"])
        seen["sources"] = db.sql("SELECT table_name, split, position, lag, rows FROM millpond_sources")
        show("SHOW SOURCES", seen["sources"])
    finally:
        db.close()
    return seen


if __name__ == "__main__":
    folder = tempfile.mkdtemp(prefix="millpond-kafka-")
    try:
        run(sys.argv[1] if len(sys.argv) > 1 else "localhost:9092", folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

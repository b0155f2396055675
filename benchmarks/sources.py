"""Sources against their bare clients: a Kafka topic of JSON messages read by millpond and by a bare
``confluent-kafka`` consumer on the same broker, and a view's freshness over it.

**Ingest.** ``--messages`` JSON objects (an id, a user, an amount, a kind) over ``--partitions``
partitions of a real Kafka-API broker (Tansu, ``tests/tansu.py``: a test-only process, installed by
``make setup``). The bare consumer assigns every partition from its beginning and consumes until
each reports its end, touching every message's value: messages / seconds. millpond reads the same
topic into a table (``CREATE TABLE ... WITH (connector = 'kafka')``) before its first epoch: the
JSON decoded, conformed to the columns and appended durably to the table's log, one append per
partition per chunk: messages / seconds of that step (``millpond_sources.rows_per_second``); then
the epoch that makes them visible (``flush()``). Each run on a fresh topic, alternating, median of
``--repeat``. Goal: millpond ≥ 50% of the bare consumer's rate.

**Freshness.** Background epochs every ``--interval`` seconds over a table of the topic and a view
(``max(id)`` and a count per user); one message every 100 ms is produced with a fresh id and the
view polled every 10 ms until it shows it: produce → visible, p50 and p90 over ``--samples``.
Goal: p50 ≤ 2 intervals.

**Delta Lake.** A key-less Delta table of ``--delta-rows`` rows (written by delta-rs in 1M-row
files) is a source table with a view over it (a count, a sum and an average per region); then
``--delta-rounds`` times 1% more rows are appended as a new version and the view refreshed
(``flush()``: the version's files read, appended, the epoch run), against Spark recomputing the
view's query over the Delta table's files (``spark.read.parquet`` of the files of its current
version, as Spark with the Delta package reads a snapshot) in the same session: median seconds, and
the view checked equal to Spark's answer. Goal: the refresh ≥ 20× faster. ``--delta-change update``
(a neighbour of the goal's shape): the table keyed by ``id`` with its change data feed, and each
round updates 1% of its rows (a contiguous range of ids, ``amount`` changed) instead of appending:
delta-rs rewrites the file holding them and writes their pre- and post-images to the feed, which
millpond reads as the version's change (100,000 keys upserted into the keyed table).

**PostgreSQL CDC.** A PostgreSQL server (Debian's, ``wal_level = logical``; tests/pg.py) with
pgbench's tables at ``--pg-scale`` (``pgbench_history`` given a key), each a ``postgres-cdc`` table,
and views of each table's balance sum; then ``pgbench`` runs its TPC-B-like transactions for
``--pg-seconds`` at ``--pg-rate`` transactions/s from 2 clients while millpond's background epochs
run every ``--interval`` seconds. Every second: the slot's lag behind the server's WAL (bytes) and
the view's lag (how many of pgbench's transactions the history view does not hold yet). pgbench
keeps every balance sum equal to the history's sum of deltas: every epoch's views must agree (a
transaction split across epochs would show). After the load, one flush, and every table and view
equal to DuckDB over the upstream tables. Goal: lag bounded (the last 10 s's no larger than the
first 10 s's), every view equal.

    .venv/bin/python benchmarks/sources.py [--only kafka|delta|pg] [--messages 200000] [--partitions 4]
        [--repeat 3] [--samples 30] [--interval 0.5] [--delta-rows 10000000] [--delta-rounds 3]
        [--delta-change append|update]
        [--pg-scale 1] [--pg-seconds 60] [--pg-rate 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import millpond  # noqa: E402
from millpond.spark.session import local_session  # noqa: E402
from tests.tansu import Broker  # noqa: E402


def _produce(broker: Broker, topic: str, messages: int, partitions: int) -> None:
    for p in range(partitions):
        broker.produce(topic, [json.dumps({"id": i, "user": f"u{i % 1000}", "amount": i * 0.25, "kind": "click"})
                               for i in range(p, messages, partitions)], partition=p)


def bare(broker: Broker, topic: str, partitions: int) -> tuple[int, float]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bare-{topic}",
                         "enable.partition.eof": True, "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    pending, n = set(range(partitions)), 0
    while pending:
        for m in consumer.consume(100_000, 0.2):
            if m.error() is not None:
                pending.discard(m.partition())
            else:
                m.value()
                n += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return n, seconds


def create(db: millpond.Database, broker: Broker, topic: str, table: str = "ev") -> None:
    db.sql(f"CREATE TABLE {table} (id BIGINT, \"user\" TEXT, amount DOUBLE PRECISION, kind TEXT) WITH ("
           f"connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{broker.bootstrap}') "
           "FORMAT PLAIN ENCODE JSON")


def ingest(spark, broker: Broker, topic: str, messages: int) -> tuple[float, float, float]:
    """millpond's rate of taking the topic in (messages/s), the seconds of its first flush, and
    the seconds of millpond's own work in the ingest (decoding and appending: the rest is waiting
    for the broker)."""
    from millpond.connectors import kafka

    work = [0.0]
    take = kafka._Topic._take

    def timed(self, *a):
        started = time.perf_counter()
        try:
            return take(self, *a)
        finally:
            work[0] += time.perf_counter() - started

    kafka._Topic._take = timed
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            create(db, broker, topic)
            started = time.perf_counter()
            db.flush()
            flushed = time.perf_counter() - started
            status = db.sql("SELECT sum(rows) AS n, max(rows_per_second) AS rate FROM millpond_sources").to_pylist()[0]
            assert status["n"] == messages, status
            assert db.sql("SELECT count(*) AS n FROM ev").to_pylist()[0]["n"] == messages
            return status["rate"], flushed, work[0]
        finally:
            kafka._Topic._take = take
            db.close()


def freshness(spark, broker: Broker, samples: int, interval: float) -> list[float]:
    topic = broker.topic("fresh", partitions=2)
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, interval=interval)
        try:
            create(db, broker, topic)
            db.sql("CREATE MATERIALIZED VIEW latest AS SELECT max(id) AS top, count(*) AS n FROM ev")
            db.sql("CREATE MATERIALIZED VIEW per_user AS SELECT \"user\", count(*) AS n FROM ev GROUP BY \"user\"")
            db.flush()
            from confluent_kafka import Producer

            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
            lags = []
            for i in range(1, samples + 1):
                producer.produce(topic, json.dumps({"id": i, "user": f"u{i % 7}", "amount": 1.0, "kind": "x"}))
                producer.flush(10)
                sent = time.perf_counter()
                while True:
                    top = db.sql("SELECT top FROM latest").to_pylist()
                    if top and top[0]["top"] is not None and top[0]["top"] >= i:
                        break
                    if time.perf_counter() - sent > 60:
                        raise RuntimeError(f"message {i} not visible after 60 s")
                    time.sleep(0.01)
                lags.append(time.perf_counter() - sent)
                time.sleep(0.1)
            return lags
        finally:
            db.close()


DELTA_SQL = "SELECT region, count(*) AS n, sum(amount) AS total, avg(qty) AS mean_qty FROM {t} GROUP BY region"


def _delta_rows(first: int, rows: int):
    import numpy as np
    import pyarrow as pa

    ids = np.arange(first, first + rows, dtype=np.int64)
    return pa.table({"id": ids, "region": pa.array((ids % 50).astype(str)).cast(pa.string()),
                     "amount": (ids % 977) * 0.5, "qty": (ids % 13).astype(np.int32)})


def delta(spark, rows: int, rounds: int, change: str = "append") -> None:
    from deltalake import DeltaTable, write_deltalake

    update = change == "update"
    with tempfile.TemporaryDirectory() as folder:
        location = f"{folder}/ev"
        for start in range(0, rows, 1_000_000):
            write_deltalake(location, _delta_rows(start, min(1_000_000, rows - start)), mode="append",
                            configuration={"delta.enableChangeDataFeed": "true"} if update and not start else None)
        db = millpond.connect(f"{folder}/root", spark=spark, interval=None)
        try:
            started = time.perf_counter()
            key = " (PRIMARY KEY (id))" if update else ""
            db.sql(f"CREATE TABLE ev{key} WITH (connector = 'deltalake', location = '{location}')")
            db.sql(f"CREATE MATERIALIZED VIEW per_region AS {DELTA_SQL.format(t='ev')}")
            db.flush()
            first = time.perf_counter() - started
            refresh, recompute, next_id = [], [], rows
            for r in range(rounds):
                if update:  # 1% of the rows, a contiguous range of ids (one file rewritten)
                    lo = (r * 37 % 97) * (rows // 100)
                    DeltaTable(location).update({"amount": "amount + 1.5"},
                                                predicate=f"id >= {lo} AND id < {lo + rows // 100}")
                else:
                    write_deltalake(location, _delta_rows(next_id, rows // 100), mode="append")
                    next_id += rows // 100
                started = time.perf_counter()
                db.flush()
                refresh.append(time.perf_counter() - started)
                started = time.perf_counter()
                frame = spark.read.parquet(*DeltaTable(location).file_uris())
                frame.createOrReplaceTempView("ev_spark")
                want = spark.sql(DELTA_SQL.format(t="ev_spark")).collect()
                recompute.append(time.perf_counter() - started)
                got = {r["region"]: (r["n"], r["total"]) for r in db.sql("SELECT * FROM per_region").to_pylist()}
                assert got == {r["region"]: (r["n"], r["total"]) for r in want}, "the view differs from Spark's answer"
        finally:
            db.close()
    r, c = statistics.median(refresh), statistics.median(recompute)
    what = "updates (keyed, change data feed) of 1%" if update else "appends of 1%"
    print(f"Delta Lake source, {rows:,} rows, then {rounds} {what} ({rows // 100:,} rows) each:")
    print(f"  first epoch (snapshot read, appended, the view's backfill)  {first:.1f} s")
    print(f"  refresh after a 1% {'update' if update else 'append'}  {r:.3f} s   Spark recomputing over the table  {c:.3f} s   "
          f"{c / r:.1f}x faster (goal >= 20x)")


PG_TABLES = {"pgbench_accounts": ("aid INT, bid INT, abalance INT, PRIMARY KEY (aid)", "abalance"),
             "pgbench_tellers": ("tid INT, bid INT, tbalance INT, PRIMARY KEY (tid)", "tbalance"),
             "pgbench_branches": ("bid INT, bbalance INT, PRIMARY KEY (bid)", "bbalance"),
             "pgbench_history": ("hid BIGINT, tid INT, bid INT, aid INT, delta INT, PRIMARY KEY (hid)", "delta")}


def postgres(spark, scale: int, seconds: int, rate: int, interval: float) -> None:
    import subprocess

    import duckdb
    import psycopg
    import pyarrow as pa

    from tests import pg

    with pg.server(logical=True) as server, tempfile.TemporaryDirectory() as root:
        user = server.user or "postgres"
        pgbench = str(pg._postgres_bin() / "pgbench")
        base = ["-h", "127.0.0.1", "-p", str(server.port), "-U", user]
        subprocess.run([pgbench, "-i", "-q", "-s", str(scale), *base, "postgres"], check=True, capture_output=True)
        conn = psycopg.connect(host="127.0.0.1", port=server.port, user=user, dbname="postgres", autocommit=True)
        conn.execute("ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            for table, (columns, total) in PG_TABLES.items():
                name = table.removeprefix("pgbench_")
                db.sql(f"CREATE TABLE {name} ({columns}) WITH (connector = 'postgres-cdc', hostname = '127.0.0.1', "
                       f"port = '{server.port}', username = '{user}', database.name = 'postgres', table.name = '{table}')")
                db.sql(f"CREATE MATERIALIZED VIEW {name}_sum AS SELECT sum({total}) AS s, count(*) AS n FROM {name}")
            started = time.perf_counter()
            db.flush()
            print(f"PostgreSQL CDC, pgbench scale {scale} ({100_000 * scale:,} accounts): snapshot in "
                  f"{time.perf_counter() - started:.2f} s")
            db.close()
            db = millpond.connect(root, spark=spark, interval=interval)
            load = subprocess.Popen([pgbench, "-n", "-c", "2", "-j", "2", "-T", str(seconds), "-R", str(rate), *base,
                                     "postgres"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            wal, behind, split = [], [], 0
            while load.poll() is None:
                time.sleep(1)
                got = db.sql("SELECT a.s AS a, t.s AS t, b.s AS b, h.s AS h, h.n AS n FROM accounts_sum a, "
                             "tellers_sum t, branches_sum b, history_sum h").to_pylist()[0]
                split += len({got["a"], got["t"], got["b"], got["h"] or 0}) > 1
                upstream = conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0]
                behind.append(upstream - (got["n"] or 0))
                wal.append(int(conn.execute("SELECT max(pg_current_wal_lsn() - confirmed_flush_lsn) FROM "
                                            "pg_replication_slots").fetchone()[0]))
            out = load.stdout.read()
            tps = next((line.split("=")[1].split()[0] for line in out.splitlines() if line.startswith("tps")), "?")
            db.close()
            db = millpond.connect(root, spark=spark, interval=None)
            db.flush()
            equal = True
            for table, (columns, total) in PG_TABLES.items():
                name = table.removeprefix("pgbench_")
                cols = [c.split()[0] for c in columns.split(", ") if not c.startswith("PRIMARY")]
                cur = conn.execute(f"SELECT {', '.join(cols)} FROM {table}")
                up = pa.Table.from_pylist([dict(zip(cols, r)) for r in cur.fetchall()])
                mine = db.sql(f"SELECT {', '.join(cols)} FROM {name}")
                duck = duckdb.connect()
                duck.register("up", up)
                duck.register("mine", mine)
                diff = duck.execute("SELECT count(*) FROM ((SELECT * FROM up EXCEPT ALL SELECT * FROM mine) UNION ALL "
                                    "(SELECT * FROM mine EXCEPT ALL SELECT * FROM up))").fetchone()[0]
                view = db.sql(f"SELECT s, n FROM {name}_sum").to_pylist()[0]
                want = duck.execute(f"SELECT sum({total}), count(*) FROM up").fetchone()
                equal &= diff == 0 and (view["s"], view["n"]) == want
            first, last = wal[:10], wal[-10:]
            print(f"  pgbench {seconds} s at {rate} tps asked, {tps} tps made (2 clients); epochs every {interval}s")
            print(f"  slot lag behind the WAL: p50 {statistics.median(wal):,.0f} bytes, max {max(wal):,} "
                  f"(first 10 s max {max(first):,}, last 10 s max {max(last):,})")
            print(f"  history view behind pgbench: p50 {statistics.median(behind):,.0f} transactions, max {max(behind):,}"
                  f" (first 10 s max {max(behind[:10]):,}, last 10 s max {max(behind[-10:]):,}; "
                  f"{rate * interval:,.0f} a epoch's interval)")
            print(f"  samples where the views' sums disagreed (a split transaction): {split} of {len(wal)}")
            print(f"  after the load: every table and view equal to DuckDB over the upstream tables: {equal}")
            bounded = max(last) <= max(2 * max(first), 1_000_000)
            print(f"  goal: lag bounded ({'met' if bounded else 'NOT met'}), views equal ({'met' if equal else 'NOT met'})")
        finally:
            db.close()
            conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--only", choices=["kafka", "delta", "pg"])
    ap.add_argument("--pg-scale", type=int, default=1)
    ap.add_argument("--pg-seconds", type=int, default=60)
    ap.add_argument("--pg-rate", type=int, default=200)
    ap.add_argument("--delta-rows", type=int, default=10_000_000)
    ap.add_argument("--delta-rounds", type=int, default=3)
    ap.add_argument("--delta-change", choices=["append", "update"], default="append")
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    if args.only in (None, "pg"):
        postgres(spark, args.pg_scale, args.pg_seconds, args.pg_rate, args.interval)
        if args.only == "pg":
            spark.stop()
            return
    if args.only != "kafka":
        delta(spark, args.delta_rows, args.delta_rounds, args.delta_change)
        if args.only == "delta":
            spark.stop()
            return
    broker = Broker()
    threading.excepthook = lambda a: None
    try:
        bare_rates, rates, flushes, works = [], [], [], []
        for r in range(args.repeat):
            for who in ("bare", "millpond") if r % 2 == 0 else ("millpond", "bare"):
                topic = broker.topic(f"ev_{who}_{r}", partitions=args.partitions)
                _produce(broker, topic, args.messages, args.partitions)
                if who == "bare":
                    n, seconds = bare(broker, topic, args.partitions)
                    assert n == args.messages, n
                    bare_rates.append(n / seconds)
                else:
                    rate, flushed, work = ingest(spark, broker, topic, args.messages)
                    rates.append(rate)
                    flushes.append(flushed)
                    works.append(work)
        b, m = statistics.median(bare_rates), statistics.median(rates)
        print(f"Kafka JSON ingest, {args.messages:,} messages over {args.partitions} partitions (median of {args.repeat}):")
        print(f"  bare confluent-kafka consumer   {b:>12,.0f} messages/s")
        print(f"  millpond into a table's log     {m:>12,.0f} messages/s   ratio {m / b:.2f} (goal >= 0.50)")
        print(f"  millpond's own work (decode, conform, append; not waiting for the broker) "
              f"{args.messages / statistics.median(works):>12,.0f} messages/s of one core")
        print(f"  millpond's first flush (ingest + epoch)  {statistics.median(flushes):.2f} s "
              f"= {args.messages / statistics.median(flushes):,.0f} messages/s")
        lags = sorted(freshness(spark, broker, args.samples, args.interval))
        p50, p90 = statistics.median(lags), lags[int(0.9 * (len(lags) - 1))]
        print(f"Freshness, produce -> visible in a view, epochs every {args.interval}s ({args.samples} messages):")
        print(f"  p50 {p50:.2f} s ({p50 / args.interval:.1f} intervals; goal <= 2)   p90 {p90:.2f} s "
              f"({p90 / args.interval:.1f} intervals)")
    finally:
        broker.stop()
        spark.stop()


if __name__ == "__main__":
    main()

"""Queries over the PostgreSQL wire protocol (``db.serve()``) against the same queries through
``db.sql`` in this process, on one root with a view of ``--keys`` groups.

- ``direct``: ``db.sql("SELECT ... FROM per_g WHERE g = 17")`` in a loop (the baseline);
- ``wire, 1 client``: the same statement from psycopg with a parameter (``%s``), one connection;
- ``wire, N clients``: ``--clients`` connections in threads, each running its share.

The server runs ``--readers`` reader processes (default: the CPUs, at most 4; as ``millpond
serve``): they answer queries in parallel with the writer's process (:mod:`millpond.readers`).

Queries per second of each and the ratio to the baseline. With ``--epochs`` (the default), a
writer thread upserts 1,000 rows every 0.2 s and background epochs commit them every 0.5 s while
every measurement runs, so the figures include whatever readers and epochs cost each other
(queries read a pinned version and take no lock: they never wait for an epoch).

    .venv/bin/python benchmarks/serve.py [--queries 400] [--clients 8] [--rows 100000] [--keys 1000] [--readers N] [--no-epochs]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import numpy as np
import psycopg
import pyarrow as pa

import millpond
from millpond.spark.session import local_session

QUERY = "SELECT n, total FROM per_g WHERE g = {}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--readers", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--epochs", action=argparse.BooleanOptionalAction, default=True,
                    help="background epochs of a writer's upserts while queries run")
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, parallelism=2, interval=0.5 if args.epochs else None)
        db.sql("""CREATE TABLE t (k BIGINT PRIMARY KEY, g INT, v DOUBLE);
                  CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g""")
        rng = np.random.default_rng(0)
        db.insert("t", pa.table({"k": np.arange(args.rows), "g": rng.integers(0, args.keys, args.rows).astype(np.int32),
                                 "v": rng.random(args.rows)}))
        db.flush()
        keys = rng.integers(0, args.keys, args.queries)
        stop, writes = threading.Event(), [0]

        def write() -> None:
            w = np.random.default_rng(1)
            while not stop.wait(0.2):
                k = w.integers(0, args.rows, 1000)
                db.insert("t", pa.table({"k": k, "g": w.integers(0, args.keys, 1000).astype(np.int32),
                                         "v": w.random(1000)}))
                writes[0] += 1
        writer = threading.Thread(target=write)
        if args.epochs:
            writer.start()
        epoch0 = db.runtime.coordinator.manifest.epoch

        start = time.perf_counter()
        for g in keys:
            db.sql(QUERY.format(int(g)))
        direct = args.queries / (time.perf_counter() - start)

        with db.serve(port=0, readers=args.readers) as server:
            while server.readers is not None and server.readers.ready < args.readers:  # started
                time.sleep(0.1)
            latencies: list[float] = []

            def run(share: np.ndarray) -> None:
                with psycopg.connect(host="127.0.0.1", port=server.port, user="bench", dbname="millpond",
                                     autocommit=True) as conn:
                    for g in share:
                        t0 = time.perf_counter()
                        conn.execute(QUERY.format("%s"), (int(g),)).fetchall()
                        latencies.append(time.perf_counter() - t0)

            start = time.perf_counter()
            run(keys)
            one = args.queries / (time.perf_counter() - start)
            p50, p99, worst = (np.percentile(latencies, q) * 1000 for q in (50, 99, 100))

            threads = [threading.Thread(target=run, args=(share,)) for share in np.array_split(keys, args.clients)]
            start = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            many = args.queries / (time.perf_counter() - start)
        stop.set()
        if args.epochs:
            writer.join()
        epochs = db.runtime.coordinator.manifest.epoch - epoch0
        db.close()
    print(f"point queries on a view of {args.keys:,} groups "
          + (f"while {epochs} background epochs committed {writes[0]:,} upserts of 1,000 rows:" if args.epochs
             else "(nothing else running):"))
    print(f"  ({args.readers} reader processes)")
    print(f"  direct db.sql {direct:,.0f}/s")
    print(f"  over the wire, 1 client: {one:,.0f}/s (x{one / direct:.2f} of direct); latency p50 {p50:.1f} ms, "
          f"p99 {p99:.1f} ms, max {worst:.1f} ms")
    print(f"  over the wire, {args.clients} clients: {many:,.0f}/s (x{many / direct:.2f} of direct, "
          f"x{many / one:.2f} of 1 client)")
    spark.stop()


if __name__ == "__main__":
    main()

"""End to end at Spark's best: events generated in a loop, GROUP BY over 10,000 keys, 1M-row epochs.

Spark Structured Streaming reads its own ``rate-micro-batch`` source (``rowsPerBatch`` rows per
micro-batch: ``timestamp``, ``value``), aggregates ``COUNT(*), SUM(value)`` per ``value % keys``
in update mode with its default state store, and writes to the ``noop`` sink. Events/s = rows /
the micro-batch's ``triggerExecution`` (everything Spark does for the batch), median over the
measured batches.

millpond gets the same events from a generator in this process (numpy: ``value`` counting up,
``timestamp`` at the same rate), appends each batch with ``db.insert`` (a durable log append) and
commits one epoch with ``db.flush()``; the view is the same query. Events/s = rows / (insert +
flush), median. Run twice: on an ``APPEND ONLY`` table (the kind of table a stream of events is,
and what Spark assumes of every input) and on an ordinary table (which millpond also maintains
as a table of rows that may be deleted or updated, every epoch).

Both run on one ``local[2]`` session (``millpond.spark.session.local_session``), one after the
other; the last batch's result of each system is checked against numpy.

    .venv/bin/python benchmarks/rate.py [--rows 1000000] [--batches 6] [--keys 10000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import millpond
from millpond.spark.session import local_session

SQL = "SELECT value % {keys} AS k, COUNT(*) AS n, SUM(value) AS s FROM events GROUP BY value % {keys}"


def events(first: int, rows: int, per_second: int) -> pa.Table:
    value = np.arange(first, first + rows, dtype=np.int64)
    ts = (value * (1_000_000 // per_second)).astype("datetime64[us]")
    return pa.table({"ts": pa.array(ts, pa.timestamp("us")), "value": pa.array(value)})


def run_millpond(spark, rows: int, batches: int, keys: int, append_only: bool) -> list[float]:  # noqa: ANN001
    times = []
    with tempfile.TemporaryDirectory(prefix="rate-millpond-") as root:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            db.sql(f"CREATE TABLE events (ts TIMESTAMP, value BIGINT){' APPEND ONLY' if append_only else ''}; "
                   f"CREATE MATERIALIZED VIEW counts AS {SQL.format(keys=keys)}")
            for i in range(batches + 1):
                batch = events(i * rows, rows, rows)
                t0 = time.perf_counter()
                db.insert("events", batch)
                db.flush()
                if i:  # batch 0 is the warm-up
                    times.append(time.perf_counter() - t0)
            check("millpond", db.read("counts"), rows * (batches + 1), keys)
        finally:
            db.close()
    return times


def run_spark(spark, rows: int, batches: int, keys: int) -> list[float]:  # noqa: ANN001
    with tempfile.TemporaryDirectory(prefix="rate-spark-") as work:
        spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows) \
            .option("numPartitions", spark.sparkContext.defaultParallelism).load().createOrReplaceTempView("events")
        try:
            query = (spark.sql(SQL.format(keys=keys)).writeStream.format("noop").outputMode("update")
                     .option("checkpointLocation", os.path.join(work, "checkpoint")).start())
            deadline = time.time() + 600
            while len([p for p in query.recentProgress if p["numInputRows"]]) < batches + 1:
                if query.exception() is not None or time.time() > deadline:
                    raise RuntimeError(f"Spark query failed or stalled: {query.exception()}")
                time.sleep(0.2)
            spark.sparkContext.setLogLevel("OFF")  # stopping aborts the micro-batch in flight, which Spark logs
            query.stop()
            spark.sparkContext.setLogLevel("ERROR")
        finally:
            spark.catalog.dropTempView("events")
        progress = [p for p in query.recentProgress if p["numInputRows"]][:batches + 1]
        if any(p["numInputRows"] != rows for p in progress):
            raise RuntimeError(f"Spark's micro-batches read {[p['numInputRows'] for p in progress]} rows, not {rows}")
        return [p["durationMs"]["triggerExecution"] / 1000 for p in progress[1:]]


def check(system: str, result: pa.Table, total: int, keys: int) -> None:
    value = np.arange(total, dtype=np.int64)
    want = np.bincount(value % keys, minlength=keys)
    got = dict(zip(result.column("k").to_pylist(), result.column("n").to_pylist()))
    if len(got) != keys or any(got[k] != want[k] for k in range(keys)):
        raise SystemExit(f"{system}: wrong counts")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="events per batch (epoch / micro-batch)")
    ap.add_argument("--batches", type=int, default=6, help="measured batches, after one warm-up")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--systems", default="millpond-ao,millpond,spark")
    args = ap.parse_args()
    spark = local_session(cores="2")
    print(f"Spark {spark.version}, {spark.sparkContext.master}, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores", flush=True)
    runs = {}
    for system in args.systems.split(","):
        if system == "spark":
            runs[system] = run_spark(spark, args.rows, args.batches, args.keys)
        elif system in ("millpond", "millpond-ao"):
            runs[system] = run_millpond(spark, args.rows, args.batches, args.keys, system == "millpond-ao")
        else:
            raise SystemExit(f"unknown system {system!r}")
        print(f"  {system}: " + " ".join(f"{t:.2f}" for t in runs[system]) + " s per batch", flush=True)
    print(f"\n{args.batches} batches of {args.rows:,} events after a warm-up; GROUP BY over {args.keys:,} keys")
    print(f"{'system':<12} {'batch s':>8} {'events/s':>12}")
    for system, times in runs.items():
        med = statistics.median(times)
        print(f"{system:<12} {med:>8.2f} {args.rows / med:>12,.0f}")
    if "spark" in runs:
        base = statistics.median(runs["spark"])
        for system in [s for s in runs if s != "spark"]:
            print(f"ratio {system}/spark events/s: {base / statistics.median(runs[system]):.2f}")


if __name__ == "__main__":
    main()

"""Flows: a per-minute rollup as a flow, as a materialized view over TUMBLE, and in Spark
Structured Streaming; then what a trigger and a restart cost as the flow's windows pile up.

All in this process, on one ``local[2]`` SparkSession (``millpond.spark.session.local_session``).

Input: K batches (``--batches``, after a warm-up batch) of D readings (``--rows``) of ``--hosts``
hosts; batch i's event times fall in minute i, except 5% late readings, up to 30 minutes back.
The same Arrow tables go to every system.

- ``flow``: ``CREATE FLOW per_min SINK TO cpu_1m AS SELECT host, date_bin(INTERVAL '1 minute',
  ts) AS minute, avg(cpu), max(cpu), count(*) FROM metrics GROUP BY host, minute`` over an APPEND
  ONLY table; per batch ``db.insert`` then one epoch (a trigger, as the background loop runs
  them), timed. A flow's changes reach its sink table's rows in the next epoch, so each epoch
  also lands the previous trigger's changes in the sink (a final FLUSH, untimed, lands the last).
- ``view``: the same aggregation as ``CREATE MATERIALIZED VIEW ... FROM TUMBLE(metrics, ts,
  INTERVAL '1 minute') GROUP BY host, window_start``; same timing. The flow and the view run
  in turn, batch by batch (each on its own root), after three warm-up batches of each, so
  neither measures a colder JVM than the other.
- ``spark``: ``readStream.parquet`` (one file per batch, ``maxFilesPerTrigger=1``,
  ``Trigger.AvailableNow``), ``withWatermark("ts", "1 hour")``, ``groupBy(window(ts, "1
  minute"), host)``, ``outputMode("update")`` into a ``foreachBatch`` sink that upserts each
  micro-batch into a copy of the result on the driver (the work a flow's sink does). A batch's
  time is Spark's ``triggerExecution``. With ``append`` mode Spark would emit a window only once
  the watermark passes it; the flow and ``update`` mode emit updated windows every trigger.

Throughput = rows / median batch time. The three results are compared with a polars oracle.

Then, state size: a flow that already holds ``--history`` times more windows (hosts × minutes of
old data, loaded in one insert and settled by six untimed triggers) runs seven triggers touching the
same windows as a flow with little history (ratio of median trigger times), and a restart (``millpond.connect`` plus the first trigger, median of three) is timed on
both roots — state is read where it lies, never refilled.

    .venv/bin/python benchmarks/flows.py [--batches 10] [--rows 100000] [--hosts 200] [--history 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

import millpond
from millpond.spark.session import local_session

T0 = datetime(2026, 1, 1)
TABLE = "CREATE TABLE metrics (host VARCHAR, ts TIMESTAMP, cpu DOUBLE) APPEND ONLY"
FLOW = """CREATE FLOW per_min SINK TO cpu_1m AS
SELECT host, date_bin(INTERVAL '1 minute', ts) AS minute, avg(cpu) AS avg_cpu, max(cpu) AS max_cpu, count(*) AS n
FROM metrics GROUP BY host, minute"""
VIEW = """CREATE MATERIALIZED VIEW cpu_1m AS
SELECT host, window_start AS minute, avg(cpu) AS avg_cpu, max(cpu) AS max_cpu, count(*) AS n
FROM TUMBLE(metrics, ts, INTERVAL '1 minute') GROUP BY host, window_start"""
DDL = {"flow": FLOW, "view": VIEW}
SCHEMA = pa.schema([("host", pa.string()), ("ts", pa.timestamp("us")), ("cpu", pa.float64())])
WARM_UP = 6  # untimed triggers after a history is loaded


def batch(rng: np.random.Generator, minute: int, rows: int, hosts: int, late: float = 0.05) -> pa.Table:
    back = np.where(rng.random(rows) < late, rng.integers(1, 31, rows), 0)
    minutes = np.maximum(minute - back, 0)
    micros = (minutes * 60 + rng.integers(0, 60, rows)) * 1_000_000 + int(T0.timestamp() * 1_000_000)
    return pa.table({
        "host": pa.array([f"h{i}" for i in rng.integers(0, hosts, rows)]),
        "ts": pa.array(micros, pa.int64()).cast(pa.timestamp("us")),
        "cpu": pa.array(np.round(rng.random(rows) * 100, 2)),
    }, schema=SCHEMA)


def oracle(parts: list[pa.Table]) -> pl.DataFrame:
    df = pl.from_arrow(pa.concat_tables(parts))
    return _canonical(df.group_by("host", pl.col("ts").dt.truncate("1m").alias("minute")).agg(
        pl.col("cpu").mean().alias("avg_cpu"), pl.col("cpu").max().alias("max_cpu"), pl.len().alias("n")))


def _canonical(df: pl.DataFrame) -> pl.DataFrame:
    return df.select("host", pl.col("minute").cast(pl.Datetime("us")), "avg_cpu", "max_cpu",
                     pl.col("n").cast(pl.Int64)).sort("host", "minute")


def differs(got: pl.DataFrame, want: pl.DataFrame) -> pl.DataFrame | None:
    """Rows where ``got`` and ``want`` disagree (an average may differ in its last bits), or None."""
    both = got.join(want, on=["host", "minute"], how="full", coalesce=True, suffix="_want")
    bad = both.filter(pl.col("n").is_null() | pl.col("n_want").is_null() | (pl.col("n") != pl.col("n_want"))
                      | (pl.col("max_cpu") != pl.col("max_cpu_want"))
                      | ((pl.col("avg_cpu") - pl.col("avg_cpu_want")).abs() > 1e-9))
    return bad if bad.height else None


def run_millpond(spark, parts: list[pa.Table], roots: dict[str, str]) -> dict[str, tuple[list[float], pl.DataFrame]]:  # noqa: ANN001
    """Each of ``roots`` (name -> root) with its DDL, batch by batch in turn, so every system's
    batch i runs on the JVM as warm as the others' (the first batch warms up and is not timed)."""
    dbs = {name: millpond.connect(root, spark=spark, interval=None) for name, root in roots.items()}
    try:
        for name, db in dbs.items():
            db.sql(TABLE)
            db.sql(DDL[name])
        times: dict[str, list[float]] = {name: [] for name in dbs}
        for i, part in enumerate(parts):
            for name, db in dbs.items():
                db.insert("metrics", part)
                t0 = time.perf_counter()
                db.runtime.run_epoch()  # one trigger, as a running stream gets: it also lands the last one in a sink
                if i:
                    times[name].append(time.perf_counter() - t0)
        out = {}
        for name, db in dbs.items():
            db.flush()
            out[name] = times[name], _canonical(pl.from_arrow(db.sql("SELECT * FROM cpu_1m")))
        return out
    finally:
        for db in dbs.values():
            db.close()


class _Upsert:
    """foreachBatch: each micro-batch's updated windows upserted into a copy on the driver."""

    def __init__(self) -> None:
        self.rows: pl.DataFrame | None = None

    def __call__(self, df, batch_id: int) -> None:  # noqa: ANN001
        new = pl.from_arrow(df.toArrow())
        self.rows = new if self.rows is None else pl.concat([self.rows.join(new, on=["host", "minute"], how="anti"),
                                                             new])


def run_spark(spark, parts: list[pa.Table], workdir: str) -> tuple[list[float], pl.DataFrame]:  # noqa: ANN001
    from pyspark.sql import functions as F

    source = os.path.join(workdir, "source")
    os.makedirs(source)
    base = int(time.time()) - 10 * len(parts)
    for i, part in enumerate(parts):
        path = os.path.join(source, f"{i:05d}.parquet")
        pq.write_table(part, path)
        os.utime(path, (base + 10 * i, base + 10 * i))
    stream = spark.readStream.schema("host STRING, ts TIMESTAMP_NTZ, cpu DOUBLE").option("maxFilesPerTrigger", 1) \
        .parquet(source)
    stream = stream.withColumn("ts", F.col("ts").cast("timestamp"))  # an event time must be a TIMESTAMP (UTC here)
    agg = (stream.withWatermark("ts", "1 hour")
           .groupBy(F.window("ts", "1 minute").start.cast("timestamp_ntz").alias("minute"), "host")
           .agg(F.avg("cpu").alias("avg_cpu"), F.max("cpu").alias("max_cpu"), F.count(F.lit(1)).alias("n")))
    sink = _Upsert()
    query = (agg.writeStream.outputMode("update").option("checkpointLocation", os.path.join(workdir, "checkpoint"))
             .trigger(availableNow=True).foreachBatch(sink).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"Spark query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    if [p["numInputRows"] for p in progress] != [p.num_rows for p in parts]:
        raise RuntimeError("Spark's micro-batches did not read one batch each")
    return [p["durationMs"]["triggerExecution"] / 1000 for p in progress[1:]], _canonical(sink.rows)


def history(spark, root: str, minutes: int, hosts: int, rows: int, probes: int) -> tuple[float, float]:  # noqa: ANN001
    """A flow holding ``minutes`` × ``hosts`` windows (loaded in one insert, then :data:`WARM_UP`
    untimed triggers): the median time of ``probes`` triggers that each touch the same windows
    (``rows`` rows in one new minute), and the median time of three restarts (connect plus the
    first trigger of one more such batch)."""
    rng = np.random.default_rng(3)
    db = millpond.connect(root, spark=spark, interval=None)
    db.sql(TABLE)
    db.sql(FLOW)
    hosts_col = pa.array([f"h{i % hosts}" for i in range(minutes * hosts)])
    micros = np.repeat(np.arange(minutes) * 60_000_000, hosts) + int(T0.timestamp() * 1_000_000)
    db.insert("metrics", pa.table({"host": hosts_col, "ts": pa.array(micros, pa.int64()).cast(pa.timestamp("us")),
                                   "cpu": pa.array(np.ones(minutes * hosts))}, schema=SCHEMA))
    db.flush()
    times = []
    for i in range(WARM_UP + probes):  # the bulk-loaded history's one compaction falls in the warm-up
        db.insert("metrics", batch(rng, minutes + i, rows, hosts, late=0.0))
        t0 = time.perf_counter()
        db.flush()
        if i >= WARM_UP:
            times.append(time.perf_counter() - t0)
    db.close()
    restarts = []
    for i in range(3):
        t0 = time.perf_counter()
        db = millpond.connect(root, spark=spark, interval=None)
        db.insert("metrics", batch(rng, minutes + WARM_UP + probes + i, rows, hosts, late=0.0))
        db.flush()
        restarts.append(time.perf_counter() - t0)
        db.close()
    return statistics.median(times), statistics.median(restarts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--history", type=int, default=100)
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    rng = np.random.default_rng(1)
    parts = [batch(rng, 30 + i, args.rows, args.hosts) for i in range(args.batches + 1)]
    want = oracle(parts)
    results = {}
    with tempfile.TemporaryDirectory() as work:
        run_millpond(spark, parts[:3], {n: os.path.join(work, f"warm-up-{n}") for n in DDL})  # JVM, workers
        runs = run_millpond(spark, parts, {n: os.path.join(work, n) for n in DDL})
        runs["spark"] = run_spark(spark, parts, os.path.join(work, "spark"))
        for name, (times, got) in runs.items():
            if (bad := differs(got, want)) is not None:
                raise SystemExit(f"{name}: result differs from the oracle:\n{bad}")
            results[name] = times
        print(f"{args.batches} batches of {args.rows:,} readings ({args.hosts} hosts, 5% late by up to 30 min); "
              f"results equal the oracle ({want.height:,} windows)")
        print(f"{'system':<6} {'median s':>9} {'rows/s':>10}  batches")
        for name, times in results.items():
            med = statistics.median(times)
            print(f"{name:<6} {med:>9.2f} {args.rows / med:>10,.0f}  " + " ".join(f"{t:.2f}" for t in times))
        flow = statistics.median(results["flow"])
        print(f"flow throughput / view's: {statistics.median(results['view']) / flow:.2f}x; "
              f"/ Spark's: {statistics.median(results['spark']) / flow:.2f}x")
        small = history(spark, os.path.join(work, "small"), 10, args.hosts, args.rows // 10, 7)
        big = history(spark, os.path.join(work, "big"), 10 * args.history, args.hosts, args.rows // 10, 7)
        print(f"trigger touching {args.hosts} windows: {small[0]:.2f} s with {10 * args.hosts:,} windows in state, "
              f"{big[0]:.2f} s with {10 * args.history * args.hosts:,} ({big[0] / small[0]:.2f}x)")
        print(f"restart (connect + first trigger): {small[1]:.2f} s vs {big[1]:.2f} s ({big[1] / small[1]:.2f}x)")
    spark.stop()


if __name__ == "__main__":
    main()

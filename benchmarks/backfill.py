"""Batch mode: the first epoch of a view (or flow) created over a keyed table that already holds
data, reading the table's committed rows plus the log after them, against replaying the table's
whole log (what every new view did before; the baseline, run in the same process with batch
mode switched off).

Setup: a table ``t (k INT PRIMARY KEY, g INT, v DOUBLE)`` of ``--rows`` rows, then ``--updates``
rounds that rewrite every row (``UPDATE t SET v = v + 1``: each adds a retraction and an insertion
per row to the log), one epoch each. Then ``CREATE MATERIALIZED VIEW`` of a per-group
count/sum/max and one timed ``FLUSH`` (its first epoch); ABAB over ``--repeats`` fresh roots per
mode. Both results are checked equal.

    .venv/bin/python benchmarks/backfill.py [--rows 200000] [--updates 4] [--repeats 2]
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
from millpond.engine.coordinator import Coordinator
from millpond.spark.session import local_session

VIEW = "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM t GROUP BY g"


def run(spark, root: str, rows: int, updates: int, batch: bool) -> tuple[float, int, list]:  # noqa: ANN001
    db = millpond.connect(root, spark=spark, interval=None)
    try:
        db.sql("CREATE TABLE t (k INT PRIMARY KEY, g INT, v DOUBLE)")
        rng = np.random.default_rng(5)
        db.insert("t", pa.table({"k": pa.array(np.arange(rows, dtype=np.int32)),
                                 "g": pa.array(rng.integers(0, 1000, rows).astype(np.int32)),
                                 "v": pa.array(rng.random(rows))}))
        db.flush()
        for _ in range(updates):
            db.sql("UPDATE t SET v = v + 1")
            db.flush()
        log = db.runtime.channel(db.catalog.tables["t"]).end
        db.sql(VIEW)
        original = Coordinator._batch_starts
        if not batch:
            Coordinator._batch_starts = lambda self, *a: {}
        try:
            t0 = time.perf_counter()
            db.flush()
            seconds = time.perf_counter() - t0
        finally:
            Coordinator._batch_starts = original
        got = sorted((r["g"], r["n"], round(r["s"], 6), r["hi"]) for r in db.sql("SELECT * FROM per_g").to_pylist())
        return seconds, log, got
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    times: dict[bool, list[float]] = {True: [], False: []}
    results = {}
    with tempfile.TemporaryDirectory() as work:
        run(spark, os.path.join(work, "warm-up"), 10_000, 1, True)
        for i in range(args.repeats):
            for batch in (True, False):
                seconds, log, got = run(spark, os.path.join(work, f"{batch}-{i}"), args.rows, args.updates, batch)
                times[batch].append(seconds)
                results[batch] = got
    if results[True] != results[False]:
        raise SystemExit("batch mode and log replay disagree")
    fast, slow = statistics.median(times[True]), statistics.median(times[False])
    print(f"a view created over {args.rows:,} rows whose log holds {log:,} records ({args.updates} rewrites):")
    print(f"  first epoch, batch mode (rows + log after them): {fast:.2f} s   "
          + " ".join(f"{t:.2f}" for t in times[True]))
    print(f"  first epoch, whole log replayed:                 {slow:.2f} s   "
          + " ".join(f"{t:.2f}" for t in times[False]))
    print(f"  batch mode / replay: {slow / fast:.2f}x faster")
    spark.stop()


if __name__ == "__main__":
    main()

"""Does an epoch get slower as epochs accumulate? Many small epochs, timed in tenths.

One table and three views (a group-by, a join with a second table, a filter); every epoch
inserts one row (``INSERT ... VALUES``) and commits with ``FLUSH``, and the time of each
insert+flush is recorded. The report is the median per tenth of the run and the ratio of the
last tenth to the second (the first includes the JVM's warm-up): 1.0 means the per-epoch cost does not grow with the number of epochs
already run (manifest size, L0 files, compaction and garbage collection included). Last, the
floor in the same session: Spark's median time for a one-row job with one shuffle (a one-row
DataFrame grouped with ``count``/``sum`` and collected), and the epoch's median over it.

    .venv/bin/python benchmarks/epochs.py [--epochs 300] [--append-only]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import millpond
from pyspark.sql import functions as F
from millpond.spark.session import local_session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--append-only", action="store_true", help="declare the table APPEND ONLY")
    args = ap.parse_args()
    spark = local_session(cores="2")
    times = []
    with tempfile.TemporaryDirectory(prefix="epochs-") as root:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            db.sql(f"CREATE TABLE t (k INT, v INT){' APPEND ONLY' if args.append_only else ''}; "
                   "CREATE TABLE p (k INT PRIMARY KEY, name VARCHAR); INSERT INTO p VALUES (1, 'one'), (2, 'two'); "
                   "CREATE MATERIALIZED VIEW a AS SELECT k % 10 AS g, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k % 10; "
                   "CREATE MATERIALIZED VIEW b AS SELECT t.k, t.v, p.name FROM t JOIN p ON t.k % 3 = p.k; "
                   "CREATE MATERIALIZED VIEW c AS SELECT k, v FROM t WHERE v > 3; FLUSH")
            for i in range(args.epochs):
                t0 = time.perf_counter()
                db.sql(f"INSERT INTO t VALUES ({i}, {i % 7}); FLUSH")
                times.append(time.perf_counter() - t0)
            n = db.sql("SELECT n FROM a").column("n").to_pylist()
            if sum(n) != args.epochs:
                raise SystemExit(f"view a counts {sum(n)} rows, expected {args.epochs}")
            manifest = db.runtime.coordinator.manifest
            files = sum(len(levels.files()) for levels in manifest.states.values())
        finally:
            db.close()
    floor = []
    for i in range(40):
        t0 = time.perf_counter()
        spark.createDataFrame([(i, i % 7)], "k INT, v INT").groupBy("k").agg(F.count("*"), F.sum("v")).collect()
        floor.append(time.perf_counter() - t0)
    tenth = max(1, len(times) // 10)
    medians = [statistics.median(times[i:i + tenth]) for i in range(0, tenth * 10, tenth)]
    print(f"{args.epochs} one-row epochs ({'APPEND ONLY' if args.append_only else 'ordinary'} table, 3 views); "
          f"median insert+flush per tenth of the run, s:")
    print("  " + " ".join(f"{m:.2f}" for m in medians))
    print(f"last tenth / second tenth: {medians[-1] / medians[1]:.2f}; overall median {statistics.median(times):.2f} s; "
          f"state files in the last manifest: {files}")
    base = statistics.median(floor[10:])
    print(f"Spark's one-row job with one shuffle: median {base:.3f} s; "
          f"a one-row epoch with 3 views / that job: {statistics.median(times) / base:.2f}")


if __name__ == "__main__":
    main()

"""Backfills in bounded epochs (``SET backfill_rows``, :mod:`millpond.engine.filling`) against a
backfill in one epoch (``SET backfill_rows = 0``, the baseline, run in the same process): how long
the views already in force wait for an epoch while a new view over a large table fills, and what
the bounded backfill costs in all.

Setup: a keyed table ``t (k INT PRIMARY KEY, g INT, v DOUBLE)`` of ``--rows`` rows, a dimension
``d (g INT PRIMARY KEY, name VARCHAR)``, and a live key-less table ``clicks`` with a view over it
in force. Then ``CREATE MATERIALIZED VIEW`` of ``t`` joined with ``d``, grouped by name; epochs run
back to back, each after 100 new clicks, until the view is filled. Printed per mode: the time to
fill it, the epochs it took, and the longest epoch — how stale the view over ``clicks`` can get
while the backfill runs. ABAB over ``--repeats`` fresh roots; both results are checked equal.

    .venv/bin/python benchmarks/bounded_backfill.py [--rows 4000000] [--backfill-rows 2000000] [--repeats 2] [--keyless]
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

VIEW = ("CREATE MATERIALIZED VIEW per_name AS SELECT d.name, count(*) AS n, sum(t.v) AS s, max(t.v) AS hi "
        "FROM t JOIN d ON t.g = d.g GROUP BY d.name")


def run(spark, root: str, rows: int, budget: int, keyless: bool) -> tuple[float, int, float, list]:  # noqa: ANN001
    db = millpond.connect(root, spark=spark, interval=None)
    try:
        db.sql(f"CREATE TABLE t (k INT{'' if keyless else ' PRIMARY KEY'}, g INT, v DOUBLE)")
        db.sql("CREATE TABLE d (g INT PRIMARY KEY, name VARCHAR)")
        db.sql("CREATE TABLE clicks (g INT, n BIGINT)")
        db.sql("CREATE MATERIALIZED VIEW live AS SELECT g, sum(n) AS n FROM clicks GROUP BY g")
        rng = np.random.default_rng(5)
        for start in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - start)
            db.insert("t", pa.table({"k": pa.array(np.arange(start, start + n, dtype=np.int32)),
                                     "g": pa.array(rng.integers(0, 1000, n).astype(np.int32)),
                                     "v": pa.array(rng.random(n))}))
        db.insert("d", pa.table({"g": pa.array(np.arange(1000, dtype=np.int32)),
                                 "name": pa.array([f"n{i % 97}" for i in range(1000)])}))
        db.flush()
        db.sql(f"SET backfill_rows = {budget}")
        clicks = pa.table({"g": pa.array(np.arange(100, dtype=np.int32)), "n": pa.array(np.ones(100, np.int64))})
        db.sql(VIEW)
        t0, epochs, longest = time.perf_counter(), 0, 0.0
        while True:
            db.insert("clicks", clicks)
            e0 = time.perf_counter()
            db.runtime.run_epoch()
            longest, epochs = max(longest, time.perf_counter() - e0), epochs + 1
            if db.runtime.populated("per_name"):
                break
        seconds = time.perf_counter() - t0
        got = sorted((r["name"], r["n"], round(r["s"], 6), r["hi"]) for r in db.sql("SELECT * FROM per_name").to_pylist())
        assert db.sql("SELECT sum(n) AS n FROM live").to_pylist() == [{"n": 100 * epochs}]
        return seconds, epochs, longest, got
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--backfill-rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--keyless", action="store_true", help="t without a key: its log read a capped range an epoch")
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    runs: dict[int, list[tuple[float, int, float]]] = {0: [], args.backfill_rows: []}
    results = {}
    with tempfile.TemporaryDirectory() as work:
        run(spark, os.path.join(work, "warm-up"), 20_000, 5_000, args.keyless)
        for i in range(args.repeats):
            for budget in runs:
                seconds, epochs, longest, got = run(spark, os.path.join(work, f"{budget}-{i}"), args.rows, budget,
                                                    args.keyless)
                runs[budget].append((seconds, epochs, longest))
                results[budget] = got
    if results[0] != results[args.backfill_rows]:
        raise SystemExit("the bounded backfill and the one-epoch backfill disagree")
    print(f"a view joining {args.rows:,} rows of {'key-less ' if args.keyless else ''}t with d, grouped, created beside a view in force "
          f"(median of {args.repeats}):")
    med = {b: tuple(statistics.median(r[i] for r in runs[b]) for i in range(3)) for b in runs}
    for budget, (seconds, epochs, longest) in med.items():
        label = "one epoch (backfill_rows = 0)" if budget == 0 else f"bounded (backfill_rows = {budget:,})"
        print(f"  {label:<36} filled in {seconds:6.2f} s over {epochs:3.0f} epochs; longest epoch {longest:6.2f} s")
    one, bounded = med[0], med[args.backfill_rows]
    print(f"longest epoch (how stale the view in force gets): {one[2] / bounded[2]:.1f}x shorter bounded; "
          f"time to fill: {bounded[0] / one[0]:.2f}x the one-epoch backfill's")


if __name__ == "__main__":
    main()

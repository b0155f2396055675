"""Per-epoch time at a fixed delta as the state grows: does cost follow the change?

Loads N visit rows into the shopping example's view (join + MAX), then runs epochs that each
append the same number of new visits, and reports the median epoch time per state size and
the ratio largest/smallest (target: near 1). Baseline and comparison run in one process.

    .venv/bin/python benchmarks/state_size.py [--sizes 100000,2000000] [--delta 10000] [--epochs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

import millpond
from millpond.spark.session import local_session

PRODUCTS = 1000
CATEGORIES = 20


def visits(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table({
        "product": pa.array(np.char.add("p", rng.integers(0, PRODUCTS, n).astype(str))),
        "user": pa.array(np.char.add("u", rng.integers(0, 100_000, n).astype(str))),
        "length": pa.array(rng.integers(0, 1000, n).astype(np.int32)),
    })


def run(spark, size: int, delta: int, epochs: int) -> dict:
    rng = np.random.default_rng(size)
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, interval=None)
        db.sql("""
            CREATE TABLE info  (product VARCHAR PRIMARY KEY, category VARCHAR);
            CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT);
            CREATE MATERIALIZED VIEW result AS
              SELECT category, MAX(length) AS max_length, COUNT(*) AS visits
              FROM info JOIN visit ON info.product = visit.product GROUP BY category;""")
        db.insert("info", pa.table({"product": [f"p{i}" for i in range(PRODUCTS)],
                                    "category": [f"c{i % CATEGORIES}" for i in range(PRODUCTS)]}))
        t0 = time.perf_counter()
        chunk = 500_000
        for start in range(0, size, chunk):
            db.insert("visit", visits(rng, min(chunk, size - start)))
        db.flush()
        load = time.perf_counter() - t0
        times = []
        for _ in range(epochs):
            db.insert("visit", visits(rng, delta))
            t0 = time.perf_counter()
            db.flush()
            times.append(time.perf_counter() - t0)
        total = db.sql("SELECT SUM(visits) AS n FROM result").column("n")[0].as_py()
        assert total == size + delta * epochs, (total, size, delta, epochs)
        db.close()
    return {"size": size, "load_s": load, "epoch_s": statistics.median(times), "epochs": times}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,2000000")
    ap.add_argument("--delta", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    spark = local_session()
    sizes = [int(s) for s in args.sizes.split(",")]
    run(spark, 10_000, args.delta, 1)  # warm up Spark and the Python workers
    results = [run(spark, s, args.delta, args.epochs) for s in sizes]
    print(f"\nfixed delta: {args.delta} new visits per epoch; view = join + MAX/COUNT group by")
    print(f"{'state rows':>12} {'load s':>8} {'epoch s (median)':>18}  epochs")
    for r in results:
        print(f"{r['size']:>12,} {r['load_s']:>8.1f} {r['epoch_s']:>18.2f}  "
              + " ".join(f"{t:.2f}" for t in r["epochs"]))
    ratio = results[-1]["epoch_s"] / results[0]["epoch_s"]
    print(f"ratio epoch time {sizes[-1]:,} / {sizes[0]:,} rows of state: {ratio:.2f} (target: near 1)")


if __name__ == "__main__":
    main()

"""Changes out: what keeping every epoch's changes costs an epoch, and how soon a subscriber gets
a committed epoch — in this process and in another (read-only) process.

All in this process, on one ``local[2]`` SparkSession, over one root:

- ``overhead``: the same epochs (``--batches`` inserts of ``--rows`` rows into a table with a
  primary key, a grouped view and a filtered view over it; every batch updates half its keys)
  with the changes kept (the default) and with the kept-changes writer replaced by a no-op,
  alternating ABBA (so periodic work, compaction every other epoch, falls on both); median epoch
  time of each and their ratio.
- ``latency``: epochs of ``--small`` rows; a subscriber thread (``db.subscribe``) and a subscriber
  process (``millpond.connect(root, read_only=True).subscribe``) note when each epoch's changes
  reach them; latency = that moment minus the moment the epoch's changes were written (just
  before its commit). Median and worst, in milliseconds; both poll every 50 ms (the default).

    .venv/bin/python benchmarks/changes.py [--batches 6] [--rows 100000] [--epochs 20] [--small 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

import millpond
from millpond.engine.changefeed import ChangeFeed
from millpond.spark.session import local_session

SCHEMA = """CREATE TABLE t (k BIGINT PRIMARY KEY, g INT, v DOUBLE);
CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g;
CREATE MATERIALIZED VIEW big AS SELECT k, v FROM t WHERE v > 0.9"""

SUBSCRIBER = """
import json, sys, time, millpond
db = millpond.connect(sys.argv[1], read_only=True)
for change in db.subscribe("per_g", int(sys.argv[2]), timeout=float(sys.argv[3])):
    print(json.dumps([change["_epoch"][0].as_py(), time.time()]), flush=True)
"""


def rows(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    keys = np.concatenate([np.arange(start, start + n // 2), rng.integers(0, max(start, 1), n - n // 2)])
    return pa.table({"k": keys.astype(np.int64), "g": rng.integers(0, 1000, n).astype(np.int32),
                     "v": rng.random(n)})


def overhead(spark, batches: int, n: int) -> tuple[float, float]:  # noqa: ANN001
    real = ChangeFeed.write
    times = {"kept": [], "not kept": []}
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
        db.sql(SCHEMA)
        rng = np.random.default_rng(1)
        db.insert("t", rows(rng, 0, n))
        db.flush()  # warm-up
        for i in range(2 * batches):
            mode = "kept" if i % 4 in (0, 3) else "not kept"  # ABBA: no mode always follows the other
            ChangeFeed.write = real if mode == "kept" else (lambda self, *a, **k: None)
            db.insert("t", rows(rng, (i + 1) * n, n))
            start = time.perf_counter()
            db.flush()
            times[mode].append(time.perf_counter() - start)
        ChangeFeed.write = real
        db.close()
    return statistics.median(times["kept"]), statistics.median(times["not kept"])


def latency(spark, epochs: int, n: int) -> tuple[list[float], list[float]]:  # noqa: ANN001
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
        db.sql(SCHEMA)
        rng = np.random.default_rng(2)
        db.insert("t", rows(rng, 0, n))
        db.flush()
        start_epoch = db.epoch
        got: dict[int, float] = {}

        def follow() -> None:
            for change in db.subscribe("per_g", start_epoch, timeout=5):
                got[change["_epoch"][0].as_py()] = time.time()

        thread = threading.Thread(target=follow)
        thread.start()
        proc = subprocess.Popen([sys.executable, "-c", SUBSCRIBER, root, str(start_epoch), "5"],
                                stdout=subprocess.PIPE, text=True, env={**os.environ})
        time.sleep(3)  # the subscriber process is up and polling
        for i in range(epochs):
            db.insert("t", rows(rng, (i + 1) * n, n))
            db.flush()
            time.sleep(0.2)
        thread.join()
        out, _ = proc.communicate(timeout=120)
        other = dict(json.loads(line) for line in out.splitlines())
        feed = db.runtime.coordinator.changes
        written = {e: feed.entry(e).at for e in range(start_epoch + 1, db.epoch + 1)}
        db.close()
    here = [(got[e] - at) * 1000 for e, at in written.items() if e in got]
    there = [(other[e] - at) * 1000 for e, at in written.items() if e in other]
    assert len(here) == len(there) == len(written), (len(here), len(there), len(written))
    return here, there


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--small", type=int, default=10)
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    kept, bare = overhead(spark, args.batches, args.rows)
    print(f"epoch of {args.rows:,} rows (2 views): changes kept {kept:.3f} s, not kept {bare:.3f} s "
          f"(x{kept / bare:.2f})")
    here, there = latency(spark, args.epochs, args.small)
    for name, ms in (("this process", here), ("another process", there)):
        print(f"subscription latency, {name}: median {statistics.median(ms):.0f} ms, worst {max(ms):.0f} ms "
              f"({len(ms)} epochs)")
    spark.stop()


if __name__ == "__main__":
    main()

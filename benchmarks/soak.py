"""Does storage follow the live data, and does an epoch stay as cheap, after many epochs of churn?

Two tables of ``--rows`` rows — ``kv`` with a primary key, ``ev`` without one — and a view over
each (``SELECT g, count(*), sum(v) … GROUP BY g``), ``SET retention = '10 epochs'``. Every epoch
re-upserts 10% of the rows and deletes 1% (``kv``: ``db.insert`` of existing keys and ``DELETE …
WHERE k IN (…)``; ``ev``: ``UPDATE`` of ten ranges of keys and ``DELETE … WHERE k IN (…)``), inserts
as many new rows as it deleted, then ``FLUSH``es. Timed per epoch: the writes and the flush, and a
``SELECT count(*)`` of each table. At the end: the bytes under the root against the live rows'
bytes (Arrow, uncompressed), and for each timing the median of the last tenth of the run over the
second tenth (the first warms up): 1.0 is flat. Every view is checked against DuckDB at the end.

    .venv/bin/python benchmarks/soak.py [--rows 100000] [--epochs 100]    # the long run: 1000000, 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa

import millpond
from millpond.spark.session import local_session


def _bytes_under(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def _by_folder(root: str) -> str:
    sizes: dict[str, int] = {}
    for d, _, files in os.walk(root):
        rel = os.path.relpath(d, root).split(os.sep)
        top = "/".join(rel[:2]) if rel[0] == "log" else rel[0]
        sizes[top] = sizes.get(top, 0) + sum(os.path.getsize(os.path.join(d, f)) for f in files)
    return ", ".join(f"{k} {v / 1e6:.1f}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]) if v)


def _tenths(times: list[float]) -> tuple[float, float, float]:
    tenth = max(1, len(times) // 10)
    second = statistics.median(times[tenth:2 * tenth])
    last = statistics.median(times[-tenth:])
    return second, last, last / second


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    n, rng = args.rows, np.random.default_rng(0)
    spark = local_session(cores="2", shuffle_partitions=2)
    timings: dict[str, list[float]] = {k: [] for k in ("kv writes", "ev writes", "flush", "kv count(*)",
                                                        "ev count(*)")}
    with tempfile.TemporaryDirectory(prefix="soak-") as root:
        db = millpond.connect(root, spark=spark, parallelism=2, interval=None)
        try:
            db.sql("CREATE TABLE kv (k BIGINT PRIMARY KEY, g INT, v BIGINT); CREATE TABLE ev (k BIGINT, g INT, v BIGINT); "
                   "CREATE MATERIALIZED VIEW kv_g AS SELECT g, count(*) AS n, sum(v) AS s FROM kv GROUP BY g; "
                   "CREATE MATERIALIZED VIEW ev_g AS SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g; "
                   "SET retention = '10 epochs'")
            k = np.arange(n, dtype=np.int64)
            rows = pa.table({"k": k, "g": (k % 1000).astype(np.int32), "v": k})
            db.insert("kv", rows)
            db.insert("ev", rows)
            db.flush()
            live_keys, next_key = np.arange(n, dtype=np.int64), n
            start = time.perf_counter()
            for e in range(args.epochs):
                changed = rng.choice(live_keys, n // 10, replace=False)
                gone = rng.choice(live_keys, n // 100, replace=False)
                fresh = np.arange(next_key, next_key + gone.size, dtype=np.int64)
                next_key += gone.size
                t0 = time.perf_counter()
                db.insert("kv", pa.table({"k": changed, "g": (changed % 1000).astype(np.int32),
                                          "v": np.full(changed.size, e, np.int64)}))
                db.sql(f"DELETE FROM kv WHERE k IN ({', '.join(map(str, gone.tolist()))})")
                db.insert("kv", pa.table({"k": fresh, "g": (fresh % 1000).astype(np.int32), "v": fresh}))
                t1 = time.perf_counter()
                lows = rng.integers(0, next_key, 10)  # 10 ranges of keys, about 10% of the rows
                ranges = " OR ".join(f"(k >= {lo} AND k < {lo + n // 100})" for lo in lows.tolist())
                db.sql(f"UPDATE ev SET v = {e} WHERE {ranges}")
                db.sql(f"DELETE FROM ev WHERE k IN ({', '.join(map(str, gone.tolist()))})")
                db.insert("ev", pa.table({"k": fresh, "g": (fresh % 1000).astype(np.int32), "v": fresh}))
                t2 = time.perf_counter()
                db.flush()
                t3 = time.perf_counter()
                c_kv = db.sql("SELECT count(*) AS c FROM kv").column("c")[0].as_py()
                t4 = time.perf_counter()
                c_ev = db.sql("SELECT count(*) AS c FROM ev").column("c")[0].as_py()
                t5 = time.perf_counter()
                assert c_kv == c_ev == n, (c_kv, c_ev)
                live_keys = np.concatenate([np.setdiff1d(live_keys, gone, assume_unique=True), fresh])
                for name, t in zip(timings, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                    timings[name].append(t)
                if (e + 1) % max(1, args.epochs // 10) == 0:
                    print(f"  epoch {e + 1}: {time.perf_counter() - start:.0f} s, {_bytes_under(root) / 1e6:.1f} MB "
                          f"under the root", flush=True)
            con = duckdb.connect()
            for t, v in (("kv", "kv_g"), ("ev", "ev_g")):
                con.register(t, db.sql(f"SELECT * FROM {t}"))
                want = con.sql(f"SELECT g, count(*) AS n, sum(v) AS s FROM {t} GROUP BY g ORDER BY g").fetchall()
                got = sorted(tuple(r.values()) for r in db.sql(f"SELECT g, n, s FROM {v}").to_pylist())
                assert got == [(g, c, int(s)) for g, c, s in want], f"{v} differs from DuckDB"
            live = sum(db.sql(f"SELECT * FROM {x}").nbytes for x in ("kv", "ev", "kv_g", "ev_g"))
            total, folders = _bytes_under(root), _by_folder(root)
            starts = {t: db.runtime.channel(db.runtime.catalog.tables[t]).start for t in ("kv", "ev")}
        finally:
            db.close()
    print(f"{args.epochs} epochs of 10% re-upserts and 1% deletes over {n:,} rows per table (kv keyed, ev key-less)")
    print(f"bytes under the root {total / 1e6:.1f} MB, live rows {live / 1e6:.1f} MB (Arrow): "
          f"ratio {total / live:.2f} (target <= 3); logs start at kv {starts['kv']:,}, ev {starts['ev']:,}")
    print(f"  MB by folder: {folders}")
    print(f"{'timing (s, median)':20} {'second tenth':>13} {'last tenth':>11} {'last/second':>12}")
    for name, times in timings.items():
        second, last, ratio = _tenths(times)
        print(f"{name:20} {second:13.3f} {last:11.3f} {ratio:12.2f}")


if __name__ == "__main__":
    main()

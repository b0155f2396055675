"""Changing a view in place: ``ALTER MATERIALIZED VIEW v AS ...`` (the new definition backfilled
beside the old, then swapped in with the change old rows -> new rows kept for subscribers) against
the baseline a user has without it, ``DROP`` + ``CREATE`` (readers see no view between them, a
subscriber's changes break), run in the same process on fresh roots, ABAB.

Setup: a table ``t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)`` of ``--rows`` rows; a view with
``--groups`` groups, and a view over it. Timed: the statement(s) and the ``FLUSH`` that puts the new
definitions in force; of that, the swap itself (reading both definitions' rows for the change kept
for subscribers, and the catalog write). Both end states are checked equal.

    .venv/bin/python benchmarks/alter.py [--rows 1000000] [--groups 100000] [--repeats 2]
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
from millpond.engine import alter
from millpond.spark.session import local_session

OLD = "SELECT g, sum(v) AS s, count(*) AS n FROM t GROUP BY g"
NEW = "SELECT g, sum(v) AS s, count(*) AS n FROM t WHERE v % 10 <> 0 GROUP BY g"
OVER = "CREATE MATERIALIZED VIEW big AS SELECT g, s FROM v WHERE n > 1"


def run(spark, root: str, rows: int, groups: int, in_place: bool) -> tuple[float, float, list]:  # noqa: ANN001
    db = millpond.connect(root, spark=spark, interval=None)
    try:
        db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
        rng = np.random.default_rng(3)
        db.insert("t", pa.table({"k": pa.array(np.arange(rows, dtype=np.int64)),
                                 "g": pa.array(rng.integers(0, groups, rows)),
                                 "v": pa.array(rng.integers(0, 1000, rows))}))
        db.sql(f"CREATE MATERIALIZED VIEW v AS {OLD}")
        db.sql(OVER)
        db.flush()
        swapped = []
        original = alter.swap

        def timed(rt):  # noqa: ANN001, ANN202
            t = time.perf_counter()
            out = original(rt)
            if out:
                swapped.append(time.perf_counter() - t)
            return out
        alter.swap = timed
        try:
            t0 = time.perf_counter()
            if in_place:
                db.sql(f"ALTER MATERIALIZED VIEW v AS {NEW}")
            else:
                db.sql("DROP MATERIALIZED VIEW big; DROP MATERIALIZED VIEW v")
                db.sql(f"CREATE MATERIALIZED VIEW v AS {NEW}")
                db.sql(OVER)
            db.flush()
            seconds = time.perf_counter() - t0
        finally:
            alter.swap = original
        got = sorted(tuple(r.values()) for r in db.sql("SELECT * FROM big").to_pylist())
        return seconds, sum(swapped), got
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    times: dict[bool, list[float]] = {True: [], False: []}
    swaps: list[float] = []
    results = {}
    with tempfile.TemporaryDirectory() as work:
        run(spark, os.path.join(work, "warm-up"), 10_000, 1_000, True)
        for i in range(args.repeats):
            for in_place in (True, False):
                seconds, swap, got = run(spark, os.path.join(work, f"{in_place}-{i}"), args.rows, args.groups, in_place)
                times[in_place].append(seconds)
                results[in_place] = got
                if in_place:
                    swaps.append(swap)
    if results[True] != results[False]:
        raise SystemExit("ALTER and DROP + CREATE disagree")
    a, b = statistics.median(times[True]), statistics.median(times[False])
    print(f"a view of {args.groups:,} groups over {args.rows:,} rows, and a view over it, given a new definition:")
    print(f"  ALTER MATERIALIZED VIEW + FLUSH (no gap):  {a:.2f} s   " + " ".join(f"{t:.2f}" for t in times[True]))
    print(f"    of which the swap (change kept, catalog): {statistics.median(swaps):.2f} s")
    print(f"  DROP + CREATE + FLUSH (a gap):              {b:.2f} s   " + " ".join(f"{t:.2f}" for t in times[False]))
    print(f"  ALTER / DROP+CREATE: {a / b:.2f}x the time")
    spark.stop()


if __name__ == "__main__":
    main()

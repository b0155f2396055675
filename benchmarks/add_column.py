"""Adding a column to a table: ``ALTER TABLE t ADD COLUMN c ... DEFAULT ...`` (one catalog write;
the rows from before read as the default, filled in by every reader) against the baseline a user
had without it — a new table with the column, ``INSERT INTO t2 SELECT ..., 'x' FROM t``, and the
views made again over it — run in the same process on fresh roots, ABAB.

Setup: a keyed table ``t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)`` of ``--rows`` rows (``--keyless``:
without the key, its rows are its log's records) and a view over it. Timed: the change itself (the ``ALTER``; the baseline's new table filled and its
epoch), then a new view grouping by the new column (its backfill reads every row: the added
column's default filled into each state block, or the column as stored). Both views' rows are
checked equal.

    .venv/bin/python benchmarks/add_column.py [--rows 1000000] [--repeats 2] [--keyless]
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

BY_C = "SELECT c, g, count(*) AS n, sum(v) AS s FROM {t} GROUP BY c, g"


def run(spark, root: str, rows: int, in_place: bool, keyed: bool) -> tuple[float, float, list]:  # noqa: ANN001
    db = millpond.connect(root, spark=spark, interval=None)
    key = " PRIMARY KEY" if keyed else ""
    try:
        db.sql(f"CREATE TABLE t (k BIGINT{key}, g BIGINT, v BIGINT)")
        rng = np.random.default_rng(3)
        db.insert("t", pa.table({"k": pa.array(np.arange(rows, dtype=np.int64)),
                                 "g": pa.array(rng.integers(0, 100, rows)),
                                 "v": pa.array(rng.integers(0, 1000, rows))}))
        db.sql("CREATE MATERIALIZED VIEW per_g AS SELECT g, sum(v) AS s FROM t GROUP BY g")
        db.flush()
        t0 = time.perf_counter()
        if in_place:
            db.sql("ALTER TABLE t ADD COLUMN c TEXT DEFAULT 'x'")
            table = "t"
        else:  # what a user did before: a new table, filled from the old one, and its views made again
            db.sql(f"CREATE TABLE t2 (k BIGINT{key}, g BIGINT, v BIGINT, c TEXT)")
            db.sql("INSERT INTO t2 SELECT k, g, v, 'x' FROM t")
            db.sql("CREATE MATERIALIZED VIEW per_g2 AS SELECT g, sum(v) AS s FROM t2 GROUP BY g")
            db.flush()
            table = "t2"
        changed = time.perf_counter() - t0
        t1 = time.perf_counter()
        db.sql(f"CREATE MATERIALIZED VIEW by_c AS {BY_C.format(t=table)}")
        db.flush()
        backfill = time.perf_counter() - t1
        got = sorted(tuple(r.values()) for r in db.sql("SELECT * FROM by_c").to_pylist())
        return changed, backfill, got
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--keyless", action="store_true", help="a table without a key (its rows are its log's records)")
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    changed: dict[bool, list[float]] = {True: [], False: []}
    backfill: dict[bool, list[float]] = {True: [], False: []}
    results: dict[bool, list] = {}
    for _ in range(args.repeats):
        for in_place in (True, False):  # ABAB
            with tempfile.TemporaryDirectory() as tmp:
                c, b, got = run(spark, os.path.join(tmp, "root"), args.rows, in_place, not args.keyless)
            changed[in_place].append(c)
            backfill[in_place].append(b)
            results[in_place] = got
    assert results[True] == results[False], "the two ways disagree"
    med = {k: {"changed": statistics.median(changed[k]), "backfill": statistics.median(backfill[k])} for k in changed}
    print(f"rows={args.rows:,} {'key-less' if args.keyless else 'keyed'} repeats={args.repeats} (medians)")
    print(f"ALTER TABLE ADD COLUMN:              {med[True]['changed']:8.3f} s   then a view over the column "
          f"{med[True]['backfill']:6.2f} s")
    print(f"new table + INSERT SELECT + view:    {med[False]['changed']:8.3f} s   then a view over the column "
          f"{med[False]['backfill']:6.2f} s")
    print(f"the change: {med[False]['changed'] / med[True]['changed']:.0f}x faster in place; the view's backfill "
          f"reading the filled default: {med[True]['backfill'] / med[False]['backfill']:.2f}x the stored column's")


if __name__ == "__main__":
    main()

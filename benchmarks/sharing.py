"""N views joining one large table on the same key: state bytes and per-epoch time as N grows,
with and without shared arrangements.

Tables: ``info`` (``--products`` rows, keyed by ``product``) and ``visit`` (``--visits`` rows,
keyed by ``id``). View i (i = 0 .. N-1): ``SELECT v.id, i.category, v.length FROM visit v JOIN
info i ON v.product = i.product WHERE v.length >= i`` — the same join, a different filter, so N
distinct views. *own*: every view keeps both join sides (millpond before indexes). *shared*:
``CREATE INDEX`` on ``info (product)`` and ``visit (product)`` first, so every view reads both
sides from the two indexes (its filter applied after the join) and keeps only its own rows.
After the load, ``--epochs`` epochs each insert ``--delta`` visits and update 1% of that many
info rows; each epoch's time is measured (``FLUSH``). Every view is checked against DuckDB over
the same input at the end. State bytes: the views' (``millpond_views``: join sides and rows) plus
the indexes' (``SHOW INDEXES``), each kept once; the tables' own rows are not counted.

    .venv/bin/python benchmarks/sharing.py [--views 1,5,20] [--products 100000] [--visits 100000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa

import millpond
from millpond.spark.session import local_session

VIEW = ("CREATE MATERIALIZED VIEW v{i} AS SELECT v.id, i.category, v.length FROM visit v "
        "JOIN info i ON v.product = i.product WHERE v.length >= {i}")


def info(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    return pa.table({"product": pa.array(np.char.add("p", ids.astype(str))),
                     "category": pa.array(np.char.add("c", rng.integers(0, 50, ids.size).astype(str)))})


def visits(rng: np.random.Generator, first: int, n: int, products: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(first, first + n), pa.int64()),
                     "product": pa.array(np.char.add("p", rng.integers(0, products, n).astype(str))),
                     "length": pa.array(rng.integers(0, 1000, n).astype(np.int32))})


def run(spark, n: int, args: argparse.Namespace, shared: bool) -> dict:  # noqa: ANN001
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            db.sql("CREATE TABLE info (product VARCHAR PRIMARY KEY, category VARCHAR)")
            db.sql("CREATE TABLE visit (id BIGINT PRIMARY KEY, product VARCHAR, length INT)")
            if shared:
                db.sql("CREATE INDEX info_product ON info (product)")
                db.sql("CREATE INDEX visit_product ON visit (product)")
            for i in range(n):
                db.sql(VIEW.format(i=i))
            db.insert("info", info(rng, np.arange(args.products)))
            db.insert("visit", visits(rng, 0, args.visits, args.products))
            t0 = time.perf_counter()
            db.flush()
            load = time.perf_counter() - t0
            times, first = [], args.visits
            for _ in range(args.epochs):
                db.insert("visit", visits(rng, first, args.delta, args.products))
                db.insert("info", info(rng, rng.choice(args.products, max(1, args.delta // 100), replace=False)))
                first += args.delta
                t0 = time.perf_counter()
                db.flush()
                times.append(time.perf_counter() - t0)
            views = db.sql("SELECT name, state_bytes FROM millpond_views")
            view_bytes = sum(views.column("state_bytes").to_pylist())
            index_bytes = sum(db.sql("SHOW INDEXES").column("state_bytes").to_pylist())
            ids = {f"o{v.id}." for v in db.catalog.views.values()}
            rows_bytes = sum(ref.size for sid, levels in db.runtime.coordinator.manifest.states.items()
                             if sid.endswith(".rows") and sid[:sid.index(".") + 1] in ids for ref in levels.files())
            _check(db, n)
        finally:
            db.close()
    return {"n": n, "load": load, "epoch": statistics.median(times), "view_bytes": view_bytes,
            "index_bytes": index_bytes, "bytes": view_bytes + index_bytes, "rows_bytes": rows_bytes}


def _check(db, n: int) -> None:  # noqa: ANN001
    """Every view equals DuckDB's join over the tables' rows as millpond holds them."""
    con = duckdb.connect()
    con.register("info", db.sql("SELECT * FROM info"))
    con.register("visit", db.sql("SELECT * FROM visit"))
    for i in range(n):
        want = con.sql(f"SELECT v.id, i.category, v.length FROM visit v JOIN info i ON v.product = i.product "
                       f"WHERE v.length >= {i} ORDER BY v.id").to_arrow_table()
        got = db.sql(f"SELECT * FROM v{i} ORDER BY id")
        if not got.equals(want.cast(got.schema)):
            raise SystemExit(f"view v{i} differs from DuckDB's join")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--views", default="1,5,20")
    ap.add_argument("--products", type=int, default=100_000)
    ap.add_argument("--visits", type=int, default=100_000)
    ap.add_argument("--delta", type=int, default=1_000)
    ap.add_argument("--epochs", type=int, default=5)
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    counts = [int(x) for x in args.views.split(",")]
    for shared in (False, True):  # warm-up
        run(spark, 1, argparse.Namespace(**{**vars(args), "products": 1000, "visits": 1000, "epochs": 2}), shared)
    results = {(shared, n): run(spark, n, args, shared) for n in counts for shared in (False, True)}
    print(f"{args.products:,} info rows, {args.visits:,} visits; per epoch {args.delta:,} visits and "
          f"{max(1, args.delta // 100):,} info updates; every view equals DuckDB's join")
    print(f"{'views':>5} {'mode':>6} {'views MB':>9} {'indexes MB':>11} {'total MB':>9} {'load s':>7} {'epoch s':>8}")
    for (shared, n), r in results.items():
        print(f"{n:>5} {'shared' if shared else 'own':>6} {r['view_bytes'] / 1e6:>9.1f} {r['index_bytes'] / 1e6:>11.1f} "
              f"{r['bytes'] / 1e6:>9.1f} {r['load']:>7.1f} {r['epoch']:>8.2f}")
    lo, hi = counts[0], counts[-1]
    for shared in (False, True):
        a, b = results[(shared, lo)], results[(shared, hi)]
        print(f"{'shared' if shared else 'own'}: {hi} views / {lo}: state {b['bytes'] / a['bytes']:.1f}x, "
              f"epoch time {b['epoch'] / a['epoch']:.1f}x")
    for n in counts:
        own, sh = results[(False, n)], results[(True, n)]
        print(f"{n} views: shared / own: state {sh['bytes'] / own['bytes']:.2f}, join state (all but the views' "
              f"rows) {(sh['bytes'] - sh['rows_bytes']) / max(1, own['bytes'] - own['rows_bytes']):.2f}; "
              f"epoch time {sh['epoch'] / own['epoch']:.2f}")
    spark.stop()

if __name__ == "__main__":
    main()

"""A three-way join as a delta join vs binary joins: state bytes and per-epoch time.

Tables: ``orders`` (``--orders`` rows: customer, product, qty), ``customers`` (``--customers``
rows: region) and ``products`` (``--products`` rows: category, price). View i (i = 0 .. N-1):
``SELECT o.o_id, c.region, p.category, o.qty * p.price FROM orders o JOIN customers c ON
o.customer = c.c_id JOIN products p ON o.product = p.p_id WHERE o.qty >= i``. *binary*: no
indexes — each view keeps both sides of ``orders ⋈ customers`` and of ``(orders ⋈ customers) ⋈
products``, the intermediate join included (millpond before delta joins). *delta*: indexes on
``orders (customer)``, ``orders (product)``, ``customers (c_id)``, ``products (p_id)`` first, so each
view is a delta join (``EXPLAIN``: six probes) and keeps no join state: each input's delta probes
the others' indexes. After the load, ``2 * --epochs`` epochs each insert ``--delta`` orders, and every
other one also updates 1% of that many customers and products; each epoch's time is measured
(``FLUSH``), apart for the two kinds (a delta join leaves out the terms of unchanged inputs). Every view
equals DuckDB's join at the end. State bytes: the views' (``millpond_views``) plus the indexes'
(``SHOW INDEXES``); the tables' own rows are not counted.

    .venv/bin/python benchmarks/delta_join.py [--views 1,5] [--orders 200000]
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

SELECT = ("SELECT o.o_id, c.region, p.category, o.qty * p.price AS amount FROM orders o "
          "JOIN customers c ON o.customer = c.c_id JOIN products p ON o.product = p.p_id WHERE o.qty >= {i}")
INDEXES = ["CREATE INDEX ON orders (customer)", "CREATE INDEX ON orders (product)",
           "CREATE INDEX ON customers (c_id)", "CREATE INDEX ON products (p_id)"]


def customers(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    return pa.table({"c_id": pa.array(ids, pa.int32()),
                     "region": pa.array(np.char.add("r", rng.integers(0, 20, ids.size).astype(str)))})


def products(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    return pa.table({"p_id": pa.array(ids, pa.int32()),
                     "category": pa.array(np.char.add("k", rng.integers(0, 50, ids.size).astype(str))),
                     "price": pa.array(rng.integers(1, 500, ids.size).astype(np.int32))})


def orders(rng: np.random.Generator, first: int, n: int, args: argparse.Namespace) -> pa.Table:
    return pa.table({"o_id": pa.array(np.arange(first, first + n), pa.int64()),
                     "customer": pa.array(rng.integers(0, args.customers, n).astype(np.int32)),
                     "product": pa.array(rng.integers(0, args.products, n).astype(np.int32)),
                     "qty": pa.array(rng.integers(0, 10, n).astype(np.int32))})


def run(spark, n: int, args: argparse.Namespace, delta: bool) -> dict:  # noqa: ANN001
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            db.sql("CREATE TABLE customers (c_id INT PRIMARY KEY, region VARCHAR)")
            db.sql("CREATE TABLE products (p_id INT PRIMARY KEY, category VARCHAR, price INT)")
            db.sql("CREATE TABLE orders (o_id BIGINT PRIMARY KEY, customer INT, product INT, qty INT)")
            for sql in INDEXES if delta else []:
                db.sql(sql)
            for i in range(n):
                db.sql(f"CREATE MATERIALIZED VIEW v{i} AS {SELECT.format(i=i)}")
                probes = "\n".join(db.sql(f"EXPLAIN MATERIALIZED VIEW v{i}").column("plan").to_pylist()).count("Probe #")
                if probes != (6 if delta else 0):
                    raise SystemExit(f"view v{i} has {probes} probes")
            db.insert("customers", customers(rng, np.arange(args.customers)))
            db.insert("products", products(rng, np.arange(args.products)))
            db.insert("orders", orders(rng, 0, args.orders, args))
            t0 = time.perf_counter()
            db.flush()
            load = time.perf_counter() - t0
            times, first = [], args.orders
            facts = []
            for e in range(2 * args.epochs):  # every other epoch changes the dimension tables too
                db.insert("orders", orders(rng, first, args.delta, args))
                few = max(1, args.delta // 100)
                if e % 2:
                    db.insert("customers", customers(rng, rng.choice(args.customers, few, replace=False)))
                    db.insert("products", products(rng, rng.choice(args.products, few, replace=False)))
                first += args.delta
                t0 = time.perf_counter()
                db.flush()
                (times if e % 2 else facts).append(time.perf_counter() - t0)
            view_bytes = sum(db.sql("SELECT state_bytes FROM millpond_views").column(0).to_pylist())
            index_bytes = sum(db.sql("SHOW INDEXES").column("state_bytes").to_pylist())
            _check(db, n)
        finally:
            db.close()
    return {"load": load, "epoch": statistics.median(times), "facts": statistics.median(facts),
            "view_bytes": view_bytes, "index_bytes": index_bytes,
            "bytes": view_bytes + index_bytes}


def _check(db, n: int) -> None:  # noqa: ANN001
    con = duckdb.connect()
    for t in ("orders", "customers", "products"):
        con.register(t, db.sql(f"SELECT * FROM {t}"))
    for i in range(n):
        want = con.sql(SELECT.format(i=i) + " ORDER BY o.o_id").to_arrow_table()
        got = db.sql(f"SELECT * FROM v{i} ORDER BY o_id")
        if not got.equals(want.cast(got.schema)):
            raise SystemExit(f"view v{i} differs from DuckDB's join")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--views", default="1,5")
    ap.add_argument("--orders", type=int, default=200_000)
    ap.add_argument("--customers", type=int, default=20_000)
    ap.add_argument("--products", type=int, default=5_000)
    ap.add_argument("--delta", type=int, default=1_000)
    ap.add_argument("--epochs", type=int, default=5)
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    small = argparse.Namespace(**{**vars(args), "orders": 2000, "customers": 200, "products": 50, "epochs": 2})
    for delta in (False, True):  # warm-up
        run(spark, 1, small, delta)
    counts = [int(x) for x in args.views.split(",")]
    results = {(delta, n): run(spark, n, args, delta) for n in counts for delta in (False, True)}
    print(f"{args.orders:,} orders, {args.customers:,} customers, {args.products:,} products; per epoch "
          f"{args.delta:,} orders, every other epoch also {max(1, args.delta // 100):,} customer and product "
          "updates; every view equals DuckDB's join")
    print(f"{'views':>5} {'joins':>6} {'views MB':>9} {'indexes MB':>11} {'total MB':>9} {'load s':>7} "
          f"{'orders epoch s':>15} {'all epoch s':>12}")
    for (delta, n), r in results.items():
        print(f"{n:>5} {'delta' if delta else 'binary':>6} {r['view_bytes'] / 1e6:>9.1f} {r['index_bytes'] / 1e6:>11.1f} "
              f"{r['bytes'] / 1e6:>9.1f} {r['load']:>7.1f} {r['facts']:>15.2f} {r['epoch']:>12.2f}")
    for n in counts:
        b, d = results[(False, n)], results[(True, n)]
        print(f"{n} view(s): delta / binary: state {d['bytes'] / b['bytes']:.2f} (the views' own "
              f"{d['view_bytes'] / b['view_bytes']:.2f}), epoch time {d['facts'] / b['facts']:.2f} (orders only), "
              f"{d['epoch'] / b['epoch']:.2f} (all three tables)")
    spark.stop()


if __name__ == "__main__":
    main()

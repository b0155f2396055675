"""A partial view where 1% of keys are read vs the same view kept whole: state bytes,
the latency of a query of a cold key (an upquery: an epoch that fills it) and of a warm one, and
the per-epoch time of maintaining each.

Tables: ``info`` (``--products`` rows, keyed by ``product``) and ``visit`` (``--visits`` rows over
those products, keyed by ``id``). The view: visits per product joined with its category —
``SELECT v.product, i.category, count(*), max(v.length), sum(v.length) FROM visit v JOIN info i ON
v.product = i.product GROUP BY v.product, i.category`` — *full*, or ``WITH (partial = true)`` by
``product``. After the load, 1% of the products are read: ``--cold`` of them one query each (each a
cold key: its first read is an upquery, timed), the rest in ``IN`` lists; then the ``--cold`` keys
again (warm, timed). Then ``--epochs`` epochs of ``--delta`` new visits each (``FLUSH``, timed). Every
key read from the partial view equals the full view's rows and DuckDB's over the same input.
State bytes: the view's (``millpond_views``), all of its state tables (join sides, aggregation,
rows, and the partial view's filled keys).

    .venv/bin/python benchmarks/partial.py [--products 20000] [--visits 200000]
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

QUERY = ("SELECT v.product, i.category, count(*) AS n, max(v.length) AS longest, sum(v.length) AS total "
         "FROM visit v JOIN info i ON v.product = i.product GROUP BY v.product, i.category")


def info(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table({"product": pa.array(np.char.add("p", np.arange(n).astype(str))),
                     "category": pa.array(np.char.add("c", rng.integers(0, 50, n).astype(str)))})


def visits(rng: np.random.Generator, first: int, n: int, products: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(first, first + n), pa.int64()),
                     "product": pa.array(np.char.add("p", rng.integers(0, products, n).astype(str))),
                     "length": pa.array(rng.integers(0, 1000, n).astype(np.int32))})


def _in(keys) -> str:  # noqa: ANN001
    return "product IN (" + ", ".join(f"'{k}'" for k in keys) + ")"


def run(spark, args: argparse.Namespace, partial: bool) -> dict:  # noqa: ANN001
    rng = np.random.default_rng(7)
    read = [f"p{k}" for k in rng.choice(args.products, max(args.cold, args.products // 100), replace=False)]
    with tempfile.TemporaryDirectory() as root:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            db.sql("CREATE TABLE info (product VARCHAR PRIMARY KEY, category VARCHAR)")
            db.sql("CREATE TABLE visit (id BIGINT PRIMARY KEY, product VARCHAR, length INT)")
            db.insert("info", info(rng, args.products))
            db.insert("visit", visits(rng, 0, args.visits, args.products))
            db.flush()
            db.sql(f"CREATE MATERIALIZED VIEW v {'WITH (partial = true) ' if partial else ''}AS {QUERY}")
            t0 = time.perf_counter()
            db.flush()
            create = time.perf_counter() - t0
            cold, warm, got = [], [], {}
            for k in read[:args.cold]:
                t0 = time.perf_counter()
                got[k] = db.sql(f"SELECT * FROM v WHERE product = '{k}'")
                cold.append(time.perf_counter() - t0)
            for i in range(args.cold, len(read), 50):
                db.sql(f"SELECT * FROM v WHERE {_in(read[i:i + 50])}")
            for k in read[:args.cold]:
                t0 = time.perf_counter()
                db.sql(f"SELECT * FROM v WHERE product = '{k}'")
                warm.append(time.perf_counter() - t0)
            times, first = [], args.visits
            for _ in range(args.epochs):
                db.insert("visit", visits(rng, first, args.delta, args.products))
                first += args.delta
                t0 = time.perf_counter()
                db.flush()
                times.append(time.perf_counter() - t0)
            state = db.sql("SELECT state_bytes FROM millpond_views WHERE name = 'v'").column(0)[0].as_py()
            result = db.sql(f"SELECT * FROM v WHERE {_in(read)}")
            _check(db, read, result)
        finally:
            db.close()
    return {"state": state, "create": create, "cold": statistics.median(cold), "warm": statistics.median(warm),
            "epoch": statistics.median(times), "result": result, "keys": len(read)}


def _check(db, keys: list[str], result: pa.Table) -> None:  # noqa: ANN001
    """The view's rows of ``keys`` equal DuckDB's over the tables' rows as millpond holds them."""
    con = duckdb.connect()
    con.register("info", db.sql("SELECT * FROM info"))
    con.register("visit", db.sql("SELECT * FROM visit"))
    want = con.sql(f"SELECT * FROM ({QUERY}) WHERE {_in(keys)} ORDER BY product").to_arrow_table()
    got = result.sort_by("product")
    if not got.equals(want.cast(got.schema)):
        raise SystemExit("the view differs from DuckDB's query for the keys read")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--products", type=int, default=20_000)
    ap.add_argument("--visits", type=int, default=200_000)
    ap.add_argument("--cold", type=int, default=10, help="keys read one query each, cold then warm (timed)")
    ap.add_argument("--delta", type=int, default=1_000)
    ap.add_argument("--epochs", type=int, default=5)
    args = ap.parse_args()
    spark = local_session(cores="2", shuffle_partitions=2)
    small = argparse.Namespace(**{**vars(args), "products": 1000, "visits": 5000, "epochs": 2, "cold": 2})
    for partial in (False, True):  # warm-up
        run(spark, small, partial)
    full, part = run(spark, args, False), run(spark, args, True)
    if not part["result"].sort_by("product").equals(full["result"].sort_by("product")):
        raise SystemExit("the partial view's rows differ from the full view's for the keys read")
    print(f"{args.products:,} products, {args.visits:,} visits; {part['keys']} keys read (1%); per epoch "
          f"{args.delta:,} new visits; the keys read equal the full view's rows and DuckDB's")
    print(f"{'view':>8} {'state MB':>9} {'create s':>9} {'cold query s':>13} {'warm query s':>13} {'epoch s':>8}")
    for name, r in (("full", full), ("partial", part)):
        print(f"{name:>8} {r['state'] / 1e6:>9.2f} {r['create']:>9.2f} {r['cold']:>13.3f} {r['warm']:>13.3f} "
              f"{r['epoch']:>8.2f}")
    print(f"partial / full: state {part['state'] / full['state']:.3f}, epoch time {part['epoch'] / full['epoch']:.2f}; "
          f"a cold key's first query {part['cold'] / part['warm']:.0f}x a warm one's")
    spark.stop()


if __name__ == "__main__":
    main()

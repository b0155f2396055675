"""Per changed row: one millpond epoch over a delta of D rows vs Spark's batch over the same D rows.

Views, each alone on a fresh root, over a table ``ev(k BIGINT, p BIGINT, v BIGINT)``
(ordinary, then ``APPEND ONLY``) and a 10,000-row dimension ``dim(p BIGINT, name VARCHAR)``:

- ``agg``:    SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k          (10,000 keys)
- ``max``:    SELECT k, max(v) AS m FROM ev GROUP BY k
- ``join``:   SELECT d.name, count(*) AS n, sum(e.v) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name
- ``filter``: SELECT k, p, v FROM ev WHERE v % 10 = 0

and the same shapes over the types real tables have (``ev`` gains ``price``, ``disc`` DECIMAL(12,2),
``x`` DOUBLE, ``ts`` TIMESTAMP, ``s`` VARCHAR): ``dec`` (a sum of a DECIMAL product per key),
``dbl`` (a DOUBLE sum and max), ``bucket`` (``date_trunc('hour', ts)`` groups), ``djoin`` (a
DECIMAL product summed over the join) and ``str`` (``upper``, ``length`` and ``LIKE``).

Per view and D: a warm-up epoch of D rows (state exists, JIT warm), then ``--repeat`` timed
epochs of D new rows each: ``db.insert`` (untimed, the log append) then ``db.flush()`` (timed:
the epoch). Spark, in the same session: the same SQL over the same D rows read from Parquet
(one file per delta, written before timing), its result written as Parquet (a recomputed view
is kept somewhere too), timed the same number of times. The ratio is millpond / Spark (lower is
better; ≤ 1.0 means maintaining costs no more per changed row than recomputing those rows). Per D,
a floor is printed first: Spark handing the D rows to a Python task that keeps nothing — what any
design pays that moves every changed row from the JVM into Python once.

Each millpond figure is printed per path (``--paths``, both by default: ``paths.py``): ``default``
(an epoch of up to 2,000,000 records runs its tasks in the driver's process) and ``cluster`` (every
epoch a Spark job, as on a cluster), each against the same Spark baseline; ``vs default`` is a
cluster epoch's time over the default path's.

Also printed, per timed epoch (medians): the bytes the driver received from the epoch's tasks, the
state kept (bytes of SSTs under the root at the end: a retractable ``max`` keeps every value, an
``APPEND ONLY`` one a value per group), and where the epoch's time went: ``build`` (the driver
building the DataFrames: py4j), ``job`` (the Spark job, planning and the driver's collect
included), ``post`` (the rest of ``flush``: netting the changelog, writing changes, the commit);
and, summed over the stateful tasks (which run two at a time), ``input`` (waiting for the JVM's
Arrow batches: the shuffle read and the transfer; for a task that reads the log itself,
``spark/fused.py``, reading and building its delta; a task chained after another waits for it),
``apply`` (the operator in Python) and ``write`` (encoding and writing state). Every view is checked against DuckDB over all rows inserted.

    .venv/bin/python benchmarks/per_row.py [--rows 100000,1000000] [--queries agg,max,join,filter,dec,dbl,bucket,djoin,str]
        [--kinds ordinary,append] [--paths default,cluster] [--repeat 3] [--no-eager]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import millpond
import paths
from ev_data import TYPED, delta_files, dimension
from millpond.spark.session import local_session

PROFILE = os.path.join(tempfile.gettempdir(), f"per-row-tasks-{os.getpid()}.jsonl")
os.environ["MILLPOND_PROFILE"] = PROFILE  # before Spark starts its Python workers: they inherit it
QUERIES = {
    "agg": "SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k",
    "max": "SELECT k, max(v) AS m FROM ev GROUP BY k",
    "join": "SELECT d.name, count(*) AS n, sum(e.v) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name",
    "filter": "SELECT k, p, v FROM ev WHERE v % 10 = 0",
    # the same shapes over the columns real tables have (``ev`` then has ev_data.TYPED's columns too)
    "dec": "SELECT k, count(*) AS n, sum(price * (1 - disc)) AS rev FROM ev GROUP BY k",
    "dbl": "SELECT k, sum(x) AS sx, max(x) AS mx FROM ev GROUP BY k",
    "bucket": "SELECT date_trunc('hour', ts) AS h, count(*) AS n, sum(price) AS s FROM ev GROUP BY date_trunc('hour', ts)",
    "djoin": "SELECT d.name, count(*) AS n, sum(e.price * e.disc) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name",
    "str": "SELECT k, upper(s) AS u, length(s) AS l FROM ev WHERE s LIKE 'a%'",
}
TYPED_QUERIES = {"dec", "dbl", "bucket", "djoin", "str"}


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def rows_of(t: pa.Table, cols: list[str]) -> list[tuple]:
    """``t``'s rows, sorted, numbers as 9 significant digits (a DOUBLE sum's last bits follow the
    order it was added in; DuckDB types decimal sums otherwise than PostgreSQL)."""
    def value(v):  # noqa: ANN001, ANN202
        return f"{float(v):.9g}" if isinstance(v, (float, Decimal)) else v
    return sorted(tuple(map(value, row)) for row in zip(*(t.column(c).to_pylist() for c in cols)))


def run_millpond(spark, query: str, kind: str, batches: list[pa.Table], dim: pa.Table) -> dict:
    with tempfile.TemporaryDirectory(prefix="per-row-") as root:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            typed = f", {TYPED}" if query in TYPED_QUERIES else ""
            db.sql(f"CREATE TABLE ev (k BIGINT, p BIGINT, v BIGINT{typed}){' APPEND ONLY' if kind == 'append' else ''}; "
                   "CREATE TABLE dim (p BIGINT PRIMARY KEY, name VARCHAR)")
            db.insert("dim", dim)
            db.sql(f"CREATE MATERIALIZED VIEW q AS {QUERIES[query]}")
            stats = getattr(db.runtime.coordinator.executor, "stats", {})  # (older millponds kept none)
            times, received, parts = [], [], []
            for i, batch in enumerate(batches):
                db.insert("ev", batch)
                before = dict(stats)
                open(PROFILE, "w").close()
                t0 = time.perf_counter()
                db.flush()
                elapsed = time.perf_counter() - t0
                if i:  # the first epoch warms up
                    times.append(elapsed)
                    received.append(stats.get("driver_bytes", 0) - before.get("driver_bytes", 0))
                    tasks = [json.loads(line) for line in open(PROFILE)]
                    build, job = (stats.get(k, 0) - before.get(k, 0) for k in ("build_s", "job_s"))
                    parts.append({"build": build, "job": job, "post": elapsed - build - job,
                                  **{k: sum(t.get(k, 0) for t in tasks) for k in ("input", "apply", "write")}})
            got = db.sql("SELECT * FROM q")
            state = du(os.path.join(root, "sst")) if os.path.isdir(os.path.join(root, "sst")) else 0
        finally:
            db.close()
    con = duckdb.connect()
    con.register("ev", pa.concat_tables(batches))
    con.register("dim", dim)
    want = con.sql(QUERIES[query]).to_arrow_table()
    cols = want.column_names
    if (a := rows_of(got, cols)) != (b := rows_of(want, cols)):
        diff = sorted(set(a) ^ set(b))[:4]
        raise SystemExit(f"{query} ({kind}): millpond's view differs from DuckDB's ({len(a)} vs {len(b)} rows; {diff})")
    return {"time": statistics.median(times), "driver": statistics.median(received), "state": state,
            "parts": {k: statistics.median(p[k] for p in parts) for k in parts[0]}}


def run_spark(spark, query: str, files: list[str], dim_file: str, out: str) -> float:
    spark.read.parquet(dim_file).createOrReplaceTempView("dim")
    times = []
    for i, f in enumerate(files):
        t0 = time.perf_counter()
        spark.read.parquet(f).createOrReplaceTempView("ev")
        spark.sql(QUERIES[query]).write.mode("overwrite").parquet(out)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _drain(batches):  # noqa: ANN001, ANN202 - a mapInArrow function: takes every row, emits none
    for _ in batches:
        pass
    return iter(())


def run_floor(spark, files: list[str]) -> float:
    """Spark reading the delta from Parquet, exchanging it and handing every row to a Python task
    that returns nothing: the least any design pays that moves each changed row into Python once."""
    times = []
    for i, f in enumerate(files):
        t0 = time.perf_counter()
        spark.read.parquet(f).repartition(2, "k").mapInArrow(_drain, "x BIGINT").collect()
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="100000,1000000")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--kinds", default="ordinary,append")
    ap.add_argument("--paths", default=",".join(paths.PATHS), help="comma-separated, of " + ",".join(paths.PATHS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-eager", action="store_true",
                    help="plan the views without eager aggregation (sql/planner/eager.py): the A/B baseline")
    args = ap.parse_args()
    on_paths = paths.parse(args.paths, ap)
    if args.no_eager:  # as CREATE planned them before (a stored plan's choice; see sql/plans.py)
        from millpond.sql import ddl
        plan_view = ddl.plan_view
        ddl.plan_view = lambda *a, **k: plan_view(*a, **{**k, "eager": False})
    spark = local_session(cores="2")
    dim = dimension()
    print(f"{'D':>9} {'query':<7} {'table':<9} {'path':<8} {'millpond s':>10} {'spark s':>8} {'ratio':>6} {'vs default':>10} "
          f"{'driver KB':>9} {'state MB':>8} | {'build':>5} {'job':>5} {'post':>5} | tasks: {'input':>5} "
          f"{'apply':>5} {'write':>5}")
    with tempfile.TemporaryDirectory(prefix="per-row-spark-") as tmp:
        dim_file = os.path.join(tmp, "dim.parquet")
        pq.write_table(dim, dim_file)
        for rows in map(int, args.rows.split(",")):
            queries = args.queries.split(",")
            batches, files = delta_files(tmp, rows, args.repeat + 1)
            typed = delta_files(tmp, rows, args.repeat + 1, typed=True) if TYPED_QUERIES & set(queries) else None
            floor = run_floor(spark, files)
            print(f"{rows:>9,} rows into Python once (Spark: Parquet -> exchange -> mapInArrow, no output): "
                  f"{floor:.3f} s", flush=True)
            for query in queries:
                b, f = typed if query in TYPED_QUERIES else (batches, files)
                base = run_spark(spark, query, f, dim_file, os.path.join(tmp, "out"))
                for kind in args.kinds.split(","):
                    times = {}
                    for path in on_paths:
                        with paths.on(path):
                            m = run_millpond(spark, query, kind, b, dim)
                        times[path] = m["time"]
                        p = m["parts"]
                        versus = f"{m['time'] / times['default']:>10.2f}" if path == "cluster" and "default" in times \
                            else f"{'':>10}"
                        print(f"{rows:>9,} {query:<7} {kind:<9} {path:<8} {m['time']:>10.3f} {base:>8.3f} "
                              f"{m['time'] / base:>6.2f} {versus} {m['driver'] / 1024:>9.1f} {m['state'] / 2**20:>8.1f} | "
                              f"{p['build']:>5.2f} {p['job']:>5.2f} {p['post']:>5.2f} | tasks: {p['input']:>5.2f} "
                              f"{p['apply']:>5.2f} {p['write']:>5.2f}", flush=True)


if __name__ == "__main__":
    main()

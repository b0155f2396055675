"""A prototype of Catalyst-native state, against millpond's Python operators and Spark's batch.

The question: does an operator whose state Spark itself reads and writes beat the Python
path? This prototype maintains two of ``per_row.py``'s views that way, over the same deltas:

- ``agg``:  SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k
- ``join``: SELECT d.name, count(*) AS n, sum(e.v) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name

State is Parquet runs that Spark's vectorized reader reads and Spark's writer writes, sorted by
key with a Parquet bloom filter on it: per epoch, one new run of the groups it changed (their
new ``n``, ``s``, and the epoch ``_ep``; a group's value is the one of its newest run), and for
the join one run of the delta's rows as the ``ev`` side's state (a later change to ``dim`` is
joined with it; ``dim``'s own side is a run written once). An epoch is one Spark job: the delta
(weights ``_w``, so deletes work as in millpond) joined with the other side's state by Catalyst,
grouped, joined with the groups' last values, and written — the new group values, the side's
run, and the view's changes (``-old``, ``+new``) — as one write partitioned by kind; the
"manifest" is the list of runs. What it leaves out, and a real design would need: compaction of
the group runs (a group's newest value is found among all runs: this prototype's epochs read
every run), the object-store commit, crash recovery.

Per view and D, the median of ``--repeat`` epochs after a warm-up: the prototype, Spark's batch
over the same D rows (as ``per_row.py``: Parquet in, result written), and the ratio. Every
prototype view is checked equal to DuckDB over all the deltas. Compare with ``per_row.py``'s
figures for millpond's Python operators (same deltas, same Spark batch).

    .venv/bin/python benchmarks/native.py [--rows 100000,1000000] [--queries agg,join] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

sys.path.insert(0, os.path.dirname(__file__))
from ev_data import delta_files, dimension  # noqa: E402
from per_row import QUERIES, rows_of, run_spark  # noqa: E402

from millpond.spark.session import local_session  # noqa: E402

GROUP = {"agg": "k", "join": "name"}


class NativeView:
    """One view maintained by Catalyst over Parquet runs under ``root``."""

    def __init__(self, spark, query: str, root: str, dim_file: str):  # noqa: ANN001
        self.spark, self.query, self.root = spark, query, root
        self.runs: list[str] = []  # the group runs, oldest first (the "manifest")
        self.epoch = 0
        if query == "join":  # dim's side: one run, written once, sorted by the join key
            self.dim_run = os.path.join(root, "dim")
            (spark.read.parquet(dim_file).sortWithinPartitions("p").write
             .option("parquet.bloom.filter.enabled#p", "true").option("parquet.bloom.filter.adaptive.enabled", "true")
             .parquet(self.dim_run))

    def step(self, delta_file: str) -> None:
        s, g = self.spark, GROUP[self.query]
        self.epoch += 1
        d = s.read.parquet(delta_file).selectExpr("*", "CAST(1 AS BIGINT) AS _w")
        if self.query == "join":
            dim = s.read.parquet(self.dim_run)
            side = d.selectExpr("p", "v", "_w")  # the ev side's state run: kept for later dim changes
            d = d.join(dim, "p")
        dagg = d.selectExpr(g, "_w", "v * _w AS sv").groupBy(g).sum("_w", "sv") \
            .selectExpr(g, "`sum(_w)` AS dn", "`sum(sv)` AS ds")
        if self.runs:  # the changed groups' last values: their newest run's
            old = (s.read.parquet(*self.runs).join(dagg.select(g), g, "leftsemi").groupBy(g)
                   .agg(F.max_by("n", "_ep").alias("on"), F.max_by("s", "_ep").alias("os")))
            merged = dagg.join(old, g, "left")
        else:
            merged = dagg.selectExpr("*", "CAST(NULL AS BIGINT) AS on", "CAST(NULL AS BIGINT) AS os")
        merged = merged.selectExpr(g, "on", "os", "coalesce(on, 0) + dn AS n", "coalesce(os, 0) + ds AS s")
        kinds = [
            merged.selectExpr("'run' AS kind", g, "n", "s", f"CAST({self.epoch} AS BIGINT) AS _ep",
                              "CAST(NULL AS BIGINT) AS p", "CAST(NULL AS BIGINT) AS v", "CAST(NULL AS BIGINT) AS _w"),
            merged.where("on IS NOT NULL AND on != n").selectExpr(
                "'change' AS kind", g, "on AS n", "os AS s", "CAST(NULL AS BIGINT) AS _ep",
                "CAST(NULL AS BIGINT) AS p", "CAST(NULL AS BIGINT) AS v", "CAST(-1 AS BIGINT) AS _w"),
            merged.where("n != 0 AND (on IS NULL OR on != n OR os != s)").selectExpr(
                "'change' AS kind", g, "n", "s", "CAST(NULL AS BIGINT) AS _ep",
                "CAST(NULL AS BIGINT) AS p", "CAST(NULL AS BIGINT) AS v", "CAST(1 AS BIGINT) AS _w"),
        ]
        if self.query == "join":
            kinds.append(side.selectExpr("'side' AS kind", f"CAST(NULL AS {'STRING' if g == 'name' else 'BIGINT'}) AS {g}",
                                         "CAST(NULL AS BIGINT) AS n", "CAST(NULL AS BIGINT) AS s",
                                         "CAST(NULL AS BIGINT) AS _ep", "p", "v", "_w"))
        out = kinds[0]
        for k in kinds[1:]:
            out = out.unionByName(k)
        path = os.path.join(self.root, f"epoch={self.epoch}")
        (out.sortWithinPartitions("kind", g, "p").write.partitionBy("kind")
         .option("parquet.bloom.filter.enabled#" + g, "true").option("parquet.bloom.filter.enabled#p", "true")
         .option("parquet.bloom.filter.adaptive.enabled", "true").parquet(path))  # sized to the file's keys
        self.runs.append(os.path.join(path, "kind=run"))

    def rows(self) -> pa.Table:
        g = GROUP[self.query]
        return duckdb.sql(
            f"SELECT {g}, n, s FROM (SELECT *, row_number() OVER (PARTITION BY {g} ORDER BY _ep DESC) AS r "
            f"FROM read_parquet({[os.path.join(r, '*.parquet') for r in self.runs]})) WHERE r = 1 AND n != 0"
        ).to_arrow_table()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="100000,1000000")
    ap.add_argument("--queries", default="agg,join")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    spark = local_session(cores="2")
    dim = dimension()
    print(f"{'D':>9} {'query':<6} {'native s':>8} {'spark s':>8} {'ratio':>6} {'state MB':>8}")
    with tempfile.TemporaryDirectory(prefix="native-") as tmp:
        dim_file = os.path.join(tmp, "dim.parquet")
        pq.write_table(dim, dim_file)
        for rows in map(int, args.rows.split(",")):
            batches, files = delta_files(tmp, rows, args.repeat + 1)
            for query in args.queries.split(","):
                base = run_spark(spark, query, files, dim_file, os.path.join(tmp, "out"))
                root = os.path.join(tmp, f"state-{query}-{rows}")
                view = NativeView(spark, query, root, dim_file)
                times = []
                for i, f in enumerate(files):
                    t0 = time.perf_counter()
                    view.step(f)
                    if i:
                        times.append(time.perf_counter() - t0)
                con = duckdb.connect()
                con.register("ev", pa.concat_tables(batches))
                con.register("dim", dim)
                want = con.sql(QUERIES[query]).to_arrow_table()
                if rows_of(view.rows(), want.column_names) != rows_of(want, want.column_names):
                    raise SystemExit(f"{query}: the prototype's view differs from DuckDB's")
                state = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
                t = statistics.median(times)
                print(f"{rows:>9,} {query:<6} {t:>8.3f} {base:>8.3f} {t / base:>6.2f} {state / 2**20:>8.1f}", flush=True)


if __name__ == "__main__":
    main()

"""Throughput: millpond vs Spark Structured Streaming on the same queries, input and session.

Two queries, each run on both systems in this process, on one ``local[2]`` SparkSession from
``millpond.spark.session.local_session`` (same config, same shuffle/state parallelism = 2):

- ``agg``:  SELECT user_bucket, COUNT(*), SUM(length), MAX(length) FROM visit GROUP BY user_bucket
- ``join``: SELECT visit.product, visitor, length, category FROM visit JOIN info ON product

Input: a warm-up batch, then K batches (``--batches``) of D visit rows each (``--rows``),
generated with numpy before anything is timed; the very same Arrow tables go to both systems.
For the join, ``info`` (one row per product, ``--products`` in all) arrives in K+1 slices, one
with every batch, while visits pick any product: a visit may arrive before its product's info
row, so both sides' state is exercised (a stored visit joins a later info row, and vice versa).

millpond: a fresh root per query; per batch ``db.insert(...)`` (a durable log append, timed as
"ingest") then ``db.flush()`` (one epoch, timed as "batch"). Three variants (``--systems``):

- ``millpond``: ordinary tables (rows may later be deleted or updated). millpond also maintains
  each *table* (``SELECT * FROM visit``) in the same epoch; Spark does not — that work is part of
  millpond's epoch and is counted.
- ``millpond-ao``: the tables are ``APPEND ONLY``, like Spark's streams: a table's log is its
  rows (no table state), and MAX keeps one value per group instead of a multiset.
- ``millpond-keyed`` (join only): ``info`` has a primary key, and every batch also upserts 10% of
  the products already sent (same category, so the join's result is unchanged while every
  upsert retracts and re-inserts its row). Spark has no keys or upserts: compare it with the
  key-less ``millpond`` run.

Spark Structured Streaming: a Parquet file source per table (``readStream.parquet(dir)``,
``maxFilesPerTrigger=1``). Each batch is one Parquet file per table (writing it is timed as
"ingest"; mtimes are set so files are taken in batch order); then one query runs with
``Trigger.AvailableNow``, i.e. one micro-batch per batch (file i of every table), back to back,
and stops. A batch's time is Spark's own ``triggerExecution`` of its micro-batch (the whole
trigger: listing, planning, the job, the sink, offset/commit logs); the script checks that
micro-batch i read exactly batch i of every table. Not a long-running query fed one file at a
time: the two sources of the join list their directories one after the other, so a trigger
often saw one table's new file without the other's and split a batch in two. The query is
built from the same SQL text over temp views of the streams. State store: Spark's
default (HDFS-backed: in memory, copied per version, plus checkpoint delta files on local
disk); ``--spark-state-store rocksdb`` runs Spark on RocksDB instead.

Sink (both queries): ``foreachBatch`` that collects the micro-batch's output to the driver as
Arrow and applies it to a driver-side copy of the result — upsert by group for ``agg``
(``outputMode("update")``), append for ``join`` (a stream-stream join allows only
``outputMode("append")``). This is the work millpond does for a view: each epoch computes the
view's changelog, collects it to the driver (``SparkExecutor.run``) and keeps the rows (as
state files). Not a memory sink: Spark's guide lists it for append and complete modes only, and
complete mode would re-emit every group each batch; not a no-op/count sink either, which would
skip shipping the output. The driver-side copy is also what the final check compares with
millpond's view.

Not measured on Spark because it is rejected: join followed by an aggregation needs append
mode with event-time watermarks (update mode refuses stream-stream joins), so the join is
compared without the grouped count.

At the end both systems' results are compared with each other and with a polars oracle over all
generated input; the script fails if any differs.

    .venv/bin/python benchmarks/throughput.py [--batches 8] [--rows 200000] [--queries agg,join]
        [--systems millpond,millpond-ao,millpond-keyed,spark] [--spark-state-store default|rocksdb]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

import millpond
from millpond.spark.session import local_session

AGG_SQL = ("SELECT user_bucket, COUNT(*) AS visits, SUM(length) AS total_length, MAX(length) AS max_length "
           "FROM visit GROUP BY user_bucket")
JOIN_SQL = ("SELECT visit.product, visit.visitor, visit.length, info.category "
            "FROM visit JOIN info ON visit.product = info.product")
VISIT_DDL = "CREATE TABLE visit (product VARCHAR, visitor VARCHAR, user_bucket INT, length INT)"
INFO_DDL = "CREATE TABLE info (product VARCHAR, category VARCHAR)"
VISIT_SCHEMA = pa.schema([("product", pa.string()), ("visitor", pa.string()),
                          ("user_bucket", pa.int32()), ("length", pa.int32())])
INFO_SCHEMA = pa.schema([("product", pa.string()), ("category", pa.string())])
CATEGORIES = 50
USERS = 1_000_000


# -- input ------------------------------------------------------------------------------------
def _labels(prefix: str, ids: np.ndarray) -> pa.Array:
    return pa.array(np.char.add(prefix, ids.astype(str)), pa.string())


def visits(rng: np.random.Generator, n: int, products: int, groups: int) -> pa.Table:
    users = rng.integers(0, USERS, n)
    return pa.table({
        "product": _labels("p", rng.integers(0, products, n)),
        "visitor": _labels("u", users),
        "user_bucket": pa.array((users % groups).astype(np.int32)),
        "length": pa.array(rng.integers(0, 1000, n).astype(np.int32)),
    }, schema=VISIT_SCHEMA)


def info_slices(rng: np.random.Generator, products: int, slices: int) -> list[pa.Table]:
    """One info row per product, in ``slices`` random slices (arriving one per batch)."""
    order = rng.permutation(products)
    return [pa.table({"product": _labels("p", part), "category": _labels("c", part % CATEGORIES)},
                     schema=INFO_SCHEMA) for part in np.array_split(order, slices)]


@dataclass
class Workload:
    query: str
    visit: list[pa.Table]  # [warm-up, batch 1..K]
    info: list[pa.Table] | None  # same length, join only

    @property
    def tables(self) -> dict[str, list[pa.Table]]:
        return {"visit": self.visit, **({"info": self.info} if self.info is not None else {})}


def make_workload(query: str, batches: int, rows: int, products: int, groups: int, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    vis = [visits(rng, rows, products, groups) for _ in range(batches + 1)]
    info = info_slices(rng, products, batches + 1) if query == "join" else None
    return Workload(query, vis, info)


def with_upserts(w: Workload, share: float = 0.1, seed: int = 2) -> Workload:
    """``w`` with every info slice after the first also re-sending ``share`` of the products sent
    before it (same category): upserts that change no result."""
    rng = np.random.default_rng(seed)
    info = [w.info[0]]
    for i in range(1, len(w.info)):
        sent = pa.concat_tables(w.info[:i])
        again = sent.take(pa.array(rng.choice(sent.num_rows, int(sent.num_rows * share), replace=False)))
        info.append(pa.concat_tables([w.info[i], again]))
    return Workload(w.query, w.visit, info)


# -- results ----------------------------------------------------------------------------------
@dataclass
class Timings:
    system: str
    ingest: list[float] = field(default_factory=list)
    batch: list[float] = field(default_factory=list)
    span: float = 0.0  # Spark: start of the first measured micro-batch to end of the last
    micro_batches: int = 0
    result: pl.DataFrame | None = None


def _canonical(query: str, df: pl.DataFrame) -> pl.DataFrame:
    if query == "agg":
        cols = ["user_bucket", "visits", "total_length", "max_length"]
        return df.select(cols).cast({c: pl.Int64 for c in cols}).sort("user_bucket")
    cols = ["product", "visitor", "length", "category"]
    return df.select(cols).cast({"length": pl.Int64}).sort(cols)


def oracle(w: Workload) -> pl.DataFrame:
    v = pl.from_arrow(pa.concat_tables(w.visit))
    if w.query == "agg":
        return v.group_by("user_bucket").agg(pl.len().alias("visits"), pl.col("length").sum().alias("total_length"),
                                             pl.col("length").max().alias("max_length"))
    i = pl.from_arrow(pa.concat_tables(w.info))
    return v.join(i, on="product", how="inner").select("product", "visitor", "length", "category")


# -- millpond ---------------------------------------------------------------------------------
def run_millpond(spark, w: Workload, workdir: str, variant: str = "millpond") -> Timings:  # noqa: ANN001
    t = Timings(variant)
    db = millpond.connect(os.path.join(workdir, "millpond"), spark=spark, interval=None)
    suffix = " APPEND ONLY" if variant == "millpond-ao" else ""
    info_ddl = INFO_DDL.replace("product VARCHAR", "product VARCHAR PRIMARY KEY") if variant == "millpond-keyed" \
        else INFO_DDL + suffix
    try:
        db.sql(";\n".join([VISIT_DDL + suffix, *([info_ddl] if w.info is not None else []),
                           f"CREATE MATERIALIZED VIEW result AS {AGG_SQL if w.query == 'agg' else JOIN_SQL}"]))
        for i in range(len(w.visit)):
            t0 = time.perf_counter()
            for name, parts in w.tables.items():
                db.insert(name, parts[i])
            t1 = time.perf_counter()
            reports = db.flush()
            t2 = time.perf_counter()
            assert len(reports) == 1, f"expected one epoch per batch, got {len(reports)}"
            if i:  # batch 0 is the warm-up
                t.ingest.append(t1 - t0)
                t.batch.append(t2 - t1)
                t.micro_batches += len(reports)
        t.result = pl.from_arrow(db.sql("SELECT * FROM result"))
    finally:
        db.close()
    return t


# -- Spark Structured Streaming ---------------------------------------------------------------
class _DriverView:
    """The foreachBatch sink: collects each micro-batch's output and applies it to a copy of
    the result on the driver (upsert by group for ``agg``, append for ``join``)."""

    def __init__(self, query: str):
        self.query = query
        self.parts: list[pa.Table] = []
        self.view: pl.DataFrame | None = None

    def __call__(self, df, batch_id: int) -> None:  # noqa: ANN001
        rows = pl.from_arrow(df.toArrow())
        if self.query == "join":
            self.parts.append(rows)
        elif self.view is None:
            self.view = rows
        else:
            self.view = pl.concat([self.view.join(rows, on="user_bucket", how="anti"), rows])

    def result(self) -> pl.DataFrame:
        if self.query == "join":
            return pl.concat(self.parts) if self.parts else pl.DataFrame()
        return self.view if self.view is not None else pl.DataFrame()


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
SPARK_SCHEMA = {"visit": "product STRING, visitor STRING, user_bucket INT, length INT",
                "info": "product STRING, category STRING"}


def run_spark(spark, w: Workload, workdir: str, state_store: str = "default") -> Timings:  # noqa: ANN001
    t = Timings("spark" if state_store == "default" else f"spark-{state_store}")
    batches = len(w.visit)
    dirs = {name: os.path.join(workdir, "source", name) for name in w.tables}
    base = int(time.time()) - 10 * batches
    for i in range(batches):
        t0 = time.perf_counter()
        for name, parts in w.tables.items():
            os.makedirs(dirs[name], exist_ok=True)
            path = os.path.join(dirs[name], f"{i:05d}.parquet")
            pq.write_table(parts[i], path)
            os.utime(path, (base + 10 * i, base + 10 * i))  # the source takes files in mtime order
        if i:
            t.ingest.append(time.perf_counter() - t0)
    for name in w.tables:
        spark.readStream.schema(SPARK_SCHEMA[name]).option("maxFilesPerTrigger", 1).parquet(dirs[name]) \
            .createOrReplaceTempView(name)
    sink = _DriverView(w.query)
    if state_store == "rocksdb":
        spark.conf.set(PROVIDER, ROCKSDB)  # read when the query starts; unset below
    try:
        query = (spark.sql(AGG_SQL if w.query == "agg" else JOIN_SQL).writeStream
                 .outputMode("update" if w.query == "agg" else "append")
                 .option("checkpointLocation", os.path.join(workdir, "checkpoint"))
                 .trigger(availableNow=True).foreachBatch(sink).start())
    finally:
        if state_store != "default":
            spark.conf.unset(PROVIDER)
        for name in w.tables:
            spark.catalog.dropTempView(name)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"Spark query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    got = [[src["numInputRows"] for src in p["sources"]] for p in progress]
    want = [[parts[i].num_rows for parts in w.tables.values()] for i in range(batches)]
    if got != want:
        raise RuntimeError(f"Spark's micro-batches read {got} rows per source, expected {want}")
    t.batch = [p["durationMs"]["triggerExecution"] / 1000 for p in progress[1:]]  # [0] is the warm-up
    starts = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() for p in progress[1:]]
    t.span = starts[-1] - starts[0] + t.batch[-1]  # checks that nothing big happens between triggers
    t.micro_batches = len(progress) - 1
    t.result = sink.result()
    return t


# -- report -----------------------------------------------------------------------------------
def _line(query: str, t: Timings, rows: int) -> str:
    med = statistics.median(t.batch)
    thr = rows * len(t.batch) / sum(t.batch)
    e2e = rows * len(t.batch) / (sum(t.batch) + sum(t.ingest))
    extra = f"  (first to last micro-batch {t.span:.1f} s, sum {sum(t.batch):.1f} s)" if t.span else ""
    return (f"{query:<5} {t.system:<13} {med:>8.2f} {min(t.batch):>6.2f} {max(t.batch):>6.2f} "
            f"{rows / med:>12,.0f} {thr:>12,.0f} {statistics.median(t.ingest):>8.3f} {e2e:>12,.0f} "
            f"{t.micro_batches:>4}  " + " ".join(f"{x:.2f}" for x in t.batch) + extra)


def check(query: str, results: dict[str, pl.DataFrame]) -> str:
    canon = {name: _canonical(query, df) for name, df in results.items()}
    base_name, base = next(iter(canon.items()))
    for name, df in canon.items():
        if df.shape != base.shape or not df.equals(base):
            diff = df.join(base, on=df.columns, how="anti").head(5)
            raise SystemExit(f"{query}: {name} ({df.height} rows) differs from {base_name} ({base.height} rows); "
                             f"e.g. rows only in {name}:\n{diff}")
    return f"{query}: " + " == ".join(canon) + f" ({base.height:,} rows each)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=8, help="measured batches (after one warm-up batch)")
    ap.add_argument("--rows", type=int, default=200_000, help="visit rows per batch")
    ap.add_argument("--groups", type=int, default=10_000, help="distinct user_bucket values (agg)")
    ap.add_argument("--products", type=int, default=20_000, help="products, i.e. info rows in all (join)")
    ap.add_argument("--queries", default="agg,join")
    ap.add_argument("--systems", default="millpond,millpond-ao,millpond-keyed,spark")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--spark-state-store", choices=["default", "rocksdb"], default="default",
                    help="Spark's state store provider (default: HDFS-backed, Spark's own default)")
    args = ap.parse_args()
    if not 1 <= args.batches <= 99:
        ap.error("--batches: 1 to 99 (Spark keeps the progress of the last 100 micro-batches)")
    spark = local_session(cores="2")
    print(f"Spark {spark.version}, master {spark.sparkContext.master}, "
          f"shuffle partitions {spark.conf.get('spark.sql.shuffle.partitions')}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    lines, checks = [], []
    for query in args.queries.split(","):
        w = make_workload(query, args.batches, args.rows, args.products, args.groups, args.seed)
        runs = {}
        for system in args.systems.split(","):
            if system == "millpond-keyed" and query != "join":
                continue
            with tempfile.TemporaryDirectory(prefix=f"throughput-{query}-{system}-") as workdir:
                if system == "spark":
                    runs[system] = run_spark(spark, w, workdir, args.spark_state_store)
                elif system == "millpond-keyed":
                    runs[system] = run_millpond(spark, with_upserts(w), workdir, system)
                elif system in ("millpond", "millpond-ao"):
                    runs[system] = run_millpond(spark, w, workdir, system)
                else:
                    raise SystemExit(f"unknown system {system!r} (millpond, millpond-ao, millpond-keyed, spark)")
            print(f"  {query} on {system}: batches " + " ".join(f"{x:.2f}" for x in runs[system].batch)
                  + f" (load average {os.getloadavg()[0]:.1f})", flush=True)
        for t in runs.values():
            lines.append(_line(query, t, args.rows))
        for mine, base in (("millpond", "spark"), ("millpond-ao", "spark"), ("millpond-keyed", "millpond")):
            if {mine, base} <= set(runs):
                m, b = (statistics.median(runs[x].batch) for x in (mine, base))
                me, be = (sum(runs[x].batch) + sum(runs[x].ingest) for x in (mine, base))
                lines.append(f"{query:<5} ratio {mine}/{base}: batch time {m / b:.2f}, throughput {b / m:.2f}, "
                             f"end to end (ingest + batch) {me / be:.2f}")
        checks.append(check(query, {**{t.system: t.result for t in runs.values()}, "oracle": oracle(w)}))
    print(f"\n{args.batches} batches of {args.rows:,} visit rows after one warm-up batch; "
          f"agg over {args.groups:,} groups; join over {args.products:,} products (info arrives in "
          f"{args.batches + 1} slices)")
    print(f"{'query':<5} {'system':<13} {'batch s':>8} {'min':>6} {'max':>6} {'rows/s(med)':>12} "
          f"{'rows/s(all)':>12} {'ingest s':>8} {'rows/s(e2e)':>12} {'mb':>4}  per-batch s")
    for line in lines:
        print(line)
    print("(batch s: median time per batch (millpond: flush(); Spark: triggerExecution); rows = visit rows; "
          "rows/s(all) = all measured rows / sum of batch times; e2e adds the ingest time (millpond insert, "
          "Spark Parquet write); mb = epochs / micro-batches run)")
    for c in checks:
        print("check", c)


if __name__ == "__main__":
    main()

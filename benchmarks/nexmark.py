"""Nexmark: millpond vs Spark Structured Streaming, query by query, on the same events and session.

Events: ``millpond.nexmark.generate`` (person:auction:bid = 1:3:46, 10,000 events per second of
event time), a warm-up epoch and then ``--epochs`` epochs of ``--events-per-epoch`` events each,
generated and written as one Parquet file per table and epoch before anything is timed. Both
systems run on one ``local[2]`` session (``millpond.spark.session.local_session``), one query at
a time, millpond first.

millpond: a fresh root per query, the three tables of ``nexmark.DDL`` (``APPEND ONLY``) and the
query as a materialized view; per epoch ``db.insert`` of the epoch's rows of every table (read
from the Parquet files, untimed) and ``db.flush()``. An epoch's time is insert + flush: the
durable append is how events reach millpond (Spark's equivalent, writing the Parquet files, is
done once for all queries and not timed).

Spark Structured Streaming: the same SQL (translated by sqlglot from PostgreSQL to Spark SQL)
over a Parquet file source per table (``maxFilesPerTrigger=1``), ``Trigger.AvailableNow``: one
micro-batch per epoch, checked to have read exactly that epoch's file of every table it reads. An
epoch's time is the micro-batch's ``triggerExecution``. Sink: ``foreachBatch`` collecting each
micro-batch's output to the driver as Arrow (the work millpond does for a view each epoch):
appended (``outputMode("append")``) or upserted by group (``update``, for q17). Windowed queries
(q5, q7, q8) are written with Spark's ``window()`` grouping (TUMBLE/HOP are not Spark SQL, and
only a grouping by ``window()`` carries the watermark), with a 0 s watermark on each stream (the
events are in order) in append mode, the only mode Spark allows for an aggregation followed by
a join. Append mode emits a window only once the watermark passes it, so after the measured
epochs one more, untimed micro-batch carries one far-future event per stream, which matches
nothing and closes every window of the measured events. Spark refuses the other queries; the
script tries each in append and in update mode and prints Spark's reason.

millpond runs on each path of ``--paths`` (both by default; ``paths.py``): ``default`` (an epoch of
up to 2,000,000 records runs its tasks in the driver's process) and ``cluster`` (every epoch a Spark
job, its tasks in Spark's Python workers, as on a cluster), each printed with its ratio to Spark.

Every result (millpond's view, Spark's driver-side copy) is checked equal to DuckDB running the
query over all events (``nexmark.duckdb_sql``, its AVG PostgreSQL's numeric quotient:
``tests/pg_numeric.averages_as_text``), as multisets: numerics as PostgreSQL prints them
(AVG of integers is a numeric quotient, at least 16 significant digits: millpond's and DuckDB's
texts must be equal), floats (Spark's AVG is a double) to 1e-9 relative; the script fails if any
differs.

    .venv/bin/python benchmarks/nexmark.py [--queries q0,q1,...] [--events-per-epoch 200000]
        [--epochs 3] [--systems millpond,spark] [--paths default,cluster] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot

import millpond
import paths
from millpond import nexmark
from millpond.serve.display import texts
from millpond.spark.session import local_session

TABLES = tuple(nexmark.SCHEMAS)
SPARK_SCHEMA = {name: ", ".join(f"{f.name} {'BIGINT' if f.type == pa.int64() else 'STRING' if f.type == pa.string() else 'TIMESTAMP'}"
                                for f in schema) for name, schema in nexmark.SCHEMAS.items()}
# The windowed queries with Spark's window() grouping: same rows and columns as nexmark.QUERIES.
SPARK_SQL = {
    "q5": """SELECT AuctionBids.auction, AuctionBids.num
             FROM (SELECT auction, COUNT(*) AS num, window AS w FROM bid
                   GROUP BY auction, window(date_time, '10 seconds', '2 seconds')) AuctionBids
             JOIN (SELECT MAX(num) AS maxn, w AS wc
                   FROM (SELECT COUNT(*) AS num, window AS w FROM bid
                         GROUP BY auction, window(date_time, '10 seconds', '2 seconds')) CountBids
                   GROUP BY w) MaxBids
               ON AuctionBids.w = MaxBids.wc AND AuctionBids.num >= MaxBids.maxn""",
    "q7": """SELECT B.auction, B.price, B.bidder, B.date_time
             FROM bid B
             JOIN (SELECT MAX(price) AS maxprice, window.end AS date_time FROM bid
                   GROUP BY window(date_time, '10 seconds')) B1
               ON B.price = B1.maxprice AND B.date_time BETWEEN B1.date_time - INTERVAL 10 SECONDS AND B1.date_time""",
    "q8": """SELECT P.id, P.name, P.w.start AS starttime
             FROM (SELECT id, name, window AS w FROM person GROUP BY id, name, window(date_time, '10 seconds')) P
             JOIN (SELECT seller, window AS w FROM auction GROUP BY seller, window(date_time, '10 seconds')) A
               ON P.id = A.seller AND P.w = A.w""",
}
WATERMARKED = {"q5", "q7", "q8"}
UPSERT_KEYS = {"q17": ["auction", "day"]}  # Spark's update mode: the groups a micro-batch replaces


# -- events -----------------------------------------------------------------------------------
@dataclass
class Events:
    root: str
    epochs: int  # warm-up included

    def path(self, table: str, epoch: int, *, closing: bool = False) -> str:
        return os.path.join(self.root, "closing" if closing else "source", table, f"{epoch:05d}.parquet")

    def epoch(self, epoch: int) -> dict[str, pa.Table]:
        return {t: pq.read_table(self.path(t, epoch)) for t in TABLES}


def write_events(root: str, epochs: int, per_epoch: int, seed: int) -> Events:
    """Every epoch's tables as Parquet files (mtimes in epoch order: the file source's order), and
    a ``closing`` copy of each table's folder with one more file: a far-future event."""
    ev = Events(root, epochs)
    base = int(time.time()) - 10 * (epochs + 1)
    last_ms = 0
    for e in range(epochs):
        for name, table in nexmark.generate(e * per_epoch, per_epoch, seed=seed).items():
            for closing in (False, True):
                path = ev.path(name, e, closing=closing)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if closing:
                    os.link(ev.path(name, e), path)
                else:
                    pq.write_table(table, path)
                    os.utime(path, (base + 10 * e, base + 10 * e))
            last_ms = max(last_ms, table.column("date_time").cast(pa.int64())[-1].as_py() // 1000)
    far = (last_ms // 10_000 + 360) * 10_000 + 1  # an hour on, past a window boundary: its own windows stay open
    for name, schema in nexmark.SCHEMAS.items():
        row = {f.name: [-1 if f.type == pa.int64() else "" if f.type == pa.string() else far * 1000] for f in schema}
        if name == "auction":
            row["seller"] = [-2]  # no sentinel person sells it
        path = ev.path(name, epochs, closing=True)
        pq.write_table(pa.table(row, schema=schema), path)
        os.utime(path, (base + 10 * epochs, base + 10 * epochs))
    return ev


# -- runs -------------------------------------------------------------------------------------
@dataclass
class Run:
    system: str
    epochs: list[float] = field(default_factory=list)  # measured epochs (warm-up excluded)
    ingest: list[float] = field(default_factory=list)
    result: pa.Table | None = None
    refused: str | None = None


def run_millpond(spark, query: str, ev: Events, workdir: str) -> Run:  # noqa: ANN001
    run = Run("millpond")
    db = millpond.connect(os.path.join(workdir, "millpond"), spark=spark, interval=None)
    try:
        db.sql(";\n".join([*nexmark.DDL, f"CREATE MATERIALIZED VIEW {query} AS {nexmark.QUERIES[query]}"]))
        for e in range(ev.epochs):
            tables = ev.epoch(e)
            t0 = time.perf_counter()
            for name, table in tables.items():
                db.insert(name, table)
            t1 = time.perf_counter()
            db.flush()
            t2 = time.perf_counter()
            if e:  # epoch 0 is the warm-up
                run.ingest.append(t1 - t0)
                run.epochs.append(t2 - t0)
        run.result = db.sql(f"SELECT * FROM {query}")
    finally:
        db.close()
    return run


def _offset(text: str | None) -> int:
    """A file source's offset: the number of the last file batch it covers (-1: none yet)."""
    return -1 if text in (None, "null") else json.loads(text)["logOffset"]


class _DriverCopy:
    """The foreachBatch sink: each micro-batch's output collected as Arrow and appended, or
    upserted by ``keys`` (update mode)."""

    def __init__(self, keys: list[str] | None):
        self.keys = keys
        self.parts: list[pl.DataFrame] = []

    def __call__(self, df, batch_id: int) -> None:  # noqa: ANN001
        rows = pl.from_arrow(df.toArrow())
        if self.keys and self.parts:
            self.parts = [pl.concat([self.parts[0].join(rows, on=self.keys, how="anti", nulls_equal=True), rows])]
        else:
            self.parts.append(rows)

    def result(self) -> pa.Table:
        return pl.concat(self.parts).to_arrow()  # foreachBatch runs for every micro-batch, empty ones too


def _tables(query: str) -> list[str]:
    """The Nexmark tables ``query`` reads (in a FROM, or as the first argument of TUMBLE/HOP)."""
    names = set()
    for t in sqlglot.parse_one(nexmark.QUERIES[query], read="postgres").find_all(sqlglot.exp.Table):
        names.add(t.this.expressions[0].name if isinstance(t.this, sqlglot.exp.Anonymous) else t.name)
    return [t for t in TABLES if t in names]


def run_spark(spark, query: str, ev: Events, workdir: str) -> Run:  # noqa: ANN001
    run = Run("spark")
    tables = _tables(query)
    closing = query in WATERMARKED
    sql = SPARK_SQL.get(query) or sqlglot.transpile(nexmark.QUERIES[query], read="postgres", write="spark")[0]
    if query in UPSERT_KEYS:
        attempts = ["update"]
    elif query in SPARK_SQL:
        attempts = ["append"]
    else:  # a refusal in append mode is tried in update mode too: Spark's reason in its most permissive mode
        attempts = ["append", "update"]
    for name in tables:
        source = spark.readStream.schema(SPARK_SCHEMA[name]).option("maxFilesPerTrigger", 1) \
            .parquet(os.path.dirname(ev.path(name, 0, closing=closing)))
        (source.withWatermark("date_time", "0 seconds") if closing else source).createOrReplaceTempView(name)
    stream, reasons = None, {}
    try:
        for mode in attempts:
            sink = _DriverCopy(UPSERT_KEYS.get(query) if mode == "update" else None)
            quiet = logging.getLogger("SQLQueryContextLogger")  # PySpark logs an AnalysisException with its stack
            quiet.disabled = True
            try:
                stream = (spark.sql(sql).writeStream.outputMode(mode)
                          .option("checkpointLocation", os.path.join(workdir, f"checkpoint-{mode}"))
                          .trigger(availableNow=True).foreachBatch(sink).start())
                break
            except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException: its first sentence is the reason
                reason = str(exc).split("\n")[0].split(";")[0].strip()
                reasons[mode] = reason.split(". ")[0].removesuffix(".")
            finally:
                quiet.disabled = False
        if stream is None:
            if len(set(reasons.values())) == 1:
                reasons = {"append/update": next(iter(reasons.values()))}
            run.refused = "; ".join(f"{mode}: {reason}" for mode, reason in reasons.items())
            return run
        if mode == "update" and query not in UPSERT_KEYS:
            raise SystemExit(f"{query}: Spark now accepts it in update mode; give its upsert keys in UPSERT_KEYS")
        stream.awaitTermination()
    finally:
        for name in tables:
            spark.catalog.dropTempView(name)
    if stream.exception() is not None:
        raise SystemExit(f"{query}: Spark query failed: {stream.exception()}")
    # a data micro-batch moves its sources' offsets (its input row count can be 0: Parquet
    # row groups that cannot match a filter are skipped); batch i must read file i of every source
    progress = [p for p in stream.recentProgress if any(_offset(s["startOffset"]) != _offset(s["endOffset"])
                                                         for s in p["sources"])]
    got = [[(_offset(s["startOffset"]), _offset(s["endOffset"])) for s in p["sources"]] for p in progress]
    want = [[(i - 1, i)] * len(tables) for i in range(ev.epochs + closing)]
    if got != want:
        raise SystemExit(f"{query}: Spark's micro-batches read files {got} of each source, expected {want}")
    run.epochs = [p["durationMs"]["triggerExecution"] / 1000 for p in progress[1:ev.epochs]]
    run.result = sink.result()
    return run


# -- checks -----------------------------------------------------------------------------------
def _numbers(t: pa.DataType) -> bool:
    return pa.types.is_decimal(t) or pa.types.is_floating(t)


def _canonical(table: pa.Table, numeric: set[int]) -> pl.DataFrame:
    """Columns by position; decimals as PostgreSQL prints them (a quotient, millpond's AVG, to its
    own display scale), integers as Int64, times without a zone; rows sorted (the ``numeric``
    columns by their value to 6 significant digits)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type):
            table = table.set_column(i, f.name, pa.array(texts(f, table.column(i)), pa.string()))
    df = pl.from_arrow(table.rename_columns([f"c{i}" for i in range(table.num_columns)]))
    casts = {}
    for name, dtype in df.schema.items():
        if dtype.is_float():
            casts[name] = pl.Float64
        elif dtype.is_integer():
            casts[name] = pl.Int64
        elif isinstance(dtype, pl.Datetime):
            casts[name] = pl.Datetime("us")
    df = df.with_columns([pl.col(c).dt.replace_time_zone(None) if isinstance(df.schema[c], pl.Datetime)
                          and df.schema[c].time_zone else pl.col(c) for c in df.columns]).cast(casts)
    keys = [pl.col(c).cast(pl.Float64).round_sig_figs(6) if i in numeric else pl.col(c)
            for i, c in enumerate(df.columns)]
    return df.sort(keys, nulls_last=False)


def same(a: pa.Table, b: pa.Table) -> str | None:
    """None if ``a`` and ``b`` hold the same rows, else what differs. Numerics compare as
    PostgreSQL prints them (millpond's view, DuckDB's ``nexmark.duckdb_sql``: AVG a numeric
    quotient); a double (Spark's AVG) compares with one by value, to 1e-9 relative."""
    if a.num_columns != b.num_columns:
        return f"{a.num_columns} and {b.num_columns} columns"
    numeric = {i for i in range(a.num_columns) if _numbers(a.schema.types[i]) or _numbers(b.schema.types[i])}
    x, y = _canonical(a, numeric), _canonical(b, numeric)
    if x.shape != y.shape:
        return f"{x.height} rows and {y.height} rows"
    for c in x.columns:
        u, v = x[c], y[c]
        if u.dtype == v.dtype == pl.String or not (u.dtype == pl.Float64 or v.dtype == pl.Float64):
            ok = u.cast(v.dtype).equals(v) if u.dtype != v.dtype else u.equals(v)
        else:
            u, v = u.cast(pl.Float64), v.cast(pl.Float64)
            nulls = u.is_null().to_numpy() == v.is_null().to_numpy()
            close = np.isclose(u.fill_null(0).to_numpy(), v.fill_null(0).to_numpy(), rtol=1e-9, atol=0)
            ok = bool(np.all(nulls & close))
        if not ok:
            return f"column {c} differs, e.g. rows {x.head(3).rows()} vs {y.head(3).rows()}"
    return None


def oracle(query: str, ev: Events) -> pa.Table:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository: tests/
    from tests import pg_numeric  # the oracles' own numeric division, checked against PostgreSQL

    con = duckdb.connect()
    pg_numeric.register(con)
    try:
        for name in TABLES:
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{os.path.join(ev.root, 'source', name)}/*.parquet')")
        return con.sql(pg_numeric.averages_as_text(nexmark.duckdb_sql(nexmark.QUERIES[query]))).to_arrow_table()
    finally:
        con.close()


# -- report -----------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", default=",".join(nexmark.QUERIES), help="comma-separated, of " + ",".join(nexmark.QUERIES))
    ap.add_argument("--events-per-epoch", type=int, default=200_000, help="events per epoch / micro-batch")
    ap.add_argument("--epochs", type=int, default=3, help="measured epochs, after one warm-up epoch")
    ap.add_argument("--systems", default="millpond,spark")
    ap.add_argument("--paths", default=",".join(paths.PATHS), help="millpond's, comma-separated, of " + ",".join(paths.PATHS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    on_paths = paths.parse(args.paths, ap)
    queries = args.queries.split(",")
    if unknown := [q for q in queries if q not in nexmark.QUERIES]:
        ap.error(f"unknown queries {unknown}; millpond.nexmark.QUERIES has {list(nexmark.QUERIES)}")
    if not 1 <= args.epochs <= 90:
        ap.error("--epochs: 1 to 90 (Spark keeps the progress of the last 100 micro-batches)")
    systems = args.systems.split(",")
    spark = local_session(cores="2")
    print(f"Spark {spark.version}, {spark.sparkContext.master}, shuffle partitions "
          f"{spark.conf.get('spark.sql.shuffle.partitions')}, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores", flush=True)
    per = args.events_per_epoch
    with tempfile.TemporaryDirectory(prefix="nexmark-") as work:
        t0 = time.perf_counter()
        ev = write_events(os.path.join(work, "events"), args.epochs + 1, per, args.seed)
        print(f"generated {(args.epochs + 1) * per:,} events in {time.perf_counter() - t0:.1f} s", flush=True)
        runs: dict[str, dict[str, Run]] = {}
        checks = []
        for q in queries:
            want = oracle(q, ev)
            runs[q] = {}
            for system in (s for name in systems for s in (
                    [f"millpond/{p}" for p in on_paths] if name == "millpond" else [name])):
                with tempfile.TemporaryDirectory(prefix=f"{q}-{system.replace('/', '-')}-", dir=work) as workdir:
                    if system.startswith("millpond/"):
                        with paths.on(system.split("/")[1]):
                            run = run_millpond(spark, q, ev, workdir)
                    elif system == "spark":
                        run = run_spark(spark, q, ev, workdir)
                    else:
                        raise SystemExit(f"unknown system {system!r} (millpond, spark)")
                runs[q][system] = run
                if run.result is not None:
                    if (diff := same(run.result, want)) is not None:
                        raise SystemExit(f"{q}: {system} differs from DuckDB: {diff}")
                print(f"  {q} {system}: " + (f"refused ({run.refused})" if run.refused else
                      "epochs " + " ".join(f"{x:.2f}" for x in run.epochs) + " s")
                      + f" (load average {os.getloadavg()[0]:.1f})", flush=True)
            checks.append(f"{q}: " + " == ".join([s for s, r in runs[q].items() if r.result is not None] + ["duckdb"])
                          + f" ({want.num_rows:,} rows)")
    print(f"\n{args.epochs} epochs of {per:,} events after a warm-up epoch (events/s: events per epoch / "
          "median epoch time; millpond: insert + flush, insert s its part; Spark: the micro-batch's triggerExecution)")
    print(f"{'query':<6} {'path':<8} {'millpond s':>10} {'insert s':>8} {'events/s':>11} {'spark s':>8} {'events/s':>11} "
          f"{'ratio':>6} {'vs default':>10}")
    only = []
    for q, by in runs.items():
        med = {system: statistics.median(r.epochs) for system, r in by.items() if r.epochs}
        spark_cells = f"{med['spark']:>8.2f} {per / med['spark']:>11,.0f}" if "spark" in med else f"{'-':>8} {'-':>11}"
        for system in [s for s in by if s.startswith("millpond/")] or ["millpond/-"]:
            path = system.split("/")[1]
            insert = statistics.median(by[system].ingest) if system in med else None
            cells = [f"{med[system]:>10.2f} {insert:>8.2f} {per / med[system]:>11,.0f}" if system in med
                     else f"{'-':>10} {'-':>8} {'-':>11}", spark_cells,
                     f"{med['spark'] / med[system]:>6.2f}" if system in med and "spark" in med else f"{'-':>6}",
                     f"{med[system] / med['millpond/default']:>10.2f}" if path == "cluster" and system in med
                     and "millpond/default" in med else f"{'':>10}"]
            print(f"{q:<6} {path:<8} " + " ".join(cells))
        if "spark" in by and by["spark"].refused:
            only.append(f"  {q}: {by['spark'].refused}")
    print("(ratio: millpond events/s / Spark events/s; vs default: the cluster path's epoch / the default path's)")
    if only:
        print("only millpond runs (Spark's refusal):")
        print("\n".join(only))
    for c in checks:
        print("check", c)


if __name__ == "__main__":
    main()

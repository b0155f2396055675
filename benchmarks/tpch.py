"""TPC-H's 22 queries as materialized views against Spark recomputing them, on tpchgen-cli's data.

- **backfill**: per query, a fresh root holding the loaded tables (a copy of one loaded once), then ``CREATE
  MATERIALIZED VIEW`` + ``flush()`` (timed: the view's first epoch) against Spark running the same
  query over the same Parquet files (``spark.read.parquet`` + ``collect()``, timed the same way).
- **refresh**: one root with all 22 views; per round, TPC-H's refresh functions at ``--fraction``
  of the orders (RF1: new orders and their lineitems; RF2: the oldest orders and theirs deleted by
  key range): the writes and ``flush()`` timed together, against Spark recomputing all 22 queries
  from the Parquet files.
- **memory**: the peak of the resident memory of this process and its children (the JVM, the
  Python workers, the compactor) over the run, sampled every 100 ms; and by phase (loading, the
  backfills, the refresh rounds, Spark's runs, the checks), to say which part to shrink; and the
  peak of millpond's own phases (loading, first epochs, refreshes), without the baselines': Spark's
  batch runs in the same JVM and grows its heap, and DuckDB's check (limited to 1 GB, spilling
  beyond) is the benchmark's. The refresh functions hold the tables' keys only, reading the rows
  each round copies from the Parquet files (untimed).

Every view is checked against DuckDB over the same rows after the backfill (DuckDB reading the
Parquet files: this process holds no copy of the tables) and after the last refresh. Ratios are millpond / Spark (lower is better).

millpond runs on each path of ``--paths`` (both by default; ``paths.py``): ``default`` (an epoch of
up to 2,000,000 records runs its tasks in the driver's process) and ``cluster`` (every epoch a Spark
job, as on a cluster): each view's first epoch on both (each over its own copy of the loaded root),
and ``--rounds`` refresh rounds on each, the second path's going on from the first's in one root.

    .venv/bin/python benchmarks/tpch.py [--scale 0.1] [--queries q1,q6] [--rounds 3] [--fraction 0.001]
        [--skip backfill|refresh] [--paths default,cluster] [--driver-memory 1g]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

import millpond
import paths
from millpond import tpch
from millpond.tpch import oracle
from millpond.spark.session import local_session



class Memory:
    """The peak memory of this process and all its descendants together, sampled in a thread, with
    what each kind of process held at that moment (this driver, the JVM, Spark's Python workers,
    the compactor). A process's share is its proportional set size (``Pss`` of
    ``/proc/PID/smaps_rollup``): a page mapped by n of them counts 1/n in each, so the log segment
    both Python workers map (and the libraries every process loads) counts once, where a sum of
    resident sizes counts it in each (a load of SF 1's ``lineitem``: 4.6 GiB of workers' RSS, 2.4
    of it the one mapped file). The peak of the sum of RSS is kept too (:attr:`rss_peak`)."""

    KINDS = (("java", "JVM"), ("pyspark.daemon", "Python workers"), ("millpond.store.compactor", "compactor"))

    def __init__(self) -> None:
        self.peak, self.rss_peak, self._stop = 0, 0, threading.Event()
        self.phases: dict[str, tuple[int, dict[str, int]]] = {}  # each phase's peak and its kinds (phase())
        self._phase, self._phase_peak = "start", (0, {})
        threading.Thread(target=self._run, daemon=True).start()

    def phase(self, name: str) -> None:
        """Close the phase under way (its peak kept) and start ``name``."""
        self.phases[self._phase] = max(self.phases.get(self._phase, (0, {})), self._phase_peak, key=lambda p: p[0])
        self._phase, self._phase_peak = name, (0, {})

    @classmethod
    def _tree(cls) -> tuple[dict[str, int], int]:
        """Each kind's proportional set size, and the sum of resident sizes, of the process tree."""
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
                rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        kinds: dict[str, int] = {}
        total_rss = 0
        todo = [os.getpid()]
        while todo:
            pid = todo.pop()
            kind = "driver" if pid == os.getpid() else cls._kind(pid)
            kinds[kind] = kinds.get(kind, 0) + cls._pss(pid, rss.get(pid, 0))
            total_rss += rss.get(pid, 0)
            todo += children.get(pid, [])
        return kinds, total_rss

    @staticmethod
    def _pss(pid: int, rss: int) -> int:
        """A process's proportional set size (its resident size where the kernel gives none)."""
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return rss

    @classmethod
    def _kind(cls, pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            return "other"
        return next((name for word, name in cls.KINDS if word in cmd), "other")

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            kinds, total_rss = self._tree()
            pss = sum(kinds.values())
            self.peak, self.rss_peak = max(self.peak, pss), max(self.rss_peak, total_rss)
            if pss > self._phase_peak[0]:
                self._phase_peak = (pss, kinds)

    BASELINES = ("the check against DuckDB", "Spark's batch of each query", "Spark recomputing the views")

    def millpond_peak(self) -> int:
        """The peak of the phases where millpond works (the baselines' phases left out: the DuckDB
        check and Spark's own batch, which runs in the same JVM and grows its heap)."""
        return max((p for name, (p, _) in self.phases.items() if name not in (*self.BASELINES, "start", "end")),
                   default=0)

    def report(self) -> str:
        lines = []
        for name, (peak, kinds) in self.phases.items():
            if name != "start":
                parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
                lines.append(f"  {name}: {peak / 2**30:.2f} GiB ({parts})")
        return "\n".join(lines)


MEMORY: Memory | None = None  # the run's sampler (main)


def phase(name: str) -> None:
    if MEMORY is not None:
        MEMORY.phase(name)


def spark_run(spark, folder: Path, names: list[str], sqls: dict[str, str]) -> float:
    for table in tpch.TABLES:
        spark.read.parquet(str(folder / f"{table}.parquet")).createOrReplaceTempView(table)
    start = time.perf_counter()
    for name in names:
        _run_query(spark, name, sqls[name])
    return time.perf_counter() - start


def loaded(spark, root: str, folder: Path) -> millpond.Database:
    db = millpond.connect(root, spark=spark, interval=None)
    db.sql(";".join(tpch.DDL))
    for table in tpch.TABLES:
        db.insert(table, tpch.read(folder, table))
    db.flush()
    return db


def backfill(spark, folder: Path, names: list[str], sqls: dict[str, str], on_paths: list[str]) -> None:
    print("backfill: each view's first epoch over the loaded tables vs Spark's batch of the query")
    print(f"{'query':6} " + " ".join(f"{path + ' s':>10} {'ratio':>6}" for path in on_paths) + f" {'spark s':>8}  check")
    totals, total_s = dict.fromkeys(on_paths, 0.0), 0.0
    with tempfile.TemporaryDirectory(prefix="tpch-") as scratch:
        template = os.path.join(scratch, "loaded")  # loaded once; each view gets a copy of its root
        phase("load the tables")
        loaded(spark, template, folder).close()
        for name in names:
            mine, checks = {}, []
            for path in on_paths:
                with paths.on(path):
                    mine[path], check = _first_epoch(spark, folder, name, sqls, template, os.path.join(scratch, name))
                checks.append(f"{path}: {check}")
            phase("Spark's batch of each query")
            spark_s = min(spark_run(spark, folder, [name], sqls) for _ in range(2))
            print(f"{name:6} " + " ".join(f"{mine[p]:10.2f} {mine[p] / spark_s:6.2f}" if mine[p] is not None
                                          else f"{'failed':>10} {'-':>6}" for p in on_paths)
                  + f" {spark_s:8.2f}  {'; '.join(checks)}", flush=True)
            if all(t is not None for t in mine.values()):
                totals = {p: totals[p] + mine[p] for p in on_paths}
                total_s += spark_s
    print(f"{'all':6} " + " ".join(f"{totals[p]:10.2f} {totals[p] / max(total_s, 1e-9):6.2f}" for p in on_paths)
          + f" {total_s:8.2f}")


def _first_epoch(spark, folder: Path, name: str, sqls: dict[str, str], template: str, root: str
                 ) -> tuple[float | None, str]:
    """A view's first epoch over a copy of the loaded root, timed, and its check against DuckDB
    (None and the error when it failed)."""
    shutil.copytree(template, root)
    phase("each view's first epoch")
    try:
        db = millpond.connect(root, spark=spark, interval=None)
        try:
            start = time.perf_counter()
            try:
                db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sqls[name]}")
                db.flush()
            except millpond.MillpondError as exc:
                return None, f"failed: {str(exc).splitlines()[0][:100]}"
            mine = time.perf_counter() - start
            phase("the check against DuckDB")
            ok = oracle.same(oracle.rows(db.sql(f"SELECT * FROM {name}")), oracle.answer(folder, sqls[name]))
        finally:
            db.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return mine, "= duckdb" if ok else "DIFFERS"


def refresh(spark, folder: Path, names: list[str], sqls: dict[str, str], rounds: int,
            fraction: float, on_paths: list[str]) -> None:
    print(f"refresh: RF1 + RF2 at {fraction:g} of the orders, all {len(names)} views, vs Spark recomputing them")
    with tempfile.TemporaryDirectory(prefix="tpch-") as root:
        phase("load the tables")
        db = loaded(spark, root, folder)
        try:
            phase("the views' backfill together")
            start = time.perf_counter()
            for name in names:
                db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sqls[name]}")
            db.flush()
            print(f"  all views' backfill together: {time.perf_counter() - start:.1f} s")
            rf = tpch.Refresh(folder / "orders.parquet", folder / "lineitem.parquet", fraction, seed=1)
            times: dict[str, list[float]] = {}
            for path in on_paths:  # each path's rounds go on from the last's
                phase(f"refresh rounds ({path} path)")
                times[path] = []
                with paths.on(path):
                    for i in range(rounds):
                        orders, lines = rf.rf1()
                        start = time.perf_counter()
                        db.insert("orders", orders)
                        db.insert("lineitem", lines)
                        for statement in rf.rf2():
                            db.sql(statement)
                        db.flush()
                        times[path].append(time.perf_counter() - start)
                        print(f"  round {i + 1} ({path} path): millpond {times[path][-1]:6.2f} s", flush=True)
            del rf, orders, lines
            phase("the check against DuckDB")
            bad = _differing(db, names, sqls, Path(root) / "check")
            print(f"  after {rounds} rounds: {'every view = duckdb' if not bad else f'DIFFER: {bad}'}", flush=True)
        finally:
            db.close()
    phase("Spark recomputing the views")
    spark_s = _spark_or_failure(spark, folder, names, sqls)
    if spark_s is not None:
        print(f"  Spark recomputing the {len(names)} views: {spark_s:.2f} s; speed-up by round:")
        for path, ts in times.items():
            print(f"    {path} path: " + " ".join(f"{spark_s / t:.2f}x" for t in ts))


def _differing(db: millpond.Database, names: list[str], sqls: dict[str, str], folder: Path) -> list[str]:
    """The views that differ from DuckDB's answer over the tables as millpond holds them (written to
    Parquet one at a time, so this process holds one table at most; DuckDB reads the files)."""
    folder.mkdir()
    for name in tpch.TABLES:
        pq.write_table(db.read(name), folder / f"{name}.parquet")
    return [n for n in names if not oracle.same(oracle.rows(db.sql(f"SELECT * FROM {n}")), oracle.answer(folder, sqls[n]))]


def _spark_or_failure(spark, folder: Path, names: list[str], sqls: dict[str, str]) -> float | None:
    """Spark's time recomputing the views (the best of two), or None when Spark failed (said with the
    query: in a 1 GB session Spark's own batch can run out of heap and take its JVM with it)."""
    try:
        return min(spark_run(spark, folder, names, sqls) for _ in range(2))
    except Exception as exc:  # noqa: BLE001 — a benchmark reports its baseline's failure and goes on
        print(f"  Spark recomputing the views failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        return None


def _run_query(spark, name: str, sql: str) -> None:
    try:
        spark.sql(sql).collect()
    except Exception as exc:
        raise RuntimeError(f"{name}: {exc}") from exc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--queries", default=",".join(tpch.queries(1)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.001)
    ap.add_argument("--skip", default="")
    ap.add_argument("--paths", default=",".join(paths.PATHS), help="millpond's, comma-separated, of " + ",".join(paths.PATHS))
    ap.add_argument("--driver-memory", help="the session's driver memory (MILLPOND_DRIVER_MEMORY; default 2g)")
    args = ap.parse_args()
    on_paths = paths.parse(args.paths, ap)
    if args.driver_memory:
        os.environ["MILLPOND_DRIVER_MEMORY"] = args.driver_memory
    global MEMORY
    memory = MEMORY = Memory()
    folder = tpch.generate(args.scale, Path(tempfile.gettempdir()) / f"tpch-sf{args.scale:g}")
    sqls = tpch.queries(args.scale)
    names = args.queries.split(",")
    lineitems = pq.ParquetFile(folder / "lineitem.parquet").metadata.num_rows  # the tables stay in their files
    print(f"TPC-H SF {args.scale:g} ({lineitems:,} lineitems), driver records "
          f"{os.environ.get('MILLPOND_DRIVER_RECORDS', 'default')}, driver memory "
          f"{os.environ.get('MILLPOND_DRIVER_MEMORY', '2g')}, duckdb {duckdb.__version__}")
    spark = local_session()
    try:
        if "backfill" not in args.skip:
            backfill(spark, folder, names, sqls, on_paths)
        if "refresh" not in args.skip:
            refresh(spark, folder, names, sqls, args.rounds, args.fraction, on_paths)
    finally:
        phase("end")
        print(f"peak memory of every process of the run (proportional set sizes): {memory.peak / 2**30:.2f} GiB; "
              f"of millpond's phases (loading, first epochs, refreshes): {memory.millpond_peak() / 2**30:.2f} GiB "
              f"(resident sizes summed, shared pages once per process: {memory.rss_peak / 2**30:.2f} GiB)")
        print("  by phase, with what each kind of process held at the phase's peak:")
        print(memory.report())
        try:
            spark.stop()
        except Exception as exc:  # noqa: BLE001 — a JVM that died of Spark's own batch is already reported
            print(f"Spark's session could not be stopped: {type(exc).__name__}")


if __name__ == "__main__":
    main()

"""Spark as millpond's epoch executor: one epoch is one Spark job over every consumer.

:class:`SparkExecutor` implements :class:`millpond.engine.executor.EpochExecutor` (step 3 of the
epoch protocol in :mod:`millpond.engine.coordinator`): it builds each consumer's DataFrame
(:mod:`millpond.spark.build`) or re-runs the one built by an earlier epoch of the same shape,
unions the final materializations, and collects with one action, with the job's descriptor set
for its tasks (:mod:`millpond.spark.task`). Consumers whose whole epoch is one stage of fused
tasks run those tasks in this process instead when they read few enough records
(:data:`DRIVER_RECORDS`), beside that job.
The final task of every view writes its changes file and emits one row naming it
(:mod:`millpond.spark.task`): the driver receives one row per (partition, view), and no changed row.
"""

from __future__ import annotations

import hashlib

import os
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from functools import reduce
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.functions import pandas_udf
from pyspark.util import PythonEvalType

from millpond.catalog import TableDef
from millpond.columns import W
from millpond.engine import plan as P
from millpond.engine.changefeed import Written
from millpond.engine.consumers import Consumer
from millpond.engine.executor import EpochJob, PieceSource, ViewInput, Work
from millpond.spark.build import FINAL, Builder
from millpond.spark.jvm import map_in_arrow
from millpond.spark.task import CONSUMER, FILE, JOB_PROPERTY, ROWS, Slots, Task, describe_job
from millpond.store.manifest import Manifest

__all__ = ["SparkExecutor", "job_tag"]

# A flow's trigger reading at most this many records computes its partials in one task: measured
# (benchmarks/flows.py's input, local[2], median trigger) one task 0.18 s vs two stages 0.29 s at
# 100,000 records, 0.27 vs 0.38 s at 300,000, 0.64 vs 0.67 s at 1,000,000.
SINGLE_TASK_ROWS = 500_000
MAX_BUILT = 256  # consumers' DataFrames kept for re-running (all are dropped past it: a catalog churns)
# The consumers whose whole epoch is one stage of fused tasks (Slots: tasks reading their input from
# the log themselves, no row through the JVM) run those tasks in this process, on as many threads as
# the session has cores, instead of as a Spark job, when they read at most this many records: on a
# local master (the machine is the same, and a Spark job's Python tasks cost ~0.1 s before any
# work: a one-row epoch with 3 views 0.20-0.22 -> 0.06-0.07 s, benchmarks/epochs.py), each stage up
# to the records a fused stage gives one task anyway (inputs.FUSED_ROWS_PER_TASK); on a cluster,
# small epochs only (all stages together).
# $MILLPOND_DRIVER_RECORDS sets both (0: always a Spark job).
DRIVER_RECORDS = {"local": 2_000_000, "cluster": 20_000}
if "MILLPOND_DRIVER_RECORDS" in os.environ:
    DRIVER_RECORDS = dict.fromkeys(DRIVER_RECORDS, int(os.environ["MILLPOND_DRIVER_RECORDS"]))


class SparkExecutor:
    """Runs epochs on ``spark`` (an :class:`~millpond.engine.executor.EpochExecutor`)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self._loaded: dict = {}  # the log's data source, loaded once per channel scan (see log_source.write_scan)
        self._partials: dict = {}  # each flow's partial aggregates over loaded scans (see partials)
        # each consumer's DataFrame, built once and re-run while the epochs' shape stays the same
        # (Builder.reuse_key): building one costs ~0.06 s of JVM round trips (measured: one-row epochs, 3 views)
        self._built: dict[tuple, tuple[DataFrame, frozenset[str]]] = {}
        self._udfs: dict = {}  # stateful tasks' Python UDFs (Builder._map)
        self._unions: dict[tuple, tuple[list[DataFrame], DataFrame]] = {}  # epochs' plans re-run (_epoch)
        self._slots: dict[tuple, DataFrame] = {}  # one-stage consumers' tasks as one UDF (_stages)
        # consumers (and parallelism) whose every source a build found read by a fused task: their
        # small ranges are read by the tasks too, so their DataFrames are re-run (Builder.all_fused)
        self._fused_only: set = set()
        # driver_bytes: what the driver received from epochs' tasks; reused: DataFrames re-run, not
        # built; build_s: seconds building DataFrames; job_s: seconds in their jobs (planning included)
        # here: epochs whose one-stage consumers ran in this process (DRIVER_RECORDS); local: consumers'
        # epochs run as one task, their whole plan (spark/local.py)
        self.stats = {"driver_bytes": 0, "reused": 0, "build_s": 0.0, "job_s": 0.0, "here": 0, "local": 0}
        self._beside = ThreadPoolExecutor(1, thread_name_prefix="millpond-job")  # a Spark job beside tasks run here
        self._threads: int | None = None  # a local master's cores (fixed; asking the JVM costs ~1-3 ms)

    def run(self, job: EpochJob, work: Sequence[Work], tables: Mapping[str, TableDef], pieces: PieceSource,
            views: Mapping[str, ViewInput] | None = None) -> dict[str, Written | None]:
        started = time.perf_counter()
        scans: dict = {}  # consumers reading the same channel range share its source
        frames, state_ids, stages, kept = [], set(), [], True
        records: list[int] | None = []  # what each one-stage consumer reads (None: one reads state too: a first epoch, a partial view)
        for c, ranges in work:
            builder = Builder(self.spark, job, c, ranges, tables, pieces, scans, self._loaded, views, udfs=self._udfs,
                              fused_only=(c, job.parallelism) in self._fused_only)
            key = builder.reuse_key()
            if key is not None and key in self._built:
                builder.check()
                df, used, one = self._built[key]
                self.stats["reused"] += 1
            else:
                df, used, one = builder.final(), frozenset(builder.state_ids), builder.one_stage
                if builder.all_fused() and len(self._fused_only) < MAX_BUILT:
                    self._fused_only.add((c, job.parallelism))
                if key is not None:
                    if len(self._built) >= MAX_BUILT:
                        self._built.clear()
                    self._built[key] = (df, used, one)
            if one is not None:
                stages.append(one)
                if records is not None and one[0].local is not None:  # a whole plan: its records, committed rows too
                    records.append(builder.inputs.local_records())
                elif records is not None:
                    records = None if job.batch.get(c.key) or c.key in job.partial else \
                        [*records, sum(b - a for a, b in ranges.values())]
            else:
                frames.append(df)
                kept = kept and key is not None  # a DataFrame of this epoch only: so is any union of it
            state_ids |= used
        sc = self.spark.sparkContext
        # on a local master the largest stage bounds what runs here (each of ``threads`` at a time
        # holds what a Python worker would: TPC-H's 22 views at 1% read the same 150,000 records
        # each, 2.5M summed, and ran as a Spark job, 7.3 GiB at the peak); on a cluster, all of them
        # (the driver is one machine of many)
        local = sc.master.startswith("local")
        here = bool(stages) and records is not None and \
            (max(records, default=0) if local else sum(records)) <= DRIVER_RECORDS["local" if local else "cluster"]
        if stages and not here:
            frames.append(self._stages(tuple(stages)))
        threads = (self._threads or sc.defaultParallelism) if here else 0  # a cluster's grows as executors join
        if local and here:
            self._threads = threads
        built = time.perf_counter()
        self.stats["local"] += sum(task.local is not None for task, _ in stages)
        descriptor = describe_job(job, state_ids)
        if not here:
            batches = self._job(frames, kept, descriptor, job_tag(job.root, job.epoch))
        elif not frames:
            batches = Slots(tuple(stages)).here(descriptor, threads=threads)
        else:  # the rest as a Spark job at the same time, from one thread kept for it (its JVM thread too)
            future = self._beside.submit(self._job, frames, kept, descriptor, job_tag(job.root, job.epoch))
            try:
                batches = Slots(tuple(stages)).here(descriptor, threads=threads)
            except BaseException:
                wait([future])  # nothing of this attempt runs on after it failed
                raise
            batches += future.result()
        self.stats["build_s"] += built - started
        self.stats["job_s"] += time.perf_counter() - built
        self.stats["driver_bytes"] += sum(b.nbytes for b in batches)
        self.stats["here"] += here
        files: dict[str, list[str]] = {c.key: [] for c, _ in work}
        rows = dict.fromkeys(files, 0)
        for consumer, name, n in (row for b in batches for row in zip(*(b.column(c).to_pylist() for c in (CONSUMER, FILE, ROWS)))):
            files[consumer].append(name)
            rows[consumer] += n
        return {k: Written(tuple(sorted(v)), rows[k]) if v else None for k, v in files.items()}

    def _job(self, frames: list[DataFrame], kept: bool, descriptor: str, tag: str) -> list[pa.RecordBatch]:
        with _running(self.spark, descriptor, tag):
            return self._epoch(frames, kept).toArrow().to_batches()

    def _stages(self, stages: tuple[tuple[Task, int], ...]) -> DataFrame:
        """The consumers whose epoch is one fused stage, as one stage of one Python UDF
        (:class:`~millpond.spark.task.Slots`), built once per set of tasks: each stage a task of
        its own, side by side (a union zips one-partition stages into one task, run in turn)."""
        key = tuple((task.identity(), n) for task, n in stages)
        if key not in self._slots:
            if len(self._slots) >= MAX_BUILT:
                self._slots.clear()
            total = sum(n for _, n in stages)
            udf = pandas_udf(Slots(stages), returnType=FINAL,  # type: ignore[call-overload]
                             functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
            self._slots[key] = map_in_arrow(self.spark.range(0, total, 1, total), udf)
        return self._slots[key]

    def _epoch(self, frames: list[DataFrame], kept: bool) -> DataFrame:
        """The union of the epoch's consumers' DataFrames. A new Dataset every epoch where the plan
        exchanges rows (re-running one would reuse its shuffle files or broadcast: an earlier
        epoch's rows); without an exchange (every task reads its input itself), the one planned
        before is re-run (measured: a union of three one-row tasks, 0.072 -> 0.046 s). ``kept``:
        every frame is kept for later epochs (else the union is of this epoch only, not kept)."""
        key = tuple(map(id, frames))
        if (found := self._unions.get(key)) is not None:
            return found[1]
        df = reduce(DataFrame.unionByName, frames) if len(frames) > 1 else frames[0].alias("epoch")
        if kept and "Exchange" not in df._jdf.queryExecution().executedPlan().toString():
            if len(self._unions) >= MAX_BUILT:
                self._unions.clear()
            self._unions[key] = (frames, df)  # the frames kept: their ids are the key
        return df

    def partials(self, job: EpochJob, work: Work, tables: Mapping[str, TableDef], pieces: PieceSource) -> pa.Table:
        consumer, ranges = work
        assert consumer.merge is not None
        node = consumer.merge.aggregate
        # a small trigger runs as one task: no shuffle stage, and (below) no planning per trigger
        single = not job.batch.get(consumer.key) and sum(b - a for a, b in ranges.values()) <= SINGLE_TASK_ROWS
        builder = Builder(self.spark, job, consumer, ranges, tables, pieces, {}, self._loaded, single=single)
        reads = builder.inputs.reads(node.input)  # this epoch's ranges named; the same DataFrame reads them
        if reads is None:
            return builder.partials(node).toArrow()
        key = (consumer.key, reads)
        if key not in self._partials:  # building one costs ~70 ms of JVM round trips: once per flow
            if len(self._partials) >= 64:
                self._partials.clear()
            self._partials[key] = builder.partials(node)
        df = self._partials[key]
        # one task re-runs the same Dataset (planned once); a plan with a shuffle gets a new Dataset
        # each time: re-running one would reuse its shuffle files (last trigger's rows)
        return (df if single else df.alias("partials")).toArrow()

    def output_schema(self, plan: P.Materialize, tables: Mapping[str, TableDef],
                      views: Mapping[str, pa.Schema] | None = None) -> pa.Schema:
        """From Spark's analysis of the plan over empty inputs (runs no job)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        ranges = {t.channel: (0, 0) for t in tables.values()}
        job = EpochJob(root="", storage={}, epoch=0, attempt="", parallelism=1, manifest=Manifest())
        consumer = Consumer("o0", 0, "", plan, ())
        inputs = {name: ViewInput(schema, "") for name, schema in (views or {}).items()}
        builder = Builder(self.spark, job, consumer, ranges, tables, lambda *_: [], views=inputs)
        builder.types_only = True
        df = builder.build(plan.input)
        return to_arrow_schema(T.StructType([f for f in df.schema if f.name != W]), timezone="UTC")


def job_tag(root: str, epoch: int) -> str:
    """The Spark job tag of an epoch's jobs on ``root`` (``CANCEL JOB`` cancels the jobs with it)."""
    return f"millpond-{hashlib.sha1(root.encode()).hexdigest()[:12]}-epoch-{epoch}"


@contextmanager
def _running(spark: SparkSession, descriptor: str, tag: str) -> Iterator[None]:
    """The job descriptor and tag set for the jobs this thread starts (Spark's local properties are
    per thread: epochs of two databases in one process do not see each other's); a cancel
    interrupts their tasks."""
    sc = spark.sparkContext
    sc.setLocalProperty(JOB_PROPERTY, descriptor)
    sc.addJobTag(tag)
    sc.setLocalProperty("spark.job.interruptOnCancel", "true")
    try:
        yield
    finally:
        sc.setLocalProperty(JOB_PROPERTY, None)
        sc.removeJobTag(tag)
        sc.setLocalProperty("spark.job.interruptOnCancel", None)

"""A source's parts read in Spark tasks: on a cluster, the executors read a Delta table's files.

The driver fixes what an epoch reads (a version's files: the split's range) and hands the parts to
one Spark job as picklable readers (each a callable returning an Arrow table, e.g. one file of a
Delta table's snapshot with its partition values). Each task reads its parts, decodes them, and
stages each as an Arrow file under the root (``sources/staging/<read id>/<part>.arrow``), returning
one row per part: its key and its row count. The driver receives those rows, never a record from
Spark; it then appends the staged files to the table's log in the parts' order (the log's append is
the one copy the driver makes: the bytes of Arrow files, no decoding — see
:mod:`millpond.connectors` for why a source is copied into its table's log) and deletes them.

Whether parts are read this way is :func:`task_reads`'s choice: on a cluster (a master that is not
``local``), or everywhere with ``MILLPOND_DRIVER_RECORDS=0`` (the tests' way to take the cluster's
path on one machine). On a local master the driver's own Arrow reader is faster: it reads with
every core already, and a Spark job adds its start-up and a staged copy (measured in
``benchmarks/sources.py --only delta``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import pyarrow as pa

from millpond import paths
from millpond.spark.job_groups import group_tasks, grouped
from millpond.store.objects import ObjectStore, open_store
from millpond.work import current_work

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TaskReads", "task_reads"]

log = logging.getLogger("millpond")

_SCHEMA = "part long, key string, rows long"


def task_reads(spark: SparkSession | None, store: ObjectStore) -> "TaskReads | None":
    """The reader of parts in Spark tasks for this session, or None where the driver reads them."""
    if spark is None:
        return None
    from millpond.spark.executor import DRIVER_RECORDS

    try:
        master = spark.sparkContext.master
    except Exception:  # noqa: BLE001 - a session without a context (Spark Connect): the driver reads
        return None
    if master.startswith("local") and DRIVER_RECORDS["local"] > 0:
        return None
    return TaskReads(spark, store)


class TaskReads:
    """``reads(parts)``: each part's table, read by Spark's tasks (see the module's docstring)."""

    def __init__(self, spark: SparkSession, store: ObjectStore):
        self.spark, self.store = spark, store
        self.stats = {"jobs": 0, "parts": 0, "rows": 0, "staged_bytes": 0}
        self._swept = False
        # the tasks run on this machine (a local master: MILLPOND_DRIVER_RECORDS=0), so they see its files
        self.local = spark.sparkContext.master.startswith("local")

    def __call__(self, parts: Sequence[Callable[[], pa.Table]], what: str = "a source") -> list[pa.Table]:
        if not parts:
            return []
        if not self._swept:  # what a process that died mid-read staged
            for key in self.store.list(paths.SOURCE_STAGING):
                self.store.delete(key)
            self._swept = True
        read_id = paths.random_id()
        n = len(parts)
        slices = max(1, min(n, 4 * self.spark.sparkContext.defaultParallelism))
        body = _ReadParts(self.store.root, self.store.options, read_id, list(parts))
        group = f"millpond-read-{read_id}"  # the read's progress (SHOW JOBS): its Spark tasks
        current_work().follow(lambda: group_tasks(self.spark, group))
        try:
            with grouped(self.spark, group, f"millpond: read {n} part(s) of {what}"):
                got = self.spark.range(0, n, 1, slices).mapInArrow(body, _SCHEMA).collect()
            staged = {r["part"]: (r["key"], r["rows"]) for r in got}
            tables = []
            for i in range(n):
                key, _ = staged[i]
                data = self.store.get(key)
                self.stats["staged_bytes"] += len(data)
                tables.append(pa.ipc.open_file(pa.py_buffer(data)).read_all())
        finally:
            for key in self.store.list(f"{paths.SOURCE_STAGING}{read_id}/"):
                self.store.delete(key)
        self.stats["jobs"] += 1
        self.stats["parts"] += n
        self.stats["rows"] += sum(t.num_rows for t in tables)
        return tables


class _ReadParts:
    """The picklable body of the read job: each id in the task's range reads its part and stages it."""

    def __init__(self, root: str, storage: dict[str, str], read_id: str, parts: list[Callable[[], pa.Table]]):
        self.root, self.storage, self.read_id, self.parts = root, storage, read_id, parts

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = open_store(self.root, self.storage)
        for batch in batches:
            for i in batch.column(0).to_pylist():
                table = self.parts[i]()
                sink = pa.BufferOutputStream()
                with pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table)
                key = paths.source_staging_key(self.read_id, i)
                store.put(key, sink.getvalue().to_pybytes())
                yield pa.record_batch({"part": pa.array([i], pa.int64()), "key": pa.array([key]),
                                       "rows": pa.array([table.num_rows], pa.int64())})

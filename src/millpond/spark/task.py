"""The body of one stateful ``mapInArrow`` stage: steps 3c–3e of the epoch protocol
(:mod:`millpond.engine.coordinator`).

A task runs its operator's step over the partition's delta (:func:`millpond.engine.step.run_step`:
open the state parts at the last committed epoch, apply, write each part's state rows as one SST
named by (version, epoch, attempt, state, partition)) and emits its output changelog to the next
stage; a view's final task writes it as the view's changes file of (epoch, attempt, partition)
instead (:mod:`millpond.engine.changefeed`) and emits one row naming the file: the driver
receives no rows. A view's rows that come straight from an operator (through renames, or
filters and projections DuckDB evaluates as Spark does) are made in that operator's task
(:class:`Feed`): one Python task where there were two.

A :class:`Task` holds only what stays the same from epoch to epoch (the operator, its state ids),
so a consumer's DataFrame is built once and re-run (:mod:`millpond.spark.executor`). What changes
— the epoch, the attempt, the pinned version and the levels of every state the job reads —
reaches the tasks at run time as the job's descriptor, a Spark local property
(:data:`JOB_PROPERTY`) set by the driver's thread around the job's action. Tasks are
deterministic for a given input, so a retried or speculative task rewrites the same files with
the same bytes; files of a failed attempt are never referenced (the coordinator lists only its
own attempt's prefix).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np
import polars as pl
import pyarrow as pa
from pyspark import TaskContext, cloudpickle

from millpond import paths
from millpond.columns import KH, VN
from millpond.engine.changefeed import parquet
from millpond.engine.executor import EpochJob
from millpond.engine.operators import Operator
from millpond.engine.operators.join import SIDE
from millpond.engine.step import run_steps, step_bytes
from millpond.errors import InvariantError
from millpond.keyhash import xxhash64
from millpond.spark import spill
from millpond.spark.fused import Fused, conform, select_records
from millpond.store.manifest import Levels
from millpond.store.objects import open_store

if TYPE_CHECKING:
    from millpond.spark.combine import Combine
    from millpond.spark.local import Keyed

__all__ = ["Task", "Feed", "Slots", "Packed", "TaskFailed", "CONSUMER", "FILE", "ROWS", "JOB_PROPERTY", "Run", "describe_job"]

CONSUMER = "_consumer"  # a final task's output: the consumer key ...
FILE = "_file"  # ... the changes file it wrote ...
ROWS = "_rows"  # ... and the rows in it
JOB_PROPERTY = "millpond.job"  # the Spark local property holding the running job's descriptor
PROFILE_ENV = "MILLPOND_PROFILE"  # set (to a file): every task appends its timings there


@dataclass(frozen=True)
class Run:
    """One run of a built plan: the epoch attempt and the state it reads (a job's descriptor)."""

    epoch: int
    attempt: str
    base_version: int
    levels: dict[str, Levels]  # state id -> its files at ``base_version``
    step_bytes: int  # how much delta a task applies at once (millpond.engine.step)


def describe_job(job: EpochJob, state_ids: Iterable[str]) -> str:
    """The descriptor of ``job`` for tasks that read ``state_ids`` (JSON: the local property's value)."""
    return json.dumps({"epoch": job.epoch, "attempt": job.attempt, "version": job.manifest.version,
                       "step_bytes": step_bytes(),
                       "levels": {sid: job.manifest.state(sid).to_json() for sid in sorted(set(state_ids))}})


_last: tuple[str, Run] | None = None  # a Python worker runs many tasks of one job: decode once
_here = threading.local()  # tasks run on the driver (Slots.here): the epoch's descriptor, in its thread


def current_run() -> Run:
    """The descriptor of the job this task belongs to."""
    global _last
    context = TaskContext.get()
    text = getattr(_here, "descriptor", None) if context is None else context.getLocalProperty(JOB_PROPERTY)
    if text is None:
        raise InvariantError(f"a millpond task ran outside an epoch: the local property {JOB_PROPERTY} is not set")
    if _last is None or _last[0] != text:
        body = json.loads(text)
        _last = (text, Run(body["epoch"], body["attempt"], body["version"],
                           {sid: Levels.from_json(v) for sid, v in body["levels"].items()}, body["step_bytes"]))
    return _last[1]


@dataclass(frozen=True)
class Task:
    """The picklable body of one stateful ``mapInArrow`` stage."""

    op: Operator
    root: str
    storage: dict[str, str]
    object_id: int
    node_id: int
    states: dict[str, str]  # part -> the state id it reads (its own, or an index's)
    out_schema: pa.Schema
    consumer: str | None  # a final task's: the view whose changes it writes
    emit: bool  # False: write state only (a table's materialize: its changelog is its log)
    changes: pa.Schema | None = None  # a final task's: the view's changes as the view types them
    combine: "Combine | None" = None  # emit the aggregate partials of its output (millpond.spark.combine)
    fused: Fused | None = None  # its delta read from the log by the task itself (millpond.spark.fused)
    feed: "Feed | None" = None  # its delta made from the output of the task feeding it, in this task
    local: "Keyed | None" = None  # its delta made by a tree of tasks and queries, in this task (spark/local.py)

    def identity(self) -> tuple:
        """What makes this task's Python UDF (its dict fields spelled out: a task is not hashable)."""
        feed = self.feed
        return (self.op, tuple(sorted(self.states.items())), self.object_id, self.node_id, self.consumer, self.emit,
                self.root, json.dumps(self.storage, sort_keys=True), self.out_schema, self.changes, self.combine,
                self.fused,
                feed and (feed.task.identity(), feed.query, feed.columns, feed.key, feed.schema, feed.side, feed.combine,
                        feed.having), self.local and self.local.identity())

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from self.run(batches, TaskContext.get().partitionId())
        release_memory()

    def run(self, batches: Iterator[pa.RecordBatch], partition: int) -> Iterator[pa.RecordBatch]:
        """The task of Spark partition ``partition`` over its input ``batches``: in groups of disjoint
        keys of a bounded size when they are its delta (:mod:`millpond.spark.spill`), each group's
        output emitted before the next is read."""
        started = time.perf_counter()
        read = self.fused is not None and self.local is None and self.feed is None
        if read:  # its input is its slot's number: the delta is read here, a slice at a time, and spilled
            slot = next((b.column(0)[0].as_py() for b in batches if b.num_rows), None)
            parts: Iterable[list[pa.RecordBatch]] = [] if slot is None else spill.groups(
                (b for t in self.fused.slices(slot) for b in t.to_batches()), current_run().step_bytes)
        elif self.local is not None or self.feed is not None:  # the delta is made here
            parts = [[b for b in batches if b.num_rows]]
        else:
            parts = spill.groups(batches, current_run().step_bytes)
        for i, part in enumerate(parts):
            step = "" if i == 0 else f"-g{i:02d}"
            yield from self._emit(self.step(part, partition, started, step=step, given=read), partition, step)
            started = time.perf_counter()

    def _emit(self, out: pl.DataFrame | None, partition: int, step: str) -> Iterator[pa.RecordBatch]:
        if out is None or out.height == 0 or not self.emit:
            return
        if self.consumer is None:
            table = out.to_arrow()
            yield from (self.combine(table, self.out_schema) if self.combine else table.cast(self.out_schema)).to_batches()
            return
        assert self.changes is not None
        run = current_run()
        key = paths.changes_part_key(self.consumer, run.epoch, run.attempt, partition, step)
        open_store(self.root, self.storage).put(key, parquet(out.to_arrow().select(self.changes.names).cast(self.changes)))
        yield pa.RecordBatch.from_pydict({CONSUMER: [self.consumer], FILE: [key], ROWS: [out.height]},
                                         schema=self.out_schema)

    def step(self, batches: list[pa.RecordBatch], partition: int, started: float, memo: dict | None = None,
             step: str = "", given: bool = False) -> pl.DataFrame | None:
        """The operator over this partition's delta (None: there is none): its output changelog.
        ``memo``: the outputs of a local tree's operators run so far in this task (spark/local.py);
        ``step``: which group of the task's input ``batches`` are (:mod:`millpond.spark.spill`);
        ``given``: ``batches`` are the delta (else, for a task that reads its own, its slot's number)."""
        if given:
            delta = pl.from_arrow(pa.Table.from_batches(batches)) if batches else None
        elif self.local is not None:  # the whole plan below it, run here over every vnode
            delta = self.local.delta(partition, {} if memo is None else memo)
        elif self.feed is not None:  # the delta is what the operator feeding this one emits, in this task
            up = self.feed.task.step(batches, partition, started)
            delta = None if up is None or up.height == 0 else self.feed(up, self.feed.task.out_schema)
            if self.fused is not None and batches:  # a join's other side, read from the log
                other = self.fused.delta(batches[0].column(0)[0].as_py())
                if delta is None or other.height:
                    delta = other if delta is None else pl.concat([delta, other], how="vertical_relaxed")
        elif self.fused is not None:  # its input is its slot's number (not the partition: the job unions consumers)
            delta = self.fused.delta(batches[0].column(0)[0].as_py()) if batches else None
        else:
            delta = pl.from_arrow(pa.Table.from_batches(batches)) if batches else None
        times = {"input": time.perf_counter() - started} if PROFILE_ENV in os.environ else None
        if delta is None or delta.height == 0:
            return None
        if VN in delta.columns:
            delta = delta.drop(VN)
        run = current_run()
        missing = [sid for sid in self.states.values() if sid not in run.levels]
        if missing:
            raise InvariantError(f"{self.op.name}: the job's descriptor lacks state {', '.join(missing)}")
        levels = {part: run.levels[sid] for part, sid in self.states.items()}
        out = run_steps(self.op, delta, open_store(self.root, self.storage), levels, epoch=run.epoch,
                        attempt=run.attempt, base_version=run.base_version, object_id=self.object_id,
                        node_id=self.node_id, partition=partition, times=times, step=step, budget=run.step_bytes)
        if times is not None:
            _profile(self.op.name, partition, delta.height, out.height, times)
        return out


def release_memory() -> None:
    """What a Spark worker's task freed, given back to the system: the worker lives on, idle
    between epochs, and Arrow's allocator and the C heap keep freed pages for reuse otherwise."""
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():  # noqa: ANN202
    try:
        return ctypes.CDLL("libc.so.6")  # glibc: malloc_trim
    except OSError:
        return None


_LIBC = _libc()


class TaskFailed(RuntimeError):
    """A task run in the driver's process (:meth:`Slots.here`) raised: what a failed Spark job is to
    the coordinator (not a :class:`~millpond.errors.MillpondError` of the caller's own)."""


@dataclass(frozen=True)
class Slots:
    """The tasks of several consumers whose whole epoch is one stage of tasks reading their input
    themselves (:mod:`millpond.spark.fused`), as one Python UDF over ``range(total)``, one slot
    per Spark partition: ``stages`` holds each consumer's final task and its number of slots.
    One Python worker per task, and the consumers' tasks run side by side (a union of their
    one-partition stages would zip them into one task).

    Shipped to Spark with each task pickled apart (:class:`Packed`): every Spark task of the stage
    receives the whole UDF, and unpickling every consumer's task in each of them was most of a
    small epoch's work on a cluster's path (the 22 TPC-H views: 547 KB, 37 ms per Spark task, 21
    tasks a round). A task unpickles the one its slot runs, once per Python worker."""

    stages: tuple[tuple["Task | Packed", int], ...]

    def __reduce__(self) -> tuple:
        return (Slots, (tuple((Packed.of(t) if isinstance(t, Task) else t, n) for t, n in self.stages),))

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for partition in batch.column(0).to_pylist():
                i = partition
                for task, n in self.stages:
                    if i < n:
                        task = task.task() if isinstance(task, Packed) else task
                        yield from task.run(iter([pa.record_batch([pa.array([i], pa.int64())], names=["id"])]), partition)
                        break
                    i -= n
        if TaskContext.get() is not None:  # a Spark worker's (run here, the epoch's memory is the caller's)
            release_memory()

    def here(self, descriptor: str, threads: int = 1) -> list[pa.RecordBatch]:
        """Every slot's task run in this process, as the Spark job over ``range(total)`` would run
        them (partition ``i`` for slot ``i``) under the job's ``descriptor``, on up to ``threads``
        threads: what a small epoch does instead of a Spark job (:mod:`millpond.spark.executor`)."""
        def run(i: int) -> list[pa.RecordBatch]:
            _here.descriptor = descriptor
            try:
                return list(self(iter([pa.record_batch([pa.array([i], pa.int64())], names=["id"])])))
            except Exception as exc:  # as a Spark task's failure reaches the driver: the epoch fails, not the caller's call
                raise TaskFailed(f"task {i} failed: {type(exc).__name__}: {exc}") from exc
            finally:
                _here.descriptor = None

        total = sum(n for _, n in self.stages)
        if threads <= 1 or total == 1:
            return [b for i in range(total) for b in run(i)]
        with ThreadPoolExecutor(min(threads, total), thread_name_prefix="millpond-task") as pool:
            return [b for out in pool.map(run, range(total)) for b in out]


@dataclass(frozen=True)
class Packed:
    """A :class:`Task` pickled, named by a digest of its bytes: a Python worker keeps the tasks it
    unpickled by digest (:data:`_UNPACKED`), so an epoch after the first unpickles none."""

    digest: bytes
    blob: bytes

    @staticmethod
    def of(task: Task) -> "Packed":
        blob = cloudpickle.dumps(task)
        return Packed(hashlib.blake2b(blob, digest_size=16).digest(), blob)

    def task(self) -> Task:
        with _UNPACKED_LOCK:
            found = _UNPACKED.get(self.digest)
        if found is None:
            found = pickle.loads(self.blob)
            with _UNPACKED_LOCK:
                if len(_UNPACKED) >= MAX_UNPACKED:  # a long-lived worker over a churning catalog
                    _UNPACKED.clear()
                _UNPACKED[self.digest] = found
        return found


MAX_UNPACKED = 512
_UNPACKED: dict[bytes, Task] = {}  # a Python worker's tasks by digest (a task holds no state of a run)
_UNPACKED_LOCK = threading.Lock()


@dataclass(frozen=True)
class Feed:
    """A task's delta made in the task itself from the output of the stateful task feeding it
    (``task``, run first over the task's input), where Spark would have done nothing but
    evaluate filters and projections between them: ``query`` (DuckDB SQL over ``records``, the
    output as ``task.out_schema`` types it; None: the columns as they are, renamed by
    ``columns``), then the key hash of ``key`` (:mod:`millpond.keyhash`, Spark's ``xxhash64``),
    as ``schema`` (Catalyst's type of the input it replaces). One Python task per view where
    there were two, and no round trip through the JVM between them."""

    task: Task
    query: str | None
    columns: tuple[tuple[str, str], ...]  # (output name, the task's output column) when query is None
    key: tuple[str, ...]
    schema: pa.Schema
    side: int | None = None  # a join's side these rows are (the join's other side is read from the log)
    combine: "Combine | None" = None  # an aggregate's delta: the output combined per group (and value) ...
    having: tuple[str, ...] = ()  # ... keeping the partials where one of these is not 0

    def __call__(self, out: pl.DataFrame, schema: pa.Schema) -> pl.DataFrame:
        table = out.to_arrow().cast(schema)
        if self.combine is not None:
            table = self.combine(table, pa.schema([f for f in self.schema if f.name != KH]))
            if self.having:
                table = pl.from_arrow(table).filter(pl.any_horizontal([pl.col(c) != 0 for c in self.having])).to_arrow()
        elif self.query is not None:
            table = select_records(self.query, table)
        else:
            table = pa.table({name: table.column(src) for name, src in self.columns})
        if self.side is not None:
            table = table.append_column(SIDE, pa.array(np.full(len(table), self.side, np.int8)))
        table = table.append_column(KH, pa.array(xxhash64([table.column(k) for k in self.key])))
        return pl.from_arrow(conform(table, self.schema))


def _profile(name: str, partition: int, rows_in: int, rows_out: int, times: dict[str, float]) -> None:
    """One line per task in ``$MILLPOND_PROFILE`` (a local file; benchmarks/per_row.py reads it):
    seconds waiting for the input (the JVM's transfer, after the shuffle read), applying the
    operator and writing its state."""
    line = json.dumps({"op": name, "partition": partition, "rows_in": rows_in,
                       "rows_out": rows_out, **{k: round(v, 4) for k, v in times.items()}})
    with open(os.environ[PROFILE_ENV], "a") as f:
        f.write(line + "\n")



"""The body of one stateful ``mapInArrow`` stage: steps 3c–3e of the epoch protocol
(:mod:`millpond.engine.coordinator`).

A task runs its operator's step over the partition's delta (:func:`millpond.engine.step.run_step`:
open the state parts at the last committed epoch, apply, write each part's state rows as one SST
named by (version, epoch, attempt, state, partition)) and emits its output changelog. Tasks are
deterministic for a given input, so a retried or speculative task rewrites the same files with
the same bytes; files of a failed attempt are never referenced (the coordinator lists only its
own attempt's prefix).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Iterator

import polars as pl
import pyarrow as pa
from pyspark import TaskContext

from millpond.columns import VN
from millpond.engine.operators import Operator
from millpond.engine.step import run_step
from millpond.store.manifest import Levels
from millpond.store.objects import open_store

__all__ = ["Task", "CONSUMER", "IPC"]

CONSUMER = "_consumer"  # a final task's output: the consumer key ...
IPC = "_ipc"  # ... and its changelog as one Arrow IPC stream


@dataclass(frozen=True)
class Task:
    """The picklable body of one stateful ``mapInArrow`` stage."""

    op: Operator
    root: str
    storage: dict[str, str]
    epoch: int
    attempt: str
    base_version: int
    object_id: int
    node_id: int
    levels: dict[str, Levels]
    out_schema: pa.Schema
    consumer: str | None
    emit: bool  # False: write state only (a table's materialize: its changelog is its log)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        delta = pl.from_arrow(pa.Table.from_batches(batches))
        if VN in delta.columns:
            delta = delta.drop(VN)
        out = run_step(self.op, delta, open_store(self.root, self.storage), self.levels, epoch=self.epoch,
                       attempt=self.attempt, base_version=self.base_version, object_id=self.object_id,
                       node_id=self.node_id, partition=TaskContext.get().partitionId())
        if out.height == 0 or not self.emit:
            return
        if self.consumer is None:
            yield from out.to_arrow().cast(self.out_schema).to_batches()
            return
        sink = io.BytesIO()
        table = out.to_arrow()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        yield pa.RecordBatch.from_pydict({CONSUMER: [self.consumer], IPC: [sink.getvalue()]}, schema=self.out_schema)



"""A stateful task's input in bounded groups: what a task holds is bounded by a setting, not by data.

A task's input arrives from Spark as Arrow batches. While they add up to at most the budget
(:func:`millpond.engine.step.step_bytes`), they are one group, applied at once as before. Past it,
every batch is spilled to a local file per range of its rows' key hashes (the top bits of
``_kh``: :data:`BUCKETS` ranges, in key order), :data:`GATHER` bytes of batches in memory at a time
(cut into ranges together, so that each range gets one large write); the files are then
read back in groups of neighbouring ranges of about the budget each. Groups hold disjoint keys,
so the operator applies them one after the other as it would apply partitions
(:mod:`millpond.engine.step`), and which rows a group holds follows from the rows alone (a retried
task makes the same groups, whatever order its batches arrive in).
"""

from __future__ import annotations

import os
import tempfile
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from millpond.columns import KH
from millpond.engine.step import content_bytes, row_bytes

__all__ = ["groups", "BUCKETS"]

BUCKETS = 64  # ranges of key hashes a spilled input is cut into: the top 6 bits of _kh
_SHIFT = 64 - 6
GATHER = 16 << 20  # bytes of input batches cut into ranges at once, so that each range's write is large


def groups(batches: Iterable[pa.RecordBatch], budget: int) -> Iterator[list[pa.RecordBatch]]:
    """``batches`` (the empty ones dropped) as groups of disjoint key hashes, each about ``budget``
    bytes (:func:`~millpond.engine.step.content_bytes`): one group when they fit,
    or when they carry no ``_kh``."""
    it = iter(batches)
    held, size = [], 0
    for batch in it:
        if batch.num_rows:
            held.append(batch)
            size += content_bytes(batch)
        if size > budget and KH in batch.schema.names:
            break
    else:
        yield held
        return
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None  # an executor's scratch disk, if named
    with tempfile.TemporaryDirectory(prefix="millpond-spill-", dir=local) as folder:
        yield from _spilled(folder, held, it, budget)


def _spilled(folder: str, held: list[pa.RecordBatch], rest: Iterator[pa.RecordBatch], budget: int
             ) -> Iterator[list[pa.RecordBatch]]:
    writers: dict[int, ipc.RecordBatchStreamWriter] = {}
    sizes = np.zeros(BUCKETS, dtype=np.int64)
    schema = held[0].schema

    def spill(batches: list[pa.RecordBatch]) -> None:
        rows = pa.Table.from_batches(batches, schema)
        bucket = (rows.column(KH).to_numpy() >> _SHIFT) + BUCKETS // 2  # signed: ranges in key order
        order = np.argsort(bucket, kind="stable")
        counts = np.bincount(bucket, minlength=BUCKETS)
        sizes[:] += np.bincount(bucket, weights=row_bytes(rows), minlength=BUCKETS).astype(np.int64)
        rows = rows.take(pa.array(order))
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        for b in np.flatnonzero(counts).tolist():  # a loop per range present in the batches
            if b not in writers:
                writers[b] = ipc.new_stream(os.path.join(folder, f"{b:02d}.arrows"), schema)
            writers[b].write_table(rows.slice(int(starts[b]), int(counts[b])))

    def incoming() -> Iterator[pa.RecordBatch]:
        held.reverse()
        while held:  # each held batch let go once gathered
            yield held.pop()
        yield from rest

    # Spark's batches are ~10,000 rows: each cut alone in 64 ranges made thousands of writes of a few
    # KB (TPC-H Q21's first epoch at SF 1: its join tasks spent about half their time spilling)
    gathered, size = [], 0
    for batch in incoming():
        if batch.num_rows:
            gathered.append(batch)
            size += batch.nbytes
        if size >= GATHER:
            spill(gathered)
            gathered, size = [], 0
    if gathered:
        spill(gathered)
    for writer in writers.values():
        writer.close()
    group: list[int] = []
    for b in sorted(writers):
        if group and sizes[group].sum() + sizes[b] > budget:
            yield _read(folder, group)
            group = []
        group.append(b)
    if group:
        yield _read(folder, group)


def _read(folder: str, buckets: list[int]) -> list[pa.RecordBatch]:
    """The rows of ``buckets``, as few batches: each input batch was spilled in up to
    :data:`BUCKETS` pieces, and polars over thousands of chunks of a few rows is slow (a join's
    apply over 515,000 rows: 0.9 s, against 0.7 s over 3M rows in large batches)."""
    pieces = []
    for b in buckets:
        path = os.path.join(folder, f"{b:02d}.arrows")
        with ipc.open_stream(path) as reader:
            pieces.extend(reader)
        os.remove(path)  # read: its disk space goes now
    return pa.Table.from_batches(pieces).combine_chunks().to_batches()

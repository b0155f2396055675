"""One stateful step of an epoch (steps 3c–3d of the epoch protocol, :mod:`millpond.engine.coordinator`):
open an operator's state parts at the last committed version, apply a delta, write each part's
state rows as this attempt's SST. A Spark task runs it per partition (:mod:`millpond.spark.task`);
the driver runs it for a flow's merge (:mod:`millpond.engine.flows`), as partition 0 of its own
state tables (no task writes those).

A delta larger than :func:`step_bytes` is applied in steps, each over the rows of one range of
key hashes (:func:`run_steps`): what a task holds while it applies and writes is bounded by the
setting, not by the data (a backfill's join over 3M lineitems held 5x its 580 MB delta at once).
An operator reads and writes state only under its input rows' ``_kh`` (that is what lets
partitions by vnode run apart), so steps over disjoint ranges of it are independent, as
partitions are: each reads the committed state, and their files hold disjoint keys. The ranges
follow from the rows alone, so a retried task writes the same files.
"""

from __future__ import annotations

import os
import time
from typing import Mapping

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from millpond import faults, paths
from millpond.columns import KH
from millpond.engine import plan as P
from millpond.engine.operators import Operator
from millpond.store.manifest import Levels
from millpond.store.objects import ObjectStore
from millpond.store.state_table import StateTable, write_state

__all__ = ["run_step", "run_steps", "step_bytes", "content_bytes"]


def step_bytes() -> int:
    """How much delta a task applies at once, at most (``MILLPOND_STEP_BYTES``, default 128 MiB);
    the driver reads it at every epoch and hands it to the tasks with the epoch's descriptor."""
    return int(os.environ.get("MILLPOND_STEP_BYTES", 128 << 20))


def run_step(op: Operator, delta: pl.DataFrame, store: ObjectStore, levels: Mapping[str, Levels], *, epoch: int,
             attempt: str, base_version: int, object_id: int, node_id: int, partition: int,
             times: dict[str, float] | None = None, step: str = "") -> pl.DataFrame:
    """``op`` over ``delta`` and its state at ``levels`` (by part name); its state rows written
    under ``sst_key(base_version, epoch, attempt, <state>, partition, step)``. Returns the output
    changelog. ``times``: gets the seconds spent applying (``apply``) and writing state (``write``)."""
    started = time.perf_counter()
    parts = op.parts()
    states = {name: StateTable(store, levels[name], part.keys, additive=part.additive,
                               name=P.state_id(object_id, node_id, name))
              for name, part in parts.items()}
    out, writes = op.apply(delta, states)
    applied = time.perf_counter()
    faults.point("task.before_state")
    for part, rows in writes.items():
        sid = P.state_id(object_id, node_id, part)
        write_state(store, paths.sst_key(base_version, epoch, attempt, sid, partition, step), rows, epoch,
                    keys=parts[part].keys, additive=parts[part].additive)
    faults.point("task.after_state")
    if times is not None:
        times["apply"] = times.get("apply", 0.0) + applied - started
        times["write"] = times.get("write", 0.0) + time.perf_counter() - applied
    return out


def run_steps(op: Operator, delta: pl.DataFrame, store: ObjectStore, levels: Mapping[str, Levels], *, epoch: int,
              attempt: str, base_version: int, object_id: int, node_id: int, partition: int,
              times: dict[str, float] | None = None, step: str = "", budget: int) -> pl.DataFrame:
    """:func:`run_step` over ``delta`` in steps of about ``budget`` bytes, each over one range of
    its key hashes (the module docstring); one step when it is smaller. The output changelog."""
    ranges = key_ranges(delta, budget)
    if len(ranges) == 1:
        return run_step(op, delta, store, levels, epoch=epoch, attempt=attempt, base_version=base_version,
                        object_id=object_id, node_id=node_id, partition=partition, times=times, step=step)
    outs = []
    for i, (lo, hi) in enumerate(ranges):  # a loop per step: one slice of the delta held at a time
        kh = pl.col(KH)
        part = delta.filter((kh >= lo) if hi is None else (kh >= lo) & (kh < hi))
        outs.append(run_step(op, part, store, levels, epoch=epoch, attempt=attempt, base_version=base_version,
                             object_id=object_id, node_id=node_id, partition=partition, times=times,
                             step=f"{step}-{i:02d}"))
        del part
    return pl.concat(outs, how="vertical_relaxed")


def content_bytes(rows: pa.Table | pa.RecordBatch) -> int:
    """The bytes of ``rows``' values, from the values alone (:func:`row_bytes`). A task cuts its
    input by this count, which does not depend on how Spark happened to batch the rows (buffer
    sizes do), so a retried task cuts it where the first attempt did and writes the same files."""
    return int(row_bytes(rows).sum())


def row_bytes(rows: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Each row's bytes: fixed-width columns by their width, strings and binaries by their length
    (and an offset), lists and structs by their share of the column as stored."""
    out = np.zeros(rows.num_rows, dtype=np.int64)
    for f, column in zip(rows.schema, rows.columns):  # a loop per column
        t = f.type
        if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            out += 8 + pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            try:
                out += max(1, t.bit_width // 8)
            except ValueError:  # a list, a struct, a map
                out += column.nbytes // max(1, len(column))
    return out


def key_ranges(delta: pl.DataFrame, budget: int) -> list[tuple[int, int | None]]:
    """Ranges ``[lo, hi)`` of ``_kh`` (``hi`` None: unbounded) that split ``delta`` into parts of
    about ``budget`` bytes (:func:`content_bytes`); a key's rows all fall in one. One range when it
    fits, or has no ``_kh``."""
    if delta.height < 2 or KH not in delta.columns:
        return [(-(1 << 63), None)]
    n = -(-content_bytes(delta.to_arrow()) // budget)
    if n <= 1:
        return [(-(1 << 63), None)]
    kh = np.sort(delta.get_column(KH).to_numpy())
    cuts = np.unique(kh[(np.arange(1, n) * kh.size) // n])  # the rows' own key hashes: deterministic
    cuts = cuts[cuts > kh[0]]
    bounds = [-(1 << 63), *cuts.tolist()]
    return [(lo, hi) for lo, hi in zip(bounds, [*cuts.tolist(), None])]

"""One stateful step of an epoch (steps 3c–3d of the epoch protocol, :mod:`millpond.engine.coordinator`):
open an operator's state parts at the last committed version, apply a delta, write each part's
state rows as this attempt's SST. A Spark task runs it per partition (:mod:`millpond.spark.task`);
the driver runs it for a flow's merge (:mod:`millpond.engine.flows`), as partition 0 of its own
state tables (no task writes those).
"""

from __future__ import annotations

import time
from typing import Mapping

import polars as pl

from millpond import faults, paths
from millpond.engine import plan as P
from millpond.engine.operators import Operator
from millpond.store.manifest import Levels
from millpond.store.objects import ObjectStore
from millpond.store.state_table import StateTable, write_state

__all__ = ["run_step"]


def run_step(op: Operator, delta: pl.DataFrame, store: ObjectStore, levels: Mapping[str, Levels], *, epoch: int,
             attempt: str, base_version: int, object_id: int, node_id: int, partition: int,
             times: dict[str, float] | None = None) -> pl.DataFrame:
    """``op`` over ``delta`` and its state at ``levels`` (by part name); its state rows written
    under ``sst_key(base_version, epoch, attempt, <state>, partition)``. Returns the output changelog.
    ``times``: gets the seconds spent applying (``apply``) and writing state (``write``)."""
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
        write_state(store, paths.sst_key(base_version, epoch, attempt, sid, partition), rows, epoch,
                    keys=parts[part].keys, additive=parts[part].additive)
    faults.point("task.after_state")
    if times is not None:
        times["apply"], times["write"] = applied - started, time.perf_counter() - applied
    return out

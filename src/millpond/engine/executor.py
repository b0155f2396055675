"""The epoch executor interface: what the coordinator needs from an execution engine.

The coordinator (:mod:`millpond.engine.coordinator`) decides *what* an epoch does; an
:class:`EpochExecutor` runs it — step 3 of the epoch protocol written there. millpond's executor
is Spark (:class:`millpond.spark.SparkExecutor`), handed to the coordinator by the entry points
(``millpond.connect``); nothing in the engine imports pyspark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import pyarrow as pa

from millpond.catalog import TableDef
from millpond.engine import plan as P
from millpond.engine.changefeed import Written
from millpond.engine.consumers import Consumer
from millpond.engine.partial import PartialStep
from millpond.log import Piece
from millpond.store.manifest import Manifest

__all__ = ["EpochJob", "EpochExecutor", "Ranges", "Work", "PieceSource", "ViewInput"]


@dataclass(frozen=True)
class ViewInput:
    """A view that other views read, in one epoch: its rows' schema, its rows state id (a reader's
    first epoch starts from its rows), and its changes in this epoch (None: none)."""

    schema: pa.Schema
    state: str
    changes: Written | None = None


Ranges = dict[str, tuple[int, int]]  # channel -> [start, stop) of this epoch
Work = tuple[Consumer, Ranges]
PieceSource = Callable[[str, int, int], list[Piece]]  # (channel, start, stop) -> where the records are


@dataclass(frozen=True)
class EpochJob:
    """One epoch attempt, as handed to the executor (picklable: tasks get what they need of it)."""

    root: str
    storage: dict[str, str]  # object-store options, shipped to every task
    epoch: int
    attempt: str
    parallelism: int
    manifest: Manifest  # last committed: tasks read state at this epoch
    # consumer -> {channel: the table's consumer}: a new view's or flow's first epoch starts from the
    # table's rows in ``manifest`` and reads its log from that consumer's offset on (batch mode)
    batch: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # consumer -> the keys a partial view reads its table for, fills and evicts in this epoch
    partial: Mapping[str, PartialStep] = field(default_factory=dict)
    # consumer -> (first, last, parts): a view filling in bounded epochs reads those parts of its
    # batch tables' rows, and their log only for the keys of the parts read so far (engine/filling.py)
    slices: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)


class EpochExecutor(Protocol):
    def run(self, job: EpochJob, work: Sequence[Work], tables: Mapping[str, TableDef], pieces: PieceSource,
            views: Mapping[str, ViewInput] | None = None) -> dict[str, Written | None]:
        """Run step 3 of the epoch protocol for every consumer in ``work`` as one job: read the
        ranges (and the ``views`` they read: their changes, computed by an earlier job of the
        epoch), evaluate the plans, and have every stateful task write its state delta under
        ``sst_attempt_prefix(job.manifest.version, job.epoch, job.attempt)`` and every view's final
        task its changes (:mod:`millpond.engine.changefeed`). Return the files of each consumer's
        changes by consumer key (None: none; always for tables: their changes are their log).
        Raise on any failure: the coordinator then commits nothing."""

    def partials(self, job: EpochJob, work: Work, tables: Mapping[str, TableDef], pieces: PieceSource) -> pa.Table:
        """A flow's trigger (``work[0].merge``): the partial aggregates of the records its ranges
        hold, one row per (group, min/max/distinct values) with the group's key hash ``_kh``,
        computed by the executor (:mod:`millpond.engine.flows`). Raise on any failure."""

    def output_schema(self, plan: P.Materialize, tables: Mapping[str, TableDef],
                      views: Mapping[str, pa.Schema] | None = None) -> pa.Schema:
        """The Arrow schema of a plan's rows, without running it (CREATE MATERIALIZED VIEW)."""

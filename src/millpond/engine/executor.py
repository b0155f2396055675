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
from millpond.engine.flows import Expiry, Merge
from millpond.engine.partial import PartialKey, PartialStep
from millpond.log import Piece
from millpond.store.manifest import Manifest

__all__ = ["Consumer", "EpochJob", "EpochExecutor", "Ranges", "Work", "PieceSource", "ViewInput"]


@dataclass(frozen=True)
class Consumer:
    """Something that reads table channels and keeps state: a table, an index, a view or a flow."""

    key: str  # "o<object id>", the manifest's offsets key and state id prefix
    object_id: int
    name: str
    plan: P.Materialize | P.Arrange  # Arrange: an index's
    columns: tuple[str, ...]  # output columns (the rows state's key)
    log_only: bool = False  # a key-less table: its log is its rows; epochs only advance its offsets
    on_error: str = "fail"  # a data error in its expressions: "fail" (the view is isolated) or "null"
    sql: str = ""  # a view's SQL as the user wrote it (its errors name the column's expression in it)
    sink: str | None = None  # a flow: the table its changes are written into
    expiry: Expiry | None = None  # a flow's EXPIRE AFTER
    merge: Merge | None = None  # a flow whose trigger merges Spark's partial aggregates on the driver
    fed_by: str | None = None  # a flow's sink table: the flow's key (its rows are the flow's; it runs no epochs)
    partial: PartialKey | None = None  # a partial view's key (millpond.engine.partial)
    views: tuple[str, ...] = ()  # the views whose changes it reads (computed before it in an epoch)
    schema: pa.Schema | None = None  # a view's or flow's rows: its changes are written with these types


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

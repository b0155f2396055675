"""The consumers of a catalog, one class per kind: every table's own materialization and every
index's, view's and flow's stored plan. A kind says what the epoch protocol does with it
(:mod:`millpond.engine.coordinator`): when it sits out, how its first epoch reads, whether it runs
in the job, where its rows are.

Only a table with a primary key keeps rows of its own (ingest resolves upserts against them). A
key-less table's log *is* its rows: every record carries the row's identity (``_row_id``) and
weight, so its consumer only advances offsets and a read consolidates the log
(:meth:`millpond.engine.runtime.Runtime.snapshot`). A flow's sink table keeps no rows of its own
either: they are its flow's (the flow's rows state), so it runs no epochs while the flow exists;
after ``DROP FLOW`` it materializes its log like any table (from where it left off, or from the
start). An index (``CREATE INDEX``) is a consumer of its table that keeps the table's rows arranged
by the index's columns (:class:`~millpond.engine.plan.Arrange`) for the views that read it. A
partial view's consumer carries its key (:mod:`millpond.engine.partial`).
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import ClassVar, Mapping

import pyarrow as pa

from millpond.catalog import Catalog, IndexDef, TableDef, ViewDef, replacement
from millpond.columns import ROW_ID
from millpond.engine import plan as P
from millpond.engine.changefeed import Change, rows_of
from millpond.engine.flows import EXPIRED, SINK_OWED, Expiry, Merge, expiry_floors, shape
from millpond.engine.operators.materialize import Materialize
from millpond.engine.partial import PartialKey, trace
from millpond.store.manifest import Levels, Manifest
from millpond.store.objects import ObjectStore
from millpond.store.state_table import StateTable

__all__ = ["Consumer", "KeyedTable", "KeylessTable", "FlowTarget", "Index", "View", "PartialView", "Flow",
           "table_plan", "index_plan", "table_rows_state", "index_rows_state", "committed_rows", "consumers"]


log = logging.getLogger(__name__)
Ranges = Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class Consumer:
    """Something that reads table channels and keeps state (its kind: a subclass below)."""

    key: str  # "o<object id>", the manifest's offsets key and state id prefix
    object_id: int
    name: str
    plan: P.Materialize | P.Arrange  # Arrange: an index's
    columns: tuple[str, ...]  # output columns (the rows state's key)
    on_error: str = "fail"  # a data error in its expressions: "fail" (the view is isolated) or "null"
    sql: str = ""  # a view's SQL as the user wrote it (its errors name the column's expression in it)
    schema: pa.Schema | None = None  # a view's or flow's rows: its changes are written with these types
    defaults: tuple[pa.Field, ...] = ()  # a table's columns its older rows lack (TableDef.defaults)

    # what its kind says (a kind overrides; the unannotated ones are fields of the kinds that have them)
    views = ()  # the views whose changes it reads, computed before it in an epoch (View.views)
    partial = None  # a partial view's key (PartialView.partial)
    merge = None  # a flow's trigger merging Spark's partial aggregates on the driver (Flow.merge)
    fed_by = None  # a flow's sink table: the flow's key (FlowTarget.fed_by)
    log_only: ClassVar[bool] = False  # a key-less table: its log is its rows; epochs only advance its offsets
    derived: ClassVar[bool] = False  # computed from tables (an index, a view, a flow): its first epoch reads their rows
    runs_new: ClassVar[bool] = False  # runs in its first epoch even when no record is new (COUNT(*) shows 0)
    keeps_rows: ClassVar[bool] = True  # its committed rows are in its own rows state (else: its log, its flow's)

    @property
    def rows_state(self) -> str:
        """The id of the state its committed rows are kept in (its final node's ``rows`` part)."""
        return P.state_id(self.object_id, self.plan.node_id, "rows")

    def rows(self, store: ObjectStore, manifest: Manifest, *, columns: tuple[str, ...] | None = None) -> StateTable:
        """Its committed rows (its final materialize state) in ``manifest``: by its row key, or with
        ``columns`` (some of :attr:`columns`) a projection read by :func:`committed_rows`."""
        levels = manifest.state(self.rows_state)
        if columns is not None:
            return committed_rows(store, levels, columns, name=self.rows_state, defaults=self.defaults)
        part = Materialize(self.columns, self.name).parts()["rows"]
        return StateTable(store, levels, part.keys, additive=part.additive, name=self.rows_state,
                          defaults=self.defaults)

    @property
    def encoded_defaults(self) -> str:
        """:attr:`defaults` as the manifest keeps them for compaction (``Manifest.defaults``)."""
        return base64.b64encode(pa.schema(self.defaults).serialize().to_pybytes()).decode()

    def ranges(self, catalog: Catalog, manifest: Manifest, ends: dict[str, int]) -> dict[str, tuple[int, int]]:
        """What it reads of each table channel its plan reads this epoch: from its committed offset
        in ``manifest`` to the log snapshot's end (``ends``)."""
        done = manifest.offsets.get(self.key, {})
        channels = {catalog.tables[s.table].channel for s in P.sources(self.plan) if s.table in catalog.tables}
        return {ch: (done.get(ch, 0), ends[ch]) for ch in channels}

    def read_up_to(self, offsets: Mapping[str, int], ranges: Ranges, epoch: int, marks: Mapping[str, int],
                   change: Change) -> dict[str, int]:
        """Its offsets in the commit of ``epoch`` (step 4), which read ``ranges`` and made ``change``
        (``marks``: what its tasks reported beside it): the end of each range it read."""
        return {**offsets, **{ch: b for ch, (_, b) in ranges.items()}}

    def expires(self, offsets: Mapping[str, int]) -> dict[str, list]:
        """The floors below which compaction drops its states' rows, given its committed ``offsets``
        (the manifest's ``expiry``): none but an expiring flow's."""
        return {}

    def sits_out(self, manifest: Manifest) -> bool:
        """Whether it takes no part in epochs now: isolated by a data error (its state and offsets
        stay at its last good epoch)."""
        return self.key in manifest.failed

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class KeyedTable(Consumer):
    """A table with a primary key: its rows, kept by key (ingest resolves upserts against them)."""


@dataclass(frozen=True)
class KeylessTable(Consumer):
    """A table without a key: its log is its rows; it takes no part in the job."""

    log_only: ClassVar[bool] = True
    keeps_rows: ClassVar[bool] = False


@dataclass(frozen=True)
class FlowTarget(Consumer):
    """A flow's sink table: its rows are the flow's (``fed_by``); it runs no epochs while the flow exists."""

    fed_by: str = ""  # the flow's key: its rows are the flow's
    keeps_rows: ClassVar[bool] = False

    def sits_out(self, manifest: Manifest) -> bool:
        return True


@dataclass(frozen=True)
class Index(Consumer):
    """An index: its table's rows arranged by its columns, for the views that read it."""

    derived: ClassVar[bool] = True
    runs_new: ClassVar[bool] = True


@dataclass(frozen=True)
class View(Consumer):
    """A materialized view: its plan's rows."""

    views: tuple[str, ...] = ()  # the views whose changes it reads (computed before it in an epoch)
    derived: ClassVar[bool] = True
    runs_new: ClassVar[bool] = True


@dataclass(frozen=True)
class PartialView(View):
    """A view that holds the keys read from it (``partial``, :mod:`millpond.engine.partial`)."""

    partial: PartialKey | None = None  # its key, traced to the sources it filters


@dataclass(frozen=True)
class Flow(Consumer):
    """A flow: its trigger's partial aggregates merged on the driver (``merge``), its changes written
    into its sink table (``sink``) after the commit."""

    sink: str = ""  # the table its changes are written into
    expiry: Expiry | None = None  # its EXPIRE AFTER
    merge: Merge | None = None  # its trigger's shape, merged on the driver (None: Spark's stages run it)
    derived: ClassVar[bool] = True

    def read_up_to(self, offsets: Mapping[str, int], ranges: Ranges, epoch: int, marks: Mapping[str, int],
                   change: Change) -> dict[str, int]:
        """Also its window expiry (``marks``: :mod:`millpond.engine.flows`), and, when the epoch
        changed its rows, that the epoch's changes are owed to its sink table."""
        out = super().read_up_to(offsets, ranges, epoch, marks, change)
        if marks:
            if marks[EXPIRED] > out.get(EXPIRED, 0):
                log.warning("flow %r: %d late changes to expired windows were dropped at epoch %d (%d so far)",
                            self.name, marks[EXPIRED] - out.get(EXPIRED, 0), epoch, marks[EXPIRED])
            out.update(marks)
        if rows_of(change):
            out[SINK_OWED] = epoch
        return out

    def expires(self, offsets: Mapping[str, int]) -> dict[str, list]:
        """Its windows' aggregation states older than its EXPIRE AFTER (:func:`~millpond.engine.flows.expiry_floors`)."""
        return expiry_floors(self.object_id, self.merge, self.expiry, offsets)


def table_plan(table: TableDef) -> P.Materialize:
    """A table's own materialization: its changelog kept as rows (including ``_row_id``), addressed
    by its primary key (tables made before catalog format 10: by every column)."""
    columns = [*(c.name for c in table.columns), ROW_ID]
    return P.Materialize(P.Source(table.name, tuple((c, c) for c in columns)), node_id=1,
                         key=table.primary_key if table.key_hashed else ())


def index_plan(index: IndexDef, table: TableDef) -> P.Arrange:
    """An index's consumer: every column of the table (as the index was created: none added since),
    arranged by the index's columns."""
    columns = table.as_seen_by(index.id).columns
    return P.Arrange(P.Source(table.name, tuple((c.name, c.name) for c in columns)), index.columns, node_id=1)


def table_rows_state(table: TableDef) -> str:
    """The id of the state ``table``'s own consumer keeps its rows in (:attr:`Consumer.rows_state`),
    for a reader that has the table but not its consumer (a Spark task)."""
    return P.state_id(table.id, table_plan(table).node_id, "rows")


def index_rows_state(index_id: int) -> str:
    """The id of the state index ``index_id`` keeps its table's rows in (:func:`index_plan`'s node 1)."""
    return P.state_id(index_id, 1, "rows")


def committed_rows(store: ObjectStore, levels: Levels, columns: tuple[str, ...], *,
                   name: str = "state", defaults: tuple[pa.Field, ...] = ()) -> StateTable:
    """The one reader of a relation's committed rows, its columns ``columns`` only, from its rows
    state's ``levels`` (:meth:`Consumer.rows`; a Spark task is shipped the levels): the multiset of
    the rows' projection, a row's copies perhaps apart (its counts are summed only when one nets
    against another), which converts none of the other columns."""
    return StateTable(store, levels, columns, additive=True, name=name, summed=False, defaults=defaults)


def consumers(catalog: Catalog, view_plans: dict[str, P.Materialize]) -> list[Consumer]:
    """Tables first, then indexes, then views (and new definitions backfilling beside them, under
    :func:`~millpond.catalog.replacement` names) and flows with their plans (``view_plans`` by name)."""
    fed = {f.sink: f"o{f.id}" for f in catalog.flows.values()}
    out: list[Consumer] = []
    for t in catalog.tables.values():
        row = (f"o{t.id}", t.id, t.name, table_plan(t), (*(c.name for c in t.columns), ROW_ID))
        out.append(FlowTarget(*row, fed_by=fed[t.name], defaults=t.defaults) if t.name in fed else
                   KeyedTable(*row, defaults=t.defaults) if t.primary_key else KeylessTable(*row, defaults=t.defaults))
    out += [Index(f"o{i.id}", i.id, i.name, index_plan(i, catalog.tables[i.table]), ())
            for i in catalog.indexes.values()]
    named = [*((v.name, v) for v in catalog.views.values()),
             *((replacement(v.name), v) for v in catalog.replacing.values())]
    for name, v in named:
        partial = _partial(catalog, v, view_plans[name])
        read = {s.table for s in P.sources(view_plans[name])} & {n for n, _ in named}
        common = dict(on_error=v.on_error, sql=v.sql, schema=v.schema, views=tuple(sorted(read)))
        row = (f"o{v.id}", v.id, name, view_plans[name], tuple(v.schema.names))
        out.append(View(*row, **common) if partial is None else PartialView(*row, **common, partial=partial))
    out += [Flow(f"o{f.id}", f.id, f.name, view_plans[f.name], tuple(f.schema.names), sql=f.sql, sink=f.sink,
                 schema=f.schema, expiry=Expiry(f.key, f.time_key, f.expire_micros) if f.expire_micros else None,
                 merge=shape(view_plans[f.name], f.schema, f.time_key, f.cluster))
            for f in catalog.flows.values()]
    return out


def _partial(catalog: Catalog, view: ViewDef, plan: P.Materialize) -> PartialKey | None:
    """A partial view's key, traced to the source nodes of its plan that it filters: the one its
    key column is read from, and those joined to it on the key that are of the same type and keep
    rows to be filled from (a table with a primary key, not a flow's sink)."""
    if not view.partial:
        return None
    (first, column), *others = trace(plan, view.partial["key"])

    def kind(source: P.Source, col: str) -> str:
        return {c.name: c.type for c in catalog.tables[source.table].columns}[col]
    sinks = {f.sink for f in catalog.flows.values()}
    others = [(s, c) for s, c in others if s.table in catalog.tables and kind(s, c) == kind(first, column)
              and catalog.tables[s.table].primary_key and s.table not in sinks]
    return PartialKey(view.partial["key"], ((first, column), *others), view.partial["max_keys"])

"""One open root below SQL: the catalog in force and its consumers, the log and the coordinator.

The SQL layer changes the catalog (:meth:`Runtime.commit_catalog`), ingest appends to tables'
channels, and epochs run over the consumers (:meth:`Runtime.flush`). Every view's consumer runs
the plan stored with it in the catalog. Callers serialize access with :attr:`Runtime.lock`.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections import deque
from typing import Any, Callable, ContextManager, Iterator
from datetime import datetime, timezone

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from millpond.catalog import Catalog, CatalogStore, TableDef, ViewDef, index_dependency, replacement
from millpond.columns import EPOCH, ROW_ID, W
from millpond.engine import alter
from millpond.engine import plan as P
from millpond.engine.changefeed import net
from millpond.engine.changelog import consolidate
from millpond.engine.coordinator import Coordinator, describe_failure
from millpond.engine.epoch import EpochPlan, EpochReport, EpochStep
from millpond.engine.consumers import Consumer, consumers
from millpond.engine.executor import EpochExecutor
from millpond.engine.flow_targets import FlowTargets
from millpond.engine.jobs import Jobs
from millpond.engine.partial import Wanted, filled_rows, missing, read_filled
from millpond.engine.reads import Installed, Reads, consolidate_rows
from millpond.engine.sinks import Sinks
from millpond.engine.tally import Tally
from millpond.engine.upkeep import LogUpkeep
from millpond.errors import CancelledError, CatalogError, MillpondError, MillpondNotice, RetentionError, SqlError
from millpond.log import Channel, Log
from millpond.store.manifest import Manifest
from millpond.store.objects import ObjectStore

__all__ = ["Runtime", "SYSTEM_VIEWS"]

logger = logging.getLogger(__name__)

HISTORY = 1000  # epochs of this process kept for ``millpond_epochs``

_VIEWS_SCHEMA = pa.schema([
    ("name", pa.string()), ("status", pa.string()), ("epoch", pa.int64()), ("lag", pa.int64()),
    ("state_bytes", pa.int64()), ("on_error", pa.string()), ("error", pa.string())])
_EPOCHS_SCHEMA = pa.schema([
    ("epoch", pa.int64()), ("committed_at", pa.timestamp("us", tz="UTC")), ("seconds", pa.float64()),
    ("name", pa.string()), ("rows_in", pa.int64()), ("rows_out", pa.int64()), ("state_bytes", pa.int64())])


class Runtime(Reads):
    def __init__(self, catalogs: CatalogStore, catalog: Catalog, log: Log, coordinator: Coordinator,
                 sources: Callable[[Runtime], Any] | None = None):
        self.catalogs, self.log, self.coordinator = catalogs, log, coordinator
        self.lock = threading.RLock()
        self.on_error = "fail"  # what a data error does in views created from now on (SET on_error)
        self.implicit_flush = False  # every INSERT, UPDATE and DELETE statement flushes (SET implicit_flush)
        self._plans: dict[tuple[int, str], P.Materialize] = {}  # decoded view plans by view id and name
        self._local = threading.local()  # a thread's pinned version while it reads (reading())
        # the work around an epoch's consumers (engine/epoch.py: befores in order, afters reversed)
        self.history = History()
        self.tally = Tally()  # running totals for monitoring (millpond.metrics)
        self.jobs = coordinator.jobs = Jobs(coordinator.store)  # backfills under way: millpond_jobs
        coordinator.state.watch = self._compacting  # and compaction rounds
        # source tables' rows taken in (millpond.connectors.Sources, handed in by the entry points)
        self.sources = sources(self) if sources is not None else None
        self.wanted = Wanted()
        self.flow_targets = FlowTargets(self.channel, coordinator.rows)
        self.sinks = Sinks(coordinator.store, self, getattr(self.sources, "target_of", None))
        self.upkeep = LogUpkeep(log, self.channel, coordinator.changes)
        self.steps = (self.upkeep, self.history, self.tally, self.sinks, alter.Swaps(self.swap_replacements),
                      self.flow_targets, self.wanted,
                      *([self.sources] if self.sources is not None else []))
        self._install(catalog)

    # -- the catalog ------------------------------------------------------------------------------
    def commit_catalog(self, catalog: Catalog) -> None:
        """Write ``catalog`` as the next version and run its consumers from now on."""
        self._plans_of(catalog)  # a plan that cannot be read fails before anything is written
        self._install(self.catalogs.commit(catalog))

    def _install(self, catalog: Catalog) -> None:
        """Run ``catalog``'s consumers from now on (one assignment: a reader sees all of it or none)."""
        found = consumers(catalog, self._plans_of(catalog))
        by_name = {c.name: c for c in found}
        self._triggers = [(c.key, f.trigger_rows, [catalog.tables[s.table] for s in P.sources(c.plan)])
                          for f in catalog.flows.values() if f.trigger_rows and (c := by_name[f.name])]
        self._installed = Installed(catalog, found, by_name, {c.key: c for c in found})

    def _plans_of(self, catalog: Catalog) -> dict[str, P.Materialize]:
        plans = {}
        for name, v in [*((v.name, v) for v in [*catalog.views.values(), *catalog.flows.values()]),
                        *((replacement(v.name), v) for v in catalog.replacing.values())]:
            if (v.id, name) not in self._plans:  # by name too: a swap renames a new definition's sources
                if v.plan is None:
                    raise CatalogError(f"view {v.name!r} has no stored plan (bind the catalog's plans first)")
                try:
                    self._plans[v.id, name] = P.decode(v.plan)
                except (ValueError, TypeError, KeyError) as exc:
                    raise CatalogError(f"view {v.name!r}: its stored plan cannot be read: {exc}; open the root "
                                       "with the millpond version that created it") from None
            plans[name] = self._plans[v.id, name]
        return plans

    def _compacting(self, tasks: list) -> ContextManager[None]:
        """A compaction round as a job (kind ``compaction``): the relations whose state files it merges,
        and the rows it reads; numbered by the epoch it follows."""
        by_key = self._installed.by_key
        names = sorted({by_key[k].name if (k := t.state.split(".", 1)[0]) in by_key else t.state for t in tasks})
        return self.jobs.track("compaction", ", ".join(names), self.coordinator.state.manifest.epoch,
                               records=sum(ref.rows for t in tasks for ref in t.inputs))

    # -- epochs -------------------------------------------------------------------------------
    @property
    def executor(self) -> EpochExecutor:
        """What runs an epoch's step 3 (Spark; it also types a new view's rows)."""
        return self.coordinator.executor

    @property
    def manifest(self) -> Manifest:
        """The last committed version: its offsets, its isolated views, its state."""
        return self.coordinator.manifest

    @property
    def store(self) -> ObjectStore:
        return self.coordinator.store

    @property
    def parallelism(self) -> int:
        """Spark partitions of stateful stages (``SET parallelism``)."""
        return self.coordinator.parallelism

    def set_parallelism(self, n: int | None) -> None:
        """Partitions of stateful stages from the next epoch on (None: the database's default)."""
        self.coordinator.with_parallelism(self.coordinator.default_parallelism if n is None else n)

    def run_epoch(self) -> EpochReport | None:
        """One epoch over all consumers, with the work around them (the protocol in
        :mod:`millpond.engine.coordinator`, steps 0-7); views' new definitions swapped in when
        their backfill is committed (before: one a crash left unswapped)."""
        self.swap_replacements()  # one a crash left (and Swaps, after the commit)
        try:
            return self.coordinator.run_epoch(self.catalog, self.consumers, self.wanted.keys, self.steps)
        except CancelledError as exc:  # CANCEL JOB: drop what it filled, and run the epoch without it
            logger.warning("%s", exc)
            self.commit_catalog(alter.cancelled(self.catalog, exc.jobs))
            return self.run_epoch()
        except BaseException:
            self.tally.failed += 1
            raise

    def swap_replacements(self) -> list[str]:
        """Views' new definitions put in force when their backfill is committed
        (:func:`millpond.engine.alter.swap`); the views swapped."""
        return alter.swap(self)

    def truncate_logs(self) -> dict[str, int]:
        """A pass of the log's upkeep now (:mod:`millpond.engine.upkeep`; every few epochs otherwise)."""
        return self.upkeep.truncate(self.catalog, self.coordinator.manifest)

    def due(self) -> bool:
        """Whether a flow's unread input has reached its ``TRIGGER AFTER n ROWS`` (the records
        appended to its tables since its last epoch): the background loop then runs an epoch
        before its interval ends. Reads only this process's log index; takes no lock."""
        manifest = self.coordinator.manifest
        for key, rows, tables in self._triggers:
            done = manifest.offsets.get(key, {})
            if key not in manifest.failed and \
                    sum(self.log.live.end(t.channel_id) - done.get(t.channel, 0) for t in tables) >= rows:
                return True
        return False

    def flush(self, *, notice: bool = False) -> list[EpochReport]:
        """Run epochs until every view reflects all input appended so far. ``notice`` (the user's
        ``flush()`` and ``FLUSH``): when files tables' sources have errors after them, say so with
        a :class:`~millpond.errors.MillpondNotice` (shown once per distinct text, as Python shows
        warnings), also when no epoch had anything to do."""
        reports = []
        while (report := self.run_epoch()) is not None:
            reports.append(report)
        if notice and self.sources is not None and (said := self.sources.errors.notice(self.catalog)) is not None:
            logger.warning("%s", said)
            warnings.warn(said, MillpondNotice, stacklevel=3)
        return reports

    # -- partial views (engine/partial.py) ---------------------------------------------------------
    def fill(self, name: str, keys: pa.Array) -> None:
        """An upquery: make partial view ``name`` hold ``keys`` (values of its key column). Keys it
        does not hold yet are filled by an epoch run now; every key is marked read (the least
        recently read keys are evicted first)."""
        with self.lock:
            c = self._by_name[name]
            assert c.partial is not None
            kind = c.partial.key_type(self.catalog.tables)
            try:
                keys = keys.cast(kind)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SqlError(f"partial view {name!r}: a value of its key {c.partial.column!r} must be of type "
                               f"{kind}: {exc}") from None
            self.wanted.add(c.key, keys)
            if c.key in self.coordinator.manifest.failed:
                return  # its rows stay as of its last good epoch (reading it says why)
            if len(missing(self.filled(name), keys)):
                self.run_epoch()

    def filled(self, name: str) -> pa.Array:
        """The keys partial view ``name`` holds at the last committed epoch."""
        c = self._by_name[name]
        assert c.partial is not None
        kind = c.partial.key_type(self.catalog.tables)
        return filled_rows(read_filled(self.coordinator.store, self.coordinator.manifest, c.object_id, c.plan), kind)

    # -- kept changes: subscriptions and time travel (engine/changefeed.py) ---------------------
    def changes(self, name: str, after: int, upto: int | None = None) -> Iterator[pa.Table]:
        """The changes of table, view or flow ``name`` committed after epoch ``after`` up to
        ``upto`` (default: the last committed epoch): one changelog per epoch it changed in, with
        its columns, ``_w`` (+1/-1) and ``_epoch``. A :class:`~millpond.errors.RetentionError` if
        an epoch's changes are no longer kept."""
        consumer, rel = self._consumer(name)
        upto = self.coordinator.manifest.epoch if upto is None else upto
        feed, kept = self.coordinator.changes, self.catalog.kept
        lineage = rel.replaced if isinstance(rel, ViewDef) else ()  # its definitions before ALTERs
        for entry in feed.entries(after, upto, kept):
            key = next(((k, at) for k, at in lineage if entry.epoch <= at), None)
            if key is not None:  # a definition it had then; at the swap, the change to the next one's rows
                change = feed.view_changes(key[0], entry, kept)
                if entry.epoch == key[1]:
                    swap = feed.swap_changes(key[0], entry, kept)
                    if swap is None:
                        raise MillpondError(f"{name} was altered at epoch {key[1]} with other columns: its changes "
                                            f"up to that epoch and after it are not one changelog (read them from "
                                            f"epoch {key[1]} on)")
                    change = net(pa.concat_tables([c for c in (change, swap) if c is not None]))
            elif consumer.fed_by is not None:  # a flow's sink: its changes are the flow's
                change = feed.view_changes(consumer.fed_by, entry, kept)
            elif isinstance(rel, TableDef):
                if (took := entry.tables.get(consumer.key)) is None:
                    continue
                records = self.channel(rel).read(*took).drop_columns([ROW_ID])
                change = consolidate(pl.from_arrow(records)).to_arrow().cast(records.schema)
            else:
                change = feed.view_changes(consumer.key, entry, kept)
            if change is not None and change.num_rows:
                yield change.append_column(EPOCH, pa.array(np.full(change.num_rows, entry.epoch, dtype=np.int64)))

    def changelog_schema(self, name: str) -> pa.Schema:
        """The columns of ``name``'s changes: its own, ``_w`` and ``_epoch``."""
        _, rel = self._consumer(name)
        return rel.schema.append(pa.field(W, pa.int64())).append(pa.field(EPOCH, pa.int64()))

    def subscription(self, name: str, as_of: int | None, snapshot: bool) -> tuple[int, pa.Table | None]:
        """Where a subscription to ``name`` starts: the epoch after which its changes follow
        (``as_of``, default the last committed one) and, with ``snapshot``, the rows as of that
        epoch as a first changelog (all ``_w`` = +1)."""
        self._consumer(name)
        self.unfilled(name, "subscribe to it")
        last = self.coordinator.manifest.epoch
        start = last if as_of is None else as_of
        if start < 0:
            raise MillpondError(f"an epoch is a number of at least 0, got {start}")
        if not snapshot:
            return start, None
        rows = self.rows_at(name, start)
        n = rows.num_rows
        return start, rows.append_column(W, pa.array(np.ones(n, dtype=np.int64))).append_column(
            EPOCH, pa.array(np.full(n, start, dtype=np.int64)))

    def rows_at(self, name: str, epoch: int) -> pa.Table:
        """The rows of table or view ``name`` as of committed epoch ``epoch`` (time travel): the
        rows now, with the changes of the epochs since undone."""
        if (flow := self.catalog.flows.get(name)) is not None:
            raise MillpondError(f"flow {name!r} keeps its rows in its sink table {flow.sink!r}: read or subscribe to "
                                f"{flow.sink}; a subscription to the flow itself follows its changes from an epoch "
                                "(from_epoch=..., or AS OF n WITH (SNAPSHOT = false))")
        last = self.coordinator.manifest.epoch
        if epoch > last:
            raise MillpondError(f"epoch {epoch} is not committed yet (the last committed epoch is {last})")
        if epoch < 0:
            raise MillpondError(f"an epoch is a number of at least 0, got {epoch}")
        consumer, rel = self._consumer(name)
        if isinstance(rel, ViewDef) and epoch > max((at for _, at in rel.replaced), default=-1) and \
                (entry := self.coordinator.changes.entry(epoch)) is not None and consumer.key in entry.filling:
            raise MillpondError(f'materialized view "{name}" had not been populated at epoch {epoch}', sqlstate="55000",
                                hint="it was filling in bounded epochs then: read it as of an epoch after its backfill")
        now = self.snapshot(name)
        if epoch == last:
            return now
        try:
            undo = [c.drop_columns([EPOCH]) for c in self.changes(name, epoch, last)]
        except RetentionError as exc:
            oldest = exc.oldest
            error = RetentionError(f"{name} as of epoch {epoch} cannot be read: the changes since are no longer "
                                   f"kept ({'the earliest epoch readable is ' + str(oldest - 1) if oldest else 'none'}"
                                   f"; retention: {self.catalog.kept.describe()}, SET retention to keep more)")
            error.oldest = oldest
            raise error from None
        if not undo:
            return now
        ones = pa.array(np.ones(now.num_rows, dtype=np.int64))
        back = [c.set_column(c.schema.get_field_index(W), W, pc.negate(c[W])) for c in undo]
        both = pa.concat_tables([now.append_column(W, ones), *back], promote_options="permissive")
        return consolidate_rows(both).drop_columns([W]).cast(now.schema)

    def epoch_at(self, when: datetime) -> int:
        """The last epoch committed at or before ``when`` (``AS OF TIMESTAMP``)."""
        feed, last = self.coordinator.changes, self.coordinator.manifest.epoch
        at = when.timestamp()
        oldest = feed.oldest()
        if oldest is None or last == 0:
            raise RetentionError(f"no epoch committed at or before {when.isoformat()} is kept")
        lo, hi = oldest, last  # entries of [oldest, last] are kept (unless collected meanwhile)
        first = feed.entry(lo)
        if first is None or first.at > at:
            raise RetentionError(f"no epoch committed at or before {when.isoformat()} is kept (the oldest kept is "
                                 f"epoch {oldest}{', committed ' + _iso(first.at) if first else ''})")
        while lo < hi:  # the last epoch with at <= when
            mid = (lo + hi + 1) // 2
            entry = feed.entry(mid)
            if entry is not None and entry.at <= at:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _consumer(self, name: str) -> tuple[Consumer, TableDef | ViewDef]:
        rel = self.catalog.flows.get(name) or self.catalog.relation(name)
        consumer = self._by_name[name]
        if (failure := self.coordinator.manifest.failed.get(consumer.key)) is not None:
            raise MillpondError(self.describe_failure(failure))
        return consumer, rel

    # -- what the system looks like (the system views) ----------------------------------------
    def views_status(self) -> pa.Table:
        """``millpond_views``: each view's status (running, backfilling: no epoch yet or filling in
        bounded epochs, failed),
        the epoch its rows are as of, how many records of its tables it has still to read, its
        state bytes and its error."""
        manifest = self.coordinator.manifest
        rows = []
        for v in self.catalog.views.values():
            c = self._by_name[v.name]
            failure = manifest.failed.get(c.key)
            done = manifest.offsets.get(c.key)
            current = done is not None and c.key not in manifest.filling  # filled (engine/filling.py)
            tables = {self.catalog.tables[s.table] for s in P.sources(c.plan) if s.table in self.catalog.tables}
            lag = sum(max(0, self.channel(t).end - (done or {}).get(t.channel, 0)) for t in tables)
            rows.append({"name": v.name, "status": "failed" if failure else "running" if current
                         else "backfilling", "epoch": failure["epoch"] if failure else manifest.epoch if current
                         else None, "lag": lag, "state_bytes": self._state_bytes(c), "on_error": v.on_error,
                         "error": self.describe_failure(failure) if failure else None})
        return pa.Table.from_pylist(rows, schema=_VIEWS_SCHEMA)

    def jobs_status(self) -> pa.Table:
        """``millpond_jobs`` (``SHOW JOBS``): the backfills under way (:mod:`millpond.engine.jobs`)."""
        return self.jobs.table()

    def indexes_status(self) -> pa.Table:
        """``SHOW INDEXES``: each index's table and columns, its state bytes (kept once, however many
        views read it), the views that read it, and its statement."""
        indexes = sorted(self.catalog.indexes.values(), key=lambda i: i.name)
        readers = {i.name: ", ".join(sorted(v.name for v in self.catalog.views.values()
                                           if index_dependency(i.name) in v.depends_on)) or None for i in indexes}
        return pa.table({
            "name": pa.array([i.name for i in indexes], pa.string()),
            "table": pa.array([i.table for i in indexes], pa.string()),
            "columns": pa.array([", ".join(i.columns) for i in indexes], pa.string()),
            "state_bytes": pa.array([self._state_bytes(self._by_name[i.name]) for i in indexes], pa.int64()),
            "read_by": pa.array([readers[i.name] for i in indexes], pa.string()),
            "sql": pa.array([i.sql for i in indexes], pa.string()),
        })

    def describe_failure(self, failure: dict) -> str:
        """A failed view's failure, naming the failing column's expression as the user wrote it."""
        view = self.catalog.views.get(failure["name"]) or self.catalog.flows.get(failure["name"])
        return describe_failure(failure, view.sql if view is not None else None)

    def epochs(self) -> pa.Table:
        """``millpond_epochs``: the epochs this process committed (the last 1,000), one row per
        table, index or view that ran in each: records read, changes out (views), state bytes after it."""
        return pa.Table.from_pylist(list(self.history.rows), schema=_EPOCHS_SCHEMA)

    def _state_bytes(self, consumer: Consumer) -> int:
        return state_bytes(self.coordinator.manifest, consumer)

    def _system(self, name: str):  # noqa: ANN202
        return (lambda: SYSTEM_VIEWS[name](self)) if name in SYSTEM_VIEWS else None

    def channel(self, table: TableDef) -> Channel:
        return self.log.create_channel(table.channel, table.log_schema, id=table.channel_id)

    def close(self) -> None:
        if self.sources is not None:
            self.sources.close()
        self.coordinator.close()
        self.log.close()


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat()


def state_bytes(manifest: Manifest, consumer: Consumer) -> int:
    """The bytes of ``consumer``'s state files in ``manifest``."""
    prefix = consumer.key + "."
    return sum(ref.size for sid, levels in manifest.states.items() if sid.startswith(prefix) for ref in levels.files())


class History(EpochStep):
    """``millpond_epochs``' rows: one per (epoch, consumer that ran), the last :data:`HISTORY` epochs'."""

    def __init__(self) -> None:
        self.rows: deque[dict] = deque(maxlen=HISTORY)
        self._started = time.perf_counter()

    def before(self, catalog: Catalog, consumers: list[Consumer], manifest: Manifest) -> None:
        self._started = time.perf_counter()

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        seconds, now = time.perf_counter() - self._started, datetime.now(timezone.utc)
        by_name = {c.name: c for c in plan.consumers}
        for name, rows_in in report.rows_in.items():
            self.rows.append({"epoch": report.epoch, "committed_at": now, "seconds": seconds, "name": name,
                              "rows_in": rows_in, "rows_out": report.changes.rows(name) if name in report.changes else None,
                              "state_bytes": state_bytes(report.manifest, by_name[name])})
        return report


SYSTEM_VIEWS = {"millpond_views": Runtime.views_status, "millpond_epochs": Runtime.epochs,
                "millpond_jobs": lambda rt: rt.jobs_status(),
                "millpond_source_errors": lambda rt: rt.sources.errors.table(rt.catalog),
                "millpond_sources": lambda rt: rt.sources.status(rt.catalog)}


"""Sinks: a table's or view's rows kept in an external table, exactly once (``CREATE SINK``).

A sink follows its *source* (a table or view) epoch by epoch. Its first write is the source's rows
as of ``start``, the epoch committed when the sink was created; every later write carries the
changes of the epochs committed since the last one, read from the kept changes
(:mod:`millpond.engine.changefeed`), right after each epoch's commit: a sink is at most one epoch
behind its source.

- ``upsert``: the target holds the source's rows, keyed by its key (a table's primary key, a view's
  group key): per key the last epoch's row is upserted, a key whose last change removed it is
  deleted (:mod:`millpond.engine.sink_targets`: Delta Lake's ``MERGE`` by key, Iceberg's delete
  of the changed keys and append of their rows, in one commit).
- ``append-only``: every change is a row of its own, with ``_op`` (``insert`` / ``delete``) and
  ``_epoch``: the target is the source's changelog; replaying it gives the rows.

**Exactly once.** Each write is one commit of the target that also records, under the sink's
``token``, the last epoch it holds (Delta Lake: the transaction identifier ``txn``; Iceberg: a
table property set in the same commit). A sink reads that epoch back from the target before its first write in a
process, and writes only the epochs after it: a crash between millpond's commit and the target's,
or inside the target's commit (whose files are not visible before its log entry), is followed by a
write of exactly the missing epochs. An epoch that changed nothing of the source writes nothing:
the sink's progress past it is kept under the root (``sinks/<token>.json``), written only after the
target holds every change up to that epoch, so the epoch a sink resumes from is the later of the two.
A process opens a sink's target once; a failed write opens it anew.

**Retention.** The changes a sink has not written yet are kept: the coordinator collects no epoch
after the slowest sink's (:meth:`Sinks.floor`).

**Small files.** Every write adds a file or a few; every :data:`COMPACT_EVERY` writes of a process
the target's files are compacted (Delta's ``OPTIMIZE``; Iceberg's are left to its own maintenance).

**Failures.** A write that fails (the target unreachable, its table changed under the sink) leaves
the sink behind, says so in the log and in ``SHOW SINKS``, and is retried after the next epoch;
the source and the other sinks go on. Only a writable process writes sinks.
"""

from __future__ import annotations

from contextlib import nullcontext

import json
import logging
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from millpond import faults, jsonb, paths
from millpond.catalog import SinkDef, TableDef
from millpond.columns import EPOCH, W
from millpond.engine.epoch import EpochPlan, EpochReport, EpochStep
from millpond.engine.sink_targets import COMPACT_EVERY, DELETE, OP, UPSERT, Target
from millpond.errors import MissingError, SqlError
from millpond.work import current_work

if TYPE_CHECKING:
    from millpond.catalog import Catalog
    from millpond.engine.consumers import Consumer
    from millpond.store.manifest import Manifest
    from millpond.store.objects import ObjectStore

__all__ = ["Sinks", "KINDS", "OP", "sink_key", "check_schema"]

log = logging.getLogger("millpond")

KINDS = ("upsert", "append-only")


class Source(Protocol):
    """What a sink reads of its source (:class:`millpond.engine.reads.Reads`)."""

    def rows_at(self, name: str, epoch: int) -> pa.Table:
        """The rows of ``name`` as of committed epoch ``epoch``."""

    def changes(self, name: str, after: int, upto: int | None = None) -> Iterator[pa.Table]:
        """Its changes committed after ``after`` up to ``upto``, one changelog per epoch."""

    def key_of(self, name: str) -> tuple[str, ...]:
        """The columns that address its committed rows."""


def sink_key(catalog: Catalog, source: Source, sink: SinkDef) -> tuple[str, ...]:
    """The columns an upsert sink keys its target's rows by: the source's primary key (a table) or
    its row key (a view whose rows come from a GROUP BY); () where there is none."""
    rel = catalog.relation(sink.source)
    if isinstance(rel, TableDef):
        return rel.primary_key
    return source.key_of(rel.name)


def check_schema(name: str, schema: pa.Schema) -> None:
    """Refuse a source with a column an append-only sink's own columns would clash with. (Every
    column type has a Delta Lake type: an INTERVAL is written as millpond keeps it, a struct of
    ``months``, ``days`` and ``micros``; a JSONB as its text.)"""
    for f in schema:
        if f.name in (OP, EPOCH):
            raise SqlError(f"sink {name!r}: column {f.name!r} is reserved for an append-only sink's changes; "
                           "rename it in a view and sink that view")


class Sinks(EpochStep):
    """The sinks of one writable runtime: what each has written, and writing what it has not —
    before an epoch (after a restart: the epochs a target missed) and after its commit. Ports:
    ``store`` (the root: a sink's progress), ``source`` (what a sink reads of its source) and
    ``target_of`` (a sink's target, by its connector: :func:`millpond.connectors.target_of`)."""

    def __init__(self, store: ObjectStore, source: Source, target_of: Callable[[SinkDef], Target] | None = None):
        self.store, self.source = store, source
        self._target_of = target_of
        self._done: dict[str, int] = {}  # token -> the last epoch the target holds (this process knows)
        self._writes: dict[str, int] = {}  # token -> writes to the target by this process
        self._targets: dict[str, Target] = {}  # token -> its target, opened once
        self.rows: dict[str, int] = {}  # token -> rows this process wrote to the target
        self.errors: dict[str, str] = {}  # sink name -> why its last write failed

    def target_of(self, sink: SinkDef) -> Target:
        """``sink``'s target, made by its connector (the port the entry points hand in)."""
        if self._target_of is None:
            raise SqlError(f"sink {sink.name!r}: this runtime was made without connectors, so it writes no sink")
        return self._target_of(sink)

    def before(self, catalog: Catalog, consumers: list[Consumer], manifest: Manifest) -> None:
        if catalog.sinks:
            self.catch_up(catalog, manifest.epoch)

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        if plan.catalog.sinks:
            self.catch_up(plan.catalog, report.epoch)
        return report

    def floor(self, catalog: Catalog) -> int | None:
        """The earliest epoch whose later changes a sink still needs (None: no sink)."""
        return min((self._done.get(s.token, s.start) for s in catalog.sinks.values()), default=None)

    def progress(self, sink: SinkDef) -> int | None:
        """The last epoch ``sink``'s target holds: as this process wrote it, else as what is durable
        says (after a restart, before the first epoch; always in a read-only process, which writes
        no sink): the target's own commit under the sink's token, or the root's kept epoch,
        whichever is later. None: nothing written yet. Raises the target's error when it cannot be
        read. Nothing is remembered here: only a write moves what this process knows."""
        if (done := self._done.get(sink.token)) is not None:
            return done
        done = self._durable(sink, self.target_of(sink))
        return None if done < 0 else done

    def catch_up(self, catalog: Catalog, upto: int) -> None:
        """Write every sink of ``catalog`` up to committed epoch ``upto``; a sink that fails stays behind."""
        for sink in list(catalog.sinks.values()):
            try:
                self.write(catalog, sink, upto)
                self.errors.pop(sink.name, None)
            except Exception as exc:  # noqa: BLE001 - one sink's target must not stop the others
                self.errors[sink.name] = f"{type(exc).__name__}: {exc}"
                log.warning("sink %s: writing epochs after %s failed and will be retried after the next epoch: %s",
                            sink.name, self._done.get(sink.token, "its start"), exc)

    def write(self, catalog: Catalog, sink: SinkDef, upto: int) -> None:
        """Make ``sink`` (of ``catalog``)'s target hold its source's changes up to epoch ``upto``."""
        if (target := self._targets.get(sink.token)) is None:
            target = self._targets[sink.token] = self.target_of(sink)
        done = self._done.get(sink.token)
        try:
            if done is None:  # (epoch 0 is an epoch: not "or -1")
                done = self._durable(sink, target)
            self._write(sink_key(catalog, self.source, sink), sink, target, done, upto)
        except BaseException:
            target.forget()
            raise

    def _write(self, key: tuple[str, ...], sink: SinkDef, target: Target, done: int, upto: int) -> None:
        if done < sink.start:  # the first write: the source's rows as of the sink's start
            rows = self.source.rows_at(sink.source, sink.start)
            n = rows.num_rows
            change = rows.append_column(W, pa.array(np.ones(n, np.int64))).append_column(
                EPOCH, pa.array(np.full(n, sink.start, np.int64)))
            jobs = getattr(self.source, "jobs", None)  # a job while it runs (SHOW JOBS: kind sink)
            with jobs.track("sink", sink.name, sink.start, n) if jobs is not None else nullcontext():
                current_work().to_do(n)  # the rows the target says it wrote (PostgreSQL, Kafka, Delta)
                self._put(key, sink, target, change, sink.start)
            done = sink.start
        if done < upto:
            changes = list(self.source.changes(sink.source, done, upto))
            if changes:
                self._put(key, sink, target, pa.concat_tables(changes), upto)
            else:
                self._keep(sink, upto)
            done = upto
        self._done[sink.token] = done

    def _put(self, key: tuple[str, ...], sink: SinkDef, target: Target, change: pa.Table, epoch: int) -> None:
        cols = [c for c in change.column_names if c not in (W, EPOCH)]  # the source's columns
        change = _outward(change)
        faults.point("sink.before_commit")
        if sink.kind == "append-only":  # a change of weight w (rows netted per epoch): |w| rows
            w = change[W].to_numpy()
            change = change.take(pa.array(np.repeat(np.arange(len(w)), np.abs(w))))
            op = pa.array(np.where(change[W].to_numpy() > 0, "insert", "delete"), pa.string())
            change = change.select(cols).append_column(OP, op).append_column(EPOCH, change[EPOCH])
            target.append(change, sink.token, epoch)
        else:
            change = _upserts(change, cols, key)
            target.upsert(change, key, sink.token, epoch)
        self.rows[sink.token] = self.rows.get(sink.token, 0) + change.num_rows
        faults.point("sink.after_commit")
        self._writes[sink.token] = n = self._writes.get(sink.token, 0) + 1
        if n % COMPACT_EVERY == 0:
            try:
                target.compact()
            except Exception as exc:  # noqa: BLE001 - upkeep: the data is written, the next round retries
                log.warning("sink %s: compacting its target's files failed (retried later): %s", sink.name, exc)

    def _durable(self, sink: SinkDef, target: Target) -> int:
        """The last epoch ``sink``'s target holds, read from the target and the root (-1: none)."""
        held = target.written(sink.token)
        return max(-1 if held is None else held, self._kept(sink))

    def _kept(self, sink: SinkDef) -> int:
        """The epoch kept under the root for ``sink`` (-1: none)."""
        try:
            return json.loads(self.store.get(paths.sink_key(sink.token)))["epoch"]
        except MissingError:
            return -1

    def _keep(self, sink: SinkDef, epoch: int) -> None:
        self.store.put(paths.sink_key(sink.token), json.dumps({"epoch": epoch}).encode())

    # -- a sink being created (sql/sinks.py): its first write is done before the catalog names it ----
    def pending(self, name: str) -> dict | None:
        """The sink named ``name`` whose ``CREATE SINK`` wrote its target but never committed (a crash
        inside it), as :meth:`note_pending` kept it; None if there is none."""
        try:
            return json.loads(self.store.get(paths.sink_pending_key(name)))
        except MissingError:
            return None

    def note_pending(self, sink: SinkDef) -> None:
        self.store.put(paths.sink_pending_key(sink.name), json.dumps(sink.to_json()).encode())

    def clear_pending(self, name: str) -> None:
        try:
            self.store.delete(paths.sink_pending_key(name))
        except MissingError:
            pass

    def forget(self, sink: SinkDef) -> None:
        """``sink`` was dropped: its progress under the root goes too (its target stays)."""
        self._done.pop(sink.token, None)
        self._targets.pop(sink.token, None)
        self.errors.pop(sink.name, None)
        try:
            self.store.delete(paths.sink_key(sink.token))
        except MissingError:
            pass


def _outward(change: pa.Table) -> pa.Table:
    """``change`` as a target keeps it: a JSONB column as its text (a string column)."""
    for i, f in enumerate(change.schema):
        if jsonb.is_jsonb(f.type):
            change = change.set_column(i, pa.field(f.name, pa.string(), f.nullable), pc.struct_field(change.column(i), [0]))
    return change


def _upserts(change: pa.Table, cols: list[str], key: tuple[str, ...]) -> pa.Table:
    """Per key, its last epoch's row to upsert (``_op = 'u'``), or its deletion (``'d'``, the other
    columns NULL) where that epoch removed it and added none."""
    df = pl.from_arrow(change)
    last = df.group_by(key).agg(pl.col(EPOCH).max().alias("_last"))
    df = df.join(last, on=key, nulls_equal=True).filter(pl.col(EPOCH) == pl.col("_last"))
    ups = df.filter(pl.col(W) > 0).select(cols).with_columns(pl.lit(UPSERT).alias(OP))
    gone = df.group_by(key).agg((pl.col(W) > 0).any().alias("_kept")).filter(~pl.col("_kept")).select(key)
    dels = gone.with_columns(*[pl.lit(None).alias(c) for c in cols if c not in key]).select(cols) \
        .with_columns(pl.lit(DELETE).alias(OP))
    out = pl.concat([ups, dels.cast(ups.schema)]) if dels.height else ups
    return out.to_arrow().cast(pa.schema([*(change.schema.field(c) for c in cols), pa.field(OP, pa.string())]))

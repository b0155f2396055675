"""The coordinator: runs epochs on the driver, commits them, recovers after a crash.

**The epoch protocol.** This is the one place it is written down; the modules that carry out a
step point here by number. :meth:`Coordinator.run_epoch` runs it as one loop of values
(:mod:`millpond.engine.epoch`): :meth:`Coordinator.plan` (steps 1-2) gives an
:class:`~millpond.engine.epoch.EpochPlan`, :meth:`Coordinator.execute` (step 3) an
:class:`~millpond.engine.epoch.EpochResult`, :meth:`Coordinator.commit` (steps 4-5) an
:class:`~millpond.engine.epoch.EpochReport`, then :meth:`Coordinator.maintain` (step 6). The work
around the consumers is done by :class:`~millpond.engine.epoch.EpochStep` s (steps 0 and 7), each
with ports of its own.

*Driver, before the job*:

0. **Take in.** Files tables take in their folders' new files, appended to their logs
   (:mod:`millpond.connectors.files`); flows' sink tables receive what a committed epoch owes them
   (:mod:`millpond.engine.flow_targets`); sinks write the epochs their targets missed (after a
   restart; :mod:`millpond.engine.sinks`). What this step appends is read by this epoch.
1. **Fix the input.** Take one log snapshot (:meth:`millpond.log.Log.snapshot`: every channel's
   end at one tick, so no transaction is split). Every consumer — a table's own materialization
   or a view — reads ``[its offset in the last manifest, the channel's end at the snapshot)`` of
   each channel it depends on. Consumers with nothing new sit the epoch out (a new view runs once,
   so e.g. ``COUNT(*)`` shows 0). An APPEND ONLY table keeps no state: its rows are its log, so it
   takes no part in the job and only its offsets advance (step 5). *Batch mode*: a new view's or
   flow's first epoch reads a keyed table as its committed rows at ``v`` (step 2) plus the log
   from the table's own offset in ``v`` — not its whole log (:meth:`Coordinator._batch_starts`).
   *Indexes*: a view that reads a table through an index (:mod:`millpond.sql.indexes`) starts
   reading the table where the index holds it, and from then on both read the same ranges, so
   the index at ``v`` is the table as of the view's offset (checked in every epoch).
   *Partial views* (:mod:`millpond.engine.partial`): the keys read since the view last ran are
   filled, the least recently read evicted past its budget; the view reads its table's records of
   its filled keys, and the table's rows at ``v`` of the keys it fills (as inserts) and evicts (as
   deletes) — in lockstep with the table's own consumer (checked); a view with keys to fill or
   evict runs even with no new records. Its filled keys are written by the driver with the job's
   files (step 4 lists them).
2. **Pin the input version.** Apply finished compactions (store maintenance), then take the
   current manifest version ``v`` as the job's input: epoch ``e = v.epoch + 1``, a fresh attempt
   id. Every task reads state at ``v``.

*The job* (:meth:`millpond.engine.executor.EpochExecutor.run`; on Spark:
:mod:`millpond.spark.executor`, :mod:`millpond.spark.build`, :mod:`millpond.spark.task`; the
epoch, attempt and ``v`` reach the tasks at run time, so a plan built once is re-run):

3. One job over all consumers (*views over views*: consumers that read a view's changes run in a
   job after the view's, given its changelog; a reader's first epoch reads the view's rows at
   ``v`` too — :meth:`millpond.spark.build.Builder._view`; a reader runs whenever a view it reads
   does):

   a. read each range from the log (the driver lists the pieces: WAL frames or Parquet files);
   b. evaluate stateless nodes as the executor's expressions; exchange rows by the vnode of each
      stateful node's key (state is addressed by vnode, never by worker);
   c. in each stateful task, open the operator's state parts at ``v`` and apply the partition's
      delta (:class:`millpond.engine.operators.Operator`);
   d. write each part's state rows as one SST under ``sst/<v>-e<e>.<attempt>/<state>/p<part>.sst``
      — named deterministically, so a retried or speculative task rewrites the same bytes;
   e. emit the output changelog; each view's final materialization writes it as the view's
      changes file of (epoch, attempt, partition) and ships only the file's name to the driver
      (tables write nothing: their changes are their log).

*Driver, after the job*:

4. **Collect.** List this attempt's SSTs — only this attempt's: files of a failed or crashed
   attempt are never referenced, and garbage collection removes them.
5. **Commit.** :meth:`millpond.store.store.StateStore.commit` writes manifest version ``v + 1`` =
   {epoch ``e``, the new SSTs on top of each state's L0, every consumer's end offsets} with
   put-if-absent. This single write makes the epoch visible, exactly once. A crash anywhere
   before it leaves ``e - 1`` as the truth and the same ranges are replayed from the same
   offsets; a second coordinator on the root is fenced here (:class:`millpond.FencedError`).
   Just before, the epoch's changes are kept for subscribers and time travel
   (:mod:`millpond.engine.changefeed`: the entry naming each view's changes files, a flow's
   changelog, and each table's log range).
6. **Maintain**, off the epoch's path: start the next compaction (a background thread, or the
   executor's compaction runner), apply finished ones as versions of their own, collect
   garbage; while a state's L0 is past its bound, commits wait (backpressure). Kept changes older
   than retention go, save those a reader pinned or a sink has not written.
7. **Follow up**, on the committed epoch: the report names files tables' source errors; partial
   views' keys read are cleared once filled (:class:`~millpond.engine.partial.Wanted`); flows'
   changes are appended to their sink tables (below); sinks write the epoch; the epoch is
   recorded for ``millpond_epochs``; every few epochs the tables' logs are truncated
   (:mod:`millpond.engine.upkeep`). A failure here leaves the epoch committed.

A failure in steps 0–4 commits nothing and is raised as ``epoch e failed and was not committed``.

**Flows.** A flow is a consumer whose step 3 is its own (:mod:`millpond.engine.flows`): the
executor computes the partial aggregates of its ranges, and the driver merges them into the
flow's state, writing its SSTs under the same attempt prefix as the job's (its ``EXPIRE AFTER``
drops changes to expired windows there, before they reach the state). Its sink table runs no
epochs: its rows are the flow's. The flow's changes are written into the sink's channel *after*
the commit (step 7), for the sink's readers, by the idempotent producer ``(flow:<key>, e)``. The
commit records that the sink is owed epoch ``e``'s changes (the flow's
:data:`~millpond.engine.flows.SINK_OWED` offset). Before every epoch (step 0) what is owed is
settled (:meth:`millpond.engine.flow_targets.FlowTargets.settle`): if the producer's last applied
sequence is below the owed epoch (a crash or a failed append after the commit), the channel
receives the difference between the flow's committed rows and what the channel adds up to —
written once, as above. The sink's readers (views, other flows) take those records in the next
epoch, like any table's.

**Fault isolation.** One exception: a *data error* in a view (an error of SQLSTATE class 22 —
division by zero, a bad cast, an overflow — raised by the view's expressions over its input) fails
that view, not the epoch. The coordinator finds the failing views (step 3 again on halves of the
set, as probe jobs under throwaway attempts), narrows each one's input to the record that raises
(probes on prefixes of its ranges), and runs the job over the others. The commit (step 5) records
each failed view in the manifest (:attr:`Manifest.failed`: the error class, the expression, the
record); from then on the view sits out epochs, its state and offsets stay at its last good epoch,
until it is dropped. A bug of millpond's that one view's operator hits (an ``InvariantError`` of
its task) is isolated the same way, as an internal error (SQLSTATE XX000) of that view. Any other
error (storage, a lost executor) still fails the whole epoch, which is then retried as a whole.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import replace
from typing import Callable, Mapping, Sequence

import pyarrow as pa

from millpond import faults, paths
from millpond.catalog import Catalog
from millpond.columns import ROW_ID, W
from millpond.engine.changefeed import Change, ChangeFeed, Changelogs
from millpond.engine.epoch import EpochPlan, EpochReport, EpochResult, EpochStep
from millpond.engine.consumers import Consumer, Flow, KeyedTable
from millpond.engine.executor import EpochExecutor, EpochJob, ViewInput, Work
from millpond.engine.failures import cause as _cause
from millpond.engine.failures import data_error as _data_error
from millpond.engine.failures import internal_error as _internal_error
from millpond.engine.failures import describe_failure
from millpond.engine.filling import BACKFILL_ROWS, bound, check_start, widened
from millpond.engine.flows import merge
from millpond.engine.partial import KEY, filled_state, plan_partial
from millpond.engine.plan import shared_sides as _shared_sides
from millpond.errors import MillpondError
from millpond.log import Log, Piece
from millpond.store.manifest import Manifest
from millpond.store.objects import ObjectStore
from millpond.store.sst import SstRef, describe_sst
from millpond.store.state_table import StateTable, write_state
from millpond.store.store import Runner, StateStore, run_in_process

__all__ = ["Coordinator", "ROWS_PER_TASK", "describe_failure"]  # describe_failure: engine/failures.py

ROWS_PER_TASK = 50_000  # an epoch's stateful stages get one task per this many new records, up to parallelism
PROBES = 12  # jobs spent per channel narrowing a failed view's input to the record that raised

log = logging.getLogger("millpond")


class Coordinator:
    def __init__(self, executor: EpochExecutor, store: ObjectStore, log: Log, *, parallelism: int,
                 compaction: Runner = run_in_process, ids: Callable[[], str] = paths.random_id):
        self.executor, self.store, self.log = executor, store, log
        self.parallelism = self.default_parallelism = parallelism
        self.ids = ids
        self.state = StateStore(store, runner=compaction, ids=ids)  # recovery: resume from the last committed version
        self.changes = ChangeFeed(store)
        self.jobs = None  # what watches an epoch's backfills (engine/jobs.py: millpond_jobs), set by the runtime
        self.backfill_rows = BACKFILL_ROWS  # a new view over more input fills in bounded epochs (engine/filling.py)

    @property
    def manifest(self) -> Manifest:
        return self.state.manifest

    def run_epoch(self, catalog: Catalog, consumers: list[Consumer], wanted: Mapping[str, pa.Array] | None = None,
                  steps: Sequence[EpochStep] = ()) -> EpochReport | None:
        """Steps 0-7 of the epoch protocol (module docstring), one value handed to the next; None
        when no consumer has work. ``wanted``: the keys of each partial view read since its last
        epoch (consumer key -> keys): those not filled yet are filled by this epoch
        (:mod:`millpond.engine.partial`). ``steps``: the work around the consumers (step 0, step 7)."""
        for step in steps:
            step.before(catalog, consumers, self.manifest)
        plan = self.plan(catalog, consumers, wanted)
        if plan is None:
            return None
        with self.jobs.watch(plan) if self.jobs is not None else nullcontext():
            try:
                result = self.execute(plan)
            finally:  # cancelled (CANCEL JOB): nothing commits, and a failure it caused says so
                if self.jobs is not None:
                    self.jobs.check(plan)
        report = self.commit(plan, result)
        self.maintain(catalog, [f for step in steps if (f := step.floor(catalog)) is not None])
        for step in reversed(steps):
            report = step.after(plan, report)
        return report

    def plan(self, catalog: Catalog, consumers: list[Consumer], wanted: Mapping[str, pa.Array] | None = None
             ) -> EpochPlan | None:
        """Steps 1-2: every consumer's ranges at one log snapshot, and the pinned version (None:
        no consumer has work)."""
        # 1. fix the input ranges
        for t in catalog.tables.values():
            self.log.create_channel(t.channel, t.log_schema, id=t.channel_id)
        _, ends = self.log.snapshot([t.channel for t in catalog.tables.values()])  # one tick: whole transactions
        work, batch, partial, fills = [], {}, {}, {}
        stored = {c.key: c.rows_state for c in consumers}
        for c in consumers:
            if c.sits_out(self.manifest):  # isolated by a data error; a flow's sink table
                continue
            ranges = c.ranges(catalog, self.manifest, ends)
            if c.derived and c.key not in self.manifest.offsets:  # a first epoch
                shared = {catalog.tables[t].channel: i for t, i in _shared_sides(c.plan, first=True).items()}
                for ch, i in shared.items():  # read through an index: from where the index holds the table
                    ranges[ch] = (self.manifest.offsets.get(f"o{i}", {}).get(ch, 0), ends[ch])
                batch[c.key] = self._batch_starts(catalog, consumers, ranges, shared)
            elif (state := self.manifest.filling.get(c.key)) and state[0] < state[1]:  # its tables' next part
                starts = dict(ranges)
                batch[c.key] = self._batch_starts(catalog, consumers, ranges, {})
                for ch in batch[c.key]:
                    check_start(c, ch, starts[ch][0], ranges[ch][0])
            rows = {ch: sum(r.rows for r in self.manifest.state(stored[k]).files()) for ch, k in batch.get(c.key, {}).items()}
            if (f := bound(c, consumers, catalog, self.manifest, ranges, rows, self.backfill_rows)) is not None:
                fills[c.key] = f  # a backfill in bounded epochs (engine/filling.py)
            new_view = c.runs_new and c.key not in self.manifest.offsets
            if c.partial is not None:
                partial[c.key] = plan_partial(self.store, self.manifest, catalog, consumers, c, ranges,
                                              (wanted or {}).get(c.key))
            keys = partial.get(c.key)
            if new_view or batch.get(c.key) or any(a < b for a, b in ranges.values()) or \
                    (keys is not None and (len(keys[0].fill) or len(keys[0].evict))):  # a new view: COUNT(*) = 0
                work.append((c, ranges))
        idle = [(c, c.ranges(catalog, self.manifest, ends)) for c in consumers
                if c.views and not c.sits_out(self.manifest)]
        while True:  # a view reading a view that runs runs too (after it: _run), to read its changes
            running = {c.name for c, _ in work}
            more = [w for w in idle if w[0].name not in running and running & set(w[0].views)]
            if not more:
                break
            work += more
        if not work:
            self.state.maintain()  # idle: apply a finished compaction now, not at the next epoch
            return None
        fills = widened(fills, work)  # nothing else waits: a backfill reads all it has left
        by_name = {c.name: c for c in consumers}
        inputs = {n: (by_name[n].schema, by_name[n].rows_state) for n in sorted({n for c in consumers for n in c.views})}
        # 2. pin the input version (apply finished compactions first)
        self.state.maintain()
        epoch, attempt = self.manifest.epoch + 1, self.ids()[:12]
        job = EpochJob(self.store.root, self.store.options, epoch, attempt, self._parallelism(work, batch, consumers),
                       self.manifest,
                       {k: v for k, v in batch.items() if v}, {k: keys for k, (keys, _) in partial.items()},
                       {k: f.slice() for k, f in fills.items() if f.part < f.parts})
        return EpochPlan(catalog, consumers, work, job, {k: writes for k, (_, writes) in partial.items()}, inputs,
                         fills=fills)

    def execute(self, plan: EpochPlan) -> EpochResult:
        """Step 3: the job over the plan's work (a view whose data raises isolated), and the
        partial views' filled keys written with the job's files."""
        faults.point("epoch.before_job")
        job = plan.job
        try:
            run = [(c, r) for c, r in plan.work if not c.log_only]  # a key-less table only advances its offsets
            result = self._job(plan, job, run)
        except MillpondError:
            raise
        except Exception as exc:  # a task failed: the epoch is not committed, nothing is visible
            raise MillpondError(f"epoch {job.epoch} failed and was not committed: {_cause(exc)}") from exc
        for c, _ in plan.work:  # a partial view's filled keys, written with its state (engine/partial.py)
            if c.key in plan.filled and c.key not in result.failures:
                sid = filled_state(c.object_id, c.plan)
                write_state(self.store, paths.sst_key(job.manifest.version, job.epoch, result.job.attempt, sid, 0),
                            plan.filled[c.key], job.epoch, keys=(KEY,), additive=False)
        faults.point("epoch.after_job")
        return result

    def commit(self, plan: EpochPlan, result: EpochResult) -> EpochReport:
        """Steps 4-5: this attempt's SSTs, every consumer's end offsets and the epoch's kept changes,
        made visible by one write."""
        catalog, consumers, epoch, job = plan.catalog, plan.consumers, plan.epoch, result.job
        changes, marks, failures = dict(result.changes), result.marks, result.failures
        work = [(c, r) for c, r in plan.work if c.key not in failures]
        # 4. this attempt's SSTs (their footers say what they hold)
        new_ssts: dict[str, list[SstRef]] = defaultdict(list)
        for key in self.store.list(paths.sst_attempt_prefix(job.manifest.version, epoch, job.attempt)):
            new_ssts[paths.parse_sst_state(key)].append(describe_sst(self.store, key))
        live = {c.key for c in consumers}
        stateful = {c.key for c in consumers if not c.log_only}  # a key-less table's old state goes
        offsets = {k: v for k, v in self.manifest.offsets.items() if k in live}
        for c, ranges in work:  # what each read, by its kind (a flow's window expiry, its sink owed)
            offsets[c.key] = c.read_up_to(offsets.get(c.key, {}), ranges, epoch, marks.get(c.key) or {},
                                          changes.get(c.key))
        # 4b. keep the epoch's changes (engine/changefeed.py): before the commit, so a reader of a
        # committed epoch finds them, and files of an epoch that never commits are never read
        kept = {}
        for c, _ in work:
            if (change := changes.get(c.key)) is not None and c.derived:
                if isinstance(change, pa.Table):  # a flow's, merged on the driver (a view's tasks typed theirs)
                    rel = catalog.views.get(c.name) or catalog.flows[c.name]
                    change = change.cast(rel.schema.append(pa.field(W, pa.int64())))
                changes[c.key] = kept[c.key] = change
        filling = {k: v for k, v in self.manifest.filling.items() if k in live}
        for c, _ in work:  # a view filling in bounded epochs: the parts it has read (engine/filling.py)
            if (f := plan.fills.get(c.key)) is not None and (after := f.after()) is not None:
                filling[c.key] = after
            else:
                filling.pop(c.key, None)
        took = {c.key: ranges[catalog.tables[c.name].channel] for c, ranges in work if not c.derived}
        self.changes.write(epoch, kept, took, time.time(), plan.started, filling=sorted(filling))
        faults.point("epoch.before_commit")
        # 5. commit: the one atomic write (compaction, step 6, starts inside it, in the background)
        failed = {k: v for k, v in {**self.manifest.failed, **failures}.items() if k in live}  # dropped: gone
        self.state.commit(epoch, new_ssts, offsets, keep=lambda sid: sid.split(".", 1)[0] in stateful, failed=failed,
                          expiry={sid: floor for c, _ in work for sid, floor in c.expires(offsets[c.key]).items()},
                          defaults={c.rows_state: c.encoded_defaults for c in consumers if c.defaults and c.keeps_rows},
                          filling=filling)
        faults.point("epoch.after_commit")
        names, texts = {c.key: c.name for c in consumers}, {c.key: c.sql for c in consumers}
        for k, f in failures.items():
            log.warning("%s", describe_failure(f, texts.get(k)))
        return EpochReport(epoch, Changelogs(self.changes, {names[k]: v for k, v in changes.items() if v is not None}),
                           {names[k]: f for k, f in failures.items()},
                           {c.name: sum(b - a for a, b in r.values()) for c, r in work}, manifest=self.manifest)

    # -- fault isolation (module docstring) ------------------------------------------------------
    def _batch_starts(self, catalog: Catalog, consumers: list[Consumer], ranges: dict[str, tuple[int, int]],
                      shared: Mapping[str, int]) -> dict[str, str]:
        """Batch mode for a new view's or flow's first epoch: each keyed table it reads with
        committed rows is read as those rows (its rows state in the pinned version) plus its log from
        the offset they reach — not its whole log, which holds every update and delete ever made.
        ``ranges`` start there; returns {channel: the table's consumer}. An APPEND ONLY or key-less
        table's log is its rows, and a flow's sink keeps none of its own: they are read from the log.
        A table read through an index (``shared`` channels) needs none of its rows: the index holds them."""
        by_name = {c.name: c for c in consumers}
        out = {}
        for t in catalog.tables.values():
            table = by_name.get(t.name)
            if t.channel not in ranges or t.channel in shared or not isinstance(table, KeyedTable) or t.append_only \
                    or not (done := self.manifest.offsets.get(table.key, {}).get(t.channel)):
                continue
            ranges[t.channel] = (done, ranges[t.channel][1])
            out[t.channel] = table.key
        return out

    def _job(self, plan: EpochPlan, job: EpochJob, run: list[Work]) -> EpochResult:
        """Step 3 over ``run``; if a view's data raises, step 3 again without the failing views
        (under a fresh attempt: the failed attempt's files are never committed)."""
        try:
            return EpochResult(job, *self._run(plan, job, run), {})
        except Exception as exc:
            if _data_error(exc) is None and _internal_error(exc) is None:
                raise
            failures = self._failing(plan, job, run, exc)
            if not failures:  # no part fails alone: not one view's data after all
                raise
        rest = [w for w in run if w[0].key not in failures]
        job = replace(job, attempt=self.ids()[:12])
        return EpochResult(job, *self._run(plan, job, rest), failures)

    def _run(self, plan: EpochPlan, job: EpochJob, run: list[Work]
             ) -> tuple[dict[str, Change], dict[str, dict[str, int]]]:
        """Step 3: one job over the views and tables; each flow's trigger (its partial aggregates
        from the executor, merged on the driver: :mod:`millpond.engine.flows`). Returns the
        changelogs and flows' window-expiry offsets."""
        tables = plan.catalog.tables
        rest = [w for w in run if w[0].merge is None]
        changes: dict[str, Change] = {}
        for level in _levels(rest):  # a view that reads views runs in a job after theirs, with their changes
            names = {c.name: c.key for c, _ in run}
            views = {name: ViewInput(schema, sid, changes.get(names.get(name, "")))
                     for name, (schema, sid) in plan.inputs.items() if any(name in c.views for c, _ in level)}
            changes.update(self.executor.run(job, level, tables, self._pieces, views))
        marks = {}
        for work in run:
            if work[0].merge is not None:
                partials = self.executor.partials(job, work, tables, self._pieces)
                faults.point("flow.before_merge")
                changes[work[0].key], marks[work[0].key] = merge(self.store, job.manifest, job.epoch, job.attempt,
                                                                 work[0], partials)
        return changes, marks

    def _probe(self, plan: EpochPlan, job: EpochJob, run: list[Work]) -> BaseException | None:
        """The data error step 3 over ``run`` raises, under a throwaway attempt (None: it passes)."""
        try:
            self._run(plan, replace(job, attempt=self.ids()[:12]), run)
        except Exception as exc:
            if _data_error(exc) is None and _internal_error(exc) is None:
                raise
            return exc
        return None

    def _failing(self, plan: EpochPlan, job: EpochJob, run: list[Work], exc: BaseException,
                 every: list[Work] | None = None) -> dict[str, dict]:
        """The consumers of ``run`` (a part of ``every``, the epoch's) that raise a data error on their own."""
        every = run if every is None else every
        if len(run) == 1:
            up = _upstream(every, run)
            if up and self._probe(plan, job, up) is not None:
                return {}  # a view it reads raises (found on its own), not it
            return {run[0][0].key: self._failure(plan, job, run[0], exc, up)}
        found: dict[str, dict] = {}
        for part in (run[:len(run) // 2], run[len(run) // 2:]):
            if (error := self._probe(plan, job, [*_upstream(every, part), *part])) is not None:
                found.update(self._failing(plan, job, part, error, every))
        return found

    def _failure(self, plan: EpochPlan, job: EpochJob, work: Work, exc: BaseException, upstream: list[Work]) -> dict:
        """What a failed consumer's manifest entry says: the error, and the record that raised it (the
        shortest failing prefix of each channel's range, by bisection; ``upstream``: the views it reads)."""
        consumer, ranges = work
        if (internal := _internal_error(exc)) is not None and _data_error(exc) is None:
            return {"name": consumer.name, "epoch": job.manifest.epoch, "failed_epoch": job.epoch, **internal,
                    "rows": [], **({"kind": "flow"} if isinstance(consumer, Flow) else {})}
        info = _data_error(exc, consumer.schema) or {}
        narrowed, rows = dict(ranges), []
        for channel, (start, stop) in ranges.items():
            table = next(t.name for t in plan.catalog.tables.values() if t.channel == channel)
            if channel in job.batch.get(consumer.key, {}) and \
                    self._probe(plan, job, [*upstream, (consumer, {**narrowed, channel: (start, start)})]) is not None:
                narrowed[channel] = (start, start)  # batch mode: a row the table held already raises
                rows.append(f"{table}: one of its rows at epoch {job.manifest.epoch} (read whole by a first epoch)")
                continue
            lo, hi = start, stop  # the prefix [start, lo) passes (or is empty), [start, hi) fails
            for _ in range(PROBES):
                if hi - lo <= 1:
                    break
                mid = (lo + hi) // 2
                if self._probe(plan, job, [*upstream, (consumer, {**narrowed, channel: (start, mid)})]) is None:
                    lo = mid
                else:
                    hi = mid
            narrowed[channel] = (start, hi)
            if hi - lo == 1 and hi > start:
                record = self.log.channel(channel).read(lo, hi).drop_columns([ROW_ID, W]).to_pylist()[0]
                rows.append(f"{table}: " + ", ".join(f"{k}={v!r}" for k, v in record.items()))
            elif hi > start:
                rows.append(f"{table}: one of records [{lo}, {hi})")
        rows += [f"{v}: one of its changes" for v in consumer.views]  # a view's changes are not records
        return {"name": consumer.name, "epoch": job.manifest.epoch, "failed_epoch": job.epoch, **info,
                "rows": rows, **({"kind": "flow"} if isinstance(consumer, Flow) else {})}

    def maintain(self, catalog: Catalog, floors: Sequence[int] = ()) -> None:
        """Step 6 for the kept changes: drop the epochs retention no longer keeps, save those after a
        reader's pinned epoch or a ``floors`` epoch (a sink's last written); a failure is retried later."""
        try:
            pinned = min([p["epoch"] for p in self.state.pins()] + list(floors), default=None)  # StateStore.pin
            self.changes.collect(catalog.kept, self.manifest.epoch, time.time(), pinned)
        except MillpondError as exc:
            log.warning("changes: retention could not drop old epochs (retried at the next epoch): %s", exc)

    def rows(self, consumer: Consumer, manifest: Manifest | None = None, *,
             columns: tuple[str, ...] | None = None) -> StateTable:
        """The committed rows of a consumer in ``manifest`` (default: the last committed one)."""
        return consumer.rows(self.store, manifest or self.manifest, columns=columns)

    def _pieces(self, channel: str, start: int, stop: int) -> list[Piece]:
        return self.log.channel(channel).pieces(start, stop)

    def _parallelism(self, work: list[tuple[Consumer, dict[str, tuple[int, int]]]], batch: Mapping[str, dict[str, str]],
                     consumers: list[Consumer]) -> int:
        """Partitions of this epoch's stateful stages: the configured parallelism, or fewer for a
        small epoch (one per ``ROWS_PER_TASK`` records read: new ones, and the committed rows a
        first epoch reads in batch mode): every task has a fixed cost, and state is addressed by
        vnode, so any epoch may use any number of tasks. (Counting new records alone ran the
        first epoch of a view over a loaded table in one task: TPC-H Q6 at SF 1, 14.5 s.)"""
        records = sum({ch: b - a for _, ranges in work for ch, (a, b) in ranges.items()}.values())
        by_key = {c.key: c for c in consumers}
        records += sum(ref.rows for key in {k for tables in batch.values() for k in tables.values()}
                       for ref in self.manifest.state(by_key[key].rows_state).files())
        return max(1, min(self.parallelism, -(-records // ROWS_PER_TASK)))

    def with_parallelism(self, n: int) -> None:
        self.parallelism = n

    def close(self) -> None:
        self.state.close()


def _upstream(every: list[Work], part: list[Work]) -> list[Work]:
    """The work of ``every`` that ``part``'s views read (transitively), not in ``part``: a part is probed
    with it (a view reading a view sees nothing without it)."""
    by_name, mine = {c.name: w for w in every for c in [w[0]]}, {c.name for c, _ in part}
    need: set[str] = set()
    todo = [c for c, _ in part]
    while todo:
        for v in todo.pop().views:
            if v in by_name and v not in need and v not in mine:
                need.add(v)
                todo.append(by_name[v][0])
    return [w for w in every if w[0].name in need]


def _levels(work: list[Work]) -> list[list[Work]]:
    """``work`` in jobs: a consumer after every consumer of ``work`` whose view it reads."""
    by_name = {c.name: (c, r) for c, r in work}
    depth: dict[str, int] = {}

    def level(name: str) -> int:
        if name not in depth:
            c = by_name[name][0]
            depth[name] = 1 + max((level(v) for v in c.views if v in by_name), default=-1)
        return depth[name]
    out: list[list[Work]] = []
    for name in by_name:
        while len(out) <= level(name):
            out.append([])
        out[level(name)].append(by_name[name])
    return out

"""The coordinator: runs epochs on the Spark driver, commits them, recovers after a crash.

One epoch, in order:

1. Fix the input: for every consumer (a table's materialization or a view), the range of each
   channel it reads is ``[offset in the last manifest, channel end now)``.
2. Run one Spark job over those ranges (``spark.execute.run_epoch_job``). Tasks read state at
   the last committed epoch and write their state delta as SSTs under this epoch's attempt prefix.
3. List the attempt's SSTs (only this attempt's: files of crashed attempts are never referenced).
4. Commit: write manifest ``e`` = {SSTs, every consumer's new end offsets} with put-if-absent.
   This single write makes the epoch visible, exactly once; a crash before it leaves epoch
   ``e-1`` as the truth, and the same ranges are replayed from the same offsets.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

from millpond import faults, paths
from millpond.catalog import Catalog
from millpond.errors import MillpondError
from millpond.engine.operators import Materialize
from millpond.engine.plan import sources as _sources
from millpond.engine.plan import state_id
from millpond.log import Log, Piece
from millpond.spark.execute import Consumer, EpochJob, run_epoch_job
from millpond.store.manifest import Manifest
from millpond.store.objects import ObjectStore
from millpond.store.sst import SstRef, describe_sst
from millpond.store.state_table import StateTable
from millpond.spark.compact import spark_runner
from millpond.store.store import StateStore, run_in_process

__all__ = ["Coordinator", "EpochReport"]


@dataclass(frozen=True)
class EpochReport:
    """What one committed epoch changed: each view's changelog (``_w`` = +1/-1 weights).

    Tables are not included: their changes are the records appended to their log, which a
    reader gets with ``spark.read.format("millpond")``; shipping them back to the driver every
    epoch would cost as much as the ingest."""

    epoch: int
    changes: dict[str, pa.Table]  # view name -> changelog (views that changed)


class Coordinator:
    def __init__(self, spark, store: ObjectStore, log: Log, *, parallelism: int,  # noqa: ANN001
                 compaction: str = "local"):
        self.spark, self.store, self.log = spark, store, log
        self.parallelism = parallelism
        if compaction not in ("local", "spark"):
            raise MillpondError(f"compaction={compaction!r}: use 'local' (a background thread) or 'spark' "
                                "(a Spark job over the same root)")
        runner = spark_runner(spark) if compaction == "spark" else run_in_process
        self.state = StateStore(store, runner=runner)  # recovery: resume from the last committed version

    @property
    def manifest(self) -> Manifest:
        return self.state.manifest

    def run_epoch(self, catalog: Catalog, consumers: list[Consumer]) -> EpochReport | None:
        # 1. fix the input ranges
        for t in catalog.tables.values():
            self.log.create_channel(t.channel, t.log_schema, id=t.channel_id)
        _, ends = self.log.snapshot([t.channel for t in catalog.tables.values()])  # one tick: whole transactions
        work = []
        for c in consumers:
            done = self.manifest.offsets.get(c.key, {})
            channels = {catalog.tables[s.table].channel for s in _sources(c.plan)}
            ranges = {ch: (done.get(ch, 0), ends[ch]) for ch in channels}
            new_view = c.name in catalog.views and c.key not in self.manifest.offsets
            if new_view or any(a < b for a, b in ranges.values()):  # a new view's first epoch: e.g. COUNT(*) = 0
                work.append((c, ranges))
        if not work:
            return None
        self.state.maintain()  # apply finished compactions before pinning this epoch's input version
        epoch, attempt = self.manifest.epoch + 1, uuid.uuid4().hex[:12]
        job = EpochJob(self.store.root, self.store.options, epoch, attempt, self.parallelism, self.manifest)
        faults.point("epoch.before_job")
        # 2. one Spark job
        try:
            changes = run_epoch_job(self.spark, job, work, catalog.tables, self._pieces)
        except MillpondError:
            raise
        except Exception as exc:  # a task failed: the epoch is not committed, nothing is visible
            raise MillpondError(f"epoch {epoch} failed and was not committed: {_cause(exc)}") from exc
        faults.point("epoch.after_job")
        # 3. this attempt's SSTs (their footers say what they hold)
        new_ssts: dict[str, list[SstRef]] = defaultdict(list)
        for key in self.store.list(paths.sst_attempt_prefix(job.manifest.version, epoch, attempt)):
            new_ssts[paths.parse_sst_state(key)].append(describe_sst(self.store, key))
        live = {c.key for c in consumers}
        offsets = {k: v for k, v in self.manifest.offsets.items() if k in live}
        for c, ranges in work:
            offsets[c.key] = {**offsets.get(c.key, {}), **{ch: b for ch, (_, b) in ranges.items()}}
        # 4. commit: the one atomic write (then compaction and GC, in the background)
        self.state.commit(epoch, new_ssts, offsets, keep=lambda sid: sid.split(".", 1)[0] in live)
        faults.point("epoch.after_commit")
        names = {c.key: c.name for c in consumers}
        return EpochReport(epoch, {names[k]: v for k, v in changes.items() if v is not None})

    def rows(self, consumer: Consumer) -> StateTable:
        """The committed rows of a consumer (its final materialize state)."""
        part = Materialize(consumer.columns, consumer.name).parts()["rows"]
        sid = state_id(consumer.object_id, consumer.plan.node_id, "rows")
        return StateTable(self.store, self.manifest.state(sid), part.keys, additive=part.additive, name=sid)

    def _pieces(self, channel: str, start: int, stop: int) -> list[Piece]:
        return self.log.channel(channel).pieces(start, stop)

    def with_parallelism(self, n: int) -> None:
        self.parallelism = n

    def close(self) -> None:
        self.state.close()


def _cause(exc: BaseException) -> str:
    """The innermost error line of a (possibly Spark-wrapped) exception."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error:" in ln or "Exception:" in ln]
    return (errors[-1] if errors else lines[-1] if lines else type(exc).__name__)[:500]

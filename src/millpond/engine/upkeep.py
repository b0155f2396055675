"""The log's upkeep: tables' records that nothing will read record by record again go (step 7,
every :data:`TRUNCATE_EVERY` epochs).

A record is needed until every consumer reading the table (its own materialization, views, flows,
indexes) has committed past it and while the table's kept changes (subscriptions and ``AS OF`` on
it, ``SET retention``) include it. Below that, a keyed table's records go (its rows are its state;
a view created later reads them and the log after the table's own offset), and a key-less table's
log — its rows — is compacted to the rows it leaves
(:meth:`~millpond.log.channel.Channel.compact`), once as many records arrived since its last
compaction as that kept (so each record is rewritten a bounded number of times). Only what is
flushed to object storage is touched. Left alone: APPEND ONLY tables (their records are their rows)
and flows' sinks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from millpond import faults
from millpond.engine.epoch import EpochPlan, EpochReport, EpochStep

if TYPE_CHECKING:
    from millpond.catalog import Catalog, TableDef
    from millpond.engine.changefeed import ChangeFeed
    from millpond.log import Channel, Log
    from millpond.store.manifest import Manifest

__all__ = ["LogUpkeep", "TRUNCATE_EVERY", "TRUNCATE_FLUSH_RECORDS"]

logger = logging.getLogger(__name__)

TRUNCATE_EVERY = 8  # epochs between two passes that truncate tables' logs
TRUNCATE_FLUSH_RECORDS = 100_000  # a pass flushes the log first when this many records could go


class LogUpkeep(EpochStep):
    """Truncating and compacting tables' logs. Ports: ``log`` (to flush it), ``channel`` (a
    table's log) and ``changes`` (the kept changes: which records they still name)."""

    def __init__(self, log: Log, channel: Callable[[TableDef], Channel], changes: ChangeFeed):
        self.log, self.channel, self.changes = log, channel, changes
        self._kept_starts: dict[tuple[str, int], int] = {}  # (table consumer, oldest kept epoch) -> log seq
        self._compacted: dict[str, tuple[int, int]] = {}  # key-less table's channel -> (compacted to, rows kept)

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        if report.epoch % TRUNCATE_EVERY == 0 and report.manifest is not None:
            try:
                self.truncate(plan.catalog, report.manifest)
            except Exception as exc:  # noqa: BLE001 - upkeep of a committed epoch: the next pass retries
                logger.warning("log truncation and compaction failed and will be retried: %s", exc)
        return report

    def truncate(self, catalog: Catalog, manifest: Manifest) -> dict[str, int]:
        """Drop or compact the records no reader needs (module docstring) as of committed version
        ``manifest``; returns each table's new log start (keyed tables) or compacted end (key-less ones)."""
        sinks = {f.sink for f in catalog.flows.values()}
        oldest = self.changes.oldest()
        floors = {}
        for t in catalog.tables.values():
            own = manifest.offsets.get(f"o{t.id}", {}).get(t.channel)
            if t.append_only or t.name in sinks or own is None:
                continue
            floor = min(o[t.channel] for o in manifest.offsets.values() if t.channel in o)
            if oldest is not None:
                floor = min(floor, self._kept_from(f"o{t.id}", oldest, own, manifest.epoch))
            done, kept = self._compacted.get(t.channel_id, (self.channel(t).start, 0))
            if floor - done >= (0 if t.primary_key else max(TRUNCATE_FLUSH_RECORDS, kept)) and floor > done:
                floors[t] = floor
        # what can go is still in the write-ahead log (its segments flush when full): flush it
        # when that holds many records, rather than keep a segment's worth of them under the root
        if sum(max(0, f - self.channel(t).flushed) for t, f in floors.items()) >= TRUNCATE_FLUSH_RECORDS:
            self.log.flush()
        out = {}
        for t, floor in floors.items():
            channel = self.channel(t)
            floor = min(floor, channel.flushed)
            if t.primary_key and floor > channel.start:
                channel.truncate(floor)
                faults.point("log.after_truncate")
                out[t.name] = floor
            elif not t.primary_key and (done := channel.compact(floor)) is not None:
                self._compacted[t.channel_id] = done
                out[t.name] = done[0]
        return out

    def _kept_from(self, key: str, oldest: int, own: int, last: int) -> int:
        """Where the kept changes of table consumer ``key`` start in its log: the range its first
        kept epoch (up to ``last``) took (``own``, its offset now, if no kept epoch changed it).
        Entries never change, so the answer is remembered per (table, oldest kept epoch)."""
        if (key, oldest) not in self._kept_starts:
            start = own
            for e in range(oldest, last + 1):
                entry = self.changes.entry(e)
                if entry is not None and key in entry.tables:
                    start = entry.tables[key][0]
                    break
            if len(self._kept_starts) > 4096:
                self._kept_starts.clear()
            self._kept_starts[(key, oldest)] = start
        return min(self._kept_starts[(key, oldest)], own)

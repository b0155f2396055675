"""What every committed epoch changed, kept on the root for a while: the source of subscriptions
(``db.subscribe``, ``SUBSCRIBE``), of views read as Spark streams and of time travel (``AS OF``).

Per committed epoch ``e`` (paths: ``changes/...``):

- ``changes/<view key>/<e>.parquet``: the changelog (``_w`` = +1/-1) of each view and flow that
  changed in ``e``, with the view's own column types;
- ``changes/epochs/<e>.json``: the epoch's *entry*: when it was written (``at``, seconds since
  1970), the rows each view changed (``views``), and the log range each table took in
  (``tables``: a table's changes are its log records, kept by the log, not copied here).

The coordinator writes them after the job and **before** the commit (step 4½ of the protocol in
:mod:`millpond.engine.coordinator`): files of an epoch that never commits are never read (a
reader reads only epochs up to the manifest it holds) and are rewritten when the epoch is
replayed. The entry is written last, so an entry names files that exist.

**Retention** (:class:`~millpond.catalog.Retention`, ``SET retention``) drops whole epochs, oldest first: their view
files, then their entry. A reader that finds no entry for an epoch it holds as committed knows it
was collected and gets a :class:`~millpond.errors.RetentionError` naming the oldest epoch kept.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from typing import Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from millpond import faults, paths
from millpond.catalog import Retention
from millpond.errors import MissingError, RetentionError
from millpond.store.objects import ObjectStore

__all__ = ["ChangeFeed", "Entry"]

log = logging.getLogger("millpond")


@dataclass(frozen=True)
class Entry:
    """One committed epoch as the feed keeps it."""

    epoch: int
    at: float  # seconds since 1970, when the epoch was written (just before its commit)
    views: Mapping[str, int]  # view or flow key -> changes written
    tables: Mapping[str, tuple[int, int]]  # table key -> the log range [start, stop) the epoch took in


class ChangeFeed:
    def __init__(self, store: ObjectStore):
        self.store = store
        self._oldest: int | None = None  # a writer's knowledge of its oldest kept epoch (after a pass)
        self._oldest_at: float | None = None  # and when that one was written (read once)

    # -- the writer ---------------------------------------------------------------------------
    def write(self, epoch: int, changes: Mapping[str, pa.Table], tables: Mapping[str, tuple[int, int]],
              at: float) -> None:
        """Keep epoch ``epoch``'s changes (before its commit; module docstring)."""
        views = {}
        for key, table in changes.items():
            if table.num_rows:
                sink = io.BytesIO()
                pq.write_table(table, sink, compression="lz4")  # 5x faster to write than zstd; kept briefly
                self.store.put(paths.changes_key(key, epoch), sink.getvalue())
                views[key] = table.num_rows
        faults.point("changes.before_entry")
        body = {"epoch": epoch, "at": at, "views": views, "tables": {k: list(r) for k, r in tables.items()}}
        self.store.put(paths.changes_epoch_key(epoch), json.dumps(body).encode())

    def collect(self, retention: Retention, epoch: int, now: float, pinned: int | None = None) -> int:
        """Drop the epochs ``retention`` no longer keeps (never ``epoch``, the last committed, nor
        one after ``pinned``: a reader of the rows as of ``pinned`` needs them); returns how many
        were dropped."""
        if self._oldest is None:
            self._oldest = self.oldest()
            if self._oldest is None:
                return 0
        horizon = epoch - retention.epochs + 1 if retention.epochs is not None else None
        dropped = 0
        e = self._oldest
        while e < epoch and (horizon is None or e < horizon) and (pinned is None or e <= pinned):
            if retention.seconds is not None and self._oldest_at is not None and self._oldest_at >= now - retention.seconds:
                break  # the oldest kept epoch is recent enough (known without reading it again)
            entry = self.entry(e)
            if entry is not None:
                if retention.seconds is not None and entry.at >= now - retention.seconds:
                    self._oldest_at = entry.at
                    break
                for key in entry.views:
                    self.store.delete(paths.changes_key(key, e))
                self.store.delete(paths.changes_epoch_key(e))
                dropped += 1
            e += 1
            self._oldest, self._oldest_at = e, None
        return dropped

    # -- readers ------------------------------------------------------------------------------
    def entry(self, epoch: int) -> Entry | None:
        """Epoch ``epoch``'s entry; None if it is not kept (collected, or never written)."""
        try:
            body = json.loads(self.store.get(paths.changes_epoch_key(epoch)))
        except MissingError:
            return None
        return Entry(body["epoch"], body["at"], body["views"], {k: tuple(r) for k, r in body["tables"].items()})

    def oldest(self) -> int | None:
        """The oldest epoch kept (None: none)."""
        keys = self.store.list(paths.CHANGES_EPOCHS_PREFIX)
        return paths.parse_numbered(keys[0]) if keys else None

    def entries(self, after: int, upto: int, retention: Retention | None = None) -> Iterator[Entry]:
        """The entries of epochs ``after + 1 .. upto`` (all committed), in order; a
        :class:`RetentionError` if one of them is no longer kept."""
        for e in range(after + 1, upto + 1):
            entry = self.entry(e)
            if entry is None:
                raise self.gone(e, retention)
            yield entry

    def view_changes(self, key: str, entry: Entry, retention: Retention | None = None) -> pa.Table | None:
        """A view's changes in ``entry``'s epoch (None: it did not change)."""
        if key not in entry.views:
            return None
        try:
            return pq.read_table(io.BytesIO(self.store.get(paths.changes_key(key, entry.epoch))))
        except MissingError:  # collected between reading the entry and the file
            raise self.gone(entry.epoch, retention) from None

    def gone(self, epoch: int, retention: Retention | None) -> RetentionError:
        oldest = self.oldest()
        kept = f"the oldest epoch kept is {oldest}" if oldest is not None else "no epoch's changes are kept"
        setting = f" (retention: {retention.describe()}; SET retention to keep more)" if retention else ""
        error = RetentionError(f"the changes of epoch {epoch} are no longer kept: {kept}{setting}")
        error.oldest = oldest
        return error

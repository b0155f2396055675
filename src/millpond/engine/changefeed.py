"""What every committed epoch changed, kept on the root for a while: the source of subscriptions
(``db.subscribe``, ``SUBSCRIBE``), of views read as Spark streams and of time travel (``AS OF``).

Per committed epoch ``e`` (paths: ``changes/...``):

- ``changes/<view key>/<e>/<attempt>-<partition>.parquet``: the changelog (``_w`` = +1/-1) of a
  view in ``e``, with the view's own column types, as the epoch's tasks wrote it: one file per
  task that changed something (:mod:`millpond.spark.task`), so the driver receives no rows;
- ``changes/<view key>/<e>.parquet``: a flow's changelog (its trigger is merged on the driver);
- ``changes/epochs/<e>.json``: the epoch's *entry*: when it was written (``at``, seconds since
  1970) and how long the epoch took to get there (``seconds``), the rows each view changed (``views``), the files holding a view's changes (``files``),
  and the log range each table took in (``tables``: a table's changes are its log records, kept
  by the log, not copied here).

The tasks write a view's files during the job, the coordinator a flow's after it; the entry is
written **before** the commit (step 4½ of the protocol in :mod:`millpond.engine.coordinator`):
files of an epoch that never commits, or of an attempt the entry does not name, are never read
(a reader reads only epochs up to the manifest it holds) and are rewritten when the epoch is
replayed. The entry is written last, so an entry names files that exist. A reader nets a view's
files (a row may change in two tasks) and orders the result retractions first, as a subscriber
reads an update: ``-old``, ``+new``.

**Retention** (:class:`~millpond.catalog.Retention`, ``SET retention``) drops whole epochs, oldest first: their view
files, then their entry. A reader that finds no entry for an epoch it holds as committed knows it
was collected and gets a :class:`~millpond.errors.RetentionError` naming the oldest epoch kept.
"""

from __future__ import annotations

import io
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from millpond import faults, paths
from millpond.catalog import Retention
from millpond.columns import W
from millpond.engine.changelog import consolidate
from millpond.errors import MissingError, RetentionError
from millpond.store.objects import ObjectStore

__all__ = ["Change", "ChangeFeed", "Changelogs", "Entry", "Written", "net", "parquet", "rows_of"]

log = logging.getLogger("millpond")


_EPOCH_IN_KEY = re.compile(r"/(\d{20})(?:\.parquet$|/)")  # a changes file's epoch (paths.changes_key, ...)


@dataclass(frozen=True)
class Entry:
    """One committed epoch as the feed keeps it."""

    epoch: int
    at: float  # seconds since 1970, when the epoch was written (just before its commit)
    views: Mapping[str, int]  # view or flow key -> changes written
    tables: Mapping[str, tuple[int, int]]  # table key -> the log range [start, stop) the epoch took in
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # view key -> its tasks' files
    # view key -> the difference between its rows and its new definition's, when an ALTER swapped them
    # at this epoch (read only by a reader whose catalog says the swap happened: Runtime.changes)
    swaps: Mapping[str, str] = field(default_factory=dict)
    seconds: float | None = None  # from its input being fixed to this entry being written (the dashboard's plot)
    filling: tuple[str, ...] = ()  # the views still filling in bounded epochs after it (AS OF it is refused)


@dataclass(frozen=True)
class Written:
    """A view's changes in one epoch attempt, as its tasks wrote them (not yet netted)."""

    files: tuple[str, ...]  # object keys
    rows: int  # rows in them


Change = pa.Table | Written | None  # a consumer's changes in an epoch: a flow's table, a view's files


def rows_of(change: Change) -> int:
    """The rows in ``change`` (as written: a view's files are not netted yet)."""
    return 0 if change is None else change.rows if isinstance(change, Written) else change.num_rows


class Changelogs(Mapping[str, pa.Table]):
    """An epoch's changelogs by view name, read from the files its tasks wrote when asked for
    (the epoch itself moves no changed row through the driver), each read once."""

    def __init__(self, feed: "ChangeFeed", changes: Mapping[str, pa.Table | Written]):
        self._feed, self._changes = feed, dict(changes)
        self._read: dict[str, pa.Table] = {}

    def __getitem__(self, name: str) -> pa.Table:
        change = self._changes[name]
        if isinstance(change, pa.Table):
            return change
        if name not in self._read:
            self._read[name] = self._feed.read(change)
        return self._read[name]

    def __contains__(self, name: object) -> bool:  # Mapping's would read the files (via __getitem__)
        return name in self._changes

    def __iter__(self) -> Iterator[str]:
        return iter(self._changes)

    def __len__(self) -> int:
        return len(self._changes)

    def rows(self, name: str) -> int:
        """The rows ``name``'s tasks wrote (before netting), without reading them."""
        return rows_of(self._changes.get(name))

    def __repr__(self) -> str:  # the rows each view's tasks wrote: nothing is read to show it
        return f"Changelogs({', '.join(f'{name}: {self.rows(name)} rows' for name in self._changes)})"


def net(table: pa.Table) -> pa.Table:
    """A changelog netted (equal rows' weights summed, zeros dropped), retractions first."""
    return consolidate(pl.from_arrow(table)).sort(W, maintain_order=True).to_arrow().cast(table.schema)


class ChangeFeed:
    def __init__(self, store: ObjectStore):
        self.store = store
        self._oldest: int | None = None  # a writer's knowledge of its oldest kept epoch (after a pass)
        self._oldest_at: float | None = None  # and when that one was written (read once)

    # -- the writer ---------------------------------------------------------------------------
    def write(self, epoch: int, changes: Mapping[str, pa.Table | Written], tables: Mapping[str, tuple[int, int]],
              at: float, started: float | None = None, filling: Sequence[str] = ()) -> None:
        """Keep epoch ``epoch``'s changes (before its commit; module docstring): a flow's changelog
        is written here, a view's files are named."""
        views, files = {}, {}
        for key, change in changes.items():
            if isinstance(change, Written):
                if change.rows:
                    views[key], files[key] = change.rows, list(change.files)
            elif change.num_rows:
                self.store.put(paths.changes_key(key, epoch), parquet(change))
                views[key] = change.num_rows
        faults.point("changes.before_entry")
        body = {"epoch": epoch, "at": at, "views": views, "files": files,
                "tables": {k: list(r) for k, r in tables.items()},
                **({"seconds": round(at - started, 6)} if started is not None else {}),
                **({"filling": list(filling)} if filling else {})}
        self.store.put(paths.changes_epoch_key(epoch), json.dumps(body).encode())

    def swap(self, key: str, epoch: int, change: pa.Table) -> None:
        """Keep, with committed epoch ``epoch``, the changes that turn view ``key``'s rows into its new
        definition's (``ALTER MATERIALIZED VIEW``: written before the catalog swaps them, and read
        only once it has; rewritten alike if the swap is retried)."""
        name = paths.changes_epoch_prefix(key, epoch) + "swap.parquet"
        self.store.put(name, parquet(change))
        body = json.loads(self.store.get(paths.changes_epoch_key(epoch)))
        body.setdefault("swaps", {})[key] = name
        self.store.put(paths.changes_epoch_key(epoch), json.dumps(body).encode())

    def swap_changes(self, key: str, entry: Entry, retention: Retention | None = None) -> pa.Table | None:
        """The changes kept by :meth:`swap` for view ``key`` at ``entry``'s epoch (None: none were:
        its new definition's columns differ)."""
        if key not in entry.swaps:
            return None
        try:
            return pq.read_table(io.BytesIO(self.store.get(entry.swaps[key])))
        except MissingError:
            raise self.gone(entry.epoch, retention) from None

    def collect(self, retention: Retention, epoch: int, now: float, pinned: int | None = None) -> int:
        """Drop the epochs ``retention`` no longer keeps (never ``epoch``, the last committed, nor
        one after ``pinned``: a reader of the rows as of ``pinned`` needs them); returns how many
        were dropped."""
        if self._oldest is None:
            self._oldest = self.oldest()
            if self._oldest is None:
                return 0
            self.sweep(self._oldest)
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
                # the entry first: a kill between the two leaves files no entry names (garbage), never
                # an entry whose files are gone (a reader would find a kept epoch unreadable)
                self.store.delete(paths.changes_epoch_key(e))
                faults.point("changes.between_collect")
                for key in {*entry.views, *entry.swaps}:
                    self.store.delete(paths.changes_key(key, e))
                    for name in self.store.list(paths.changes_epoch_prefix(key, e)):  # every attempt's
                        self.store.delete(name)
                dropped += 1
            e += 1
            self._oldest, self._oldest_at = e, None
        return dropped

    def sweep(self, oldest: int) -> int:
        """Delete the changes files of epochs before ``oldest`` (the oldest kept): those a kill
        inside :meth:`collect` left behind, which no entry names. Once per process (a listing of
        every kept epoch's files); returns how many were deleted."""
        swept = 0
        for name in self.store.list("changes/"):
            if name.startswith(paths.CHANGES_EPOCHS_PREFIX):
                continue
            m = _EPOCH_IN_KEY.search(name)
            if m is not None and int(m.group(1)) < oldest:
                self.store.delete(name)
                swept += 1
        return swept

    # -- readers ------------------------------------------------------------------------------
    def entry(self, epoch: int) -> Entry | None:
        """Epoch ``epoch``'s entry; None if it is not kept (collected, or never written)."""
        try:
            body = json.loads(self.store.get(paths.changes_epoch_key(epoch)))
        except MissingError:
            return None
        return Entry(body["epoch"], body["at"], body["views"], {k: tuple(r) for k, r in body["tables"].items()},
                     {k: tuple(v) for k, v in body.get("files", {}).items()}, body.get("swaps", {}),
                     body.get("seconds"), tuple(body.get("filling", ())))

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
            if key in entry.files:
                return self.read(Written(entry.files[key], entry.views[key]))
            return pq.read_table(io.BytesIO(self.store.get(paths.changes_key(key, entry.epoch))))
        except MissingError:  # collected between reading the entry and the file
            raise self.gone(entry.epoch, retention) from None

    def read(self, written: Written) -> pa.Table:
        """A view's changes its tasks wrote, netted, retractions first."""
        return net(pa.concat_tables([pq.read_table(io.BytesIO(self.store.get(f))) for f in written.files]))

    def gone(self, epoch: int, retention: Retention | None) -> RetentionError:
        oldest = self.oldest()
        kept = f"the oldest epoch kept is {oldest}" if oldest is not None else "no epoch's changes are kept"
        setting = f" (retention: {retention.describe()}; SET retention to keep more)" if retention else ""
        error = RetentionError(f"the changes of epoch {epoch} are no longer kept: {kept}{setting}")
        error.oldest = oldest
        return error


def parquet(table: pa.Table) -> bytes:
    """A changelog as a Parquet file's bytes (LZ4: 5x faster to write than zstd; kept briefly)."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="lz4")
    return sink.getvalue()

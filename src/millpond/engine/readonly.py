"""A read-only runtime: follows a root that another ``Database`` (in this process or another one)
writes, and never writes an object itself.

It runs no epochs, writes no catalog version, appends nothing to the log (so it never claims a
physical channel's writer lock) and takes no pins (a pin is an object). What it reads is always
one committed state:

1. :meth:`ReadOnlyRuntime.follow` loads the newest catalog (bound by the caller, the entry point,
   which owns the planner), then the newest manifest version, then the log's state — in this order,
   so the log is known at least as far as the manifest's offsets;
2. a read runs against that one manifest version (its rows and its offsets agree);
3. the writer's garbage collection may delete files of the version being read once a newer
   version replaced them (compaction): :meth:`ReadOnlyRuntime.read` then follows again and reruns
   the read, so an answer is one committed epoch's, whole — never a mix and never a "missing" error
   for a file that a newer version no longer needs.
"""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

import pyarrow as pa

from millpond.catalog import Catalog, CatalogStore, TableDef
from millpond.engine.coordinator import Coordinator
from millpond.engine.epoch import EpochReport
from millpond.engine.jobs import published
from millpond.engine.runtime import Runtime
from millpond.errors import MillpondError, ReadOnlyError, StorageError
from millpond.log import Channel, Log
from millpond.store.objects import ObjectStore

__all__ = ["ReadOnlyRuntime", "NoEpochs", "READ_ATTEMPTS"]

READ_ATTEMPTS = 6  # follows of a writer that keeps collecting the files just read, before giving up
RETRY_SECONDS = 0.02  # the first pause before following again (doubling)

T = TypeVar("T")


class ReadOnlyRuntime(Runtime):
    read_only = True
    _followed = False  # the log was read once
    sleep: Callable[[float], None] = staticmethod(time.sleep)  # replaced by tests that count retries

    @classmethod
    def open(cls, store: ObjectStore, catalog: Catalog | None = None, *,
             sources: Callable[[Runtime], Any] | None = None) -> "ReadOnlyRuntime":
        """A reader of the root in ``store``, with ``catalog`` (bound by the caller; default: the
        newest, running the plans stored with its views as they are)."""
        catalogs = CatalogStore(store)
        log = Log(store)
        coordinator = Coordinator(NoEpochs(), store, log, parallelism=1)
        return cls(catalogs, catalogs.load() if catalog is None else catalog, log, coordinator, sources)

    def follow(self, catalog: Catalog | None = None, *, log: bool = False) -> None:
        """Step 1: adopt ``catalog`` (the newest, bound; None: unchanged), then the newest manifest
        and log state. The log is read again only when the manifest version moved (what a read
        sees of a log ends at the manifest's offsets) or when ``log`` asks for it (a flushed or
        compacted log file replaced the ones known)."""
        if catalog is not None and catalog.version != self.catalog.version:
            self._install(catalog)
        before = self.coordinator.manifest.version if self._followed else None
        if self.coordinator.state.follow().version != before or log:
            self.log.refresh()
        self._followed = True

    def read(self, run: Callable[[], T], newest: Callable[[], Catalog | None]) -> T:
        """Steps 2 and 3: ``run`` over the state of one :meth:`follow`; rerun after following again
        when a file it needed was gone (a state file collected after a compaction, a log segment
        replaced by its flushed Parquet file). ``newest`` returns the newest bound catalog."""
        delay = RETRY_SECONDS
        for attempt in range(READ_ATTEMPTS):
            try:
                return run()
            except StorageError:
                if attempt + 1 == READ_ATTEMPTS:
                    raise  # still missing in the newest state: the error is real
                self.sleep(delay)
                delay *= 2
                self.follow(newest(), log=True)
        raise AssertionError("unreachable")

    # -- writes are refused -----------------------------------------------------------------------
    def jobs_status(self) -> pa.Table:
        """The writer's jobs, as it last published them under the root."""
        return published(self.coordinator.store)

    def commit_catalog(self, catalog: Catalog) -> None:
        raise ReadOnlyError("the database is open read-only: CREATE and DROP are refused (open it with "
                            "millpond.connect(root) to change it)")

    def run_epoch(self) -> EpochReport | None:
        raise ReadOnlyError("the database is open read-only: it runs no epochs (the writer does)")

    def flush(self, *, notice: bool = False) -> list[EpochReport]:
        raise ReadOnlyError("the database is open read-only: FLUSH is refused (the writer runs the epochs)")

    def channel(self, table: TableDef) -> Channel | _NoRecords:
        """The table's channel as the writer created it; never created here (that is a write)."""
        try:
            found = self.log.channel(table.channel)
        except MillpondError:
            return _NoRecords(table.log_schema)
        if found.info.id != table.channel_id:  # a dropped incarnation: this table has no records yet
            return _NoRecords(table.log_schema)
        return found


class NoEpochs:
    """The executor of a read-only runtime: it runs nothing (the writer runs the epochs)."""

    def run(self, *args: object) -> dict:
        raise ReadOnlyError("the database is open read-only: it runs no epochs")

    partials = run

    def output_schema(self, *args: object) -> pa.Schema:
        raise ReadOnlyError("the database is open read-only: CREATE is refused")


class _NoRecords:
    """The records of a table whose channel the writer has not created yet: none."""

    end = 0
    start = 0

    def __init__(self, schema: pa.Schema):
        self.schema = schema

    def read(self, start: int | None = None, stop: int | None = None, *, hidden: bool = False) -> pa.Table:
        return self.schema.empty_table()

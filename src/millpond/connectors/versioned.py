"""Tables read version by version — Delta Lake (:mod:`millpond.connectors.delta`) and Iceberg
(:mod:`millpond.connectors.iceberg`) tables that other jobs write — as a source table's rows.

- **The first epoch** reads the table's current version whole (its snapshot, ``SNAPSHOT_FILES`` of
  its files per append); **each later version** is one change: the rows it added and the rows it
  removed (a connector's :class:`Reader` says which), or nothing for a version that only rewrites
  files (Delta's ``OPTIMIZE``, Iceberg's ``replace``).
- **A keyed table** takes the added rows as upserts and deletes the keys of the removed rows that
  the added ones do not hold again (an update rewrites a file: its rows are upserts). **A key-less
  table** takes appends; a version that deletes or updates its rows stops it (a ``stopped`` source
  error naming the version): a key-less row has no identity to delete by.
- **Exactly once**: the table's log is appended with the producer ``<connector>:t<id>`` whose
  sequence is ``version * 2**20 + files done`` (``2**20 - 1`` once a version is read whole); the
  snapshot's version is recorded under the root (:mod:`millpond.connectors.records`) before its
  first append. A restart goes on after the last sequence the log applied; a version that changed
  no row appends nothing and is read again after a restart, to the same effect.
- **Who reads the files**: the driver fixes which files an epoch reads (a version's snapshot or
  change) and a :class:`Parts` reads them — on a cluster, in Spark tasks, a file per part
  (:mod:`millpond.spark.source_tasks`: the driver gets the staged parts to append, never reads or
  decodes a file); else the driver itself, a read's files together with its threads.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Protocol

import polars as pl
import pyarrow as pa

from millpond import faults
from millpond.catalog import TableDef
from millpond.connectors import records
from millpond.connectors.source_errors import SourceErrors, text
from millpond.engine.ingest import conform_rows
from millpond.store.objects import ObjectStore
from millpond.work import current_work

if TYPE_CHECKING:
    from millpond.log import Channel

__all__ = ["PARTS", "Parts", "Reader", "Stop", "Versioned", "plain"]

log = logging.getLogger("millpond")

PARTS = 2 ** 20  # a version's sequence numbers: version * PARTS + files done
SNAPSHOT_FILES = 64  # the snapshot's files per append


class Reader(Protocol):
    """One versioned table, as a connector reads it."""

    location: str  # what errors and millpond_sources name

    def latest(self) -> int:
        """The table's current version (-1: none yet)."""

    def operations(self, after: int, upto: int) -> dict[int, str | None]:
        """Each version in (after, upto]: its commit's operation."""

    def files(self, version: int) -> list:
        """The snapshot of ``version``'s files, in a fixed order (read by :meth:`read`)."""

    def read(self, version: int, files: list, parts: Parts) -> pa.Table:
        """The rows of ``files`` of ``version``'s snapshot, read by ``parts``."""

    def change(self, version: int, operation: str | None, parts: Parts) -> tuple[pa.Table, pa.Table] | None:
        """The rows ``version`` added and removed (their files read by ``parts``); None when it
        changed no row."""


class Parts:
    """How a read's files are read: by Spark tasks (``tasks``, a
    :class:`millpond.spark.source_tasks.TaskReads`: a part per file, so that they spread over the
    cluster) or by the driver (None: a read's files as one part, read together with its threads).
    A part is a picklable callable returning the rows of its files (a connector's own class)."""

    def __init__(self, tasks: Callable | None, what: str):
        self.tasks, self.what = tasks, what

    def groups(self, files: list) -> list[list]:
        """``files`` as the parts' groups: one each for tasks, all together for the driver."""
        return [[f] for f in files] if self.tasks is not None else [files] if files else []

    def read(self, parts: list[Callable[[], pa.Table]], schema: pa.Schema) -> pa.Table:
        tables = self.tasks(parts, self.what) if self.tasks is not None and parts else [p() for p in parts]
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return schema.empty_table()
        return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


class Stop(Exception):
    """A change the table cannot follow: it stops (a source error) until it is created again."""


class Versioned:
    """The source tables of one connector read version by version, in one writable runtime
    (step 0; ports as the other connectors'). ``open`` makes a table's :class:`Reader`; ``tasks``
    gives what reads files in Spark tasks, or None (:class:`Parts`)."""

    def __init__(self, connector: str, open: Callable[[TableDef], Reader], store: ObjectStore,
                 channel: Callable[[TableDef], Channel], insert: Callable, apply: Callable, errors: SourceErrors,
                 tasks: Callable[[], Callable | None] = lambda: None):
        self.connector, self.open, self.tasks = connector, open, tasks
        self.store, self.channel, self.insert, self.apply, self.errors = store, channel, insert, apply, errors
        self._status: dict[int, dict] = {}  # table id -> its millpond_sources row
        self._stopped: dict[int, str] = {}
        self._at: dict[int, tuple[int, int]] = {}  # table id -> (version, its files done; PARTS - 1: all)
        self._readers: dict[int, Reader] = {}  # table id -> its reader, kept open across epochs

    def ingest(self, tables: list[TableDef], epoch: int) -> None:
        now = datetime.now(timezone.utc)
        for gone in set(self._readers) - {t.id for t in tables}:  # dropped since
            del self._readers[gone]
        for t in tables:
            if t.id in self._stopped:
                continue
            where = str(dict(t.source).get("location") or dict(t.source).get("table.name"))
            try:
                self._ingest(t, epoch)
            except Stop as exc:
                self._readers.pop(t.id, None)
                self._stopped[t.id] = str(exc)
                self.errors.seen(t.id, "stopped", where, str(exc), epoch=epoch, now=now)
                log.warning("table %s stopped: %s", t.name, exc)
            except Exception as exc:  # noqa: BLE001 - one table's source must not stop the epoch
                self._readers.pop(t.id, None)  # opened anew next time
                if self.errors.seen(t.id, "listing", where, text(exc), epoch=epoch, now=now):
                    log.warning("table %s: reading its %s table failed (tried again before every epoch): %s",
                                t.name, self.connector, text(exc))
            else:
                if self.errors.clear(t.id, "listing"):
                    log.info("table %s: reading its %s table works again", t.name, self.connector)

    def status(self, t: TableDef) -> list[dict]:
        return [self._status[t.id]] if t.id in self._status else []

    def close(self) -> None:
        pass

    def _ingest(self, t: TableDef, epoch: int) -> None:
        reader = self._readers.get(t.id) or self._readers.setdefault(t.id, self.open(t))
        producer = f"{self.connector}:t{t.id}"
        latest = reader.latest()
        if t.id not in self._at:  # where this process starts: the snapshot's version, the log's last append
            name = f"{self.connector}-snapshot"
            first = (records.read(self.store, t.id, name) or records.fix(self.store, t.id, name, {"version": latest}))
            first = first["version"]
            applied = self.channel(t).producer_seq(producer)
            self._at[t.id] = divmod(applied, PARTS) if applied >= 0 and applied // PARTS >= first else (first, -1)
        version, done = self._at[t.id]
        rows = 0
        if done < PARTS - 1:  # the snapshot, not read whole yet
            rows += self._snapshot(t, reader, version, max(done, 0), producer)
            self._at[t.id] = (version, PARTS - 1)
        if latest > version:
            operations = reader.operations(version, latest)
            for v in range(version + 1, latest + 1):
                rows += self._change(t, reader, v, operations.get(v), producer)
                self._at[t.id] = (v, PARTS - 1)
        self._status[t.id] = {"split": reader.location, "position": latest, "upstream_end": latest, "lag": 0,
                              "rows": self._status.get(t.id, {}).get("rows", 0) + rows, "last_epoch": epoch}

    def _snapshot(self, t: TableDef, reader: Reader, version: int, done: int, producer: str) -> int:
        """The snapshot's parts from ``done`` on, ``SNAPSHOT_FILES`` per append; the last append's
        sequence marks the snapshot read (``version * PARTS + PARTS - 1``)."""
        if version < 0:  # no version yet: nothing to read
            return 0
        files = reader.files(version)
        rows = 0
        work = current_work()  # the snapshot's progress (SHOW JOBS): its files
        work.to_do(len(files) - done)
        for start in range(done, max(len(files), done + 1), SNAPSHOT_FILES):
            group = files[start:start + SNAPSHOT_FILES]
            last = start + len(group) >= len(files)
            table = reader.read(version, group, Parts(self.tasks(), f"{t.name}'s snapshot"))
            rows += table.num_rows
            self._append(t, table, None, (producer, version * PARTS + (PARTS - 1 if last else start + len(group))))
            work.did(len(group))
        return rows

    def _change(self, t: TableDef, reader: Reader, version: int, operation: str | None, producer: str) -> int:
        """Version ``version``'s change, as one append."""
        found = reader.change(version, operation, Parts(self.tasks(), f"{t.name}'s version {version}"))
        if found is None:
            return 0
        added, removed = found
        seq = (producer, version * PARTS + PARTS - 1)
        if not t.primary_key:
            if removed.num_rows:
                raise Stop(f"version {version} of {reader.location!r} ({operation}) deletes or updates "
                           f"{removed.num_rows} rows, which a table without a key cannot follow: create it "
                           "with a PRIMARY KEY")
            self._append(t, added, None, seq)
            return added.num_rows
        key = list(t.primary_key)
        upserts = pl.from_arrow(added).unique(subset=key, keep="last", maintain_order=True) if added.num_rows else None
        gone = pl.from_arrow(removed.select(key)).unique() if removed.num_rows else None
        if gone is not None and upserts is not None:
            gone = gone.join(upserts.select(key), on=key, how="anti")
        self._append(t, upserts.to_arrow() if upserts is not None else None,
                     gone.to_arrow() if gone is not None and gone.height else None, seq)
        return added.num_rows + removed.num_rows

    def _append(self, t: TableDef, rows: pa.Table | None, deletes: pa.Table | None, producer: tuple[str, int]) -> None:
        faults.point(f"{self.connector}.before_append")
        if rows is not None:
            rows = conform_rows(t, plain(rows).select([c.name for c in t.columns]))
        if deletes is None:
            if rows is not None and rows.num_rows:
                self.insert(t, rows, producer)  # a keyed table's rows are upserts
        else:
            self.apply(t, rows, plain(deletes), producer)
        faults.point(f"{self.connector}.after_append")


_PLAIN = {pa.large_string(): pa.string(), pa.string_view(): pa.string(), pa.large_binary(): pa.binary(),
          pa.binary_view(): pa.binary()}


def plain(table: pa.Table) -> pa.Table:
    """``table`` with large and view strings (and binaries) as plain ones (what pyarrow's kernels
    and the table's log take)."""
    return table.cast(plain_schema(table.schema))


def plain_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(_PLAIN.get(f.type, f.type)) for f in schema])


"""A Delta Lake table is a source: ``CREATE TABLE t [(columns | PRIMARY KEY (k))] WITH (connector =
'deltalake', location = '<path or s3://…>' [, storage.<option> = '…'])``, read with ``deltalake``
(delta-rs: no JVM jars) as other jobs write it (Spark with the Delta package, delta-rs, Databricks).

- **Columns** are the Delta table's (``CREATE TABLE t () WITH (...)``, or ``(PRIMARY KEY (k))`` to
  key it); columns given are checked against it (a column it lacks, or of another type, is
  refused by name).
- **The first epoch** reads the table's current version (its snapshot), a group of its files per
  append; **each later version** is read as a change: with the change data feed
  (``delta.enableChangeDataFeed``) its inserts, updates and deletes; without it, the rows of the
  files it added (and, for a keyed table, deletes of the keys of the files it removed that its
  added files do not have again). A version that only rewrites files (``OPTIMIZE``) changes nothing.
- **A key-less table** takes appends; a version that deletes or updates its rows stops it, with an
  error that says to key it (``PRIMARY KEY``): a key-less row has no identity to delete by.
- **Exactly once**: the table's log is appended with the producer ``delta:t<id>`` whose sequence is
  ``version * 2**20 + files done`` (the snapshot's files; ``2**20 - 1`` for a version read whole);
  the snapshot's version is recorded under the root before its first append. A restart goes on from
  the last sequence the log applied (:mod:`millpond.connectors`); a version that changed no row
  appends nothing and is read again after a restart, to the same effect.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from millpond import faults
from millpond.catalog import Column, TableDef
from millpond.catalog.types import normalize_type, sql_type
from millpond.connectors import records
from millpond.connectors.source_errors import SourceErrors
from millpond.engine.ingest import conform_rows
from millpond.errors import SqlError
from millpond.store.objects import ObjectStore

if TYPE_CHECKING:
    from millpond.log import Channel

__all__ = ["Delta", "check_source"]

log = logging.getLogger("millpond")

PARTS = 2 ** 20  # a version's sequence numbers: version * PARTS + files done
SNAPSHOT_FILES = 64  # the snapshot's files per append
NO_CHANGE = ("OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "FSCK")


def check_source(table: str, options: dict[str, str], columns: list[Column], key: list[str]
                 ) -> tuple[dict[str, str], list[Column]]:
    """A Delta table's options checked, and the table's columns: its own (when none are given) or
    the ones given, each checked against it."""
    where = f"table {table!r}"
    unknown = sorted(k for k in options if k not in ("connector", "location") and not k.startswith("storage."))
    if unknown:
        raise SqlError(f"{where}: unknown option {unknown[0]!r} for connector 'deltalake' (known: location, "
                       "storage.<option>)")
    if not options.get("location"):
        raise SqlError(f"{where}: connector 'deltalake' needs location = '<the Delta table's path or URI>'")
    if "://" not in options["location"]:
        import os

        options = {**options, "location": os.path.abspath(options["location"])}
    try:
        schema = _schema(_open(options))
    except Exception as exc:  # noqa: BLE001 - any reader's error: the location is named
        raise SqlError(f"{where}: no Delta table at {options['location']!r} can be read: {_text(exc)}") from None
    found = {f.name: f for f in schema}
    if not columns:
        columns = [Column(f.name, sql_type(f.type)) for f in schema]
    for c in columns:
        if c.name not in found:
            raise SqlError(f"{where}: column {c.name!r} is not in the Delta table at {options['location']!r} "
                           f"(its columns: {', '.join(found)})")
        theirs = sql_type(found[c.name].type)
        if normalize_type(theirs) != normalize_type(c.type):
            raise SqlError(f"{where}: column {c.name!r} is {c.type} here but {theirs} in the Delta table")
    for k in key:
        if k not in found:
            raise SqlError(f"{where}: primary key column {k!r} is not in the Delta table")
    return options, columns


def _open(options: dict[str, str], version: int | None = None):
    from deltalake import DeltaTable

    storage = {k.removeprefix("storage."): v for k, v in options.items() if k.startswith("storage.")}
    return DeltaTable(options["location"], version=version, storage_options=storage or None)


_PLAIN = {pa.large_string(): pa.string(), pa.string_view(): pa.string(), pa.large_binary(): pa.binary(),
          pa.binary_view(): pa.binary()}


def _schema(dt) -> pa.Schema:
    """The Delta table's columns as Arrow's plain types (large and view strings as strings)."""
    return pa.schema([f.with_type(_PLAIN.get(f.type, f.type)) for f in pa.schema(dt.schema().to_arrow())])


class Delta:
    """The Delta source tables of one writable runtime (step 0; ports as the other connectors')."""

    def __init__(self, store: ObjectStore, channel: Callable[[TableDef], Channel], insert: Callable,
                 apply: Callable, errors: SourceErrors):
        self.store, self.channel, self.insert, self.apply, self.errors = store, channel, insert, apply, errors
        self._status: dict[int, dict] = {}  # table id -> its millpond_sources row
        self._stopped: dict[int, str] = {}
        self._at: dict[int, tuple[int, int]] = {}  # table id -> (version, its files done; PARTS - 1: all)

    def ingest(self, tables: list[TableDef], epoch: int) -> None:
        now = datetime.now(timezone.utc)
        for t in tables:
            if t.id in self._stopped:
                continue
            try:
                self._ingest(t, epoch)
            except _Stop as exc:
                self._stopped[t.id] = str(exc)
                self.errors.seen(t.id, "stopped", dict(t.source)["location"], str(exc), epoch=epoch, now=now)
                log.warning("table %s stopped: %s", t.name, exc)
            except Exception as exc:  # noqa: BLE001 - one table's source must not stop the epoch
                if self.errors.seen(t.id, "listing", dict(t.source)["location"], _text(exc), epoch=epoch, now=now):
                    log.warning("table %s: reading its Delta table failed (tried again before every epoch): %s",
                                t.name, _text(exc))
            else:
                if self.errors.clear(t.id, "listing"):
                    log.info("table %s: reading its Delta table works again", t.name)

    def status(self, t: TableDef) -> list[dict]:
        return [self._status[t.id]] if t.id in self._status else []

    def close(self) -> None:
        pass

    def _ingest(self, t: TableDef, epoch: int) -> None:
        options = dict(t.source)
        producer = f"delta:t{t.id}"
        table = _open(options)
        latest = table.version()
        if t.id not in self._at:  # where this process starts: the snapshot's version, the log's last append
            first = (records.read(self.store, t.id, "delta-snapshot")
                     or records.fix(self.store, t.id, "delta-snapshot", {"version": latest}))["version"]
            applied = self.channel(t).producer_seq(producer)
            self._at[t.id] = divmod(applied, PARTS) if applied >= 0 and applied // PARTS >= first else (first, -1)
        version, done = self._at[t.id]
        rows = 0
        if done < PARTS - 1:  # the snapshot, not read whole yet
            rows += self._snapshot(t, version, max(done, 0), producer)
            self._at[t.id] = (version, PARTS - 1)
        if latest > version:
            operations = {h.get("version"): h.get("operation") for h in table.history(latest - version)}
            for v in range(version + 1, latest + 1):
                rows += self._change(t, v, operations.get(v), producer)
                self._at[t.id] = (v, PARTS - 1)
        self._status[t.id] = {"split": options["location"], "position": latest, "upstream_end": latest, "lag": 0,
                              "rows": self._status.get(t.id, {}).get("rows", 0) + rows, "last_epoch": epoch}

    def _snapshot(self, t: TableDef, version: int, done: int, producer: str) -> int:
        """The snapshot's files from ``done`` on, ``SNAPSHOT_FILES`` per append; the last append's
        sequence marks the snapshot read (``version * PARTS + PARTS - 1``)."""
        ds = _open(dict(t.source), version).to_pyarrow_dataset()
        fragments = sorted(ds.get_fragments(), key=lambda f: f.path)
        rows = 0
        for start in range(done, max(len(fragments), done + 1), SNAPSHOT_FILES):
            group = fragments[start:start + SNAPSHOT_FILES]
            last = start + len(group) >= len(fragments)
            seq = version * PARTS + (PARTS - 1 if last else start + len(group))
            table = _read(ds, group)
            rows += table.num_rows
            self._append(t, table, None, (producer, seq))
        return rows

    def _change(self, t: TableDef, version: int, operation: str | None, producer: str) -> int:
        """Version ``version``'s change (its commit's ``operation``), as one append."""
        options = dict(t.source)
        dt = _open(options, version)
        seq = (producer, version * PARTS + PARTS - 1)
        if operation in NO_CHANGE:
            return 0
        if dt.metadata().configuration.get("delta.enableChangeDataFeed", "false").lower() == "true":
            feed = dt.load_cdf(starting_version=version, ending_version=version)
            feed = _plain(pa.table(feed.read_all() if hasattr(feed, "read_all") else feed))
            kind = feed.column("_change_type")
            names = [f.name for f in _schema(dt)]
            plain = _schema(dt)
            added = feed.filter(pc.is_in(kind, pa.array(["insert", "update_postimage"]))).select(names).cast(plain)
            removed = feed.filter(pc.is_in(kind, pa.array(["delete", "update_preimage"]))).select(names).cast(plain)
        else:
            now, before = dt.to_pyarrow_dataset(), _open(options, version - 1).to_pyarrow_dataset()
            now_files, before_files = {f.path: f for f in now.get_fragments()}, {f.path: f for f in before.get_fragments()}
            added = _read(now, [now_files[p] for p in sorted(set(now_files) - set(before_files))])
            removed = _read(before, [before_files[p] for p in sorted(set(before_files) - set(now_files))])
        if not t.primary_key:
            if removed.num_rows:
                raise _Stop(f"version {version} of the Delta table ({operation}) deletes or updates "
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
        faults.point("delta.before_append")
        if rows is not None:
            rows = conform_rows(t, rows.select([c.name for c in t.columns]))
        if deletes is None:
            if rows is not None and rows.num_rows:
                self.insert(t, rows, producer)  # a keyed table's rows are upserts
        else:
            self.apply(t, rows, deletes, producer)
        faults.point("delta.after_append")


class _Stop(Exception):
    """A change the table cannot follow: it stops (a source error) until it is created again."""


def _read(ds: pds.FileSystemDataset, fragments: list) -> pa.Table:
    """The rows of ``fragments`` of ``ds`` (partition values included)."""
    if not fragments:
        return ds.schema.empty_table()
    part = pds.FileSystemDataset(fragments, ds.schema, ds.format, ds.filesystem)
    return _plain(part.to_table())


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with large and view strings (and binaries) as plain ones (what pyarrow's kernels
    and the table's log take)."""
    return table.cast(pa.schema([f.with_type(_PLAIN.get(f.type, f.type)) for f in table.schema]))


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()

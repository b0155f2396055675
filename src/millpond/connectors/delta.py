"""A Delta Lake table is a source: ``CREATE TABLE t [(columns | PRIMARY KEY (k))] WITH (connector =
'deltalake', location = '<path or s3://…>' [, storage.<option> = '…'])``, read with ``deltalake``
(delta-rs: no JVM jars) as other jobs write it (Spark with the Delta package, delta-rs, Databricks),
version by version (:mod:`millpond.connectors.versioned`).

- **Columns** are the Delta table's (``CREATE TABLE t WITH (...)``, or ``(PRIMARY KEY (k))`` to key
  it); columns given are checked against it (a column it lacks, or of another type, is refused by
  name).
- **A version's change**: with the change data feed (``delta.enableChangeDataFeed``) its inserts
  and update post-images added, its deletes and update pre-images removed; without it, the rows of
  the files it added and of the files it removed. ``OPTIMIZE``, ``VACUUM`` and property changes
  change no row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from millpond.catalog import Column, TableDef
from millpond.catalog.types import normalize_type, sql_type
from millpond.connectors.source_errors import text
from millpond.connectors.versioned import Parts, plain, plain_schema
from millpond.errors import SqlError

__all__ = ["DeltaPart", "DeltaReader", "check_source", "check_columns"]

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
        options = {**options, "location": os.path.abspath(options["location"])}
    try:
        schema = plain_schema(pa.schema(_open(options).schema().to_arrow()))
    except Exception as exc:  # noqa: BLE001 - any reader's error: the location is named
        raise SqlError(f"{where}: no Delta table at {options['location']!r} can be read: {text(exc)}") from None
    return options, check_columns(where, f"the Delta table at {options['location']!r}", schema, columns, key)


def check_columns(where: str, upstream: str, schema: pa.Schema, columns: list[Column], key: list[str]) -> list[Column]:
    """The table's columns: ``schema``'s (none given), or those given, each checked against it."""
    found = {f.name: f for f in schema}
    if not columns:
        columns = [Column(f.name, sql_type(f.type)) for f in schema]
    for c in columns:
        if c.name not in found:
            raise SqlError(f"{where}: column {c.name!r} is not in {upstream} (its columns: {', '.join(found)})")
        theirs = sql_type(found[c.name].type)
        if normalize_type(theirs) != normalize_type(c.type):
            raise SqlError(f"{where}: column {c.name!r} is {c.type} here but {theirs} in {upstream}")
    for k in key:
        if k not in found:
            raise SqlError(f"{where}: primary key column {k!r} is not in {upstream}")
    return columns


def _open(options: dict[str, str], version: int | None = None):
    from deltalake import DeltaTable

    storage = {k.removeprefix("storage."): v for k, v in options.items() if k.startswith("storage.")}
    return DeltaTable(options["location"], version=version, storage_options=storage or None)


class DeltaReader:
    """One Delta table, version by version (:class:`millpond.connectors.versioned.Reader`): kept
    open across epochs, its log read on from where it was (``update_incremental``), and a second
    handle walked forward a version at a time to see what each version added and removed."""

    def __init__(self, t: TableDef):
        self.options = dict(t.source)
        self.location = self.options["location"]
        self.table = _open(self.options)
        self._walker = None  # a handle at the version before the one read next (no change data feed)

    def latest(self) -> int:
        self.table.update_incremental()
        return self.table.version()

    def operations(self, after: int, upto: int) -> dict[int, str | None]:
        return {h.get("version"): h.get("operation") for h in self.table.history(upto - after)}

    def files(self, version: int) -> list:
        self._walker = _open(self.options, version)  # the next version's change walks on from here
        self._snapshot = self._walker.to_pyarrow_dataset()
        return sorted(self._snapshot.get_fragments(), key=lambda f: f.path)

    def read(self, version: int, files: list, parts: Parts) -> pa.Table:
        return _read(self._snapshot, files, parts)

    def change(self, version: int, operation: str | None, parts: Parts) -> tuple[pa.Table, pa.Table] | None:
        walker = self._walker
        if walker is None or walker.version() != version - 1:
            walker = self._walker = _open(self.options, version - 1)
        before = walker.to_pyarrow_dataset() if operation not in NO_CHANGE else None
        walker.load_as_version(version)  # one commit read on
        if operation in NO_CHANGE:
            return None
        if walker.metadata().configuration.get("delta.enableChangeDataFeed", "false").lower() == "true":
            # the feed is read by the driver: delta-rs reads a version's change files as one scan
            feed = walker.load_cdf(starting_version=version, ending_version=version)
            feed = plain(pa.table(feed.read_all() if hasattr(feed, "read_all") else feed))
            kind, names = feed.column("_change_type"), [f.name for f in walker.schema().to_arrow()]
            added = feed.filter(pc.is_in(kind, pa.array(["insert", "update_postimage"]))).select(names)
            removed = feed.filter(pc.is_in(kind, pa.array(["delete", "update_preimage"]))).select(names)
            return added, removed
        now = walker.to_pyarrow_dataset()
        now_files, before_files = {f.path: f for f in now.get_fragments()}, {f.path: f for f in before.get_fragments()}
        return (_read(now, [now_files[p] for p in sorted(set(now_files) - set(before_files))], parts),
                _read(before, [before_files[p] for p in sorted(set(before_files) - set(now_files))], parts))


@dataclass
class DeltaPart:
    """Files of one version of a Delta table, their partition values included: a part
    (:class:`~millpond.connectors.versioned.Parts`) that pickles with the table's file system (and
    its storage options), so that a Spark task reads it."""

    dataset: pds.FileSystemDataset

    def __call__(self) -> pa.Table:
        return plain(self.dataset.to_table())


def _read(ds: pds.FileSystemDataset, fragments: list, parts: Parts) -> pa.Table:
    """The rows of ``fragments`` of ``ds`` (partition values included), read by ``parts``."""
    return parts.read([DeltaPart(pds.FileSystemDataset(g, ds.schema, ds.format, ds.filesystem))
                       for g in parts.groups(fragments)],
                      plain_schema(ds.schema))

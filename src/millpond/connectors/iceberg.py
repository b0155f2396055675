"""An Iceberg table is a source: ``CREATE TABLE t [(columns | PRIMARY KEY (k))] WITH (connector =
'iceberg', catalog.type = 'sql', catalog.uri = '…', warehouse.path = '…', database.name = '…',
table.name = '…')`` — the sinks' catalog options (:mod:`millpond.connectors.lake_sinks`) — read with
``pyiceberg`` as other jobs write it, snapshot by snapshot (:mod:`millpond.connectors.versioned`).

- A **version** is a snapshot's place in the current snapshot's ancestry (1 for the oldest): the
  table's main line, as it was committed.
- A snapshot's **change**: the data files its own manifests add and delete (pyiceberg, Spark and
  Flink write a row-level delete or update copy-on-write by default: a file rewritten). A
  ``replace`` snapshot (compaction) changes no row. Delete files (merge-on-read deletes) stop the
  table with an error saying so: they are not followed yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from millpond.catalog import Column, TableDef
from millpond.connectors.delta import check_columns
from millpond.connectors.versioned import Parts, Stop, plain, plain_schema
from millpond.errors import SqlError

__all__ = ["IcebergReader", "check_source"]

OPTIONS = ("catalog.type", "catalog.uri", "warehouse.path", "database.name", "table.name", "catalog.name")
NEEDED = ("catalog.uri", "warehouse.path", "database.name", "table.name")


def check_source(table: str, options: dict[str, str], columns: list[Column], key: list[str]
                 ) -> tuple[dict[str, str], list[Column]]:
    where = f"table {table!r}"
    unknown = sorted(k for k in options if k != "connector" and k not in OPTIONS)
    if unknown:
        raise SqlError(f"{where}: unknown option {unknown[0]!r} for connector 'iceberg' (known: {', '.join(OPTIONS)})")
    missing = [k for k in NEEDED if not options.get(k)]
    if missing:
        raise SqlError(f"{where}: connector 'iceberg' needs {', '.join(missing)}")
    if options.setdefault("catalog.type", "sql") != "sql":
        raise SqlError(f"{where}: catalog.type must be 'sql' (pyiceberg's SQL catalog), got {options['catalog.type']!r}")
    upstream = f"the Iceberg table {options['database.name']}.{options['table.name']}"
    try:
        schema = plain_schema(_load(options).schema().as_arrow())
    except Exception as exc:  # noqa: BLE001 - any catalog's error: the table is named
        raise SqlError(f"{where}: {upstream} cannot be read: {type(exc).__name__}: {exc}") from None
    return options, check_columns(where, upstream, schema, columns, key)


def _load(options: dict[str, str]):
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = options["warehouse.path"]
    catalog = SqlCatalog(options.get("catalog.name", "millpond"), uri=options["catalog.uri"],
                         warehouse=warehouse if "://" in warehouse else Path(warehouse).absolute().as_uri())
    return catalog.load_table((options["database.name"], options["table.name"]))


class IcebergReader:
    """One Iceberg table, snapshot by snapshot (:class:`millpond.connectors.versioned.Reader`)."""

    def __init__(self, t: TableDef):
        self.options = options = dict(t.source)
        self.location = f"{options['database.name']}.{options['table.name']}"
        self.table = _load(options)
        self.chain: list = []

    def latest(self) -> int:
        """The current snapshot's place in its ancestry (the table's metadata read anew)."""
        from pyiceberg.table.snapshots import ancestors_of

        self.table = self.table.refresh()
        current = self.table.current_snapshot()
        self.chain = list(reversed(list(ancestors_of(current, self.table.metadata)))) if current else []
        self.schema = plain_schema(self.table.schema().as_arrow())
        return len(self.chain) if self.chain else -1

    def operations(self, after: int, upto: int) -> dict[int, str | None]:
        return {v: _operation(self.chain[v - 1]) for v in range(max(after + 1, 1), upto + 1)}

    def files(self, version: int) -> list:
        return [version] if version >= 1 else []  # the snapshot is read in one scan (it applies delete files)

    def read(self, version: int, files: list, parts: Parts) -> pa.Table:
        if not files:
            return self.schema.empty_table()
        snapshot = self.chain[version - 1].snapshot_id
        part = _Snapshot(self.options, snapshot) if parts.tasks is not None else \
            (lambda: plain(self.table.scan(snapshot_id=snapshot).to_arrow()))  # the driver: the table it has open
        return parts.read([part], self.schema)

    def change(self, version: int, operation: str | None, parts: Parts) -> tuple[pa.Table, pa.Table] | None:
        from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

        if operation == "replace":
            return None
        snapshot = self.chain[version - 1]
        io = self.table.io
        added, removed = [], []
        for manifest in snapshot.manifests(io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                if entry.data_file.content != DataFileContent.DATA:
                    raise Stop(f"snapshot {snapshot.snapshot_id} (version {version}) of {self.location} has delete "
                               "files (merge-on-read deletes), which are not followed yet")
                if entry.status == ManifestEntryStatus.ADDED:
                    added.append(entry.data_file.file_path)
                elif entry.status == ManifestEntryStatus.DELETED:
                    removed.append(entry.data_file.file_path)
        return self._read_files(sorted(added), parts), self._read_files(sorted(removed), parts)

    def _read_files(self, files: list[str], parts: Parts) -> pa.Table:
        return parts.read([_Files(self.table.io, g, self.schema) for g in parts.groups(files)], self.schema)


@dataclass
class _Snapshot:
    """A snapshot's rows, as the table's scan gives them (delete files applied): one part."""

    options: dict[str, str]
    snapshot_id: int

    def __call__(self) -> pa.Table:
        return plain(_load(self.options).scan(snapshot_id=self.snapshot_id).to_arrow())


@dataclass
class _Files:
    """Data files of a snapshot, read by the table's file IO (picklable: a Spark task reads them)."""

    io: object
    paths: list[str]
    schema: pa.Schema

    def __call__(self) -> pa.Table:
        tables = []
        for path in self.paths:
            with self.io.new_input(path).open() as f:
                rows = pq.read_table(f)
            tables.append(plain(rows.select([n for n in self.schema.names if n in rows.column_names])))
        if not tables:
            return self.schema.empty_table()
        return pa.concat_tables(tables, promote_options="permissive").cast(self.schema)


def _operation(snapshot) -> str | None:
    summary = snapshot.summary
    op = getattr(summary, "operation", None)
    return getattr(op, "value", op)

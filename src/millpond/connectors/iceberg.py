"""An Iceberg table is a source: ``CREATE TABLE t [(columns | PRIMARY KEY (k))] WITH (connector =
'iceberg', catalog.type = 'sql', catalog.uri = '…', warehouse.path = '…', database.name = '…',
table.name = '…')`` — the sinks' catalog options (:mod:`millpond.connectors.lake_sinks`) — read with
``pyiceberg`` as other jobs write it, snapshot by snapshot (:mod:`millpond.connectors.versioned`).

- A **version** is a snapshot's place in the current snapshot's ancestry (1 for the oldest): the
  table's main line, as it was committed.
- A snapshot's **change**: the data files its own manifests add and delete (pyiceberg, Spark and
  Flink write a row-level delete or update copy-on-write by default: a file rewritten), and the
  rows its position delete files mark (merge-on-read: Spark's ``write.delete.mode``), each data
  file read without the rows the delete files in force then mark. A ``replace`` snapshot
  (compaction) changes no row. Equality delete files (Flink's upserts) stop the table with an error
  saying so: pyiceberg does not read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
        added, removed, deletes = [], [], []
        for manifest in snapshot.manifests(io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                content, path = entry.data_file.content, entry.data_file.file_path
                if content == DataFileContent.EQUALITY_DELETES:
                    raise Stop(f"snapshot {snapshot.snapshot_id} (version {version}) of {self.location} has equality "
                               "delete files (merge-on-read upserts, as Flink writes them), which pyiceberg cannot read")
                if content == DataFileContent.POSITION_DELETES:  # (one removed: its data files rewritten too)
                    if entry.status == ManifestEntryStatus.ADDED:
                        deletes.append(path)
                elif entry.status == ManifestEntryStatus.ADDED:
                    added.append(path)
                elif entry.status == ManifestEntryStatus.DELETED:
                    removed.append(path)
        if not deletes and not removed:  # appends: no delete file of an older snapshot applies to a new file
            return self._read_files([(p, None) for p in sorted(added)], parts), self.schema.empty_table()
        marked = sorted({p for d in deletes for p in _positions(io, d, None)} - set(added) - set(removed))
        before = self._deleted(self.chain[version - 2].snapshot_id if version >= 2 else None, [*removed, *marked])
        now = self._deleted(snapshot.snapshot_id, [*added, *marked])
        gone = [(p, ("drop", before.get(p))) for p in sorted(removed)]
        gone += [(p, ("take", np.setdiff1d(now.get(p, _NONE), before.get(p, _NONE)))) for p in marked]
        return (self._read_files([(p, ("drop", now.get(p))) for p in sorted(added)], parts),
                self._read_files(gone, parts))

    def _deleted(self, snapshot_id: int | None, paths: list[str]) -> dict[str, np.ndarray]:
        """The positions of the rows of data files ``paths`` that the delete files in force at the
        snapshot mark (none marked: absent)."""
        if snapshot_id is None or not paths:
            return {}
        wanted, found, read = set(paths), {}, {}
        try:
            tasks = self.table.scan(snapshot_id=snapshot_id).plan_files()
        except ValueError as exc:  # equality deletes
            raise Stop(f"{self.location}: {exc}") from None
        for task in tasks:
            path = task.file.file_path
            if path in wanted and task.delete_files:
                marked = [_positions(self.table.io, d.file_path, read).get(path, _NONE) for d in task.delete_files]
                found[path] = np.unique(np.concatenate(marked))
        return found

    def _read_files(self, files: list[tuple], parts: Parts) -> pa.Table:
        """Data files (path, ``("drop" | "take", positions)`` or None: all rows), read by ``parts``."""
        return parts.read([_Files(self.table.io, [p for p, _ in g], self.schema, [r for _, r in g])
                           for g in parts.groups(files)], self.schema)


@dataclass
class _Snapshot:
    """A snapshot's rows, as the table's scan gives them (delete files applied): one part."""

    options: dict[str, str]
    snapshot_id: int

    def __call__(self) -> pa.Table:
        return plain(_load(self.options).scan(snapshot_id=self.snapshot_id).to_arrow())


_NONE = np.zeros(0, dtype=np.int64)


def _positions(io, path: str, cache: dict | None) -> dict[str, np.ndarray]:  # noqa: ANN001
    """A position delete file's marked rows: each data file's positions."""
    if cache is not None and path in cache:
        return cache[path]
    with io.new_input(path).open() as f:
        marks = pq.read_table(f, columns=["file_path", "pos"])
    order = pc.sort_indices(marks, [("file_path", "ascending"), ("pos", "ascending")])
    marks = marks.take(order)
    files, pos = marks.column("file_path").combine_chunks(), marks.column("pos").to_numpy()
    found = {}
    for name in pc.unique(files).to_pylist():  # per data file, not per row
        found[name] = pos[pc.equal(files, name).to_numpy(zero_copy_only=False)]
    if cache is not None:
        cache[path] = found
    return found


@dataclass
class _Files:
    """Data files of a snapshot, read by the table's file IO (picklable: a Spark task reads them),
    each whole or without the rows at some positions (``("drop", positions)``) or only those
    (``("take", positions)``)."""

    io: object
    paths: list[str]
    schema: pa.Schema
    rows: list = None  # per path: None (all) or (how, positions)

    def __call__(self) -> pa.Table:
        tables = []
        for path, which in zip(self.paths, self.rows or [None] * len(self.paths)):
            with self.io.new_input(path).open() as f:
                rows = pq.read_table(f)
            if which is not None and which[1] is not None:
                how, positions = which
                if how == "take":
                    rows = rows.take(pa.array(positions))
                else:
                    keep = np.ones(rows.num_rows, dtype=bool)
                    keep[positions[positions < rows.num_rows]] = False
                    rows = rows.filter(pa.array(keep))
            tables.append(plain(rows.select([n for n in self.schema.names if n in rows.column_names])))
        if not tables:
            return self.schema.empty_table()
        return pa.concat_tables(tables, promote_options="permissive").cast(self.schema)


def _operation(snapshot) -> str | None:
    summary = snapshot.summary
    op = getattr(summary, "operation", None)
    return getattr(op, "value", op)

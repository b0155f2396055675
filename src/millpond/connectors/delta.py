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
- **Deletion vectors** (Spark's Delta, Databricks): each file is read without the rows its vector
  marks (:class:`Rows`); a file whose vector grew gives the rows newly marked as removed.
- **A new version** is seen by a stat of its commit's file; the log is read on only when there is one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
from pyarrow.fs import FileType

from millpond.catalog import Column, TableDef
from millpond.catalog.types import normalize_type, sql_type
from millpond.connectors.source_errors import text
from millpond.connectors.versioned import Parts, Stop, plain, plain_schema
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

    return DeltaTable(options["location"], version=version, storage_options=_storage(options))


def _storage(options: dict[str, str]) -> dict[str, str] | None:
    return {k.removeprefix("storage."): v for k, v in options.items() if k.startswith("storage.")} or None


class DeltaReader:
    """One Delta table, version by version (:class:`millpond.connectors.versioned.Reader`): kept
    open across epochs, its log read on from where it was (``update_incremental``), and a second
    handle walked forward a version at a time to see what each version added and removed."""

    def __init__(self, t: TableDef):
        self.options = dict(t.source)
        self.location = self.options["location"]
        self.table = _open(self.options)
        from deltalake.fs import DeltaStorageHandler

        self._files = DeltaStorageHandler(self.table.table_uri, _storage(self.options))  # the table's folder
        self._checkpoint: tuple[tuple, int] = ((), -1)  # the last checkpoint file's (mtime, size), its version
        self._walker = None  # a handle at the version before the one read next (no change data feed)
        self._seen: tuple[int, tuple] | None = None  # the walker's version and its files (_files), as read last

    def latest(self) -> int:
        version = self.table.version()
        # a version's commit creates its JSON file: none after ``version`` (and no checkpoint past it,
        # which lets a log cleanup remove the files after it) is nothing new, seen in two stats
        following, checkpoint = self._files.get_file_info([f"_delta_log/{version + 1:020}.json",
                                                           "_delta_log/_last_checkpoint"])
        if following.type == FileType.NotFound and self._checkpointed(checkpoint) <= version:
            return version
        self.table.update_incremental()
        return self.table.version()

    def _checkpointed(self, info) -> int:  # noqa: ANN001
        """The version of the log's last checkpoint (-1: none), read again when its file changed."""
        if info.type == FileType.NotFound:
            return -1
        if self._checkpoint[0] != (info.mtime_ns, info.size):
            with self._files.open_input_file("_delta_log/_last_checkpoint") as f:
                self._checkpoint = ((info.mtime_ns, info.size), int(json.loads(f.read())["version"]))
        return self._checkpoint[1]

    def operations(self, after: int, upto: int) -> dict[int, str | None]:
        return {h.get("version"): h.get("operation") for h in self.table.history(upto - after)}

    def files(self, version: int) -> list:
        self._walker = _open(self.options, version)  # the next version's change walks on from here
        self._snapshot = _files(self._walker)
        self._seen = (version, self._snapshot)
        return sorted(self._snapshot[0].get_fragments(), key=lambda f: f.path)

    def read(self, version: int, files: list, parts: Parts) -> pa.Table:
        ds, kept = self._snapshot
        return _read(ds, [(f, kept.get(_name(f.path))) for f in files], parts)

    def change(self, version: int, operation: str | None, parts: Parts) -> tuple[pa.Table, pa.Table] | None:
        walker = self._walker
        if walker is None or walker.version() != version - 1:
            walker = self._walker = _open(self.options, version - 1)
        before = None
        if operation not in NO_CHANGE:  # the files before it: as the last version read left them
            before = self._seen[1] if self._seen and self._seen[0] == version - 1 else _files(walker)
        self._seen = None
        walker.load_as_version(version)  # one commit read on
        if operation in NO_CHANGE:
            return None
        feed = walker.metadata().configuration.get("delta.enableChangeDataFeed", "false").lower() == "true"
        # on a cluster a version's change files are read by Spark tasks (none: its change is the
        # rows of the files it added and removed, as the feed's reader takes it); here delta-rs
        # reads them as one scan
        changes = self._change_files(version) if feed and parts.tasks is not None else None
        if feed and (parts.tasks is None or changes):
            if changes:
                schema = plain_schema(pa.schema(walker.schema().to_arrow()))
                got = parts.read([_ChangeFiles(self._files, g, schema, tuple(walker.metadata().partition_columns))
                                  for g in parts.groups(changes)],
                                 schema.append(pa.field("_change_type", pa.string())))
            else:
                got = walker.load_cdf(starting_version=version, ending_version=version)
                got = plain(pa.table(got.read_all() if hasattr(got, "read_all") else got))
            kind, names = got.column("_change_type"), [f.name for f in walker.schema().to_arrow()]
            added = got.filter(pc.is_in(kind, pa.array(["insert", "update_postimage"]))).select(names)
            removed = got.filter(pc.is_in(kind, pa.array(["delete", "update_preimage"]))).select(names)
            return added, removed
        now = _files(walker)
        self._seen = (version, now)
        (now_ds, now_kept), (before_ds, before_kept) = now, before
        now_files = {f.path: f for f in now_ds.get_fragments()}
        before_files = {f.path: f for f in before_ds.get_fragments()}
        added = [(now_files[p], now_kept.get(_name(p))) for p in sorted(set(now_files) - set(before_files))]
        removed = [(before_files[p], before_kept.get(_name(p))) for p in sorted(set(before_files) - set(now_files))]
        vectors = set(before_kept) | set(now_kept)
        for p in sorted(set(now_files) & set(before_files)) if vectors else ():  # a file whose vector changed
            was, kept = before_kept.get(_name(p), ALL), now_kept.get(_name(p), ALL)
            if _name(p) in vectors and not was.same(kept):
                removed.append((before_files[p], was.minus(kept)))
                if (back := kept.minus(was)).any():
                    added.append((now_files[p], back))
        return _read(now_ds, added, parts), _read(before_ds, removed, parts)


    def _change_files(self, version: int) -> list[tuple[str, dict]]:
        """The change data files (path, partition values) of ``version``'s commit: its ``cdc``
        actions, read from its JSON file (none: it wrote none, or the file is gone)."""
        try:
            with self._files.open_input_file(f"_delta_log/{version:020}.json") as f:
                lines = f.read().decode().splitlines()
        except FileNotFoundError:
            return []
        return [(a["cdc"]["path"], a["cdc"].get("partitionValues") or {})
                for line in lines if line.strip() and "cdc" in (a := json.loads(line))]


@dataclass
class _ChangeFiles:
    """Change data files of a version (``_change_type`` and the table's columns but its partition
    columns, whose values the log's action gives): a part a Spark task reads."""

    files: object  # the table's folder (a DeltaStorageHandler: pickles with its storage options)
    paths: list[tuple[str, dict]]
    schema: pa.Schema  # the table's columns
    partitioned: tuple[str, ...]

    def __call__(self) -> pa.Table:
        import pyarrow.parquet as pq

        tables = []
        for path, values in self.paths:
            with self.files.open_input_file(path) as f:
                t = plain(pq.read_table(f))
            for name in self.partitioned:  # a constant column, its value typed as the table's column
                kind = self.schema.field(name).type
                value = values.get(name)
                column = pa.nulls(t.num_rows, kind) if value is None else \
                    pa.repeat(pa.scalar(value, pa.string()).cast(kind), t.num_rows)
                t = t.append_column(pa.field(name, kind), column)
            tables.append(t.select([*self.schema.names, "_change_type"]).cast(
                self.schema.append(pa.field("_change_type", pa.string()))))
        return pa.concat_tables(tables)


@dataclass(frozen=True)
class Rows:
    """The rows of a data file a read takes, by position: ``mask[i]`` for row ``i``, ``rest`` for
    the rows past it (a deletion vector's kept rows: the rows it does not mark)."""

    mask: np.ndarray
    rest: bool = True

    def _fitted(self, other: "Rows") -> tuple[np.ndarray, np.ndarray]:
        n = max(len(self.mask), len(other.mask))
        return self.take(n), other.take(n)

    def take(self, n: int) -> np.ndarray:
        """The mask of a file of ``n`` rows."""
        return np.concatenate([self.mask[:n], np.full(max(0, n - len(self.mask)), self.rest)])

    def same(self, other: "Rows") -> bool:
        a, b = self._fitted(other)
        return self.rest == other.rest and bool((a == b).all())

    def minus(self, other: "Rows") -> "Rows":
        """The rows this takes and ``other`` does not."""
        a, b = self._fitted(other)
        return Rows(a & ~b, self.rest and not other.rest)

    def any(self) -> bool:
        return bool(self.mask.any()) or self.rest


ALL = Rows(np.zeros(0, dtype=bool))  # every row (a file without a deletion vector)


@dataclass
class DeltaPart:
    """Files of one version of a Delta table, their partition values included, each with the rows
    it takes (:class:`Rows`; None: all): a part (:class:`~millpond.connectors.versioned.Parts`) that
    pickles with the table's file system (and its storage options), so that a Spark task reads it."""

    dataset: pds.FileSystemDataset
    rows: tuple[Rows | None, ...] = ()

    def __call__(self) -> pa.Table:
        if not any(r is not None for r in self.rows):
            return plain(self.dataset.to_table())
        ds = self.dataset
        tables = []
        for fragment, rows in zip(ds.get_fragments(), self.rows):  # a file's rows in its order: a mask's positions
            t = pds.FileSystemDataset([fragment], ds.schema, ds.format, ds.filesystem).to_table()
            tables.append(t if rows is None else t.filter(pa.array(rows.take(t.num_rows))))
        return plain(pa.concat_tables(tables))


def _read(ds: pds.FileSystemDataset, files: list[tuple], parts: Parts) -> pa.Table:
    """The rows of ``files`` (a fragment of ``ds``, the :class:`Rows` it takes or None: all) with
    their partition values, read by ``parts``."""
    return parts.read([DeltaPart(pds.FileSystemDataset([f for f, _ in g], ds.schema, ds.format, ds.filesystem),
                                 tuple(r for _, r in g))
                       for g in parts.groups(files)],
                      plain_schema(ds.schema))


def _files(table) -> tuple[pds.FileSystemDataset, dict[str, Rows]]:  # noqa: ANN001
    """``table``'s files at its version, and the rows each file with a deletion vector keeps (by
    :func:`_name`): what a reader of the table reads."""
    if "deletionVectors" not in (table.protocol().reader_features or ()):
        return table.to_pyarrow_dataset(), {}
    try:  # delta-rs's dataset refuses deletion vectors: the same files, masked here
        import pyarrow.fs as pa_fs
        from deltalake.fs import DeltaStorageHandler

        raw = table._table
        files = pa_fs.PyFileSystem(DeltaStorageHandler.from_table(raw, table._storage_options,
                                                                  raw.get_add_file_sizes()))
        schema = pa.schema(table.schema().to_arrow())
        fmt = pds.ParquetFileFormat(default_fragment_scan_options=pds.ParquetFragmentScanOptions(pre_buffer=True))
        ds = pds.FileSystemDataset([fmt.make_fragment(f, filesystem=files, partition_expression=e)
                                    for f, e in raw.dataset_partitions(schema, None)], schema, fmt, files)
    except AttributeError as exc:  # another deltalake than the one pinned
        raise Stop(f"the Delta table at {table.table_uri!r} has deletion vectors, which this deltalake "
                   f"({exc}) does not let millpond read") from None
    vectors = pa.table(table.deletion_vectors().read_all())
    kept = {}
    for i, path in enumerate(vectors.column("filepath").to_pylist()):  # per file, not per row
        kept[_name(path, table.table_uri)] = Rows(vectors.column("selection_vector")[i].values.to_numpy(
            zero_copy_only=False).astype(bool))
    return ds, kept


def _name(path: str, root: str = "") -> str:
    """A data file's path within its table, as the log's actions and delta-rs's URIs spell it
    (percent-escaped once or twice)."""
    path = path.removeprefix(root)
    while (plain_path := unquote(path)) != path:
        path = plain_path
    return path

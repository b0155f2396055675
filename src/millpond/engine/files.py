"""A folder is a source: ``CREATE TABLE t (...) WITH (connector = 'files', path = '<dir or glob>',
format = 'parquet' | 'csv' | 'json')`` takes in every file that appears under ``path``, once.
The path is a local folder or glob, or one on object storage (``s3://bucket/folder/``,
``s3://bucket/folder/*.parquet``), read with the root's storage options where the root is on
object storage too.

Before each epoch (``flush()``, background epochs) the writer lists ``path`` (a folder: every file
in it; a glob: the files it matches), and takes the files it has not taken yet in arrival order
(modification time, then name), each as one insert into the table (for a keyed table: upserts).

**Exactly once.** File ``n`` of a table (0, 1, 2, ... in the order taken) is first recorded under
the root, ``files/t<table id>/<n>.json`` (its path, size and modification time), then appended to
the table's log with the producer sequence ``(files:t<id>, n)``: the log applies a producer's
sequence number once. A restart reads the records, and every recorded file whose number the log
has not applied yet is appended again (a crash between the record and the append), so each file's
rows are in the log exactly once; a file that was never recorded is taken as new.

**A bad file** (unreadable, or rows that do not fit the table: a missing column, a value of the
wrong type) is recorded with its error and skipped: the error names the file (and, where the
reader says, the row), the table's row in ``SHOW TABLES`` shows the last one, a warning is logged,
and the files after it still come in. Replacing it with a fixed file of another name takes that in.
A file changed after it was taken is not taken again.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from millpond import faults, paths
from millpond.catalog import TableDef
from millpond.errors import SqlError
from millpond.store.objects import ObjectStore

if TYPE_CHECKING:
    from millpond.engine.runtime import Runtime

__all__ = ["Files", "FORMATS", "check_source"]

log = logging.getLogger("millpond")

FORMATS = ("parquet", "csv", "json")


def check_source(table: str, options: dict[str, str]) -> dict[str, str]:
    """A files table's options checked, its path made absolute; a SqlError naming what is wrong."""
    unknown = sorted(set(options) - {"connector", "path", "format"})
    if unknown:
        raise SqlError(f"table {table!r}: unknown option {unknown[0]!r} for connector 'files' (known: path, format)")
    if not options.get("path"):
        raise SqlError(f"table {table!r}: connector 'files' needs path = '<folder or glob>'")
    if options.get("format") not in FORMATS:
        raise SqlError(f"table {table!r}: connector 'files' needs format = 'parquet', 'csv' or 'json'"
                       f"{', got ' + repr(options['format']) if options.get('format') else ''}")
    if "://" in options["path"]:
        if not re.match(r"[a-z0-9]+://[^/]+", options["path"]):
            raise SqlError(f"table {table!r}: path {options['path']!r} names no bucket (s3://bucket/folder/)")
        return dict(options)
    return {**options, "path": os.path.abspath(options["path"])}


class Files:
    """The files tables of one writable runtime: which files each has taken, and taking new ones."""

    def __init__(self, rt: "Runtime"):
        self.rt = rt
        self._taken: dict[int, dict[str, int]] = {}  # table id -> file path -> its number (read once)
        self.errors: dict[str, str] = {}  # table name -> the last file it refused, and why
        self._stores: dict[str, ObjectStore] = {}  # a bucket's URL -> its store (a path on object storage)

    def ingest(self) -> None:
        """Take every new file of every files table. A table whose folder cannot be listed, or whose
        append fails, is said in the log and retried before the next epoch (its records read anew:
        a file recorded but not appended is appended then); the epoch and the other tables go on."""
        for t in list(self.rt.catalog.tables.values()):
            if t.source:
                try:
                    self._ingest(t)
                except Exception as exc:  # noqa: BLE001 - one table's folder must not stop the epoch
                    self._taken.pop(t.id, None)
                    log.warning("table %s: reading its files failed (retried before the next epoch): %s", t.name, exc)

    def _ingest(self, t: TableDef) -> None:
        taken = self._recorded(t)
        source = dict(t.source)
        for path, size, mtime_ns in _candidates(self._folder(source["path"]), source["path"], taken):
            n = len(taken)
            record = {"file": path, "size": size, "mtime_ns": mtime_ns}
            try:
                rows = self._read(t, path)
            except Exception as exc:  # noqa: BLE001 - any reader's error: the file is named, the next come in
                record["error"] = f"{type(exc).__name__}: {exc}".strip()
            self.rt.coordinator.store.put(paths.files_key(t.id, n), json.dumps(record).encode())
            taken[path] = n
            if "error" in record:
                self.errors[t.name] = f"file {path!r}: {record['error']}"
                log.warning("table %s: file %s was refused: %s", t.name, path, record["error"])
                continue
            faults.point("files.after_record")
            self._append(t, rows, n)

    def _append(self, t: TableDef, rows: pa.Table, n: int) -> None:
        from millpond.engine import ingest

        ingest.insert(self.rt, t, rows, producer=(_producer(t), n))

    def _recorded(self, t: TableDef) -> dict[str, int]:
        """The files ``t`` has taken; on the first call in a process, files recorded but not yet in
        the log (a crash between the two) are appended again."""
        if (taken := self._taken.get(t.id)) is not None:
            return taken
        store = self.rt.coordinator.store
        records = [(int(Path(k).stem), json.loads(store.get(k))) for k in store.list(paths.files_prefix(t.id))]
        applied = self.rt.channel(t).producer_seq(_producer(t))
        for n, record in sorted(records):
            if n > applied and "error" not in record:
                try:
                    self._append(t, self._read(t, record["file"]), n)
                except Exception as exc:  # noqa: BLE001 - gone or changed since: said, not guessed
                    log.warning("table %s: file %s, recorded before a crash, could not be read again: %s",
                                t.name, record["file"], exc)
            if "error" in record:
                self.errors[t.name] = f"file {record['file']!r}: {record['error']}"
        self._taken[t.id] = taken = {record["file"]: n for n, record in records}
        return taken

    def forget(self, t: TableDef) -> None:
        self._taken.pop(t.id, None)
        self.errors.pop(t.name, None)

    def _folder(self, path: str) -> ObjectStore | None:
        """The object store a URI path is read from (with the root's storage options where the root
        is remote too: its credentials and endpoint); None for a local path."""
        if "://" not in path:
            return None
        bucket = re.match(r"[a-z0-9]+://[^/]+", path).group(0)
        if bucket not in self._stores:
            root = self.rt.coordinator.store
            self._stores[bucket] = ObjectStore(bucket, root.options if "://" in root.root else {}, create=False)
        return self._stores[bucket]

    def first_schema(self, path: str, fmt: str) -> pa.Schema | None:
        """The columns of the first file under ``path`` (a folder or a glob, local or on object
        storage), as a reader infers them; None when there is no file yet."""
        found = _candidates(self._folder(path), path, {})
        if not found:
            return None
        data = self._data(found[0][0])
        if fmt == "parquet":
            return pq.read_schema(data)
        return (pcsv.read_csv(data) if fmt == "csv" else pjson.read_json(data)).schema

    def _read(self, t: TableDef, path: str) -> pa.Table:
        return _read(t, dict(t.source)["format"], self._data(path))

    def _data(self, path: str) -> "str | pa.BufferReader":
        """A file to read: its local path, or its bytes fetched from object storage."""
        store = self._folder(path)
        return path if store is None else pa.BufferReader(store.get(path[len(store.root):].lstrip("/")))


def _producer(t: TableDef) -> str:
    return f"files:t{t.id}"


def _candidates(store: ObjectStore | None, path: str, taken: dict[str, int]) -> list[tuple[str, int, int]]:
    """Files under ``path`` (a folder: the files in it; a glob: those it matches) not taken yet, in
    arrival order (modification time, then name), as (path, size, modification time in ns). Hidden
    and underscore files are left: a writer's temporary files, Spark's ``_SUCCESS``."""
    if store is None:
        pattern = os.path.join(path, "*") if os.path.isdir(path) else path
        found = [(p, os.stat(p)) for p in glob.glob(pattern) if p not in taken and os.path.isfile(p)]
        files = [(p, st.st_size, st.st_mtime_ns) for p, st in found]
    else:
        key = path[len(store.root):].lstrip("/")
        wild = re.search(r"[*?\[]", key)
        folder = key[:key.rfind("/", 0, wild.start()) + 1] if wild else key.rstrip("/") + "/" if key else ""
        rest = key[len(folder):] if wild else "*"
        files = [(f"{store.root}/{k}", size, mtime) for k, size, mtime in store.list_files(folder)
                 if fnmatch.fnmatchcase(k[len(folder):], rest) and "/" not in k[len(folder):]]
        files = [f for f in files if f[0] not in taken]
    files = [f for f in files if not os.path.basename(f[0]).startswith((".", "_"))]
    return sorted(files, key=lambda f: (f[2], f[0]))


def _read(t: TableDef, fmt: str, path: "str | pa.BufferReader") -> pa.Table:
    """The file's rows as the table's columns (an error names what does not fit)."""
    from millpond.engine.ingest import conform_rows

    schema = t.schema
    if fmt == "parquet":
        rows = pq.read_table(path)
    elif fmt == "csv":
        rows = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
            column_types={f.name: f.type for f in schema if not pa.types.is_struct(f.type)},
            strings_can_be_null=True))
    else:
        rows = pjson.read_json(path, parse_options=pjson.ParseOptions(
            explicit_schema=pa.schema([f for f in schema if not pa.types.is_struct(f.type)]),
            unexpected_field_behavior="error"))
    return conform_rows(t, rows)

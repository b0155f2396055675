"""A folder is a source: ``CREATE TABLE t (...) WITH (connector = 'files', path = '<dir or glob>',
format = 'parquet' | 'csv' | 'json')`` takes in every file that appears under ``path``, once.
The path is a local folder or glob, or one on object storage (``s3://bucket/folder/``,
``s3://bucket/folder/*.parquet``), read with the root's storage options where the root is on
object storage too.

Before each epoch (``flush()``, background epochs) the writer lists ``path`` (a folder: every file
in it; a glob: the files it matches), and takes the files it has not taken yet in arrival order
(modification time, then name), each as one insert into the table (for a keyed table: upserts).
On a cluster, new files on object storage are read by Spark tasks (``TASK_FILES`` a job), the
driver recording and appending them in the same order.

**Exactly once.** File ``n`` of a table (0, 1, 2, ... in the order taken) is first recorded under
the root, ``files/t<table id>/<n>.json`` (its path, size and modification time), then appended to
the table's log with the producer sequence ``(files:t<id>, n)``: the log applies a producer's
sequence number once. A restart reads the records, and every recorded file whose number the log
has not applied yet is appended again (a crash between the record and the append), so each file's
rows are in the log exactly once; a file that was never recorded is taken as new.

**A bad file** (unreadable, or rows that do not fit the table: a missing column, a value of the
wrong type) is recorded with its error and skipped: the error names the file (and, where the
reader says, the row), a warning is logged, and the files after it still come in. **A path that
cannot be listed** (a local folder that does not exist or cannot be read, a bucket out of reach)
takes nothing in and is listed again before every epoch; the other tables go on. Both are
problems of the table's source (:mod:`millpond.connectors.source_errors`): rows of
``millpond_source_errors``, counted in the table's row of ``SHOW TABLES``, carried by every epoch's
report and said by ``flush()``, until they go away: a refused file that is removed, or rewritten
(another size or modification time: it is read again, under a new number) and reads well; a
listing that works again. A fixed copy under another name is taken like any new file. A file
changed after it was taken is not taken again.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import logging
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Container

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from millpond import faults, paths
from millpond.catalog import TableDef
from millpond.connectors.source_errors import SourceErrors, text
from millpond.engine.ingest import conform_rows
from millpond.errors import SqlError
from millpond.store.objects import ObjectStore
from millpond.work import current_work

if TYPE_CHECKING:
    from millpond.log import Channel

    Insert = Callable[[TableDef, pa.Table, tuple[str, int]], object]

__all__ = ["Files", "FORMATS", "check_source", "local_listing_error"]

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


def local_listing_error(path: str) -> str | None:
    """Why a local ``path`` cannot be listed now (a folder that does not exist...); None when it
    can, or when it is on object storage (listed before the first epoch, not at CREATE)."""
    if "://" in path:
        return None
    try:
        _local(path)
    except OSError as exc:
        return text(exc)
    return None


class Files:
    """The files tables of one writable runtime: which files each has taken, and taking new ones
    (step 0, run by :class:`millpond.connectors.Sources`). Ports: ``store`` (the root: what was
    taken), ``channel`` (a table's log: what it applied), ``insert`` (rows appended to a table,
    idempotent per producer) and ``errors`` (what the tables' sources fail on)."""

    def __init__(self, store: ObjectStore, channel: Callable[[TableDef], Channel], insert: "Insert",
                 errors: SourceErrors, tasks: Callable[[], Callable | None] = lambda: None):
        self.store, self.channel, self.insert, self.errors, self.tasks = store, channel, insert, errors, tasks
        self._taken: dict[int, dict[str, int]] = {}  # table id -> file path -> its last number (read once)
        self._next: dict[int, int] = {}  # table id -> the number of its next file
        self._stores: dict[str, ObjectStore] = {}  # a bucket's URL -> its store (a path on object storage)

    def ingest(self, tables: list[TableDef], epoch: int) -> None:
        """Take every new file of the files tables ``tables`` for ``epoch``. A table whose
        folder cannot be listed, or whose append fails, is said (a source error, and the log) and
        retried before the next epoch (its records read anew: a file recorded but not appended is
        appended then); the epoch and the other tables go on."""
        now = datetime.now(timezone.utc)
        for t in tables:
            try:
                self._ingest(t, epoch, now)
            except Exception as exc:  # noqa: BLE001 - one table's folder must not stop the epoch
                self._taken.pop(t.id, None)
                if self.errors.seen(t.id, "ingest", dict(t.source)["path"], text(exc), epoch=epoch, now=now):
                    log.warning("table %s: taking its files in failed (retried before every epoch): %s",
                                t.name, text(exc))
            else:
                if self.errors.clear(t.id, "ingest"):
                    log.info("table %s: taking its files in works again", t.name)

    def status(self, t: TableDef) -> list[dict]:
        """``t``'s row of ``millpond_sources``: its path, and how many files it has taken."""
        return [{"split": dict(t.source)["path"], "position": self._next.get(t.id)}]

    def _ingest(self, t: TableDef, epoch: int, now: datetime) -> None:
        taken = self._recorded(t, epoch, now)
        source = dict(t.source)
        refused = self.errors.refused(t.id)
        try:
            found = _candidates(self._folder(source["path"]), source["path"], taken, refused)
        except Exception as exc:  # noqa: BLE001 - any listing error: said, retried, the others go on
            if self.errors.seen(t.id, "listing", source["path"], text(exc), epoch=epoch, now=now):
                log.warning("table %s: its path %s cannot be listed (retried before every epoch): %s",
                            t.name, source["path"], text(exc))
            return
        if self.errors.clear(t.id, "listing"):
            log.info("table %s: its path %s is listed again", t.name, source["path"])
        listed = {path: (size, mtime_ns) for path, size, mtime_ns in found}
        for path, e in refused.items():
            if path not in listed:  # removed (or no longer matched): nothing to take any more
                self.errors.clear(t.id, "file", path)
                log.info("table %s: file %s, refused, is gone", t.name, path)
            elif listed[path] == (e.size, e.mtime_ns):  # unchanged: still refused, not read again
                self.errors.seen(t.id, "file", path, e.error, epoch=epoch, now=now, size=e.size, mtime_ns=e.mtime_ns)
        todo = [(path, size, mtime_ns) for path, size, mtime_ns in found
                if not (path in refused and (size, mtime_ns) == (refused[path].size, refused[path].mtime_ns))]
        work = current_work()  # the read's progress (SHOW JOBS): its new files' bytes
        work.to_do(sum(size or 0 for _, size, _ in todo))
        read = self._reader(t, [path for path, _, _ in todo])
        for path, size, mtime_ns in todo:
            n = self._next[t.id]
            record = {"file": path, "size": size, "mtime_ns": mtime_ns, "epoch": epoch, "at": now.timestamp()}
            rows = read(path)
            if isinstance(rows, str):  # any reader's error: the file is named, the next come in
                record["error"] = rows
            self.store.put(paths.files_key(t.id, n), json.dumps(record).encode())
            taken[path], self._next[t.id] = n, n + 1
            if "error" in record:
                self.errors.seen(t.id, "file", path, record["error"], epoch=epoch, now=now, size=size,
                                 mtime_ns=mtime_ns)
                log.warning("table %s: file %s was refused: %s", t.name, path, record["error"])
                work.did(size or 0)
                continue
            if self.errors.clear(t.id, "file", path):
                log.info("table %s: file %s, refused before, changed and was taken", t.name, path)
            faults.point("files.after_record")
            self._append(t, rows, n)
            work.did(size or 0)

    def _append(self, t: TableDef, rows: pa.Table, n: int) -> None:
        self.insert(t, rows, (_producer(t), n))

    def _recorded(self, t: TableDef, epoch: int, now: datetime) -> dict[str, int]:
        """The files ``t`` has taken (a path read more than once: its last number); on the first
        call in a process, files recorded but not yet in the log (a crash between the two) are
        appended again, and the files refused are its source errors again."""
        if (taken := self._taken.get(t.id)) is not None:
            return taken
        store = self.store
        records = sorted((int(Path(k).stem), json.loads(store.get(k))) for k in store.list(paths.files_prefix(t.id)))
        applied = self.channel(t).producer_seq(_producer(t))
        for n, record in records:
            if n > applied and "error" not in record:
                try:
                    self._append(t, self._read(t, record["file"]), n)
                except Exception as exc:  # noqa: BLE001 - gone or changed since: said, not guessed
                    log.warning("table %s: file %s, recorded before a crash, could not be read again: %s",
                                t.name, record["file"], exc)
        last = {record["file"]: (n, record) for n, record in records}  # in order: a path's last record wins
        for path, (_, record) in last.items():
            if "error" in record:
                at = record.get("at")
                self.errors.seen(t.id, "file", path, record["error"], epoch=epoch, now=now,
                                 first=(record.get("epoch"), None if at is None else datetime.fromtimestamp(at, timezone.utc)),
                                 size=record.get("size"), mtime_ns=record.get("mtime_ns"))
        self._next[t.id] = records[-1][0] + 1 if records else 0
        self._taken[t.id] = taken = {path: n for path, (n, _) in last.items()}
        return taken

    def _folder(self, path: str) -> ObjectStore | None:
        """The object store a URI path is read from (with the root's storage options where the root
        is remote too: its credentials and endpoint); None for a local path."""
        if "://" not in path:
            return None
        bucket = re.match(r"[a-z0-9]+://[^/]+", path).group(0)
        if bucket not in self._stores:
            root = self.store
            self._stores[bucket] = ObjectStore(bucket, root.options if "://" in root.root else {}, create=False)
        return self._stores[bucket]

    def first_schema(self, path: str, fmt: str) -> pa.Schema | None:
        """The columns of the first file under ``path`` (a folder or a glob, local or on object
        storage), as a reader infers them; None when there is no file yet."""
        try:
            found = _candidates(self._folder(path), path, {}, {})
        except FileNotFoundError:  # no folder yet: no file yet
            return None
        if not found:
            return None
        data = self._data(found[0][0])
        if fmt == "parquet":
            return pq.read_schema(data)
        return (pcsv.read_csv(data) if fmt == "csv" else pjson.read_json(data)).schema

    def _read(self, t: TableDef, path: str) -> pa.Table:
        return _read(t, dict(t.source)["format"], self._data(path))

    def _reader(self, t: TableDef, todo: list[str]) -> Callable[[str], "pa.Table | str"]:
        """How ``t``'s new files ``todo`` are read, in their order: each file's rows, or its reader's
        error. By the driver, a file at a time; on a cluster by Spark tasks, ``TASK_FILES`` files a
        job (a local path only where the tasks run on this machine: the executors cannot see it)."""
        tasks = self.tasks()
        if tasks is None or not todo or ("://" not in todo[0] and not tasks.local):
            def here(path: str) -> "pa.Table | str":
                try:
                    return self._read(t, path)
                except Exception as exc:  # noqa: BLE001 - any reader's error
                    return text(exc)
            return here
        got: dict[str, pa.Table | str] = {}

        def in_tasks(path: str) -> "pa.Table | str":
            if path not in got:
                got.clear()
                group = todo[todo.index(path):][:TASK_FILES]
                for p, table in zip(group, tasks([_FilePart(t, p, self._where(p)) for p in group],
                                                 f"{t.name}'s {len(group)} new file(s)")):
                    error = (table.schema.metadata or {}).get(_ERROR)
                    got[p] = table if error is None else error.decode()
            return got.pop(path)
        return in_tasks

    def _where(self, path: str) -> tuple[str, dict] | None:
        """Where a task reads a path on object storage from (its bucket's URL and options)."""
        store = self._folder(path)
        return None if store is None else (store.root, store.options)

    def _data(self, path: str) -> "str | pa.BufferReader":
        """A file to read: its local path, or its bytes fetched from object storage."""
        return _data(self._folder(path), path)


TASK_FILES = 64  # files read by one Spark job (on a cluster): their rows in the driver at once
_ERROR = b"millpond.error"  # a file's reader's error, in the metadata of a part's empty table


@dataclass
class _FilePart:
    """A new file of a files table, read by a Spark task: its rows as the table's columns, or no
    rows and its reader's error (a file that does not read or fit is refused, as the driver does)."""

    t: TableDef
    path: str
    bucket: tuple[str, dict] | None  # (URL, storage options) of a path on object storage

    def __call__(self) -> pa.Table:
        try:
            store = None if self.bucket is None else ObjectStore(self.bucket[0], self.bucket[1], create=False)
            return _read(self.t, dict(self.t.source)["format"], _data(store, self.path))
        except Exception as exc:  # noqa: BLE001 - any reader's error: said by the driver, naming the file
            return pa.table({}).replace_schema_metadata({_ERROR: text(exc).encode()})


def _data(store: ObjectStore | None, path: str) -> "str | pa.BufferReader":
    """A file to read: its local path (``store`` None), or its bytes fetched from its bucket's store."""
    return path if store is None else pa.BufferReader(store.get(path[len(store.root):].lstrip("/")))


def _producer(t: TableDef) -> str:
    return f"files:t{t.id}"


def _candidates(store: ObjectStore | None, path: str, taken: dict[str, int], refused: Container[str]
                ) -> list[tuple[str, int, int]]:
    """Files under ``path`` (a folder: the files in it; a glob: those it matches) not taken yet, or
    refused (to see whether they changed), in arrival order (modification time, then name), as
    (path, size, modification time in ns). Hidden and underscore files are left: a writer's
    temporary files, Spark's ``_SUCCESS``. A folder that cannot be listed raises (OSError)."""
    if store is None:
        files = []
        for p in _local(path):
            if p not in taken or p in refused:
                try:
                    st = os.stat(p)
                except FileNotFoundError:  # removed since it was listed
                    continue
                files.append((p, st.st_size, st.st_mtime_ns))
    else:
        key = path[len(store.root):].lstrip("/")
        wild = re.search(r"[*?\[]", key)
        folder = key[:key.rfind("/", 0, wild.start()) + 1] if wild else key.rstrip("/") + "/" if key else ""
        rest = key[len(folder):] if wild else "*"
        files = [(f"{store.root}/{k}", size, mtime) for k, size, mtime in store.list_files(folder)
                 if fnmatch.fnmatchcase(k[len(folder):], rest) and "/" not in k[len(folder):]]
        files = [f for f in files if f[0] not in taken or f[0] in refused]
    files = [f for f in files if not os.path.basename(f[0]).startswith((".", "_"))]
    return sorted(files, key=lambda f: (f[2], f[0]))


def _local(path: str) -> list[str]:
    """The files a local ``path`` names: a file itself, a folder's files, a glob's matches. A
    folder that does not exist (a glob's: the part before its first wildcard) or cannot be read
    raises, where a glob alone would match nothing and say nothing."""
    if os.path.isfile(path):
        return [path]
    wild = re.search(r"[*?\[]", path)
    if wild is None:
        if not os.path.exists(path):
            raise FileNotFoundError(f"folder {path!r} does not exist")
        with os.scandir(path) as entries:  # NotADirectoryError, PermissionError: said as they are
            return [e.path for e in entries if e.is_file()]
    folder = os.path.dirname(path[:wild.start()] + "x") or os.sep
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"folder {folder!r} (of the glob {path!r}) does not exist")
    if not os.access(folder, os.R_OK | os.X_OK):
        raise PermissionError(f"folder {folder!r} (of the glob {path!r}) cannot be read")
    return [p for p in glob.glob(path) if os.path.isfile(p)]


def _read(t: TableDef, fmt: str, path: "str | pa.BufferReader") -> pa.Table:
    """The file's rows as the table's columns (an error names what does not fit)."""
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

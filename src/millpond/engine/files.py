"""A folder is a source: ``CREATE TABLE t (...) WITH (connector = 'files', path = '<dir or glob>',
format = 'parquet' | 'csv' | 'json')`` takes in every file that appears under ``path``, once.

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

import glob
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from millpond import faults, paths
from millpond.catalog import TableDef
from millpond.errors import SqlError

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
        raise SqlError(f"table {table!r}: connector 'files' reads a local folder; {options['path']!r} is a URI")
    return {**options, "path": os.path.abspath(options["path"])}


class Files:
    """The files tables of one writable runtime: which files each has taken, and taking new ones."""

    def __init__(self, rt: "Runtime"):
        self.rt = rt
        self._taken: dict[int, dict[str, int]] = {}  # table id -> file path -> its number (read once)
        self.errors: dict[str, str] = {}  # table name -> the last file it refused, and why

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
        for path in _candidates(source["path"], taken):
            n = len(taken)
            stat = os.stat(path)
            record = {"file": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
            try:
                rows = _read(t, source["format"], path)
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
                    self._append(t, _read(t, dict(t.source)["format"], record["file"]), n)
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


def _producer(t: TableDef) -> str:
    return f"files:t{t.id}"


def _candidates(path: str, taken: dict[str, int]) -> list[str]:
    """Files under ``path`` not taken yet, in arrival order (modification time, then name)."""
    pattern = os.path.join(path, "*") if os.path.isdir(path) else path
    found = []
    for p in glob.glob(pattern):
        if p in taken or not os.path.isfile(p) or os.path.basename(p).startswith((".", "_")):
            continue  # hidden and underscore files: a writer's temporary files, Spark's _SUCCESS
        found.append((os.stat(p).st_mtime_ns, p))
    return [p for _, p in sorted(found)]


def _read(t: TableDef, fmt: str, path: str) -> pa.Table:
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

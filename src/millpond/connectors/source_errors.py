"""What source tables' sources failed on, for as long as it lasts (:mod:`millpond.connectors`).

Files tables' three kinds of problem (:mod:`millpond.connectors.files`), each kept per table until
it goes away:

- ``file``: a file was refused (unreadable, or rows that do not fit the table) and skipped; the
  files after it still come in. It goes away when the file is removed (or no longer matches the
  table's glob), or when it is rewritten (another size or modification time) and reads well;
- ``listing``: the table's path (a folder or glob, local or on object storage) could not be
  listed — a local folder that does not exist or cannot be read, a bucket that cannot be reached.
  No file of the table comes in meanwhile; the listing is retried before every epoch and the
  problem goes away with the first listing that works;
- ``ingest``: the files were listed but taking one in failed otherwise (recording it under the
  root, appending its rows to the table's log); retried before every epoch (a Kafka table's too:
  its messages were read but could not be appended).

Kafka tables' (:mod:`millpond.connectors.kafka`):

- ``broker``: the broker could not be reached, or refused (authentication, a topic gone); tried
  again before the epochs, and gone with the first read that works;
- ``message``: a malformed message was skipped (``path`` is ``topic/partition/offset``); the last
  100 of a table are kept;
- ``stopped``: a malformed message stopped the table (``on_error = 'stop'``; ``path`` is
  ``topic/partition/offset``); a Delta or Iceberg version, or a PostgreSQL change, that the table
  cannot follow stopped it (an upstream ``ALTER TABLE``, a delete where there is no key).

PostgreSQL CDC tables' (:mod:`millpond.connectors.postgres_cdc`): ``upstream``, the server could
not be reached or refused (tried again before every epoch), and ``stopped``.

They are the rows of the system view ``millpond_source_errors`` (:meth:`SourceErrors.table`),
summed up in ``SHOW TABLES``' ``error`` column (:meth:`SourceErrors.summary`), carried by every
:class:`~millpond.engine.epoch.EpochReport` and said once more by ``flush()``
(:meth:`SourceErrors.notice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

import pyarrow as pa

from millpond.catalog import Catalog

__all__ = ["KINDS", "SCHEMA", "SourceError", "SourceErrors", "text"]

KINDS = ("listing", "upstream", "ingest", "broker", "stopped", "file", "message")  # in the order they are shown: what stops the whole table first

SCHEMA = pa.schema([
    ("table_name", pa.string()), ("kind", pa.string()), ("path", pa.string()), ("error", pa.string()),
    ("first_epoch", pa.int64()), ("last_epoch", pa.int64()),
    ("first_seen", pa.timestamp("us", tz="UTC")), ("last_seen", pa.timestamp("us", tz="UTC"))])


@dataclass
class SourceError:
    """One problem of one files table. ``path``: the refused file (``file``), else the table's path.
    An epoch here is the one whose input was being taken in (the last committed one + 1)."""

    kind: str
    path: str
    error: str
    first_epoch: int | None  # None: refused by a millpond that did not record when
    first_seen: datetime | None
    last_epoch: int
    last_seen: datetime
    size: int | None = None  # a refused file's, as read: it is read again once these change
    mtime_ns: int | None = None

    def describe(self) -> str:
        if self.kind == "file":
            return f"file {self.path!r}: {self.error}"
        if self.kind == "listing":
            return f"path {self.path!r} cannot be listed: {self.error}"
        if self.kind == "broker":
            return f"broker {self.path!r}: {self.error}"
        if self.kind == "stopped":
            return f"stopped at {self.path}: {self.error}"
        if self.kind == "upstream":
            return f"{self.path} cannot be read: {self.error}"
        if self.kind == "message":
            return f"message {self.path} skipped: {self.error}"
        return f"taking its rows in failed: {self.error}"


class SourceErrors:
    """The problems in force, by table id (a dropped table's go with it: :meth:`keep`)."""

    def __init__(self) -> None:
        self._by_table: dict[int, dict[tuple[str, str], SourceError]] = {}

    def seen(self, table_id: int, kind: str, path: str, error: str, *, epoch: int, now: datetime,
             first: tuple[int | None, datetime | None] | None = None, size: int | None = None,
             mtime_ns: int | None = None) -> bool:
        """Note a problem seen now (``first``: when it was seen first, if before); True when it is
        new or its error changed (worth a warning), False when it goes on as it was."""
        assert kind in KINDS, kind
        problems = self._by_table.setdefault(table_id, {})
        known = problems.get((kind, path))
        if known is not None and known.error == error:
            known.last_epoch, known.last_seen, known.size, known.mtime_ns = epoch, now, size, mtime_ns
            return False
        first_epoch, first_seen = first if first is not None else (epoch, now)
        problems[(kind, path)] = SourceError(kind, path, error, first_epoch, first_seen, epoch, now, size, mtime_ns)
        return True

    def clear(self, table_id: int, kind: str, path: str | None = None) -> list[SourceError]:
        """Forget ``table_id``'s problems of ``kind`` (of ``path`` only, if given); the ones gone."""
        problems = self._by_table.get(table_id, {})
        gone = [key for key in problems if key[0] == kind and (path is None or key[1] == path)]
        return [problems.pop(key) for key in gone]

    def trim(self, table_id: int, kind: str, keep: int) -> None:
        """Keep the last ``keep`` problems of ``kind`` of ``table_id`` (skipped messages: the newest)."""
        problems = self._by_table.get(table_id, {})
        found = [key for key in problems if key[0] == kind]
        for key in found[:max(len(found) - keep, 0)]:
            del problems[key]

    def refused(self, table_id: int) -> dict[str, SourceError]:
        """``table_id``'s refused files by path (a copy)."""
        return {p: e for (k, p), e in self._by_table.get(table_id, {}).items() if k == "file"}

    def keep(self, table_ids: Iterable[int]) -> None:
        """Forget the problems of every table not in ``table_ids`` (dropped since)."""
        wanted = set(table_ids)
        for gone in [i for i in self._by_table if i not in wanted]:
            del self._by_table[gone]

    def of(self, table_id: int) -> list[SourceError]:
        """``table_id``'s problems: listing and ingest first, then files in the order they failed."""
        return sorted(self._by_table.get(table_id, {}).values(),
                      key=lambda e: (KINDS.index(e.kind), e.first_epoch or 0, e.path))

    def by_table(self, catalog: Catalog) -> dict[str, tuple[str, ...]]:
        """Each table with problems, by name: its problems, described (an EpochReport's ``source_errors``)."""
        return {t.name: tuple(e.describe() for e in found) for t in sorted(catalog.tables.values(), key=lambda t: t.name)
                if (found := self.of(t.id))}

    def summary(self, table_id: int) -> str | None:
        """``SHOW TABLES``' ``error``: the problem, or how many there are and the first of them."""
        found = self.of(table_id)
        if len(found) <= 1:
            return found[0].describe() if found else None
        items = sum(e.kind in ("file", "message") for e in found)
        noun, verb = ("file", "refused") if found[-1].kind == "file" else ("message", "skipped")
        if items == len(found):
            return f"{items} {noun}s {verb} (each in millpond_source_errors); the first: {found[0].describe()}"
        tail = f"; and {items} {noun}{'s' if items > 1 else ''} {verb} (each in millpond_source_errors)" if items else ""
        return "; ".join(e.describe() for e in found if e.kind not in ("file", "message")) + tail

    def notice(self, catalog: Catalog) -> str | None:
        """What ``flush()`` says when sources have problems (None: they have none)."""
        tables = [(t.name, found) for t in sorted(catalog.tables.values(), key=lambda t: t.name)
                  if (found := self.of(t.id))]
        if not tables:
            return None
        said = "; ".join(f"table {name!r}: {found[0].describe()}" if len(found) == 1
                         else f"table {name!r}: {len(found)} errors, first {found[0].describe()}"
                         for name, found in tables)
        return f"source tables have errors (SELECT * FROM millpond_source_errors): {said}"

    def table(self, catalog: Catalog) -> pa.Table:
        """``millpond_source_errors``: one row per problem in force."""
        rows = [{"table_name": t.name, "kind": e.kind, "path": e.path, "error": e.error,
                 "first_epoch": e.first_epoch, "last_epoch": e.last_epoch, "first_seen": e.first_seen,
                 "last_seen": e.last_seen}
                for t in sorted(catalog.tables.values(), key=lambda t: t.name) for e in self.of(t.id)]
        return pa.Table.from_pylist(rows, schema=SCHEMA)


def text(exc: BaseException) -> str:
    """An exception as a source error says it: its type and message."""
    return f"{type(exc).__name__}: {exc}".strip()

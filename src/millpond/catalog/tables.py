"""A table's definition: its columns (with their defaults, and when each was added) and its key.

A column added by ``ALTER TABLE ... ADD COLUMN`` is numbered from the catalog's ids (``added``): a view,
flow or index created before it (a smaller id) is planned without it, as PostgreSQL expands a view's
``*`` when the view is created (:meth:`TableDef.as_seen_by`). Its records written before it existed
lack it; every reader fills them in with its default then (the field's ``millpond.fill`` metadata,
:func:`millpond.defaults.fit`), so adding a column rewrites nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Sequence

import pyarrow as pa

from millpond.catalog.types import arrow_type
from millpond.columns import DEFAULT, FILL, ROW_ID, W

__all__ = ["Column", "TableDef"]


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # normalized SQL type, see catalog.types
    not_null: bool = False  # NOT NULL: a row with NULL here is refused (PostgreSQL's 23502)
    # DEFAULT: the expression as written (None: NULL), and its value (a 1-row Arrow array as IPC,
    # base64: millpond.defaults); a column with a default, or added, may be left out of an insert
    default: str | None = None
    added: int = 0  # the catalog id of its ALTER TABLE ... ADD COLUMN (0: created with the table)
    value: str | None = None
    fill: str | None = None  # an added column's value in the rows stored before it (its default then)

    @property
    def field(self) -> pa.Field:
        f = pa.field(self.name, arrow_type(self.type))
        meta = {**({DEFAULT: json.dumps(self.value)} if self.default is not None else {}),
                **({FILL: json.dumps(self.fill)} if self.added else {})}
        return f.with_metadata(meta) if meta else f

    def encode(self) -> list:
        if self.default is None and not self.added:
            return [self.name, self.type, *([True] if self.not_null else [])]
        return [self.name, self.type, self.not_null, self.default, self.added, self.value, self.fill]


@dataclass(frozen=True)
class TableDef:
    id: int
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    append_only: bool = False  # rows are only ever inserted: the log is the table (no state of its own)
    # its rows are addressed in state by the primary key's hash (read and written by key); False for
    # tables made before catalog format 10, whose rows are addressed by the hash of every column
    key_hashed: bool = False
    # where its rows also come from: ``(("connector", "files"), ("format", ...), ("path", ...))``
    # (millpond.connectors.files); () for a table written by statements and inserts only
    source: tuple[tuple[str, str], ...] = ()
    # its log channel's name where it is not the table's: a renamed table's channel keeps the name it
    # had (nothing is rewritten), and a table made with the name of a renamed one's channel gets another
    channel_name: str = ""

    @property
    def channel(self) -> str:
        """The table's log channel has the table's name (or :attr:`channel_name`) ..."""
        return self.channel_name or self.name

    @property
    def channel_id(self) -> str:
        """... and an id per incarnation, so a recreated table never sees a dropped one's records."""
        return f"t{self.id}"

    @property
    def schema(self) -> pa.Schema:
        """User-visible columns (an added column's field carries its default: records older than it lack it)."""
        return pa.schema([c.field for c in self.columns])

    @property
    def log_schema(self) -> pa.Schema:
        """Changelog records in the table's channel."""
        return pa.schema([*self.schema, pa.field(ROW_ID, pa.int64()), pa.field(W, pa.int64())])

    def read_schema(self, columns: Sequence[str]) -> pa.Schema:
        """The records a reader of ``columns`` takes from the channel: those columns and the
        weight, in the log's order (a log file is Parquet: the other columns are never decoded)."""
        wanted = {*columns, W}
        return pa.schema([f for f in self.log_schema if f.name in wanted])

    @property
    def defaults(self) -> tuple[pa.Field, ...]:
        """The fields of its columns stored records or state rows may lack (filled with their default)."""
        return tuple(f for f in self.schema if f.metadata and FILL in f.metadata)

    def as_seen_by(self, id: int) -> "TableDef":
        """The table as the view, flow or index numbered ``id`` was created over: without the
        columns added after it."""
        kept = tuple(c for c in self.columns if c.added < id)
        return self if len(kept) == len(self.columns) else replace(self, columns=kept)

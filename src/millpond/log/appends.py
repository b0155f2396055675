"""What an append is made of: each channel's data checked and turned into records to write.

:func:`prepare` checks data against its channel when the append is made (nothing of a rejected
append is written or forwarded); :func:`records` turns the parts into the records the writer
appends, in the process that holds the writer. Tables' channels follow :mod:`millpond.log.tables`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from millpond.errors import SchemaError
from millpond.log.conform import conform
from millpond.log.state import ChannelInfo
from millpond.log.tables import as_inserts, carries_changes, conform_rows, is_table

__all__ = ["Part", "prepare", "records", "upserts"]


@dataclass(frozen=True)
class Part:
    """One channel's records of an append: conformed rows of a table, the Database's own changelog
    records of a table (``changes``), or a plain channel's records."""

    info: ChannelInfo
    table: pa.Table
    changes: bool = False


def prepare(info: ChannelInfo, data: Any, *, database: bool) -> Part:
    """``data`` for ``info`` checked: a plain channel's records, a table's rows, or (``database``:
    the Log of the Database that owns the table) the table's own changelog records."""
    if carries_changes(info, data):
        if not database:
            conform_rows(info, data)  # raises: only the Database writes _row_id and _w
        return Part(info, conform(f"channel {info.name!r}", info.schema, data), changes=True)
    if is_table(info):
        return Part(info, conform_rows(info, data))
    return Part(info, conform(f"channel {info.name!r}", info.schema, data))


def upserts(parts: list[Part]) -> Part | None:
    """The one part of an append that the Database must resolve (a table's rows), if that is all
    the append is."""
    if len(parts) == 1 and is_table(parts[0].info) and not parts[0].changes:
        return parts[0]
    return None


def records(parts: list[Part]) -> list[tuple[ChannelInfo, pa.Table]]:
    """Each part as records to write; a table's rows become inserts, which a table with a primary
    key (an upsert) or with an unknown key cannot take here."""
    out = []
    for p in parts:
        table = p.table
        if is_table(p.info) and not p.changes:
            if p.info.table_key is None:
                raise SchemaError(f"table {p.info.name!r}: its channel does not record the table's primary key "
                                  "(it was created by an older millpond): open the root with millpond.connect once "
                                  "to record it, or write while a Database is open on the root")
            if p.info.table_key:
                raise SchemaError(
                    f"table {p.info.name!r} has a primary key ({', '.join(p.info.table_key)}): its rows are "
                    "upserts, resolved against the table's current rows by the Database; write them while a "
                    "Database is open on the root (millpond.connect), on their own (not in a transaction), or "
                    "with db.insert")
            table = as_inserts(table)
        out.append((p.info, table))
    return out

"""PostgreSQL's logical replication messages (the ``pgoutput`` plugin, protocol version 1) read into
Arrow, and PostgreSQL's text forms of values typed as a table's columns.

:func:`decode` walks one epoch's messages — whole transactions, as
``pg_logical_slot_peek_binary_changes`` returns them — once, in Python (a message is a few
``struct`` reads; the typing of the values is vectorized, by column, in :func:`typed`). What it gives
per relation: the rows inserted or updated (each row's new values as text) and the keys deleted,
each with its place in the stream, so the caller keeps each key's last change.

Message layouts: PostgreSQL's documentation, "Logical Replication Message Formats".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from millpond import jsonb

__all__ = ["Change", "Relation", "Unfollowable", "arrow_type", "decode", "typed"]

UNCHANGED = object()  # a TOASTed value an update did not change (pgoutput sends none)

# PostgreSQL type oids and what millpond keeps them as
_OIDS = {16: pa.bool_(), 20: pa.int64(), 21: pa.int16(), 23: pa.int32(), 700: pa.float32(), 701: pa.float64(),
         25: pa.string(), 1043: pa.string(), 1042: pa.string(), 19: pa.string(), 2950: pa.string(),
         1082: pa.date32(), 1114: pa.timestamp("us"), 1184: pa.timestamp("us", tz="UTC"), 17: pa.binary(),
         114: "jsonb", 3802: "jsonb"}


def arrow_type(oid: int, typmod: int) -> pa.DataType | str | None:
    """What a PostgreSQL column of type ``oid`` (with ``typmod``) is in millpond (``"jsonb"``: a
    JSONB column); None: a type millpond does not take."""
    if oid == 1700:  # numeric(p, s): typmod = (p << 16 | s) + 4; unconstrained: DECIMAL(38,10)
        return pa.decimal128(38, 10) if typmod < 0 else pa.decimal128((typmod - 4) >> 16, (typmod - 4) & 0xFFFF)
    return _OIDS.get(oid)


class Unfollowable(Exception):
    """A change the table cannot follow (an upstream ALTER TABLE, a TRUNCATE): it stops."""


@dataclass
class Relation:
    """A relation's columns as the stream last described them: (name, type oid, typmod)."""

    name: str
    columns: list[tuple[str, int, int]]


@dataclass
class Change:
    """One relation's changes in one epoch, in the stream's order: ``rows`` (each column's texts of
    the rows inserted or updated) at places ``row_at``; ``deletes`` (the key columns' texts of the
    keys deleted, an update's old key among them) at places ``delete_at``."""

    rows: dict[str, list] = field(default_factory=dict)
    row_at: list[int] = field(default_factory=list)
    deletes: dict[str, list] = field(default_factory=dict)
    delete_at: list[int] = field(default_factory=list)
    transactions: int = 0


_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def _string(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(b"\x00", at)
    return data[at:end].decode(), end + 1


def _tuple(data: bytes, at: int) -> tuple[list, int]:
    (n,), at = _I16.unpack_from(data, at), at + 2
    values = []
    for _ in range(n):
        kind = data[at]
        at += 1
        if kind == 110:  # 'n'
            values.append(None)
        elif kind == 117:  # 'u'
            values.append(UNCHANGED)
        else:  # 't' (text; 'b' binary is not asked for)
            (size,) = _I32.unpack_from(data, at)
            values.append(data[at + 4:at + 4 + size].decode())
            at += 4 + size
    return values, at


def decode(messages: list[bytes], relations: dict[int, Relation], columns: list[str], key: list[str],
           after: int, check: Callable[[Relation], None]) -> tuple[Change, int, Unfollowable | None]:
    """The changes of the transactions in ``messages`` that commit after LSN ``after`` (those at or
    before it are in the table already), for a table of ``columns`` keyed by ``key``; ``relations``
    is kept up to date (a relation message describes its columns before their first change).
    ``check`` sees each relation description (and raises :class:`Unfollowable` for one the table
    cannot follow: an upstream ``ALTER TABLE``). Returns the changes of the transactions before the
    first one that cannot be followed, the last such transaction's end LSN (``after`` when none),
    and why the stream stopped there (None: it did not): an ``ALTER TABLE``, a ``TRUNCATE``, an
    update whose unchanged large value the stream leaves out."""
    change = Change(rows={c: [] for c in columns}, deletes={k: [] for k in key})
    last, place = after, 0
    pending: list[tuple] = []  # the open transaction's changes: (kind, relation id, values)
    try:
        for data in messages:
            last, place, pending = _message(data, change, relations, columns, key, after, check, last, place, pending)
    except Unfollowable as exc:
        return change, last, exc
    return change, last, None


def _message(data: bytes, change: Change, relations: dict[int, Relation], columns: list[str], key: list[str],
             after: int, check: Callable[[Relation], None], last: int, place: int, pending: list) -> tuple:
    kind = data[0]
    if kind == 66:  # 'B' begin
        pending = []
    elif kind == 67:  # 'C' commit: flags, commit LSN, end LSN, time
        (end,) = _I64.unpack_from(data, 10)
        if end > after:
            if pending:
                sizes = [len(v) for v in (*change.rows.values(), *change.deletes.values(), change.row_at,
                                          change.delete_at)]
                try:
                    place = _take(change, pending, relations, columns, key, place)
                except Unfollowable:  # none of the transaction is taken
                    for v, n in zip((*change.rows.values(), *change.deletes.values(), change.row_at,
                                     change.delete_at), sizes):
                        del v[n:]
                    raise
                change.transactions += 1
            last = end
        pending = []
    elif kind == 82:  # 'R' relation
        (oid,) = _I32.unpack_from(data, 1)
        ns, at = _string(data, 5)
        name, at = _string(data, at)
        at += 1  # replica identity
        (n,), at = _I16.unpack_from(data, at), at + 2
        cols = []
        for _ in range(n):
            col, at = _string(data, at + 1)
            typ, mod = struct.unpack_from(">ii", data, at)
            at += 8
            cols.append((col, typ, mod))
        relations[oid] = Relation(f"{ns}.{name}", cols)
        check(relations[oid])
    elif kind == 73:  # 'I' insert: relation, 'N', tuple
        (oid,) = _I32.unpack_from(data, 1)
        pending.append(("I", oid, _tuple(data, 6)[0], None))
    elif kind == 85:  # 'U' update: relation, ['K' | 'O' old tuple], 'N' new tuple
        (oid,) = _I32.unpack_from(data, 1)
        old = None
        at = 5
        if data[at] in (75, 79):  # 'K', 'O'
            old, at = _tuple(data, at + 1)
        pending.append(("U", oid, _tuple(data, at + 1)[0], old))
    elif kind == 68:  # 'D' delete: relation, 'K' | 'O', old tuple
        (oid,) = _I32.unpack_from(data, 1)
        pending.append(("D", oid, None, _tuple(data, 6)[0]))
    elif kind == 84:  # 'T' truncate
        raise Unfollowable("the upstream table was truncated (TRUNCATE), which this table cannot follow: "
                           "create it again to take a new snapshot")
    # 'O' origin, 'Y' type, 'M' message: nothing to take
    return last, place, pending


def _take(change: Change, pending: list[tuple], relations: dict[int, Relation], columns: list[str],
          key: list[str], place: int) -> int:
    at: dict[int, tuple[list[int], list[int]]] = {}  # relation -> its columns' and key's places in a tuple
    rows, deletes = [change.rows[c] for c in columns], [change.deletes[k] for k in key]
    for kind, oid, new, old in pending:
        if oid not in at:
            rel = relations.get(oid)
            if rel is None:
                raise Unfollowable(f"a change of relation {oid} came before its description")
            names = [c[0] for c in rel.columns]
            at[oid] = ([names.index(c) for c in columns], [names.index(k) for k in key])
        cols, keys = at[oid]
        if old is not None and (kind == "D" or any(old[i] is not None and old[i] != new[i] for i in keys)):
            for out, i in zip(deletes, keys):  # a delete, or an update that moved the row to another key
                out.append(old[i])
            change.delete_at.append(place)
            place += 1
        if new is not None:
            if UNCHANGED in new:
                new = _unchanged(new, old, cols, relations[oid], columns)
            for out, i in zip(rows, cols):
                out.append(new[i])
            change.row_at.append(place)
            place += 1
    return place


def _unchanged(new: list, old: list | None, cols: list[int], rel: Relation, columns: list[str]) -> list:
    """An update's new values with the unchanged large ones taken from its old row (a table with
    ``REPLICA IDENTITY FULL`` sends it); without it, the update cannot be followed."""
    gone = [c for c, i in zip(columns, cols) if new[i] is UNCHANGED]
    if not gone:
        return new
    if old is None or any(old[i] is UNCHANGED for i in cols):
        raise Unfollowable(f"an update of {rel.name} left column {gone[0]!r} out (an unchanged large value): "
                           f"run ALTER TABLE {rel.name} REPLICA IDENTITY FULL upstream, then create this table again")
    return [old[i] if v is UNCHANGED else v for i, v in enumerate(new)]


def typed(texts: pa.Array, t: pa.DataType | str, column: str) -> pa.Array:
    """PostgreSQL's text forms of a column's values (its output with ``TimeZone`` UTC and
    ``DateStyle`` ISO) as ``t``; a value that does not convert raises ValueError naming ``column``."""
    try:
        if t == "jsonb":
            return jsonb.wrap([None if v is None else jsonb.canonical(v) for v in texts.to_pylist()])
        if t == pa.bool_():
            return pc.equal(texts, "t")
        if t == pa.binary():  # bytea_output hex: \x0a1b...
            return pa.array([None if v is None else bytes.fromhex(v[2:]) for v in texts.to_pylist()], pa.binary())
        if t == pa.string():
            return texts
        return pc.cast(texts, t)
    except (pa.ArrowInvalid, ValueError, jsonb.JsonbError) as exc:
        raise ValueError(f"column {column!r}: a value does not convert to {t}: {exc}") from None

"""Checking incoming rows against a schema: the one path every row takes into millpond (a log
channel's append, and a table's insert before it). Errors name the target, column and row.

A value of another type is converted as PostgreSQL assigns it to the column
(:mod:`millpond.log.assign`: an integer into a NUMERIC, a numeric rounded into an integer, text
read by the column type's input rules), or refused in PostgreSQL's words. An INTERVAL column (the
struct ``months, days, micros``) also takes Arrow ``month_day_nano_interval`` and durations
(:mod:`millpond.log.intervals`). A JSONB column takes JSON text (strings, or Arrow's ``arrow.json``
extension type), kept as PostgreSQL prints it (:mod:`millpond.jsonb`). A column whose field has a
default (:data:`~millpond.columns.DEFAULT`: added by ``ALTER TABLE``, or declared with ``DEFAULT``)
may be left out: it is filled in, as it is in stored records older than it (:mod:`millpond.defaults`).
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, Sequence


import pyarrow as pa
import pyarrow.compute as pc

from millpond import jsonb
from millpond.defaults import default, may_lack
from millpond.errors import SchemaError
from millpond.log.assign import Unassignable, assign
from millpond.log.intervals import INTERVAL as _INTERVAL, from_interval, to_interval

__all__ = ["conform", "to_interval", "from_interval"]


def conform(where: str, schema: pa.Schema, data: Any, *, key: Sequence[str] = (),
            types: Mapping[str, str] | None = None, not_null: Collection[str] = ()) -> pa.Table:
    """``data`` (a Table, RecordBatch or dict of columns) cast to ``schema``, or a SchemaError.

    ``where`` names the target in messages (``"table 'visit'"``, ``"channel 'visit'"``); columns
    in ``key`` (a primary key), in ``not_null`` (``NOT NULL``) and non-nullable fields may not be NULL; ``types`` are the names
    of the columns' types to show (SQL types for a table; Arrow's by default). Nothing is
    partially accepted: the first problem found rejects the whole batch.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif isinstance(data, dict):
        try:
            data = pa.table(data)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise SchemaError(f"{where}: cannot build a batch from the given columns: {exc}") from None
    elif not isinstance(data, pa.Table):
        raise SchemaError(f"{where}: expected a pyarrow Table, RecordBatch or dict of columns, "
                          f"got {type(data).__name__}")
    for f in schema:
        if f.name not in data.column_names and may_lack(f):
            data = data.append_column(f.name, default(f, data.num_rows))
    missing = [n for n in schema.names if n not in data.column_names]
    extra = [n for n in data.column_names if n not in schema.names]
    if missing or extra:
        raise SchemaError(f"{where} has columns {schema.names}; the input "
                          + " and ".join(([f"lacks {missing}"] if missing else [])
                                         + ([f"has unknown {extra}"] if extra else [])))
    columns = []
    for f in schema:
        col = data.column(f.name)
        want = (types or {}).get(f.name, str(f.type))
        if f.type.equals(_INTERVAL) and not col.type.equals(f.type):
            converted = to_interval(col)
            col = col if converted is None else converted
        if f.type.equals(_INTERVAL) and len(col) and col.type.equals(f.type):  # NULL together (whole NULL intervals)
            partial = pc.and_(pc.is_valid(col), pc.or_(pc.or_(pc.is_null(pc.struct_field(col, 0)), pc.is_null(
                pc.struct_field(col, 1))), pc.is_null(pc.struct_field(col, 2))))
            if pc.any(partial).as_py():
                row = pc.index(partial, True).as_py()
                raise SchemaError(f"{where}: column {f.name!r} row {row} is an interval with a NULL field "
                                  "(a NULL interval is NULL as a whole)")
        if jsonb.is_jsonb(f.type) and not col.type.equals(f.type):
            col = _jsonb(where, f.name, col)
        try:
            col = assign(col, f.type)
        except Unassignable as exc:
            found = f" at row {exc.row} (value {col[exc.row].as_py()!r})" if exc.row is not None else ""
            raise SchemaError(f"{where}: column {f.name!r} expects {want}, got {col.type}{found}: {exc.reason}",
                              sqlstate=exc.sqlstate) from None
        if col.null_count and (f.name in key or f.name in not_null or not f.nullable):
            row = pc.index(pc.is_null(col), True).as_py()
            if f.name in key:
                raise SchemaError(f"{where}: primary key column {f.name!r} is NULL in row {row}")
            if f.name in not_null:
                raise SchemaError(f"{where}: null value in column {f.name!r} violates its NOT NULL constraint "
                                  f"(row {row})", sqlstate="23502")
            raise SchemaError(f"{where}: column {f.name!r} is not nullable, but row {row} is null")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def _jsonb(where: str, name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """JSON text as JSONB (its PostgreSQL text: :func:`millpond.jsonb.canonical`)."""
    t = col.type.storage_type if isinstance(col.type, pa.BaseExtensionType) else col.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)):
        raise SchemaError(f"{where}: column {name!r} expects JSONB, got {col.type} (give JSON text: strings)",
                          sqlstate="42804")
    out = []
    for row, text in enumerate(jsonb.texts(col.cast(t) if t != col.type else col)):
        try:
            out.append(None if text is None else jsonb.canonical(text))
        except jsonb.JsonbError as exc:
            reason = str(exc).split("] ", 1)[1].rsplit(" SQLSTATE", 1)[0]
            raise SchemaError(f"{where}: column {name!r} row {row}: {reason}",
                              sqlstate=str(exc).rsplit("SQLSTATE: ", 1)[-1]) from None
    return pa.chunked_array([jsonb.wrap(out)])


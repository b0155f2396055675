"""Checking incoming rows against a schema: the one path every row takes into millpond (a log
channel's append, and a table's insert before it). Errors name the target, column and row.

An INTERVAL column (the struct ``months, days, micros``: :data:`millpond.catalog.types.INTERVAL`)
also takes Arrow ``month_day_nano_interval`` (what a query returns; nanoseconds rounded to
microseconds) and durations (Python ``timedelta``: whole days and the time under a day, as
PostgreSQL reads one). A JSONB column takes JSON text (strings, or Arrow's ``arrow.json``
extension type), kept as PostgreSQL prints it (:mod:`millpond.jsonb`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from millpond import jsonb
from millpond.errors import SchemaError

__all__ = ["conform", "to_interval", "from_interval"]

# an INTERVAL in a table or view: millpond.catalog.types.INTERVAL (the log may not import the catalog)
_INTERVAL = pa.struct([pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("micros", pa.int64())])
_DAY_US = 86_400_000_000


def conform(where: str, schema: pa.Schema, data: Any, *, key: Sequence[str] = (),
            types: Mapping[str, str] | None = None) -> pa.Table:
    """``data`` (a Table, RecordBatch or dict of columns) cast to ``schema``, or a SchemaError.

    ``where`` names the target in messages (``"table 'visit'"``, ``"channel 'visit'"``); columns
    in ``key`` (a primary key) and non-nullable fields may not be NULL; ``types`` are the names
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
    missing = [n for n in schema.names if n not in data.column_names]
    extra = [n for n in data.column_names if n not in schema.names]
    if missing or extra:
        raise SchemaError(f"{where} has columns {schema.names}; the input "
                          + " and ".join(([f"lacks {missing}"] if missing else [])
                                         + ([f"has unknown {extra}"] if extra else [])))
    columns = []
    for f in schema:
        col = data.column(f.name)
        if f.type.equals(_INTERVAL) and not col.type.equals(f.type):
            converted = to_interval(col)
            if converted is None:
                want = (types or {}).get(f.name, "INTERVAL")
                raise SchemaError(f"{where}: column {f.name!r} expects {want}, got {col.type} (give a "
                                  "month_day_nano_interval, a duration or a struct of months, days, micros)")
            col = converted
        if f.type.equals(_INTERVAL) and len(col):  # its fields are NULL together (whole NULL intervals)
            partial = pc.and_(pc.is_valid(col), pc.or_(pc.or_(pc.is_null(pc.struct_field(col, 0)), pc.is_null(
                pc.struct_field(col, 1))), pc.is_null(pc.struct_field(col, 2))))
            if pc.any(partial).as_py():
                row = pc.index(partial, True).as_py()
                raise SchemaError(f"{where}: column {f.name!r} row {row} is an interval with a NULL field "
                                  "(a NULL interval is NULL as a whole)")
        if jsonb.is_jsonb(f.type) and not col.type.equals(f.type):
            col = _jsonb(where, f.name, col)
        if pa.types.is_time(f.type) and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            try:  # 'HH:MM[:SS[.ffffff]]' as the time of day of a timestamp
                col = pc.cast(pc.cast(pc.binary_join_element_wise("1970-01-01T", col, ""), pa.timestamp("us")), f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # the cast below names the row
        if not col.type.equals(f.type):
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                row = _first_bad_row(col, f.type)
                found = f" at row {row} (value {col[row].as_py()!r})" if row is not None else f": {exc}"
                want = (types or {}).get(f.name, str(f.type))
                raise SchemaError(f"{where}: column {f.name!r} expects {want}, got {col.type}{found}") from None
        if col.null_count and (f.name in key or not f.nullable):
            row = pc.index(pc.is_null(col), True).as_py()
            if f.name in key:
                raise SchemaError(f"{where}: primary key column {f.name!r} is NULL in row {row}")
            raise SchemaError(f"{where}: column {f.name!r} is not nullable, but row {row} is null")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def _jsonb(where: str, name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """JSON text as JSONB (its PostgreSQL text: :func:`millpond.jsonb.canonical`)."""
    t = col.type.storage_type if isinstance(col.type, pa.BaseExtensionType) else col.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)):
        raise SchemaError(f"{where}: column {name!r} expects JSONB, got {col.type} (give JSON text: strings)")
    out = []
    for row, text in enumerate(jsonb.texts(col.cast(t) if t != col.type else col)):
        try:
            out.append(None if text is None else jsonb.canonical(text))
        except jsonb.JsonbError as exc:
            reason = str(exc).split("] ", 1)[1].rsplit(" SQLSTATE", 1)[0]
            raise SchemaError(f"{where}: column {name!r} row {row}: {reason}") from None
    return pa.chunked_array([jsonb.wrap(out)])


def _first_bad_row(col: pa.ChunkedArray, target: pa.DataType) -> int | None:
    """The first row whose value does not cast: a binary search over prefixes (log n casts)."""
    def casts(n: int) -> bool:
        try:
            pc.cast(col.slice(0, n), target, safe=True)
            return True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False
    if casts(len(col)) or not casts(0):
        return None  # the whole type does not cast: no row to name
    lo, hi = 0, len(col)  # casts(lo) holds, casts(hi) fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if casts(mid):
            lo = mid
        else:
            hi = mid
    return lo


def to_interval(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | None:
    """``col`` as INTERVAL structs, or None when its type is no interval."""
    if isinstance(col, pa.Array):
        col = pa.chunked_array([col], col.type)
    t = col.type
    if pa.types.is_null(t):
        return pa.chunked_array([pa.nulls(len(col), _INTERVAL)], _INTERVAL)
    if pa.types.is_struct(t) and [t.field(i).name for i in range(t.num_fields)] == _INTERVAL.names:
        return pc.cast(col, _INTERVAL, safe=True)
    if t == pa.month_day_nano_interval():
        return pa.chunked_array([_from_month_day_nano(c) for c in col.chunks], _INTERVAL)
    if pa.types.is_duration(t):
        micros = pc.cast(pc.cast(col, pa.duration("us")), pa.int64())
        days = pc.divide(micros, _DAY_US)  # integer division truncates: the time keeps the days' sign
        rest = pc.subtract(micros, pc.multiply(days, _DAY_US))
        return pa.chunked_array([pa.StructArray.from_arrays(
            [pa.nulls(len(d), pa.int32()).fill_null(0), pc.cast(d, pa.int32()), r], fields=list(_INTERVAL),
            mask=pc.is_null(d)) for d, r in zip(days.chunks, rest.chunks)], _INTERVAL)
    return None


def _from_month_day_nano(arr: pa.Array) -> pa.StructArray:
    raw = np.frombuffer(arr.buffers()[1], dtype=np.dtype([("m", "<i4"), ("d", "<i4"), ("ns", "<i8")]),
                        count=len(arr), offset=arr.offset * 16) if len(arr) else np.zeros(
        0, dtype=[("m", "<i4"), ("d", "<i4"), ("ns", "<i8")])
    ns = raw["ns"]
    micros = np.where(ns >= 0, (ns + 500) // 1000, -((-ns + 500) // 1000))  # to the nearest microsecond
    mask = pc.is_null(arr) if arr.null_count else None
    return pa.StructArray.from_arrays([pa.array(raw["m"].copy()), pa.array(raw["d"].copy()), pa.array(micros)],
                                      fields=list(_INTERVAL), mask=mask)


def from_interval(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """INTERVAL structs as Arrow ``month_day_nano_interval`` (how a query's result shows them)."""
    out = []
    for chunk in col.chunks:
        m, d, us = (f.fill_null(0).to_numpy(zero_copy_only=False) for f in chunk.flatten())
        raw = np.empty(len(chunk), dtype=[("m", "<i4"), ("d", "<i4"), ("ns", "<i8")])
        raw["m"], raw["d"], raw["ns"] = m, d, us.astype(np.int64) * 1000
        validity = None
        if chunk.null_count:
            validity = pa.array(pc.is_valid(chunk).to_numpy(zero_copy_only=False)).buffers()[1]
        out.append(pa.Array.from_buffers(pa.month_day_nano_interval(), len(chunk),
                                         [validity, pa.py_buffer(raw.tobytes())], null_count=chunk.null_count))
    return pa.chunked_array(out, pa.month_day_nano_interval())

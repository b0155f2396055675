"""Checking a batch against a channel's schema: errors name the channel, field and row."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from millpond.errors import SchemaError

__all__ = ["conform"]


def conform(channel: str, schema: pa.Schema, data: Any) -> pa.Table:
    """``data`` (a Table, RecordBatch or dict of columns) cast to ``schema``, or a SchemaError.

    Nothing is partially accepted: the first problem found rejects the whole batch.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif isinstance(data, dict):
        try:
            data = pa.table(data)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise SchemaError(f"channel {channel!r}: cannot build a batch from the given columns: {exc}") from None
    elif not isinstance(data, pa.Table):
        raise SchemaError(f"channel {channel!r}: expected a pyarrow Table, RecordBatch or dict of columns, "
                          f"got {type(data).__name__}")
    extra = [n for n in data.column_names if n not in schema.names]
    if extra:
        raise SchemaError(f"channel {channel!r}: unknown field {extra[0]!r} (the channel has {schema.names})")
    columns = []
    for f in schema:
        if f.name not in data.column_names:
            raise SchemaError(f"channel {channel!r}: field {f.name!r} ({f.type}) is missing")
        col = data.column(f.name)
        if not col.type.equals(f.type):
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                row = _first_bad_row(col, f.type)
                where = f" at row {row} (value {col[row].as_py()!r})" if row is not None else ""
                raise SchemaError(f"channel {channel!r}: field {f.name!r} expects {f.type}, got {data.column(f.name).type}"
                                  f"{where}: {exc}") from None
        if not f.nullable and col.null_count:
            row = pc.index(pc.is_null(col), True).as_py()
            raise SchemaError(f"channel {channel!r}: field {f.name!r} is not nullable, but row {row} is null")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


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

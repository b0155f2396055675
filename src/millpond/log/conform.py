"""Checking incoming rows against a schema: the one path every row takes into millpond (a log
channel's append, and a table's insert before it). Errors name the target, column and row.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from millpond.errors import SchemaError

__all__ = ["conform"]


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

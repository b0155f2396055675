"""INTERVAL values as a table keeps them: the struct ``months, days, micros``
(:data:`millpond.catalog.types.INTERVAL`, which the log may not import), read from Arrow's
``month_day_nano_interval`` (what a query returns; nanoseconds rounded to microseconds) and from
durations (Python ``timedelta``: whole days and the time under a day, as PostgreSQL reads one).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["INTERVAL", "to_interval", "from_interval"]

INTERVAL = pa.struct([pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("micros", pa.int64())])
_DAY_US = 86_400_000_000


def to_interval(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | None:
    """``col`` as INTERVAL structs, or None when its type is no interval."""
    if isinstance(col, pa.Array):
        col = pa.chunked_array([col], col.type)
    t = col.type
    if pa.types.is_null(t):
        return pa.chunked_array([pa.nulls(len(col), INTERVAL)], INTERVAL)
    if pa.types.is_struct(t) and [t.field(i).name for i in range(t.num_fields)] == INTERVAL.names:
        return pc.cast(col, INTERVAL, safe=True)
    if t == pa.month_day_nano_interval():
        return pa.chunked_array([_from_month_day_nano(c) for c in col.chunks], INTERVAL)
    if pa.types.is_duration(t):
        micros = pc.cast(pc.cast(col, pa.duration("us")), pa.int64())
        days = pc.divide(micros, _DAY_US)  # integer division truncates: the time keeps the days' sign
        rest = pc.subtract(micros, pc.multiply(days, _DAY_US))
        return pa.chunked_array([pa.StructArray.from_arrays(
            [pa.nulls(len(d), pa.int32()).fill_null(0), pc.cast(d, pa.int32()), r], fields=list(INTERVAL),
            mask=pc.is_null(d)) for d, r in zip(days.chunks, rest.chunks)], INTERVAL)
    return None


def _from_month_day_nano(arr: pa.Array) -> pa.StructArray:
    raw = np.frombuffer(arr.buffers()[1], dtype=np.dtype([("m", "<i4"), ("d", "<i4"), ("ns", "<i8")]),
                        count=len(arr), offset=arr.offset * 16) if len(arr) else np.zeros(
        0, dtype=[("m", "<i4"), ("d", "<i4"), ("ns", "<i8")])
    ns = raw["ns"]
    micros = np.where(ns >= 0, (ns + 500) // 1000, -((-ns + 500) // 1000))  # to the nearest microsecond
    mask = pc.is_null(arr) if arr.null_count else None
    return pa.StructArray.from_arrays([pa.array(raw["m"].copy()), pa.array(raw["d"].copy()), pa.array(micros)],
                                      fields=list(INTERVAL), mask=mask)


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

"""The families of Arrow types as PostgreSQL names them, and the error of a value that cannot be
stored: what :mod:`millpond.log.assign` and :mod:`millpond.log.assign_text` share."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from millpond import jsonb
from millpond.log.intervals import INTERVAL

__all__ = ["Unassignable", "kind", "NAMES", "first", "bounds"]


class Unassignable(Exception):
    """Values that cannot be stored: ``reason`` in PostgreSQL's words, ``sqlstate`` its code,
    ``row`` the first row at fault (None: the column's type)."""

    def __init__(self, reason: str, sqlstate: str, row: int | None = None):
        super().__init__(reason)
        self.reason, self.sqlstate, self.row = reason, sqlstate, row


def kind(t: pa.DataType) -> str:
    """PostgreSQL's family of an Arrow type: ``integer``, ``numeric``, ``float``, ``text``... (its
    own name when it has none)."""
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_decimal(t):
        return "numeric"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    if pa.types.is_time(t):
        return "time"
    if t.equals(INTERVAL) or pa.types.is_interval(t) or pa.types.is_duration(t):
        return "interval"
    if jsonb.is_jsonb(t):
        return "jsonb"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t):
        return "bytea"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "array"
    if pa.types.is_struct(t):
        return "record"
    return str(t)


# PostgreSQL's names of the families, in messages
NAMES = {"integer": "integer", "numeric": "numeric", "float": "double precision", "text": "text",
         "boolean": "boolean", "date": "date", "timestamp": "timestamp without time zone",
         "timestamptz": "timestamp with time zone", "time": "time without time zone", "interval": "interval",
         "bytea": "bytea", "jsonb": "jsonb", "array": "array", "record": "record", "map": "map"}


def first(mask: pa.ChunkedArray | pa.Array) -> int | None:
    """The first row where ``mask`` is true (NULL counts as false), or None."""
    if not len(mask) or not pc.any(mask).as_py():
        return None
    return pc.index(mask, True).as_py()


def bounds(t: pa.DataType) -> tuple[int, int]:
    """The least and greatest value of integer type ``t``."""
    w = t.bit_width
    return (-(2 ** (w - 1)), 2 ** (w - 1) - 1) if pa.types.is_signed_integer(t) else (0, 2 ** w - 1)

"""PostgreSQL's words for the errors the engines raise: a data error in a view (Spark), in a query
or a flow (DuckDB), or raised by millpond's own SQL (``RAISE_ERROR('division by zero')``) is told
to the user as PostgreSQL tells it — its message and its SQLSTATE — whatever engine raised it.

    >>> translate("[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` ... SQLSTATE: 22012")
    PgError(message='division by zero', sqlstate='22012')
    >>> translate("Conversion Error: Could not convert string 'abc' to INT32")
    PgError(message='invalid input syntax for type integer: "abc"', sqlstate='22P02')
    >>> translate("Out of Range Error: Overflow in addition of INT64 (9223372036854775807 + 1)!")
    PgError(message='bigint out of range', sqlstate='22003')

A base module: it knows error texts, not engines (nothing here imports Spark or DuckDB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PgError", "translate", "own_sqlstate", "is_data_error", "shaped"]


@dataclass(frozen=True)
class PgError:
    """An error as PostgreSQL words it: its message and its SQLSTATE."""

    message: str
    sqlstate: str


# Spark's and DuckDB's names of types -> PostgreSQL's
_TYPES = {"INT": "integer", "INTEGER": "integer", "INT32": "integer", "SMALLINT": "smallint", "INT16": "smallint",
          "BIGINT": "bigint", "INT64": "bigint", "LONG": "bigint", "TINYINT": "smallint", "INT8": "smallint",
          "DOUBLE": "double precision", "FLOAT": "real", "BOOLEAN": "boolean", "BOOL": "boolean", "DATE": "date",
          "TIMESTAMP": "timestamp without time zone", "TIMESTAMP_NTZ": "timestamp without time zone",
          "TIMESTAMP WITH TIME ZONE": "timestamp with time zone", "TIMESTAMP_LTZ": "timestamp with time zone",
          "TIME": "time without time zone", "INTERVAL": "interval", "STRING": "text", "VARCHAR": "text"}
_SUFFIX = {"S": "smallint", "L": "bigint", "Y": "smallint", "": "integer"}  # Spark's literal suffixes


def _pg_type(name: str) -> str:
    name = name.strip().strip('"').upper()
    if name.startswith(("DECIMAL", "NUMERIC")):
        return "numeric"
    return _TYPES.get(name, name.lower())


def _out_of_range(type_name: str) -> PgError:
    pg = _pg_type(type_name)
    if pg == "numeric":
        return PgError("numeric field overflow", "22003")
    if pg in ("double precision", "real"):
        return PgError("value out of range: overflow", "22003")
    if pg in ("date", "timestamp without time zone", "timestamp with time zone"):
        return PgError(f"{pg.split(' ')[0]} out of range", "22008")
    return PgError(f"{pg} out of range", "22003")


# millpond's own data errors (raised by the SQL it generates, or by its Python code) by their
# message's start -> SQLSTATE; the messages are PostgreSQL's
_OWN = (
    ("division by zero", "22012"),
    ("invalid input syntax for type", "22P02"),
    ("invalid input value for enum", "22P02"),
    ("numeric field overflow", "22003"),
    ("value out of range", "22003"),
    ("integer out of range", "22003"),
    ("smallint out of range", "22003"),
    ("bigint out of range", "22003"),
    ("date out of range", "22008"),
    ("timestamp out of range", "22008"),
    ("date/time field value out of range", "22008"),
    ("interval out of range", "22008"),
    ("negative substring length not allowed", "22011"),
    ("invalid regular expression", "2201B"),
    ("cannot take logarithm of", "2201E"),
    ("cannot take square root of a negative number", "2201F"),
    ("zero raised to a negative power is undefined", "2201F"),
    ("a negative number raised to a non-integer power yields a complex result", "2201F"),
    ("requested character too large", "54000"),
    ("null character not permitted", "54000"),
)


def own_sqlstate(message: str) -> str | None:
    """The SQLSTATE of one of millpond's own data errors (a PostgreSQL message), else None."""
    text = message.strip()
    return next((state for start, state in _OWN if text.startswith(start)), None)


def is_data_error(sqlstate: str) -> bool:
    """SQLSTATE class 22 (data exception), 2201x included, or 38 (a Python function raised)."""
    return sqlstate.startswith(("22", "38"))


_SPARK = re.compile(r"\[([A-Z][A-Z0-9_.]*)\]\s*(.*?)\s*SQLSTATE: (\w{5})", re.S)


def shaped(error: PgError) -> str:
    """``error`` in the shape of Spark's errors (``[PG_ERROR] message SQLSTATE: xxxxx``): how a data
    error raised in a Spark task by millpond's own code (DuckDB in a task, a flow's merge) travels
    back to the coordinator's fault isolation, which reads it with :func:`translate`."""
    return f"[PG_ERROR] {error.message} SQLSTATE: {error.sqlstate}"


def _spark(cls: str, message: str, sqlstate: str) -> PgError | None:
    base = cls.split(".")[0]
    if base == "PG_ERROR":
        return PgError(message, sqlstate)
    if base in ("DIVIDE_BY_ZERO", "REMAINDER_BY_ZERO", "INTERVAL_DIVIDED_BY_ZERO"):
        return PgError("division by zero", "22012")
    if base == "USER_RAISED_EXCEPTION":  # millpond's own RAISE_ERROR('<PostgreSQL's message>')
        state = own_sqlstate(message)
        return PgError(message.strip(), state) if state else None
    if base == "CAST_INVALID_INPUT":
        m = re.search(r"The value '(.*)' of the type \"[^\"]+\" cannot be cast to \"([^\"]+)\"", message, re.S)
        if m:
            target = _pg_type(m.group(2))
            if target in ("date", "timestamp without time zone", "timestamp with time zone"):
                return PgError(f'invalid input syntax for type {target}: "{m.group(1)}"', "22007")
            return PgError(f'invalid input syntax for type {target}: "{m.group(1)}"', "22P02")
    if base == "CAST_OVERFLOW":
        m = re.search(r"cannot be cast to \"([^\"]+)\"", message)
        if m:
            return _out_of_range(m.group(1))
    if base == "BINARY_ARITHMETIC_OVERFLOW":
        m = re.match(r"-?\d+([SLY]?)\s", message)
        return PgError(f"{_SUFFIX[m.group(1) if m else '']} out of range", "22003")
    if base in ("NUMERIC_VALUE_OUT_OF_RANGE", "NUMERIC_OUT_OF_SUPPORTED_RANGE"):
        return PgError("numeric field overflow", "22003")
    if base == "DATETIME_FIELD_OUT_OF_BOUNDS":
        return PgError("date/time field value out of range", "22008")
    if base == "DATETIME_OVERFLOW":
        return PgError("timestamp out of range", "22008")
    return None


_DUCK = re.compile(r"(?:Invalid Input|Conversion|Out of Range) Error: (.*)", re.S)


def _duckdb(message: str) -> PgError | None:
    message = message.split("\n\nLINE ", 1)[0].strip()
    if (state := own_sqlstate(message)) is not None:
        return PgError(message, state)
    if re.search(r"ZeroDivisionError: (?:float )?(?:integer )?(?:division|modulo) by zero", message) or \
            "decimal.DivisionByZero" in message or "DivisionUndefined" in message:
        return PgError("division by zero", "22012")  # PostgreSQL's numeric division, in Python
    if m := re.match(r"Overflow in (?:addition|subtraction|multiplication|negation|division) of (\w+)", message):
        return _out_of_range(m.group(1))
    if m := re.match(r"Could not convert string '(.*)' to (\w+)", message, re.S):
        target = _pg_type(m.group(2))
        return PgError(f'invalid input syntax for type {target}: "{m.group(1)}"', "22P02")
    if m := re.match(r"Type \w+ with value .* can't be cast because the value is out of range for the destination "
                     r"type (\w+)", message, re.S):
        return _out_of_range(m.group(1))
    if m := re.match(r"Type \w+ with value .* can't be cast to the destination type (\w+)", message, re.S):
        return _out_of_range(m.group(1))
    if m := re.match(r"(?:date|timestamp|time) field value out of range: (\"[^\"]*\")", message):
        return PgError(f"date/time field value out of range: {m.group(1)}", "22008")
    if m := re.match(r"(?:invalid|Invalid) (date|timestamp|time) field format: (\"[^\"]*\")", message):
        return PgError(f"invalid input syntax for type {_pg_type(m.group(1))}: {m.group(2)}", "22007")
    if re.match(r"(Date|Timestamp) out of range", message):
        return _out_of_range(message.split()[0])
    if message.startswith("Could not cast value") or message.startswith("Value out of range"):
        return PgError("value out of range: overflow", "22003")
    return None


def translate(text: str) -> PgError | None:
    """A Spark or DuckDB data error's text (as raised: Spark's ``[CLASS] … SQLSTATE: xxxxx``, or
    DuckDB's ``<Kind> Error: …``) as PostgreSQL words it; None when it is not one known here."""
    if (m := _SPARK.search(text)) is not None:
        return _spark(m.group(1), m.group(2), m.group(3))
    if (m := _DUCK.search(text)) is not None:
        return _duckdb(m.group(1))
    return _duckdb(text) if own_sqlstate(text.strip()) else None

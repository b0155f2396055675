"""SQL column types and their Arrow and Spark equivalents.

A ``TIMESTAMPTZ`` is a UTC instant: Arrow ``timestamp[us, tz=UTC]``, Spark's ``TIMESTAMP``. An
``INTERVAL`` is PostgreSQL's three fields, kept apart: Arrow ``struct<months: int32, days: int32,
micros: int64>`` (:data:`INTERVAL`), Spark's ``STRUCT<months: INT, days: INT, micros: BIGINT>``
(:mod:`millpond.sql.semantics.intervals` gives it its meaning). A ``JSONB`` is its PostgreSQL text
in a one-field struct (:data:`millpond.jsonb.STRUCT`).
"""

from __future__ import annotations

from functools import lru_cache

import pyarrow as pa
from sqlglot import exp

from millpond.errors import SchemaError
from millpond.jsonb import STRUCT as JSONB, is_jsonb

__all__ = ["arrow_type", "normalize_type", "spark_ddl_type", "sql_type", "INTERVAL"]

INTERVAL = pa.struct([pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("micros", pa.int64())])

_T = exp.DataType.Type
_SIMPLE: dict[exp.DataType.Type, tuple[str, pa.DataType, str]] = {
    _T.BOOLEAN: ("BOOLEAN", pa.bool_(), "BOOLEAN"),
    _T.SMALLINT: ("SMALLINT", pa.int16(), "SMALLINT"),
    _T.INT: ("INT", pa.int32(), "INT"),
    _T.BIGINT: ("BIGINT", pa.int64(), "BIGINT"),
    _T.FLOAT: ("REAL", pa.float32(), "FLOAT"),
    _T.DOUBLE: ("DOUBLE", pa.float64(), "DOUBLE"),
    _T.VARCHAR: ("VARCHAR", pa.string(), "STRING"),
    _T.TEXT: ("VARCHAR", pa.string(), "STRING"),
    _T.CHAR: ("VARCHAR", pa.string(), "STRING"),
    _T.DATE: ("DATE", pa.date32(), "DATE"),
    _T.TIME: ("TIME", pa.time64("us"), "TIME(6)"),
    _T.VARBINARY: ("BYTEA", pa.binary(), "BINARY"),
    _T.TIMESTAMP: ("TIMESTAMP", pa.timestamp("us"), "TIMESTAMP_NTZ"),
    _T.TIMESTAMPTZ: ("TIMESTAMPTZ", pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    _T.INTERVAL: ("INTERVAL", INTERVAL, "STRUCT<months: INT, days: INT, micros: BIGINT>"),
    _T.JSONB: ("JSONB", JSONB, "STRUCT<pg_jsonb: STRING>"),
}


def _parse(sql_type: str | exp.DataType) -> exp.DataType:
    if isinstance(sql_type, exp.DataType):
        return sql_type
    try:
        return exp.DataType.build(sql_type, dialect="postgres")
    except Exception as exc:
        raise SchemaError(f"unknown column type {sql_type!r}") from exc


def normalize_type(sql_type: str | exp.DataType) -> str:
    dt = _parse(sql_type)
    if dt.this == _T.DECIMAL:
        p, s = _decimal_args(dt)
        return f"DECIMAL({p},{s})"
    if dt.this == _T.INTERVAL and dt.expressions:
        raise SchemaError(f"column type {dt.sql('postgres')} is not supported: an INTERVAL keeps microseconds; "
                          "use INTERVAL")
    if dt.this == _T.ARRAY:
        return f"{normalize_type(_one(dt))}[]"
    if dt.this == _T.STRUCT:
        return f"STRUCT<{', '.join(f'{_field(c)[0]} {normalize_type(_field(c)[1])}' for c in dt.expressions)}>"
    if dt.this == _T.MAP:
        key, value = dt.expressions
        if key.this in _NESTED:
            raise SchemaError(f"column type {dt.sql('postgres')} is not supported: a map's key is a scalar type")
        return f"MAP({normalize_type(key)}, {normalize_type(value)})"
    if dt.this == _T.JSON:
        raise SchemaError("column type JSON is not supported: use JSONB (the same documents, compared by value)")
    if dt.this not in _SIMPLE:
        raise SchemaError(f"column type {dt.sql('postgres')} is not supported; use one of BOOLEAN, SMALLINT, INT, "
                          "BIGINT, REAL, DOUBLE, VARCHAR, BYTEA, JSONB, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, DECIMAL(p,s), "
                          "an array of one (INT[]), STRUCT<a INT, …> or MAP(VARCHAR, INT)")
    return _SIMPLE[dt.this][0]


_NESTED = (_T.ARRAY, _T.STRUCT, _T.MAP)


def _one(dt: exp.DataType) -> exp.DataType:
    return dt.expressions[0]


def _field(c: exp.Expression) -> tuple[str, exp.DataType]:
    """A STRUCT field's name and type."""
    if isinstance(c, exp.ColumnDef):
        return c.name, c.args["kind"]
    raise SchemaError(f"a STRUCT field needs a name and a type: {c.sql('postgres')}")


def _decimal_args(dt: exp.DataType) -> tuple[int, int]:
    """DECIMAL(p,s); DECIMAL(p) has scale 0; a bare DECIMAL/NUMERIC is DECIMAL(38,10), as in casts
    (millpond.sql.semantics): PostgreSQL's unconstrained NUMERIC keeps fractions."""
    args = [int(e.name) for e in dt.expressions]
    precision = args[0] if args else 38
    scale = args[1] if len(args) > 1 else 0 if args else 10
    return precision, scale


def arrow_type(sql_type: str | exp.DataType) -> pa.DataType:
    # a column's type text is parsed once (sqlglot: ~0.3 ms; a table's schema is read per insert)
    return _arrow_type_of_text(sql_type) if isinstance(sql_type, str) else _arrow_type(sql_type)


@lru_cache(maxsize=4096)
def _arrow_type_of_text(sql_type: str) -> pa.DataType:
    return _arrow_type(sql_type)


def _arrow_type(sql_type: str | exp.DataType) -> pa.DataType:
    dt = _parse(sql_type)
    if dt.this == _T.DECIMAL:
        return pa.decimal128(*_decimal_args(dt))
    if dt.this == _T.ARRAY:
        return pa.list_(arrow_type(_one(dt)))
    if dt.this == _T.STRUCT:
        return pa.struct([pa.field(n, arrow_type(t)) for n, t in map(_field, dt.expressions)])
    if dt.this == _T.MAP:
        return pa.map_(arrow_type(dt.expressions[0]), arrow_type(dt.expressions[1]))
    return _SIMPLE[dt.this][1]


def spark_ddl_type(sql_type: str | exp.DataType) -> str:
    dt = _parse(sql_type)
    if dt.this == _T.DECIMAL:
        return "DECIMAL({},{})".format(*_decimal_args(dt))
    if dt.this == _T.ARRAY:
        return f"ARRAY<{spark_ddl_type(_one(dt))}>"
    if dt.this == _T.STRUCT:
        return f"STRUCT<{', '.join(f'`{n}`: {spark_ddl_type(t)}' for n, t in map(_field, dt.expressions))}>"
    if dt.this == _T.MAP:
        return f"MAP<{spark_ddl_type(dt.expressions[0])}, {spark_ddl_type(dt.expressions[1])}>"
    return _SIMPLE[dt.this][2]


def sql_type(t: pa.DataType) -> str:
    """The SQL name of an Arrow type (a view's columns), as ``CREATE TABLE`` spells it."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_time(t):  # Spark gives time64[ns]; millpond keeps microseconds
        return "TIME"
    if t == INTERVAL:
        return "INTERVAL"
    if is_jsonb(t):
        return "JSONB"
    if pa.types.is_struct(t) and [t.field(i).name for i in range(t.num_fields)] == ["pg_numeric", "pg_divisor"]:
        return "NUMERIC"  # a quotient: PostgreSQL's display scale per value (millpond.engine.numerics)
    if pa.types.is_map(t):
        return f"MAP({sql_type(t.key_type)}, {sql_type(t.item_type)})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"{sql_type(t.value_type)}[]"
    if pa.types.is_struct(t):
        return f"STRUCT<{', '.join(f'{_name(t.field(i).name)} {sql_type(t.field(i).type)}' for i in range(t.num_fields))}>"
    return _SQL_TYPES.get(t, str(t).upper())


def _name(name: str) -> str:
    return name if name.isidentifier() and name.lower() == name else '"' + name.replace('"', '""') + '"'


_SQL_TYPES = {pa.bool_(): "BOOLEAN", pa.int8(): "SMALLINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
              pa.int64(): "BIGINT", pa.float32(): "REAL", pa.float64(): "DOUBLE", pa.string(): "VARCHAR",
              pa.large_string(): "VARCHAR", pa.date32(): "DATE", pa.binary(): "BYTEA", pa.large_binary(): "BYTEA"}

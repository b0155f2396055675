"""PostgreSQL's types, as the semantics layer reasons about them.

Every expression of a view or a query gets one :class:`SqlType`; the rules that choose engine
expressions read it. The engines' own types follow from it: :func:`datatype` is the one sqlglot
type both generators print (``TIMESTAMP`` is Spark's ``TIMESTAMP_NTZ``, DuckDB's ``TIMESTAMP``).

An INTERVAL is PostgreSQL's three fields (months, days, microseconds), kept apart as PostgreSQL
keeps them: in both engines and in state it is the struct :data:`INTERVAL_FIELDS`
(:mod:`millpond.sql.semantics.intervals`). A TIMESTAMPTZ is a UTC instant; millpond's session
TimeZone is UTC, fixed (Spark's ``spark.sql.session.timeZone``, DuckDB's ``TimeZone``).

NUMERIC and DECIMAL without a precision are ``DECIMAL(38,10)`` (:data:`NUMERIC_DEFAULT`): 28
digits before the point and 10 after. Arithmetic on NUMERIC follows one set of result types in
both engines (:func:`decimal_result`, Spark's rules: no result has more than 38 digits). A
quotient is PostgreSQL's: its display scale is its value's own (:data:`QUOTIENT`, a ``dynamic``
numeric, carried as its text: :mod:`millpond.engine.numerics`).

    >>> decimal_result("*", numeric(10, 2), numeric(10, 0))
    SqlType(kind='numeric', precision=21, scale=2, exact=True, dynamic=False)
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from millpond import jsonb
from millpond.engine.numerics import DIVISOR as QUOTIENT_DIVISOR, FIELD as QUOTIENT_FIELD, is_quotient
from millpond.errors import SqlError
from millpond.sql.statements import position

__all__ = ["SqlType", "NUMERIC_DEFAULT", "QUOTIENT", "QUOTIENT_VALUE", "QUOTIENT_FIELD", "numeric", "INTEGER",
           "BIGINT", "SMALLINT", "REAL", "DOUBLE", "TEXT", "BOOLEAN", "DATE", "TIMESTAMP", "TIMESTAMPTZ", "INTERVAL",
           "UNKNOWN", "NULL", "BYTEA", "array_of", "from_datatype", "from_arrow", "from_catalog", "datatype", "decimal_of", "decimal_result",
           "common_type", "is_quotient_struct", "MAX_PRECISION", "INTERVAL_FIELDS", "Typed", "refuse"]

MAX_PRECISION = 38


@dataclass(frozen=True)
class SqlType:
    """A PostgreSQL type: ``kind`` is its name (``integer``, ``numeric``, ``text``...); a numeric has
    a precision and a scale. ``exact`` is False for a numeric whose scale is millpond's choice, not
    PostgreSQL's display scale (an unconstrained NUMERIC): its text form would differ. A
    ``dynamic`` numeric has PostgreSQL's display scale per value (a quotient, :data:`QUOTIENT`):
    the engines carry it as its text; where an operation needs a fixed scale, its value is read as
    ``numeric(precision, scale)`` (:data:`QUOTIENT_VALUE`)."""

    kind: str
    precision: int | None = None
    scale: int | None = None
    exact: bool = True
    dynamic: bool = False
    # an array's (element,); a record's ((field, type), ...); a map's (key, value)
    args: tuple = ()

    @property
    def nested(self) -> bool:
        return self.kind in ("array", "record", "map")

    @property
    def integer(self) -> bool:
        return self.kind in ("smallint", "integer", "bigint")

    @property
    def decimal(self) -> bool:
        return self.kind == "numeric"

    @property
    def float(self) -> bool:
        return self.kind in ("real", "double precision")

    @property
    def number(self) -> bool:
        return self.integer or self.decimal or self.float

    @property
    def temporal(self) -> bool:
        return self.kind in ("date", "timestamp", "timestamp with time zone")

    @property
    def untyped(self) -> bool:
        """A string literal or NULL: PostgreSQL's ``unknown``, typed by where it is used."""
        return self.kind in ("unknown", "null")

    def __str__(self) -> str:
        if self.kind == "array":
            return f"{self.args[0]}[]"
        if self.kind == "map":
            return f"map({self.args[0]}, {self.args[1]})"
        if self.dynamic:
            return "numeric"
        if self.decimal:
            return f"numeric({self.precision},{self.scale})"
        return self.kind


def numeric(precision: int, scale: int, *, exact: bool = True) -> SqlType:
    return SqlType("numeric", min(precision, MAX_PRECISION), scale, exact)


def array_of(element: SqlType) -> SqlType:
    return SqlType("array", args=(element,))


SMALLINT, INTEGER, BIGINT = SqlType("smallint"), SqlType("integer"), SqlType("bigint")
BYTEA = SqlType("bytea")
JSONB = SqlType("jsonb")  # its PostgreSQL text in a one-field struct (millpond.jsonb)
REAL, DOUBLE = SqlType("real"), SqlType("double precision")
TEXT, BOOLEAN, DATE = SqlType("text"), SqlType("boolean"), SqlType("date")
TIMESTAMP, TIMESTAMPTZ = SqlType("timestamp"), SqlType("timestamp with time zone")
TIME = SqlType("time without time zone")
INTERVAL = SqlType("interval")
UNKNOWN, NULL = SqlType("unknown"), SqlType("null")
NUMERIC_DEFAULT = numeric(38, 10, exact=False)
# a quotient: PostgreSQL's display scale per value; read as numeric(38,16) where a fixed scale is needed
QUOTIENT = SqlType("numeric", 38, 16, dynamic=True)
QUOTIENT_VALUE = numeric(38, 16, exact=False)

_T = exp.DataType.Type
_FROM_SQLGLOT = {
    _T.SMALLINT: SMALLINT, _T.TINYINT: SMALLINT, _T.INT: INTEGER, _T.BIGINT: BIGINT,
    _T.FLOAT: REAL, _T.DOUBLE: DOUBLE, _T.BOOLEAN: BOOLEAN, _T.DATE: DATE,
    _T.TEXT: TEXT, _T.VARCHAR: TEXT, _T.NVARCHAR: TEXT, _T.TIMESTAMP: TIMESTAMP, _T.TIMESTAMPNTZ: TIMESTAMP,
    _T.DATETIME: TIMESTAMP, _T.TIMESTAMPTZ: TIMESTAMPTZ, _T.TIMESTAMPLTZ: TIMESTAMPTZ, _T.INTERVAL: INTERVAL,
    _T.JSONB: JSONB, _T.TIME: TIME,
}
# an INTERVAL in the engines: (months, days, microseconds), as PostgreSQL keeps it
INTERVAL_FIELDS = (("months", "INT"), ("days", "INT"), ("micros", "BIGINT"))
_INTERVAL_TYPE = exp.DataType.build(f"STRUCT<{', '.join(f'{n} {t}' for n, t in INTERVAL_FIELDS)}>", dialect="spark")
# a quotient in the engines: its PostgreSQL text (millpond.engine.numerics)
_JSONB_TYPE = exp.DataType.build(f"STRUCT<{jsonb.FIELD} STRING>", dialect="spark")
_QUOTIENT_TYPE = exp.DataType.build(f"STRUCT<{QUOTIENT_FIELD} STRING, {QUOTIENT_DIVISOR} STRING>", dialect="spark")
_TO_SQLGLOT = {
    "smallint": _T.SMALLINT, "integer": _T.INT, "bigint": _T.BIGINT, "real": _T.FLOAT,
    "double precision": _T.DOUBLE, "boolean": _T.BOOLEAN, "date": _T.DATE, "text": _T.TEXT,
    "timestamp": _T.TIMESTAMPNTZ, "timestamp with time zone": _T.TIMESTAMPTZ, "unknown": _T.TEXT,
    "null": _T.TEXT, "time without time zone": _T.TIME,
}


def from_datatype(dt: exp.DataType) -> SqlType | None:
    """The type a CAST names (None: a type millpond does not have)."""
    if dt.this == _T.ARRAY:
        element = from_datatype(dt.expressions[0]) if dt.expressions else None
        return None if element is None else array_of(element)
    if dt.this == _T.STRUCT:
        fields = tuple((c.name, from_datatype(c.args["kind"])) for c in dt.expressions if isinstance(c, exp.ColumnDef))
        return None if len(fields) != len(dt.expressions) or any(t is None for _, t in fields) else \
            SqlType("record", args=fields)
    if dt.this == _T.MAP:
        key, value = (from_datatype(e) for e in dt.expressions)
        return None if key is None or value is None else SqlType("map", args=(key, value))
    if dt.this in (_T.VARBINARY, _T.BINARY):
        return BYTEA
    if dt.this == _T.INTERVAL and dt.expressions:
        return None  # INTERVAL(p): a precision millpond does not keep
    if dt.this == _T.DECIMAL:
        args = [int(e.name) for e in dt.expressions]
        if not args:
            return NUMERIC_DEFAULT
        return numeric(args[0], args[1] if len(args) > 1 else 0)
    if dt.this in (_T.VARCHAR, _T.CHAR, _T.NCHAR, _T.NVARCHAR) and dt.expressions:
        return None  # a length: see the cast rule, which truncates VARCHAR(n) itself
    return _FROM_SQLGLOT.get(dt.this)


def from_catalog(sql_type: str) -> SqlType:
    """A column type stored in the catalog (``INT``, ``DECIMAL(10,2)``, ``TIMESTAMP``...)."""
    dt = exp.DataType.build(sql_type, dialect="postgres")
    found = from_datatype(dt)
    return found if found is not None else TEXT


def from_arrow(t: pa.DataType) -> SqlType:
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return SMALLINT
    if pa.types.is_int32(t):
        return INTEGER
    if pa.types.is_integer(t):
        return BIGINT
    if pa.types.is_decimal(t):
        return numeric(t.precision, t.scale)
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return REAL
    if pa.types.is_floating(t):
        return DOUBLE
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_date(t):
        return DATE
    if pa.types.is_timestamp(t):
        return TIMESTAMPTZ if t.tz else TIMESTAMP
    if pa.types.is_time(t):
        return TIME
    if pa.types.is_duration(t) or pa.types.is_interval(t) or _is_interval_struct(t):
        return INTERVAL
    if is_quotient_struct(t):
        return QUOTIENT
    if jsonb.is_jsonb(t):
        return JSONB
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return array_of(from_arrow(t.value_type))
    if pa.types.is_map(t):
        return SqlType("map", args=(from_arrow(t.key_type), from_arrow(t.item_type)))
    if pa.types.is_struct(t):
        return SqlType("record", args=tuple((t.field(i).name, from_arrow(t.field(i).type)) for i in range(t.num_fields)))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BYTEA
    return TEXT


def is_quotient_struct(t: pa.DataType) -> bool:
    """``t`` is the Arrow type of a quotient (``struct<pg_numeric: string, pg_divisor: string>``)."""
    return is_quotient(t)


def _is_interval_struct(t: pa.DataType) -> bool:
    names = [t.field(i).name for i in range(t.num_fields)] if pa.types.is_struct(t) else []
    return names == [n for n, _ in INTERVAL_FIELDS]


def datatype(t: SqlType) -> exp.DataType:
    """The sqlglot type of ``t``, printed right by both generators."""
    if t.dynamic:
        return _QUOTIENT_TYPE.copy()
    if t.decimal:
        return exp.DataType(this=_T.DECIMAL, expressions=[
            exp.DataTypeParam(this=exp.Literal.number(t.precision)), exp.DataTypeParam(this=exp.Literal.number(t.scale))])
    if t.kind == "interval":
        return _INTERVAL_TYPE.copy()
    if t.kind == "jsonb":
        return _JSONB_TYPE.copy()
    if t.kind == "array":
        return exp.DataType(this=_T.ARRAY, expressions=[datatype(t.args[0])], nested=True)
    if t.kind == "map":
        return exp.DataType(this=_T.MAP, expressions=[datatype(t.args[0]), datatype(t.args[1])], nested=True)
    if t.kind == "record":
        return exp.DataType(this=_T.STRUCT, nested=True, expressions=[
            exp.ColumnDef(this=exp.to_identifier(n), kind=datatype(ft)) for n, ft in t.args])
    if t.kind == "bytea":
        return exp.DataType(this=_T.VARBINARY)
    return exp.DataType(this=_TO_SQLGLOT[t.kind])


def decimal_of(t: SqlType) -> SqlType:
    """An integer type as the decimal arithmetic sees it (``integer`` is ``numeric(10,0)``); a
    quotient as its value is read."""
    if t.dynamic:
        return QUOTIENT_VALUE
    if t.decimal:
        return t
    return {"smallint": numeric(5, 0), "integer": numeric(10, 0), "bigint": numeric(20, 0)}[t.kind]


def _bounded(precision: int, scale: int, *, exact: bool) -> SqlType:
    """Spark's adjustment of a result wider than 38 digits: keep the integer digits and at least
    6 digits after the point (fewer only when the value has them)."""
    if precision <= MAX_PRECISION:
        return numeric(precision, scale, exact=exact)
    int_digits = precision - scale
    min_scale = min(scale, 6)
    return numeric(MAX_PRECISION, max(MAX_PRECISION - int_digits, min_scale), exact=False)


def decimal_result(op: str, a: SqlType, b: SqlType) -> SqlType:
    """The type of ``a op b`` (``+ - * %``) for numerics (integers count as ``decimal_of``); a
    quotient's is :data:`QUOTIENT`."""
    a, b = decimal_of(a), decimal_of(b)
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    exact = a.exact and b.exact
    if op in ("+", "-"):
        scale = max(s1, s2)
        return _bounded(max(p1 - s1, p2 - s2) + scale + 1, scale, exact=exact)
    if op == "*":
        return _bounded(p1 + p2 + 1, s1 + s2, exact=exact)
    if op == "%":
        scale = max(s1, s2)
        return _bounded(min(p1 - s1, p2 - s2) + scale, scale, exact=exact)
    raise ValueError(op)


_INTEGER_RANK = {"smallint": 0, "integer": 1, "bigint": 2}
_NUMBER_RANK = {"smallint": 0, "integer": 1, "bigint": 2, "numeric": 3, "real": 4, "double precision": 5}
_TIME_RANK = {"date": 0, "timestamp": 1, "timestamp with time zone": 2}


def implicit(source: SqlType, target: SqlType) -> bool:
    """PostgreSQL has an implicit cast from ``source`` to ``target`` (what a function argument may
    be given): numbers widen (integers, numeric, real, double precision), dates and timestamps
    widen to timestamps and timestamptz; an untyped literal becomes anything."""
    if source.untyped or source.kind == target.kind:
        return True
    if source.number and target.number:
        return _NUMBER_RANK[source.kind] < _NUMBER_RANK[target.kind]
    if source.temporal and target.temporal:
        return _TIME_RANK[source.kind] < _TIME_RANK[target.kind]
    return False


def common_type(types: list[SqlType]) -> SqlType | None:
    """The type PostgreSQL resolves CASE branches, COALESCE, IN lists and UNION columns to (None:
    no common type). Untyped literals take the type of the others; all untyped is text."""
    typed = [t for t in types if not t.untyped]
    if not typed:
        return TEXT if any(t.kind == "unknown" for t in types) else NULL
    first = typed[0]
    if all(t == first for t in typed):
        return first
    if all(t.number for t in typed):
        if any(t.float for t in typed):
            return DOUBLE if any(t.kind == "double precision" or not t.float for t in typed) else REAL
        if any(t.dynamic for t in typed):  # each value keeps its own display scale, as in PostgreSQL
            return QUOTIENT
        if any(t.decimal for t in typed):
            decs = [decimal_of(t) for t in typed]
            scale = max(d.scale for d in decs)
            ints = max(d.precision - d.scale for d in decs)
            same_scale = all(d.scale == scale for d in decs)  # else PostgreSQL keeps each value's own scale
            return numeric(min(ints + scale, MAX_PRECISION), scale, exact=same_scale and all(d.exact for d in decs))
        return max(typed, key=lambda t: _INTEGER_RANK[t.kind])
    if all(t.kind in ("date", "timestamp") for t in typed):
        return TIMESTAMP
    if all(t.temporal for t in typed):  # PostgreSQL's preferred type of the category
        return TIMESTAMPTZ
    if all(t.kind == "array" for t in typed):
        element = common_type([t.args[0] for t in typed])
        return None if element is None else array_of(element)
    if all(t.kind == first.kind for t in typed) and not first.nested:
        return first
    return None


Typed = tuple[exp.Expression, SqlType]  # an expression and its type, as the binder and its rules pass them


def refuse(message: str, node: exp.Expression | None = None, *, sqlstate: str | None = None) -> SqlError:
    """A SqlError at ``node``'s position (where it starts): how a rule refuses what it cannot mean."""
    line, col = position(node)
    return SqlError(message, line=line, col=col, sqlstate=sqlstate)

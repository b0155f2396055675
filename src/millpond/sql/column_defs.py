"""A column as ``CREATE TABLE`` and ``ALTER TABLE ... ADD COLUMN`` declare it."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
from sqlglot import exp

from millpond.catalog import Column
from millpond.catalog.types import normalize_type
from millpond.engine.runtime import Runtime
from millpond.errors import SqlError
from millpond.defaults import encode_default
from millpond.log.conform import conform
from millpond.sql.query import run_query
from millpond.sql.semantics.assign import column_type, literal_for

__all__ = ["column_def", "with_default"]


def column_def(rt: Runtime, table: str, d: exp.ColumnDef) -> Column:
    """A column of ``CREATE TABLE`` or ``ALTER TABLE ... ADD COLUMN``: its type, ``NOT NULL`` and
    ``DEFAULT`` — a constant expression, evaluated here as PostgreSQL assigns it to the column (a
    row is filled with its value where an insert, or a record older than the column, leaves it out)."""
    if d.args.get("kind") is None:
        raise SqlError(f"column {d.name!r} of {table!r} needs a type")
    kinds = [c.args.get("kind") for c in d.args.get("constraints") or []]
    for k in kinds:  # PostgreSQL would enforce the others: refused, not ignored
        if not isinstance(k, (exp.NotNullColumnConstraint, exp.DefaultColumnConstraint,
                              exp.PrimaryKeyColumnConstraint)):
            raise SqlError(f"column {d.name!r} of {table!r}: {k.sql('postgres') if k is not None else 'its constraint'} "
                           "is not supported (a column takes PRIMARY KEY, NOT NULL and DEFAULT)", sqlstate="0A000")
    not_null = any(isinstance(k, exp.NotNullColumnConstraint) and not k.args.get("allow_null") for k in kinds)
    column = Column(d.name, normalize_type(d.args["kind"]), not_null)
    given = next((k.this for k in kinds if isinstance(k, exp.DefaultColumnConstraint)), None)
    return with_default(rt, table, column, given)


def with_default(rt: Runtime, table: str, column: Column, given: exp.Expression | None) -> Column:
    """``column`` with the default ``given`` (None or ``NULL``: none) — a constant expression,
    evaluated here as PostgreSQL assigns it to the column."""
    if given is None or isinstance(given, exp.Null):
        return replace(column, default=None, value=None)
    for node in given.walk():
        if isinstance(node, (exp.Column, exp.Query)) or isinstance(node, exp.Func) and not isinstance(node, exp.Cast):
            raise SqlError(f"column {column.name!r} of {table!r}: DEFAULT {given.sql('postgres')} is not supported: a "
                           "default is a constant expression (a function such as now() or random() would give each "
                           "row its own value, and rows stored before the column would need rewriting)",
                           sqlstate="0A000")
    query = exp.select(exp.alias_(literal_for(given.copy(), column.type), "v"))
    try:
        rows = run_query(rt, query, assign=[("v", column_type(column.type))])
    except SqlError as exc:  # its position would be in the SELECT made here: the column is named instead
        reason = str(exc).split(" (line ", 1)[0] if exc.line is not None else str(exc)
        raise SqlError(f"column {column.name!r} of {table!r}: DEFAULT {given.sql('postgres')}: {reason}",
                       sqlstate=exc.sqlstate) from None
    typed = pa.schema([pa.field("v", column.field.type)])
    value = conform(f"the DEFAULT of column {column.name!r} of {table!r}", typed, rows)
    return replace(column, default=given.sql("postgres"), value=encode_default(value.column(0).combine_chunks()))

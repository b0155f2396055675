"""PostgreSQL's assignment in SQL: the values an ``INSERT`` or ``UPDATE`` stores, checked against
the types of the columns they go into when the statement is bound.

- A string constant (or NULL) is read by the column type's input rules, as PostgreSQL reads an
  unknown-typed literal: ``'2024-03-05'`` into a DATE, ``'\\x0a0b'`` into a BYTEA, ``'{1,2}'``
  into an ``INT[]`` (:func:`literal_for`, applied to ``VALUES`` cells, an ``INSERT ... SELECT``'s
  own items and ``UPDATE ... SET`` values).
- A typed value needs one of PostgreSQL's assignment casts to the column's type
  (:func:`assignable`): numbers into numbers, dates and timestamps into each other, a timestamp
  into TIME, TIME and INTERVAL into each other, arrays of assignable elements, anything into
  text. Anything else is refused in PostgreSQL's words (SQLSTATE 42804): ``column "n" is of type
  integer but expression is of type text``.
- The values themselves convert when the row is written (:mod:`millpond.log.assign`: rounding,
  ranges, ``numeric field overflow``), the same for every write path; a value stored into a text
  column is written as its PostgreSQL text here, where its SQL type is known.

    >>> assignable(T.TEXT, T.INTEGER), assignable(T.numeric(3, 1), T.INTEGER)
    (False, True)
"""

from __future__ import annotations

from typing import Sequence

from sqlglot import exp

from millpond.sql.semantics import types as T
from millpond.sql.semantics.types import SqlType, refuse

__all__ = ["assignable", "assign_outputs", "literal_for", "column_type"]

_TIME = "time without time zone"


def assignable(source: SqlType, target: SqlType) -> bool:
    """PostgreSQL assigns a value of type ``source`` to a column of type ``target``."""
    if source.untyped or source == target or target.kind == "text":
        return True
    if source.number and target.number or source.temporal and target.temporal:
        return True
    if target.kind == _TIME and source.kind in ("timestamp", "timestamp with time zone", "interval"):
        return True
    if source.kind == _TIME and target.kind == "interval":
        return True
    if source.kind == target.kind == "array":
        return assignable(source.args[0], target.args[0])
    return source.kind == target.kind  # records, maps: field by field when the row is written


def column_type(sql_type: str) -> SqlType:
    """A catalog column type (``DECIMAL(10,2)``, ``INT[]``, ``STRUCT<a INT>``) as a SqlType."""
    return T.from_catalog(sql_type)


def literal_for(node: exp.Expression, sql_type: str) -> exp.Expression:
    """``node``, or a string constant (or NULL) read as a constant of the catalog column type
    ``sql_type`` (the input rules of the column's type, as PostgreSQL reads an unknown-typed
    literal); a ``ROW(...)`` into a record column as that record, field by position."""
    literal = isinstance(node, exp.Literal) and node.is_string or isinstance(node, exp.Null)
    row = isinstance(node, exp.Anonymous) and str(node.this).lower() == "row"  # into a STRUCT: by position
    if literal and column_type(sql_type).kind != "text" or row and column_type(sql_type).kind == "record":
        return exp.Cast(this=node.copy(), to=exp.DataType.build(sql_type, dialect="postgres"))
    return node


def assign_outputs(binder, root: exp.Expression, columns: Sequence[tuple[str, SqlType]]) -> None:  # noqa: ANN001
    """The bound query ``root``'s outputs as the ``columns`` (name, type) they are stored into:
    refused (SQLSTATE 42804) where PostgreSQL has no assignment cast; written as text into a text
    column."""
    select = root
    while isinstance(select, exp.Subquery):
        select = select.this
    outputs = binder.outputs.get(id(select), [])
    for i, ((_, source), (name, target)) in enumerate(zip(outputs, columns)):
        if source == target or source.kind == "null":
            continue
        if not assignable(source, target):
            raise refuse(f'column "{name}" is of type {_pg(target)} but expression is of type {_pg(source)}: '
                         "rewrite or cast the expression", _item(select, i), sqlstate="42804")
        if target.kind == "text" and source.kind not in ("text", "unknown", "bytea"):
            binder.cast_output(select, i, T.TEXT)  # its PostgreSQL text (an interval's, a timestamptz's)


def _pg(t: SqlType) -> str:
    if t.decimal:
        return "numeric"
    if t.kind == "array":
        return f"{_pg(t.args[0])}[]"
    return str(t)


def _item(select: exp.Expression, i: int) -> exp.Expression | None:
    """The ``i``-th output expression of ``select`` (its first branch's, for a UNION), for the error's position."""
    while isinstance(select, exp.SetOperation):
        select = select.this
        while isinstance(select, exp.Subquery):
            select = select.this
    if not isinstance(select, exp.Select) or i >= len(select.expressions):
        return None
    item = select.expressions[i]
    item = item.this if isinstance(item, exp.Alias) else item
    source = select.args.get("from_") or select.args.get("from")
    values = source.this if source is not None else None
    while isinstance(values, exp.Subquery):
        values = values.this
    if isinstance(item, exp.Column) and isinstance(values, exp.Values) and values.expressions:
        return values.expressions[0].expressions[i]  # INSERT ... VALUES: the first row's value
    return item

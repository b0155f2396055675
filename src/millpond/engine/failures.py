"""Data errors, for the coordinator's fault isolation (:mod:`millpond.engine.coordinator`, "Fault
isolation"): what Spark says when a view's expression raises (an error of SQLSTATE class 22), and
how a failed view is described to the user — the column's expression as the view's SQL writes it,
and the input record that raised."""

from __future__ import annotations

import contextlib
import re

import pyarrow as pa
import sqlglot
from sqlglot import exp

from millpond import pgerrors

__all__ = ["data_error", "internal_error", "describe_failure", "cause", "DATA_ERRORS_AS_NULL"]

DATA_ERRORS_AS_NULL = ", or WITH (on_error = 'null')"  # a view's other remedy (a flow has no on_error)
_ERROR = re.compile(r"\[([A-Z][A-Z0-9_.]*)\] ([^\n]*?) ?SQLSTATE: (\w{5})")
_CONTEXT = re.compile(r"== SQL \(line \d+, position \d+\) ==\n(.*)")


def data_error(exc: BaseException, schema: "pa.Schema | None" = None) -> dict | None:
    """A Spark error of SQLSTATE class 22 (data exception) or 38 (a Python function raised:
    :mod:`millpond.pyfunctions`) — also millpond's own ``RAISE_ERROR('division by zero')`` — as
    {error_class, sqlstate, message, expression} with PostgreSQL's message and SQLSTATE
    (:mod:`millpond.pgerrors`); None for any other error. ``schema``: the view's rows, whose
    column's type names an overflow Spark does not name (``integer out of range``)."""
    text = str(exc)
    m = _ERROR.search(text)
    if m is None:
        return None
    pg = pgerrors.translate(text)
    sqlstate = pg.sqlstate if pg is not None else m.group(3)
    if not pgerrors.is_data_error(sqlstate):
        return None
    # Spark's advice (try_divide, ansi) does not apply here
    message = pg.message if pg is not None else m.group(2).split(". ")[0].rstrip(".")
    context = _CONTEXT.search(text[m.end():])
    expression = column = None
    if context:  # the fragment of the SQL millpond generated, back in the user's column names
        fragment = context.group(1).strip()
        if (alias := re.search(r"\s+AS\s+`([^`]*)`\s*$", fragment)) is not None:
            column, fragment = alias.group(1), fragment[:alias.start()]
        expression = re.sub(r"`(?:[^`]*__)?([^`]*)`", r"\1", fragment)
    if m.group(1) == "ARITHMETIC_OVERFLOW" and schema is not None and column in schema.names:
        kind = schema.field(column).type
        named = {pa.int16(): "smallint", pa.int32(): "integer", pa.int64(): "bigint"}.get(kind)
        message = f"{named} out of range" if named else message
    return {"error_class": m.group(1), "sqlstate": sqlstate, "message": message, "expression": expression,
            "column": column}


_INTERNAL = re.compile(r"InvariantError: ([^\n]*)")
# a Python worker killed under the task (the kernel's OOM killer, most often), or Arrow's allocator out of memory
_DIED = re.compile(r"Python worker exited unexpectedly[^\n]*|org\.apache\.arrow\.memory\.OutOfMemoryException[^\n]*")


def internal_error(exc: BaseException) -> dict | None:
    """A failure of one view's tasks that is not its data, as a failure record; None for any
    other error: a bug of millpond's in its operator (an :class:`~millpond.errors.InvariantError`
    its task raised: a count that went negative, a retraction of a row that is not there),
    SQLSTATE XX000; or a task that died or ran out of memory (a Spark Python worker killed under
    it, Arrow's allocator exhausted), SQLSTATE 53200. The coordinator isolates the view as it
    isolates a data error when it fails alone on a probe (not a lost executor, storage, or the
    epoch's views together), so that one view does not stop every other view's epochs."""
    text = str(exc)
    if (m := _INTERNAL.search(text)) is not None:
        return {"error_class": "INTERNAL", "sqlstate": "XX000", "expression": None, "column": None,
                "message": f"internal error (please report it): {m.group(1).strip()}"}
    if (m := _DIED.search(text)) is not None:
        return {"error_class": "OUT_OF_MEMORY", "sqlstate": "53200", "expression": None, "column": None,
                "message": "out of memory: its epoch's task died (a Spark Python worker killed under it, most often by "
                           f"the system for lack of memory, or Arrow's allocator exhausted: {m.group(0).strip()[:200]})"}
    return None


def describe_failure(f: dict, sql: str | None = None) -> str:
    """One line: which view failed, where, why, on which input: the failing column's expression as
    written in the view's ``sql`` when it can be found, else the fragment of the SQL millpond generated."""
    shown = _written(sql, f.get("column")) or f.get("expression")
    where = f" in {shown!r}" if shown else ""
    rows = f"; input: {'; '.join(f['rows'])}" if f.get("rows") else ""
    flow = f.get("kind") == "flow"
    state = f" (SQLSTATE {f['sqlstate']})" if f.get("sqlstate") else ""
    return (f"{'flow' if flow else 'view'} {f['name']!r} failed at epoch {f['failed_epoch']} (its rows stay as of "
            f"epoch {f['epoch']}): {f.get('message')}{where}{state}{rows}. Drop it, or drop and "
            + ("recreate it" if f.get("error_class") == "INTERNAL" else
               "recreate it with more memory for Spark's workers, or over fewer rows"
               if f.get("error_class") == "OUT_OF_MEMORY" else
               f"recreate it (e.g. with NULLIF{'' if flow else DATA_ERRORS_AS_NULL})"))


def _written(sql: str | None, column: str | None) -> str | None:
    """``column = <its expression>`` as the view's SQL writes it, or None."""
    if not sql or not column:
        return None
    with contextlib.suppress(sqlglot.errors.SqlglotError):
        select = sqlglot.parse_one(sql, dialect="postgres").find(exp.Select)
        for item in select.expressions if select is not None else ():
            if item.alias_or_name == column:
                return f"{column} = {item.unalias().sql('postgres')}"
    return None


def cause(exc: BaseException) -> str:
    """The innermost error line of a (possibly Spark-wrapped) exception: Spark's error class line
    when there is one (never its caret line)."""
    m = _ERROR.search(str(exc))
    if m is not None:
        return f"[{m.group(1)}] {m.group(2)}".strip()
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error:" in ln or "Exception:" in ln]
    return (errors[-1] if errors else lines[-1] if lines else type(exc).__name__)[:500]

"""Data errors, for the coordinator's fault isolation (:mod:`millpond.engine.coordinator`, "Fault
isolation"): what Spark says when a view's expression raises (an error of SQLSTATE class 22), and
how a failed view is described to the user — the column's expression as the view's SQL writes it,
and the input record that raised."""

from __future__ import annotations

import contextlib
import re

import sqlglot
from sqlglot import exp

__all__ = ["data_error", "describe_failure", "cause", "DATA_ERRORS_AS_NULL"]

DATA_ERRORS_AS_NULL = ", or WITH (on_error = 'null')"  # a view's other remedy (a flow has no on_error)
_ERROR = re.compile(r"\[([A-Z][A-Z0-9_.]*)\] ([^\n]*?) ?SQLSTATE: (\w{5})")
_CONTEXT = re.compile(r"== SQL \(line \d+, position \d+\) ==\n(.*)")


def data_error(exc: BaseException) -> dict | None:
    """A Spark error of SQLSTATE class 22 (data exception) or 38 (a Python function raised:
    :mod:`millpond.pyfunctions`) as {error_class, sqlstate, message, expression}; None for any
    other error."""
    text = str(exc)
    m = _ERROR.search(text)
    if m is None or not m.group(3).startswith(("22", "38")):
        return None
    message = m.group(2).split(". ")[0].rstrip(".")  # Spark's advice (try_divide, ansi) does not apply here
    context = _CONTEXT.search(text[m.end():])
    expression = column = None
    if context:  # the fragment of the SQL millpond generated, back in the user's column names
        fragment = context.group(1).strip()
        if (alias := re.search(r"\s+AS\s+`([^`]*)`\s*$", fragment)) is not None:
            column, fragment = alias.group(1), fragment[:alias.start()]
        expression = re.sub(r"`(?:[^`]*__)?([^`]*)`", r"\1", fragment)
    return {"error_class": m.group(1), "sqlstate": m.group(3), "message": message, "expression": expression,
            "column": column}


def describe_failure(f: dict, sql: str | None = None) -> str:
    """One line: which view failed, where, why, on which input: the failing column's expression as
    written in the view's ``sql`` when it can be found, else the fragment of the SQL millpond generated."""
    shown = _written(sql, f.get("column")) or f.get("expression")
    where = f" in {shown!r}" if shown else ""
    rows = f"; input: {'; '.join(f['rows'])}" if f.get("rows") else ""
    flow = f.get("kind") == "flow"
    return (f"{'flow' if flow else 'view'} {f['name']!r} failed at epoch {f['failed_epoch']} (its rows stay as of "
            f"epoch {f['epoch']}): [{f.get('error_class')}] {f.get('message')}{where}{rows}. Drop it, or drop and "
            f"recreate it (e.g. with NULLIF{'' if flow else DATA_ERRORS_AS_NULL})")


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

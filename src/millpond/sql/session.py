"""Statement dispatch: each parsed statement goes to the module that executes its kind.

A script of several statements is parsed whole first (a syntax error anywhere runs nothing), then
run statement by statement. Each statement is atomic, the script is not: if statement ``i`` fails,
statements ``1..i-1`` stay applied, the rest do not run, and the error says so
(``statement 3 of 4 failed (statements 1-2 were applied, the rest were not run): ...``) and
carries ``statement = i``. On a read-only runtime a script with any write is refused before
anything runs.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import pyarrow as pa
from sqlglot import exp

from millpond.engine.runtime import Runtime
from millpond.errors import MillpondError, ReadOnlyError, SqlError, unexpected
from millpond.sql import alter, ddl, dml, flows, introspect, sinks
from millpond.sql.query import run_query
from millpond.sql.subscribe import subscribe
from millpond.sql.statements import keyword, parse

__all__ = ["run", "execute", "statements", "locate", "verb", "lock_free", "cancel_statement"]


def statements(text: str) -> list[exp.Expression]:
    """The statements of ``text`` (``SHOW``, ``EXPLAIN``... included, without sqlglot's warning
    that it keeps them as commands)."""
    with _no_command_warning():
        return parse(text, strict=True)


def run(rt: Runtime, text: str) -> pa.Table | None:
    """Run one or more statements; return the result of the last query (None for DDL/DML)."""
    parsed = statements(text)
    if getattr(rt, "read_only", False):
        for i, statement in enumerate(parsed, 1):
            if not _reads(statement):
                where = f" (statement {i} of {len(parsed)}; nothing was run)" if len(parsed) > 1 else ""
                raise ReadOnlyError(f"the database is open read-only: {verb(statement)} is refused{where}; "
                                    "open it with millpond.connect(root) to write")
    result = None
    for i, statement in enumerate(parsed, 1):
        try:
            result = execute(rt, statement)
        except Exception as exc:
            if len(parsed) == 1:
                raise
            error = unexpected(exc)
            locate(error, i, len(parsed))
            if error is exc:
                raise
            raise error from exc
    return result


def lock_free(rt: Runtime, text: str) -> exp.Query | None:
    """``text`` when it is one query that can read a pinned version without the database's lock
    (:meth:`~millpond.engine.runtime.Runtime.reading`): it reads only tables and views — no
    ``AS OF`` (kept changes), no partial view (it fills keys: a write), no system view but
    ``millpond_jobs`` (``SHOW JOBS`` is one: the jobs are seen while an epoch runs) — else None (a
    syntax error is left to :func:`run` to report)."""
    try:
        parsed = statements(text)
    except MillpondError:
        return None
    if len(parsed) == 1 and isinstance(parsed[0], exp.Command) and parsed[0].name.upper() == "SHOW" and \
            isinstance(parsed[0].expression, exp.Literal) and parsed[0].expression.name.upper() == "JOBS":
        parsed = [exp.select("*").from_("millpond_jobs")]
    if len(parsed) != 1 or not isinstance(parsed[0], exp.Query):
        return None
    catalog = rt.catalog
    for table in parsed[0].find_all(exp.Table):
        view = catalog.views.get(table.name)
        if table.args.get("version") is not None or (view is not None and view.partial):
            return None
    ctes = {c.alias_or_name for c in parsed[0].find_all(exp.CTE)}
    names = {t.name for t in parsed[0].find_all(exp.Table) if isinstance(t.this, exp.Identifier)} - ctes
    return parsed[0] if all(n in catalog.tables or n in catalog.views or n == "millpond_jobs" for n in names) else None


def cancel_statement(text: str) -> exp.Command | None:
    """``text`` when it is one ``CANCEL JOB n``, which runs without the database's lock (the epoch
    it cancels holds it)."""
    try:
        parsed = statements(text)
    except MillpondError:
        return None
    return parsed[0] if len(parsed) == 1 and keyword(parsed[0]) == "CANCEL" else None


def locate(error: MillpondError, i: int, n: int) -> None:
    """Say which statement of a script failed and what the ones before it did."""
    applied = ("nothing was applied" if i == 1 else "statement 1 was applied" if i == 2
               else f"statements 1-{i - 1} were applied")
    rest = ", the rest were not run" if i < n else ""
    error.args = (f"statement {i} of {n} failed ({applied}{rest}): {error.message}", *error.args[1:])
    error.statement = i  # type: ignore[attr-defined]


def _reads(s: exp.Expression) -> bool:
    return isinstance(s, (exp.Query, exp.Describe)) or keyword(s) in ("SHOW", "EXPLAIN", "SUBSCRIBE")


def verb(s: exp.Expression) -> str:
    """What a statement does, in its own words: ``CREATE MATERIALIZED VIEW``, ``INSERT``, ``FLUSH``."""
    word = keyword(s)
    if word in ("CREATE", "DROP") and (flows.is_flow(s, word)):
        return f"{word} FLOW"
    if word in ("CREATE", "DROP") and sinks.is_sink(s, word):
        return f"{word} SINK"
    if word:
        return word
    if isinstance(s, (exp.Create, exp.Drop)):
        kind = (s.args.get("kind") or "").upper()
        props = s.args.get("properties")
        materialized = s.args.get("materialized") or (props is not None and any(
            isinstance(p, exp.MaterializedProperty) for p in props.expressions))
        return f"{type(s).__name__.upper()} {'MATERIALIZED ' if materialized and kind == 'VIEW' else ''}{kind}".strip()
    if isinstance(s, exp.Alter):  # PostgreSQL's tag: ALTER TABLE
        return f"ALTER {(s.args.get('kind') or '').upper()}".strip()
    return type(s).__name__.upper()


class _CommandFallback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


@contextmanager
def _no_command_warning() -> Iterator[None]:
    logger, quiet = logging.getLogger("sqlglot"), _CommandFallback()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


# statement kind -> what executes it (queries return their result; the rest return None)
_EXECUTE = {
    exp.Create: ddl.create,
    exp.Drop: ddl.drop,
    exp.Set: ddl.set_,
    exp.Insert: dml.insert,
    exp.Delete: dml.delete,
    exp.Update: dml.update,
    exp.Describe: introspect.describe,
    exp.Alter: alter.alter,
}
_COMMANDS = {"SHOW": introspect.show, "EXPLAIN": introspect.explain, "SUBSCRIBE": subscribe,
             "ALTER": alter.alter_command, "CANCEL": introspect.cancel}
_FLOWS = {"CREATE": flows.create, "DROP": flows.drop}
_SINKS = {"CREATE": sinks.create, "DROP": sinks.drop}


def execute(rt: Runtime, s: exp.Expression) -> pa.Table | None:
    word = keyword(s)
    if word == "FLUSH":
        rt.flush(notice=True)  # a files table's source errors are said (MillpondNotice)
        return None
    if isinstance(s, exp.Command) and word in _COMMANDS:
        return _COMMANDS[word](rt, s)
    if word in _FLOWS and flows.is_flow(s, word):
        return _FLOWS[word](rt, s)
    if word in _SINKS and sinks.is_sink(s, word):
        return _SINKS[word](rt, s)
    run_it = run_query if isinstance(s, exp.Query) else _EXECUTE.get(type(s))
    if run_it is None:
        raise SqlError(f"unsupported statement: {s.sql('postgres')[:80]!r}")
    result = run_it(rt, s)
    if rt.implicit_flush and isinstance(s, (exp.Insert, exp.Delete, exp.Update)):
        rt.flush()  # SET implicit_flush = true: the statement's rows reach every view before it returns
    return result

"""Names resolved as PostgreSQL resolves them: every column of a query qualified with the FROM item
it comes from (sqlglot's ``qualify``), FROM items' column lists checked first; a name that does not
resolve is PostgreSQL's error, in its words, at the name's position:

    column "nocol" does not exist (line 1, column 8)              SQLSTATE 42703
    column reference "k" is ambiguous (line 1, column 8)          SQLSTATE 42702
    missing FROM-clause entry for table "u" (line 1, column 8)    SQLSTATE 42P01
"""

from __future__ import annotations

import re
from typing import Mapping

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.qualify import qualify

from millpond.errors import SqlError
from millpond.sql import semantics
from millpond.sql.desugar import check_column_aliases
from millpond.sql.statements import position

__all__ = ["qualify_names", "unresolved"]


def qualify_names(query: exp.Expression, types: Mapping[str, Mapping[str, semantics.SqlType]]) -> exp.Expression:
    """``query`` with every column qualified, over relations with the column ``types``."""
    query = check_column_aliases(query, types)
    try:
        return qualify(query, schema=semantics.sqlglot_schema(types), dialect="postgres",
                       validate_qualify_columns=True, quote_identifiers=False)
    except OptimizeError as exc:
        raise unresolved(exc, query, types) from None


def _column_at(query: exp.Expression, name: str, line: str | None, col: str | None) -> exp.Column | None:
    """The column ``name`` of ``query`` whose identifier ends at ``line``/``col`` (the first such
    column when no position is given)."""
    for c in query.find_all(exp.Column):
        if c.name != name:
            continue
        meta = c.this.meta if isinstance(c.this, exp.Identifier) else {}
        if line is None or (str(meta.get("line")) == line and str(meta.get("col")) == col):
            return c
    return None


def unresolved(exc: OptimizeError, query: exp.Expression,
               types: Mapping[str, Mapping[str, object]] | None = None) -> SqlError:
    """sqlglot's error for a name that does not resolve, as PostgreSQL's (``types``: the columns
    of the relations the query reads, which tell an ambiguous name from a missing one)."""
    text = str(exc).split("\n")[0]
    if m := re.match(r"Column '(.*)' could not be resolved(?: for table: '(.*)')?\. ?(?:Line: (\d+), Col: (\d+))?",
                     text):
        name, table = m.group(1), m.group(2)
        node = _column_at(query, name, m.group(3), m.group(4))
        line, col = position(node)
        sources = [t for t in query.find_all(exp.Table)]
        if table and table not in {t.alias_or_name for t in sources} | {t.name for t in sources}:
            return SqlError(f'missing FROM-clause entry for table "{table}"', line=line, col=col, sqlstate="42P01")
        having = [t for t in sources if name in (types or {}).get(t.name, {})]
        if not table and len(having) > 1:
            return SqlError(f'column reference "{name}" is ambiguous', line=line, col=col, sqlstate="42702")
        shown = f"{table}.{name}" if table else f'"{name}"'
        return SqlError(f"column {shown} does not exist", line=line, col=col, sqlstate="42703")
    if m := re.match(r"Ambiguous column '(.*)'(?: \(Line: (\d+), Col: (\d+)\))?", text):
        line, col = position(_column_at(query, m.group(1), m.group(2), m.group(3)))
        return SqlError(f'column reference "{m.group(1)}" is ambiguous', line=line, col=col, sqlstate="42702")
    if m := re.match(r"Unknown table: (.*)", text):
        table = m.group(1).strip().strip('"')
        node = next((c for c in query.find_all(exp.Column) if c.table == table), None)
        line, col = position(node)
        return SqlError(f'missing FROM-clause entry for table "{table}"', line=line, col=col, sqlstate="42P01")
    if m := re.match(r"Unknown (?:output )?column: (.*)", text):
        name = m.group(1).strip()
        line, col = position(_column_at(query, name, None, None))
        return SqlError(f'column "{name}" does not exist', line=line, col=col, sqlstate="42703")
    if m := re.match(r"Alias already used: (.*)", text):
        return SqlError(f'table name "{m.group(1).strip()}" specified more than once', sqlstate="42712")
    return SqlError(f"cannot resolve the query: {text}", sqlstate="42000")

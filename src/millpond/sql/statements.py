"""Parse SQL text into sqlglot statements with clear, positioned errors."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from millpond.errors import SqlError

__all__ = ["parse", "keyword", "view_query"]


def parse(text: str) -> list[exp.Expression]:
    """Statements of ``text`` with unquoted identifiers folded to lower case (PostgreSQL rules)."""
    try:
        statements = [s for s in sqlglot.parse(text, dialect="postgres") if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        raise SqlError(f"syntax error: {first.get('description', exc)}"
                       + (f" near {first.get('highlight')!r}" if first.get("highlight") else ""),
                       sql=text, line=first.get("line"), col=first.get("col")) from None
    except TokenError as exc:
        raise SqlError(f"syntax error: {exc}", sql=text) from None
    return [normalize_identifiers(s, dialect="postgres") for s in statements]


def keyword(statement: exp.Expression) -> str | None:
    """The bare keyword of a one-word statement such as ``FLUSH`` (parsed as a column)."""
    if isinstance(statement, exp.Column) and not statement.table:
        return statement.name.upper()
    if isinstance(statement, exp.Command):
        return str(statement.this).upper()
    return None


def view_query(text: str) -> exp.Expression:
    """The query of a stored view definition: its CREATE statement as the user wrote it (or, in
    catalogs written before plans were stored, the bare query)."""
    statement = parse(text)[0]
    return statement.expression if isinstance(statement, exp.Create) else statement

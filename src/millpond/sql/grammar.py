"""PostgreSQL's own grammar: a statement PostgreSQL's parser refuses is refused, in its words.

sqlglot, which reads millpond's statements, is lenient: it takes ``SELECT k, FROM t``, ``IN ()``,
``LIMIT 1, 2``, a bare expression as a statement, Spark's and MySQL's syntax... A user who writes
such SQL should hear what PostgreSQL would say, not get a view that means something else. So every
statement a user sends is first read by PostgreSQL's parser itself (libpg_query, through
``pgparse``), and its syntax error — ``syntax error at or near "FROM"``, SQLSTATE 42601, at the
offending token — is raised before sqlglot sees the text.

    >>> check("SELECT k, FROM t")
    Traceback (most recent call last):
    ...
    millpond.errors.SqlError: syntax error at or near "FROM" (line 1, column 11)

millpond's own syntax is not PostgreSQL's and is not checked here: its statements (``CREATE SINK``,
``CREATE FLOW``, ``SUBSCRIBE``, ``CANCEL JOB``, ``FLUSH``, ``SHOW …``, ``DESCRIBE``, ``EXPLAIN MATERIALIZED VIEW``)
are left to their own readers, and its clauses inside PostgreSQL's statements (``APPEND ONLY``,
``AS OF EPOCH n``, ``STRUCT<…>`` and ``MAP(…)`` types) are blanked out before the check, keeping every other
token where it was so positions stay true.
"""

from __future__ import annotations

import re
from typing import Sequence

import pgparse
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from millpond.errors import SqlError

__all__ = ["check", "split", "line_col", "OWN_STATEMENTS"]

# statements of millpond's own, by their first words (each read by its own module)
OWN_STATEMENTS: tuple[tuple[str, ...], ...] = (
    ("SUBSCRIBE",), ("CANCEL",), ("FLUSH",), ("SHOW",), ("DESCRIBE",), ("DESC",), ("EXPLAIN", "MATERIALIZED"),
    ("CREATE", "FLOW"), ("CREATE", "SINK"), ("DROP", "FLOW"), ("DROP", "SINK"),
)


def line_col(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of the character at ``offset`` (0-based) of ``text``."""
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def split(text: str) -> list[tuple[int, list[Token]]]:
    """The statements of ``text``: the runs of tokens between semicolons, each with its offset."""
    try:
        tokens = Postgres().tokenize(text)
    except TokenError as exc:
        raise SqlError(f"syntax error: {exc}", sql=text, sqlstate="42601") from None
    runs: list[tuple[int, list[Token]]] = []
    run: list[Token] = []
    for token in [*tokens, None]:
        if token is None or token.token_type == TokenType.SEMICOLON:
            if run:
                runs.append((run[0].start, run))
            run = []
        else:
            run.append(token)
    return runs


def _own(text: str) -> bool:
    words = text.upper().split(None, 2)[:2]  # (sqlglot keeps a command's rest as one token)
    return any(words[:len(own)] == list(own) for own in OWN_STATEMENTS)


def _masked(text: str, tokens: Sequence[Token], base: int) -> str:
    """``text`` (one statement, starting at ``base`` of the script) with millpond's own clauses
    blanked out: ``ALTER MATERIALIZED VIEW v AS`` (read as ``CREATE VIEW v AS``), ``OR REPLACE`` of
    a materialized view, ``APPEND ONLY`` after a table's columns, a source table's ``INCLUDE …`` and ``FORMAT …
    ENCODE …`` clauses (its dotted option names' dots as ``_``), ``AS OF EPOCH n`` / ``AS OF TIMESTAMP '…'``
    / ``FOR SYSTEM_TIME AS OF …`` after a relation, ``STRUCT<…>`` and ``MAP(…)`` types (as ``text``)."""
    chars = list(text)

    def blank(first: Token, last: Token, keep: str = "") -> None:
        a, b = first.start - base, last.end - base + 1
        chars[a:b] = list(keep.ljust(b - a))

    n = len(tokens)
    words = [t.text.upper() for t in tokens[:5]]
    if words[:3] == ["ALTER", "MATERIALIZED", "VIEW"] and words[4:] == ["AS"]:  # RisingWave's: a new query
        blank(tokens[0], tokens[2], "CREATE VIEW")
    elif words[:5] == ["CREATE", "OR", "REPLACE", "MATERIALIZED", "VIEW"]:  # PostgreSQL's has no OR REPLACE
        blank(tokens[1], tokens[2])
    table = n > 2 and tokens[0].text.upper() == "CREATE" and tokens[1].text.upper() == "TABLE"
    skip = -1
    for i, t in enumerate(tokens):
        word = t.text.upper()
        nxt = tokens[i + 1].text.upper() if i + 1 < n else ""
        if i <= skip:
            continue
        if table and t.token_type == TokenType.DOT:  # a source's dotted options (properties.bootstrap.server)
            blank(t, t, "_")
        elif table and word == "INCLUDE" and nxt and nxt != "(":  # INCLUDE partition [AS p]
            skip = i + 3 if i + 2 < n and tokens[i + 2].token_type == TokenType.ALIAS else i + 1
            blank(t, tokens[min(skip, n - 1)])
        elif table and word == "FORMAT" and i + 3 < n and tokens[i + 2].text.upper() == "ENCODE":
            skip = i + 3
            if skip + 1 < n and tokens[skip + 1].token_type == TokenType.L_PAREN:
                while skip + 1 < n and tokens[skip].token_type != TokenType.R_PAREN:
                    skip += 1
            blank(t, tokens[min(skip, n - 1)])
        elif word == "APPEND" and nxt == "ONLY" and i and tokens[i - 1].token_type == TokenType.R_PAREN:
            blank(t, tokens[i + 1])
        elif word in ("AS", "FOR") and i + 2 < n and (
                (word == "AS" and nxt == "OF" and tokens[i + 2].text.upper() in ("EPOCH", "TIMESTAMP"))
                or (word == "FOR" and nxt == "SYSTEM_TIME")):
            j = i + 2 if word == "AS" else i + 3  # the word after AS OF
            if word == "FOR" and j < n and tokens[j].text.upper() == "OF":
                j += 1
            if j < n and tokens[j].text.upper() in ("EPOCH", "TIMESTAMP"):
                j += 1
            if j < n:  # the epoch, or the time (a constant or an expression: blanked as far as the next clause)
                blank(t, tokens[j])
        elif word == "MAP" and nxt == "(":  # RisingWave's MAP(K, V) type: its types may not be expressions
            depth, j = 0, i + 1
            while j < n:
                kind = tokens[j].token_type
                depth += (kind == TokenType.L_PAREN) - (kind == TokenType.R_PAREN)
                if depth <= 0:
                    break
                j += 1
            blank(t, tokens[min(j, n - 1)], "text")
        elif word == "STRUCT" and nxt == "<":
            depth, j = 0, i + 1
            while j < n:
                kind = tokens[j].token_type
                depth += (kind == TokenType.LT) - (kind == TokenType.GT)
                if tokens[j].text == ">>":
                    depth -= 2
                if depth <= 0:
                    break
                j += 1
            blank(t, tokens[min(j, n - 1)], "text")
    return "".join(chars)


_NO_COLUMNS = re.compile(r'^(\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:"[^"]*"|[\w.]+))\s+WITH\s*\(', re.I)


def check(text: str, statements: Sequence[tuple[int, Sequence[Token]]] | None = None) -> None:
    """Raise PostgreSQL's syntax error for the first statement of ``text`` its parser refuses.

    ``statements``: each statement's offset in ``text`` and its tokens (sqlglot's; the statements of
    ``text`` split at semicolons when not given)."""
    if statements is None:
        statements = split(text)
    for base, tokens in statements:
        end = tokens[-1].end + 1 if tokens else base
        if not tokens or _own(text[base:end]):
            continue
        source = _masked(text[base:end], tokens, base)
        # a source table whose columns are its upstream's: CREATE TABLE t WITH (connector = ...)
        source = _NO_COLUMNS.sub(r"\1 () WITH (", source, count=1)
        try:
            pgparse.parse(source)
        except pgparse.PGQueryError as exc:
            offset = base + max(int(exc.position or 1), 1) - 1
            offset = min(offset, len(text))
            line, col = line_col(text, offset)
            raise SqlError(exc.message, sql=text, line=line, col=col, sqlstate="42601") from None

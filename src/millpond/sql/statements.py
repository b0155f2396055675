"""Parse SQL text into sqlglot statements with clear, positioned errors.

Each statement keeps the text the user wrote for it (``statement.meta["sql"]``): a catalog
stores that, never a re-generation of the parsed tree, which may not mean the same thing.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokens import TokenType

from millpond.errors import SqlError
from millpond.sql import grammar

__all__ = ["parse", "position", "tokens", "Words", "command_rest", "is_command", "dropped", "keyword", "view_query", "view_definition", "source", "VIEW_ALIAS"]


class MillpondPostgres(Postgres):
    """PostgreSQL as written: ``date_part`` and ``to_char`` stay the calls they are (sqlglot turns
    ``date_part`` into EXTRACT, which has another result type, and rewrites ``to_char``'s PostgreSQL
    pattern into a strftime format), and an interval constant keeps its whole text (sqlglot reads
    ``INTERVAL '1 day 02:00:00'`` as one day); :mod:`millpond.sql.semantics` gives them their meaning."""

    class Parser(Postgres.Parser):
        FUNCTIONS = {k: v for k, v in Postgres.Parser.FUNCTIONS.items() if k not in ("TO_CHAR", "DATE_PART")}
        FUNCTION_PARSERS = {k: v for k, v in Postgres.Parser.FUNCTION_PARSERS.items() if k != "DATE_PART"}

        def _parse_interval_span(self, this: exp.Expression, parse_function_unit: bool = True) -> exp.Interval:
            text = this.name if isinstance(this, exp.Literal) and this.is_string else None
            interval = super()._parse_interval_span(this, parse_function_unit=parse_function_unit)
            unit = interval.args.get("unit")
            if text is not None and interval.this is not None and interval.this.name != text \
                    and unit is not None and not isinstance(unit, exp.IntervalSpan):
                return exp.Interval(this=exp.Literal.string(text))
            return interval


_DIALECT = MillpondPostgres


def parse(text: str, *, strict: bool = False) -> list[exp.Expression]:
    """Statements of ``text`` with unquoted identifiers folded to lower case (PostgreSQL rules).

    ``strict``: the text a user sent, which PostgreSQL's own parser reads first
    (:mod:`millpond.sql.grammar`): what it refuses is refused in its words, and what it accepts but
    millpond cannot read is refused as not supported. Stored definitions are read without it."""
    runs = grammar.split(text)
    if strict:
        grammar.check(text, runs)
    sources = [text[start:run[-1].end + 1] for start, run in runs]
    try:
        if any(_subscribe(s) for s in sources):
            parsed = [_subscribe(s) or sqlglot.parse_one(_rewrite(s), dialect=_DIALECT) for s in sources]
        else:
            parsed = [s for s in sqlglot.parse(_rewrite(text), dialect=_DIALECT)
                      if s is not None and not isinstance(s, exp.Semicolon)]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        near = f" near {first.get('highlight')!r}" if first.get("highlight") else ""
        if strict:  # PostgreSQL reads it: a construct millpond's parser does not know
            raise SqlError(f"millpond cannot read this statement, which PostgreSQL accepts: "
                           f"{first.get('description', exc)}{near}", sql=text, line=first.get("line"),
                           col=first.get("col"), sqlstate="0A000") from None
        raise SqlError(f"syntax error: {first.get('description', exc)}{near}",
                       sql=text, line=first.get("line"), col=first.get("col")) from None
    except TokenError as exc:
        raise SqlError(f"syntax error: {exc}", sql=text) from None
    if len(sources) != len(parsed):  # not one token run per statement: parse the runs one by one
        parsed = [sqlglot.parse_one(_rewrite(s), dialect=_DIALECT) for s in sources]
    out = []
    for statement, sql in zip(parsed, sources):
        statement = normalize_identifiers(statement, dialect=_DIALECT)
        statement.meta["sql"] = sql
        out.append(statement)
    return out


def position(node: exp.Expression | None) -> tuple[int | None, int | None]:
    """Where ``node`` starts in the text it was parsed from: the line and column (1-based) of the
    first of its tokens that has a position (in its whole subtree), or ``(None, None)``."""
    metas = [n.meta for n in (node.walk() if node is not None else ()) if (n.meta or {}).get("line") is not None]
    if not metas:
        return None, None
    meta = min(metas, key=lambda m: (m.get("start") is None, m.get("start") or 0, m["line"], m.get("col") or 0))
    col = meta.get("col")
    if col is not None and meta.get("start") is not None and meta.get("end") is not None:
        col -= meta["end"] - meta["start"]  # sqlglot's column is the token's last character
    return meta["line"], col


def tokens(text: str) -> list:
    """The tokens of ``text`` in millpond's PostgreSQL dialect (each with its ``start`` and ``end``)."""
    try:
        return sqlglot.Dialect.get_or_raise(_DIALECT).tokenize(text)
    except TokenError as exc:
        raise SqlError(f"syntax error: {exc}", sql=text) from None


class Words:
    """A statement sqlglot keeps as a command (``CREATE FLOW``, ``CREATE SINK``) read token by token:
    ``toks[i]`` is the next one; ``syntax`` is quoted in errors."""

    def __init__(self, text: str, statement: str, syntax: str):
        self.text, self.statement, self.syntax = text, statement, syntax
        self.toks, self.i = tokens(text), 0

    def word(self, *expected: str) -> bool:
        """Whether the next tokens are ``expected`` (case-insensitive); if so, past them."""
        toks, i = self.toks, self.i
        if i + len(expected) <= len(toks) and all(toks[i + k].text.upper() == w for k, w in enumerate(expected)):
            self.i += len(expected)
            return True
        return False

    def name(self, what: str) -> str:
        """The next token as a name (a quoted one as written, else lowercased)."""
        toks, i = self.toks, self.i
        if i >= len(toks) or toks[i].token_type not in (TokenType.VAR, TokenType.IDENTIFIER) and not \
                toks[i].text.isidentifier():
            raise SqlError(f"{self.statement}: expected {what} ({self.syntax})", sql=self.text)
        self.i += 1
        return toks[i].text if toks[i].token_type == TokenType.IDENTIFIER else toks[i].text.lower()


def command_rest(s: exp.Command) -> str:
    """The text after a command's first word (``FLOW ...`` of ``CREATE FLOW ...``)."""
    return re.sub(r"^\s*\w+", "", source(s), count=1)


def is_command(s: exp.Expression, verb: str, noun: str) -> bool:
    """Whether ``s`` is ``<verb> <noun>`` (or its plural), a statement sqlglot keeps as a command."""
    return isinstance(s, exp.Command) and str(s.this).upper() == verb and \
        re.match(rf"\s*{noun}S?\b", command_rest(s), flags=re.IGNORECASE) is not None


def dropped(s: exp.Command, noun: str) -> tuple[str, bool]:
    """The name in ``DROP <noun> [IF EXISTS] name`` (a quoted one as written) and whether IF EXISTS."""
    m = re.fullmatch(rf"\s*{noun}\s+(IF\s+EXISTS\s+)?(\S+?)\s*;?\s*", command_rest(s), flags=re.IGNORECASE)
    if m is None:
        raise SqlError(f"expected DROP {noun} [IF EXISTS] name", sql=source(s))
    name = m.group(2)
    return (name[1:-1].replace('""', '"') if name.startswith('"') else name.lower()), m.group(1) is not None


def _rewrite(text: str) -> str:
    """Syntax the parser does not know, as syntax it does: ``CREATE TABLE t (...) APPEND ONLY``
    (RisingWave's) as the storage parameter ``WITH (append_only = true)``; a relation's ``AS OF
    EPOCH n`` / ``AS OF TIMESTAMP '...'`` (time travel) as ``FOR SYSTEM_TIME AS OF n`` / ``FOR
    SYSTEM_TIME AS OF TIMESTAMP '...'``; a source table's ``INCLUDE ...`` and ``FORMAT ... ENCODE ...``
    (RisingWave's) as its options (:func:`_source_clauses`)."""
    text = _source_clauses(_altered_views(text))
    tokens = sqlglot.Dialect.get_or_raise(_DIALECT).tokenize(text)
    for prev, a, b, c, d in reversed(list(zip(tokens, tokens[1:], tokens[2:], [*tokens[3:], None],
                                              [*tokens[4:], None, None]))):
        if (prev.token_type == TokenType.R_PAREN and a.text.upper() == "APPEND" and b.token_type == TokenType.ONLY):
            text = text[:a.start] + "WITH (append_only = true)" + text[b.end + 1:]
        elif a.token_type == TokenType.ALIAS and b.text.upper() == "OF" and c is not None \
                and c.text.upper() in ("EPOCH", "TIMESTAMP"):
            typed = c.text.upper() == "TIMESTAMP" and d is not None and d.token_type == TokenType.STRING
            end = b.end + 1 if typed else c.end + 1  # TIMESTAMP '...' is a typed constant; TIMESTAMP now() is not
            text = text[:a.start] + "FOR SYSTEM_TIME AS OF" + text[end:]
    return text


def _altered_views(text: str) -> str:
    """``ALTER MATERIALIZED VIEW v AS <query>`` (RisingWave's) as ``CREATE OR REPLACE MATERIALIZED
    VIEW v AS <query>`` (of a view that exists: :func:`millpond.sql.ddl.create` tells them apart by
    the text the user wrote)."""
    if "ALTER" not in text.upper():
        return text
    tokens = sqlglot.Dialect.get_or_raise(_DIALECT).tokenize(text)
    for i in reversed(range(len(tokens) - 4)):
        words = [t.text.upper() for t in tokens[i:i + 5]]
        if words[:3] == ["ALTER", "MATERIALIZED", "VIEW"] and words[4] == "AS" and \
                (i == 0 or tokens[i - 1].token_type == TokenType.SEMICOLON):
            text = text[:tokens[i].start] + "CREATE OR REPLACE" + text[tokens[i].end + 1:]
    return text


def _source_clauses(text: str) -> str:
    """``CREATE TABLE t (...) INCLUDE partition [AS p] ... WITH (...) FORMAT PLAIN ENCODE JSON
    [(delimiter = ',')]`` as ``CREATE TABLE t (...) WITH (..., "include.partition" = 'p',
    format = 'plain', encode = 'json', "encode.delimiter" = ',')``: RisingWave's clauses of a Kafka
    table as options (:mod:`millpond.connectors.kafka`)."""
    tokens = sqlglot.Dialect.get_or_raise(_DIALECT).tokenize(text)
    if not any(t.text.upper() in ("INCLUDE", "ENCODE") for t in tokens):
        return text
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in the text
    n, i = len(tokens), 0
    while i < n:
        start = i  # one statement: tokens[start:stop]
        while i < n and tokens[i].token_type != TokenType.SEMICOLON:
            i += 1
        stop, i = i, i + 1
        if stop - start < 3 or tokens[start].text.upper() != "CREATE" or tokens[start + 1].text.upper() != "TABLE":
            continue
        options, close, depth, j = [], None, 0, start
        last = tokens[stop - 1]
        while j < stop:
            t = tokens[j]
            word = t.text.upper()
            nxt = tokens[j + 1] if j + 1 < stop else None
            if t.token_type == TokenType.L_PAREN:
                depth += 1
            elif t.token_type == TokenType.R_PAREN:
                depth -= 1
            elif depth == 0 and word == "WITH" and nxt is not None and nxt.token_type == TokenType.L_PAREN:
                k, d = j + 1, 0
                while k < stop:
                    d += (tokens[k].token_type == TokenType.L_PAREN) - (tokens[k].token_type == TokenType.R_PAREN)
                    if d == 0:
                        break
                    k += 1
                close = tokens[min(k, stop - 1)]
            elif depth == 0 and word == "INCLUDE" and nxt is not None and nxt.token_type != TokenType.L_PAREN:
                end = j + 1
                name = f"kafka_{nxt.text.lower()}"
                if end + 2 < stop + 1 and end + 1 < stop and tokens[end + 1].token_type == TokenType.ALIAS:
                    end += 2
                    alias = tokens[end]
                    name = alias.text if alias.token_type == TokenType.IDENTIFIER else alias.text.lower()
                options.append(f"\"include.{nxt.text.lower()}\" = '{name}'")
                edits.append((t.start, tokens[end].end + 1, ""))
                j = end + 1
                continue
            elif depth == 0 and word == "FORMAT" and j + 3 < stop and tokens[j + 2].text.upper() == "ENCODE":
                options += [f"format = '{nxt.text.lower()}'", f"encode = '{tokens[j + 3].text.lower()}'"]
                end = j + 3
                if end + 1 < stop and tokens[end + 1].token_type == TokenType.L_PAREN:
                    k = end + 2
                    while k + 2 < stop and tokens[k].token_type != TokenType.R_PAREN:
                        options.append(f"\"encode.{tokens[k].text.lower()}\" = '{tokens[k + 2].text}'")
                        k += 4 if k + 3 < stop and tokens[k + 3].token_type == TokenType.COMMA else 3
                    end = k
                edits.append((t.start, tokens[min(end, stop - 1)].end + 1, ""))
                j = end + 1
                continue
            j += 1
        if not options:
            continue
        if close is not None:
            edits.append((close.start, close.start, ", " + ", ".join(options)))
        else:
            edits.append((last.end + 1, last.end + 1, " WITH (" + ", ".join(options) + ")"))
    for a, b, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:a] + new + text[b:]
    return text


def _subscribe(text: str) -> exp.Command | None:
    """``SUBSCRIBE ...`` and ``CANCEL ...`` as commands (read by :mod:`millpond.sql.subscribe` and
    :func:`millpond.sql.introspect.cancel`)."""
    words = text.split(None, 1)
    if not words or words[0].upper() not in ("SUBSCRIBE", "CANCEL"):
        return None
    return exp.Command(this=words[0].upper(), expression=exp.Literal.string(words[1] if len(words) > 1 else ""))


def source(statement: exp.Expression) -> str:
    """The text the user wrote for ``statement`` (a re-generation only for built statements)."""
    return statement.meta.get("sql") or statement.sql("postgres")


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
    return view_definition(statement) if isinstance(statement, exp.Create) else statement


VIEW_ALIAS = "_view"  # the subquery a view's column list renames


def view_definition(create: exp.Create) -> exp.Expression:
    """The query a ``CREATE MATERIALIZED VIEW`` defines; with a column list ``v(a, b)``, its
    output columns renamed (the first ones, as in PostgreSQL; more names than columns are refused
    when the query is bound)."""
    query = create.expression
    if not isinstance(create.this, exp.Schema):
        return query
    names = [e.name for e in create.this.expressions]
    if len(set(names)) != len(names):
        raise SqlError(f"column names of view {create.this.this.name!r} must be unique: {', '.join(names)}")
    alias = exp.TableAlias(this=exp.to_identifier(VIEW_ALIAS), columns=[exp.to_identifier(n) for n in names])
    return exp.select("*").from_(exp.Subquery(this=query.copy(), alias=alias))

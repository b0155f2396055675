"""``SUBSCRIBE [TO] name [AS OF [EPOCH] n | AS OF TIMESTAMP '...'] [WITH (SNAPSHOT = true|false)]``
(Materialize's and RisingWave's subscription statement).

It answers what a subscriber would have received so far: with ``SNAPSHOT`` (the default), the rows
of the table, view or flow ``name`` as of the start (``AS OF``, default the last committed epoch)
as inserts, then the changes of every committed epoch after it — the relation's columns, ``_w``
(+1/-1) and ``_epoch``. A program that follows on gets the next epochs from ``db.subscribe`` (or
a Spark stream over the view) from the last ``_epoch`` it saw.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
from sqlglot import exp
from sqlglot.tokens import TokenType

from millpond.engine.runtime import Runtime
from millpond.errors import SqlError
from millpond.sql.statements import tokens

__all__ = ["subscribe", "clauses", "SYNTAX"]

SYNTAX = "SUBSCRIBE [TO] name [AS OF [EPOCH] n | AS OF TIMESTAMP '...'] [WITH (SNAPSHOT = true|false)]"


def subscribe(rt: Runtime, s: exp.Command) -> pa.Table:
    text = s.expression.name
    name, as_of, snapshot = clauses(rt, text)
    start, first = rt.subscription(name, as_of, snapshot)
    parts = [*([first] if first is not None else []), *rt.changes(name, start)]
    return pa.concat_tables(parts) if parts else rt.changelog_schema(name).empty_table()


def clauses(rt: Runtime, text: str) -> tuple[str, int | None, bool]:
    """The relation, the start epoch (None: the last committed) and the SNAPSHOT option of
    ``SUBSCRIBE ...`` (``text`` may start with the keyword)."""
    first, _, rest = text.strip().partition(" ")
    if first.upper() == "SUBSCRIBE":
        text = rest
    toks = tokens(text)
    words = [t.text.upper() if t.token_type != TokenType.STRING else None for t in toks]
    i = 1 if words[:1] == ["TO"] else 0
    if i >= len(toks) or toks[i].token_type == TokenType.L_PAREN:
        raise SqlError(f"SUBSCRIBE takes the name of a table, view or flow ({SYNTAX}); to follow a query, "
                       "create a materialized view of it and subscribe to the view", sql=f"SUBSCRIBE {text}")
    name = toks[i].text if toks[i].token_type == TokenType.IDENTIFIER else toks[i].text.lower()  # quoted: as written
    i += 1
    as_of, snapshot = None, True
    while i < len(toks):
        if words[i:i + 2] == ["AS", "OF"]:
            i += 2
            if i < len(toks) and words[i] == "EPOCH":
                i += 1
            if i < len(toks) and words[i] == "TIMESTAMP" and i + 1 < len(toks) \
                    and toks[i + 1].token_type == TokenType.STRING:
                as_of = rt.epoch_at(_timestamp(toks[i + 1].text, text))
                i += 2
            elif i < len(toks) and toks[i].token_type == TokenType.NUMBER and toks[i].text.isdigit():
                as_of = int(toks[i].text)
                i += 1
            else:
                raise SqlError(f"SUBSCRIBE: AS OF takes an epoch number or TIMESTAMP '...' ({SYNTAX})",
                               sql=f"SUBSCRIBE {text}")
        elif words[i] == "WITH":
            i, snapshot = _options(toks, words, i + 1, text)
        else:
            raise SqlError(f"SUBSCRIBE: unexpected {toks[i].text!r} ({SYNTAX})", sql=f"SUBSCRIBE {text}")
    return name, as_of, snapshot


def _options(toks: list, words: list, i: int, text: str) -> tuple[int, bool]:
    """``(SNAPSHOT [=] true|false)`` from token ``i``; the token after it and the option."""
    end = next((j for j in range(i, len(toks)) if toks[j].token_type == TokenType.R_PAREN), None)
    if i >= len(toks) or toks[i].token_type != TokenType.L_PAREN or end is None:
        raise SqlError(f"SUBSCRIBE: WITH takes (SNAPSHOT = true|false) ({SYNTAX})", sql=f"SUBSCRIBE {text}")
    inner = [w for w in words[i + 1:end] if w != "="]
    if len(inner) != 2 or inner[0] != "SNAPSHOT" or inner[1] not in ("TRUE", "FALSE", "ON", "OFF"):
        raise SqlError(f"SUBSCRIBE: the only option is SNAPSHOT = true|false, got "
                       f"{text[toks[i].start:toks[end].end + 1]}", sql=f"SUBSCRIBE {text}")
    return end + 1, inner[1] in ("TRUE", "ON")


def _timestamp(value: str, text: str) -> datetime:
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise SqlError(f"SUBSCRIBE: AS OF TIMESTAMP {value!r} is not a timestamp (e.g. '2026-11-24 10:00:00+00')",
                       sql=f"SUBSCRIBE {text}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)

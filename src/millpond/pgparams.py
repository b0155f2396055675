"""Parameters of the extended query protocol (``$1``, ``$2``...) as SQL constants of their types:
a statement is bound by substituting them, then run as any statement (a text parameter is quoted;
a number stays a number; a binary one — psycopg sends numbers so — is read first)."""

from __future__ import annotations

import re
import struct
from datetime import datetime, timedelta

from sqlglot.tokens import TokenType

from millpond.errors import SqlError
from millpond.sql.statements import tokens

__all__ = ["bind", "text_param"]


def bind(sql: str, types: list[int], values: list[bytes | None]) -> str:
    """``sql`` with ``$n`` replaced by the n-th parameter as a constant of its type."""
    out, last = [], 0
    toks = tokens(sql)
    for dollar, number in zip(toks, toks[1:]):
        if dollar.token_type != TokenType.PARAMETER or number.token_type != TokenType.NUMBER \
                or number.start != dollar.end + 1 or not number.text.isdigit():
            continue
        i = int(number.text) - 1
        if i >= len(values):
            raise SqlError(f"there is no parameter ${i + 1} (the statement was given {len(values)})")
        out += [sql[last:dollar.start], _constant(values[i], types[i] if i < len(types) else 0)]
        last = number.end + 1
    return "".join(out) + sql[last:]


_NUMERIC_OIDS = {20, 21, 23, 26, 700, 701, 1700}
_EPOCH_2000 = datetime(2000, 1, 1)


def text_param(value: bytes, oid: int) -> bytes:
    """A parameter sent in binary (psycopg sends numbers so) as its text form."""
    v = bytes(value)
    if oid in (20, 21, 23, 26):
        return str(int.from_bytes(v, "big", signed=True)).encode()
    if oid in (700, 701):
        return repr(struct.unpack("!f" if oid == 700 else "!d", v)[0]).encode()
    if oid == 16:
        return b"true" if v != b"\x00" else b"false"
    if oid in (0, 25, 1043, 19, 1042):
        return v
    if oid == 17:  # bytea: its hex text
        return b"\\x" + v.hex().encode()
    if oid == 1082:
        return str(_EPOCH_2000.date() + timedelta(days=int.from_bytes(v, "big", signed=True))).encode()
    if oid in (1114, 1184):
        when = _EPOCH_2000 + timedelta(microseconds=int.from_bytes(v, "big", signed=True))
        return (when.isoformat(sep=" ") + ("+00" if oid == 1184 else "")).encode()
    raise SqlError(f"a binary parameter of type oid {oid} is not supported: send it as text")


def _constant(value: bytes | None, oid: int) -> str:
    if value is None:
        return "NULL"
    text = bytes(value).decode("utf-8")
    if oid in _NUMERIC_OIDS and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text.strip()):
        # a float keeps its type (2.5 into an INT column rounds half to even, as a float8's does)
        return f"CAST({text.strip()} AS {_CASTS[oid]})" if oid in (700, 701) else text.strip()
    if oid == 16:
        return "TRUE" if text.lower() in ("t", "true", "1", "on", "yes") else "FALSE"
    quoted = "'" + text.replace("'", "''") + "'"
    cast = _CASTS.get(oid)
    return f"CAST({quoted} AS {cast})" if cast else quoted


_CASTS = {700: "REAL", 701: "DOUBLE PRECISION", 17: "BYTEA", 1082: "DATE", 1114: "TIMESTAMP", 1184: "TIMESTAMPTZ", 1186: "INTERVAL", 25: "TEXT", 1043: "VARCHAR"}

"""Regular expressions: ``~``, ``~*``, ``!~``, ``!~*``, ``regexp_like``, ``regexp_replace``,
``regexp_match(...)[n]`` and ``substring(s FROM pattern)``.

PostgreSQL's advanced regular expressions, Java's (Spark) and RE2 (DuckDB) agree on the common
core: literals, ``.``, classes ``[...]``, ``\\d \\w \\s``, anchors, groups, alternation and the
greedy and lazy quantifiers. A pattern must be a constant, so it is checked when the query is
bound: constructs outside that core (back-references, look-around, ``\\m``/``\\y`` word anchors,
POSIX classes ``[[:alpha:]]``) are refused by name. Every pattern gets ``(?s)``: in PostgreSQL
``.`` matches a newline. A replacement's ``\\1`` and ``\\&`` are translated for each engine.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.sql.semantics import types as T
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.types import Typed, refuse
from millpond.engine.expressions import mp

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["regexp_like", "regexp_replace", "regexp_extract", "check_pattern", "CONSTRUCTS"]

_UNSUPPORTED = [
    (re.compile(r"\\[1-9]"), "back-references (\\1)"),
    (re.compile(r"\(\?[=!<]"), "look-ahead and look-behind"),
    (re.compile(r"\\[mMyYAZ]"), "PostgreSQL's \\m \\M \\y \\Y \\A \\Z anchors"),
    (re.compile(r"\[\[[:=.]"), "POSIX classes such as [[:alpha:]]"),
    (re.compile(r"&&"), "'&&' (Java reads it as class intersection)"),
    (re.compile(r"\*\*\*"), "PostgreSQL's ***: directors"),
    (re.compile(r"[*+?}]\+"), "possessive quantifiers"),
    (re.compile(r"\\[pPQEGKRXhHvV]"), "engine-specific escapes"),
]


def check_pattern(node: exp.Expression, at: exp.Expression) -> str:
    """The constant pattern of ``node``, checked against the shared core."""
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise refuse("a regular expression must be a constant string", at)
    pattern = node.this
    for rx, what in _UNSUPPORTED:
        if rx.search(pattern):
            raise refuse(f"regular expression {pattern!r}: {what} are not supported", at)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise refuse(f"invalid regular expression {pattern!r}: {exc}", at) from None
    return pattern


def _flags(node: exp.Expression | None, allowed: str, at: exp.Expression) -> str:
    if node is None:
        return ""
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise refuse("regular expression flags must be a constant string", at)
    bad = set(node.this) - set(allowed)
    if bad:
        raise refuse(f"regular expression flags {''.join(sorted(bad))!r} are not supported (supported: "
                      f"{', '.join(allowed)})", at)
    return node.this


def _prefixed(pattern: str, insensitive: bool) -> exp.Literal:
    return exp.Literal.string(("(?si)" if insensitive else "(?s)") + pattern)


def _text(b: Binder, node: exp.Expression, at: exp.Expression) -> exp.Expression:
    typed = b.value(node)
    return b.cast_to(typed, T.TEXT, at) if typed[1].kind != "text" else typed[0]


def regexp_like(b: Binder, node: exp.Expression) -> Typed:
    """``s ~ p``, ``s ~* p`` (``RegexpILike``) and ``regexp_like(s, p [, flags])``."""
    s = _text(b, node.this, node)
    pattern = check_pattern(node.expression, node)
    flags = _flags(node.args.get("flag"), "ic", node)
    insensitive = isinstance(node, exp.RegexpILike) or ("i" in flags and not flags.endswith("c"))
    return exp.RegexpLike(this=s, expression=_prefixed(pattern, insensitive)), T.BOOLEAN


def regexp_replace(b: Binder, node: exp.RegexpReplace) -> Typed:
    for arg in ("position", "occurrence", "parameters"):
        if node.args.get(arg) is not None:
            raise refuse("regexp_replace takes a string, a pattern, a replacement and optional flags", node)
    s = _text(b, node.this, node)
    pattern = check_pattern(node.expression, node)
    replacement = node.args.get("replacement")
    if not (isinstance(replacement, exp.Literal) and replacement.is_string):
        raise refuse("regexp_replace needs a constant replacement", node)
    flags = _flags(node.args.get("modifiers"), "gi", node)
    groups = _groups(pattern)
    return mp("REGEXP_REPLACE", s, _prefixed(pattern, "i" in flags), exp.Literal.string(replacement.this),
              exp.Literal.number(1 if "g" in flags else 0), exp.Literal.number(groups)), T.TEXT


def regexp_extract(b: Binder, s: exp.Expression, pattern_node: exp.Expression, flags_node: exp.Expression | None,
                   at: exp.Expression, *, group: int | None = None) -> exp.Expression:
    """The ``group``-th parenthesized part of the first match (None: PostgreSQL's substring rule —
    the first group if the pattern has one, else the whole match); NULL without a match."""
    pattern = check_pattern(pattern_node, at)
    flags = _flags(flags_node, "i", at)
    groups = _groups(pattern)
    if group is None:
        group = 1 if groups else 0
    elif groups == 0:
        if group != 1:
            return exp.Cast(this=exp.Null(), to=T.datatype(T.TEXT))
        group = 0
    elif group > groups:
        return exp.Cast(this=exp.Null(), to=T.datatype(T.TEXT))
    return mp("REGEXP_EXTRACT", s, _prefixed(pattern, "i" in flags), exp.Literal.number(group))


def _groups(pattern: str) -> int:
    """Capturing groups of a (checked) pattern."""
    return re.compile(pattern).groups


register(Function("regexp_like", regexp_like, (exp.RegexpLike,)),  # also the operator ~
         Function("regexp_replace", regexp_replace, (exp.RegexpReplace,), forms=("REGEXP_REPLACE",)))
CONSTRUCTS = {exp.RegexpILike: regexp_like}  # the operator ~*

"""A call's arguments as PostgreSQL's parameters take them, for the rules of
:mod:`~millpond.sql.semantics.functions` and :mod:`~millpond.sql.semantics.numbers`: an argument
converted to text or checked to be an integer, a plain call, a cast, the name a call was written with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.sql.semantics import types as T
from millpond.sql.semantics.types import SqlType, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["text", "integer", "call", "to", "args", "name"]


def text(b: Binder, node: exp.Expression | None, at: exp.Expression) -> exp.Expression:
    """An argument converted to text, as PostgreSQL's ``text`` parameters take it."""
    if node is None:
        raise refuse(f"{name(at)}: missing argument", at)
    typed = b.value(node)
    return b.cast_to(typed, T.TEXT, at) if typed[1].kind != "text" else typed[0]


def integer(b: Binder, node: exp.Expression | None, at: exp.Expression) -> exp.Expression:
    if node is None:
        raise refuse(f"{name(at)}: missing argument", at)
    typed = b.value(node)
    if not (typed[1].integer or typed[1].untyped):
        raise refuse(f"{name(at)}: argument {node.sql('postgres')} must be an integer, not {typed[1]}", at)
    return b.cast_to(typed, T.INTEGER, at) if typed[1].untyped else typed[0]


def call(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def to(node: exp.Expression, t: SqlType) -> exp.Cast:
    return exp.Cast(this=node, to=T.datatype(t))


def args(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    return [v for k, v in node.args.items() if isinstance(v, exp.Expression)] + list(node.expressions)


def name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):  # as the user wrote it in PostgreSQL (unnest, not sqlglot's explode)
        head = node.sql("postgres").split("(", 1)[0].strip()
        return head.lower() if head.replace("_", "").isalnum() else node.sql_name().lower()
    return node.key

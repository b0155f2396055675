"""JSONB with PostgreSQL's meaning: ``j -> 'k'``, ``j -> 0``, ``j ->> 'k'``, ``j #> '{a,0}'``,
``j #>> '{a,0}'``, ``j ? 'k'``, ``jsonb_array_elements[_text](j)`` (in the select list or in
``FROM``), ``jsonb_typeof``, ``jsonb_array_length``, ``text::jsonb`` and ``jsonb::text``. Each
operation is an internal call ``MP_JSONB('<operation>', args…)`` of :mod:`millpond.jsonb`'s Arrow
functions, which both engines run; a constant document is parsed here, once
(``MP_JSONB_CONST('<its text>')``).

Equality, ``GROUP BY`` and ``DISTINCT`` compare documents by their PostgreSQL text, in which equal
documents are equal — but for numbers written with different scales (``1.0`` and ``1``, equal in
PostgreSQL). Ordering documents (``<``, ``ORDER BY j``) is refused: PostgreSQL's jsonb order is
its own.

    >>> import sqlglot
    >>> from millpond.sql.semantics import bind, to_spark
    >>> q = bind(sqlglot.parse_one("SELECT t.j ->> 'a' AS x FROM t AS t", dialect="postgres"), {"t": {"j": T.JSONB}},
    ...          view=True)
    >>> to_spark(q.selects[0])
    "(mp_jsonb_get_text(t.j, 'a', TRUE)) AS x"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from millpond import jsonb
from millpond.engine.expressions import mp
from millpond.sql.semantics import types as T
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.types import SqlType, Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["CONSTRUCTS", "cast_jsonb", "constant", "ELEMENTS"]

ELEMENTS = ("jsonb_array_elements", "jsonb_array_elements_text")  # set-returning: made unnest by desugar
_STRICT = exp.Literal.string("fail")  # an operation's error mode; null_on_error makes it 'null'


def op(name: str, *args: exp.Expression) -> exp.Anonymous:
    return mp("JSONB", exp.Literal.string(name), *args)


def constant(text: str, at: exp.Expression) -> exp.Expression:
    """The string constant ``text`` as a jsonb value (parsed now: an error names it)."""
    try:
        return mp("JSONB_CONST", exp.Literal.string(jsonb.canonical(text)))
    except jsonb.JsonbError as exc:
        raise refuse(str(exc).split("] ", 1)[1].rsplit(" SQLSTATE", 1)[0], at) from None


def _document(b: "Binder", node: exp.Expression, what: str) -> exp.Expression:
    value, t = b.value(node)
    if t.kind == "unknown":
        return constant(value.name, node)
    if t.kind != "jsonb":
        raise refuse(f"operator does not exist: {t} {what} (its left side must be jsonb)", node)
    return value


def _extract(b: "Binder", node: exp.Expression) -> Typed:
    """``j -> key`` and ``j ->> key``: a key by name (text) or an array element by position (integer)."""
    text = isinstance(node, exp.JSONExtractScalar)
    symbol = "->>" if text else "->"
    doc = _document(b, node.this, symbol)
    key = node.expression
    if isinstance(key, exp.JSONPath):
        parts = [p for p in key.expressions if not isinstance(p, exp.JSONPathRoot)]
        if len(parts) != 1 or not isinstance(parts[0], (exp.JSONPathKey, exp.JSONPathSubscript)):
            raise refuse(f"{symbol} takes one key or array position", node)
        part = parts[0].this
        name = "at" if isinstance(part, int) else "get"
        arg = exp.Literal.number(part) if isinstance(part, int) else exp.Literal.string(part)
    else:
        arg, kt = b.value(key)
        if kt.integer:
            name = "at"
            arg = exp.Cast(this=arg, to=T.datatype(T.INTEGER)) if kt != T.INTEGER else arg
        elif kt.kind in ("text", "unknown"):
            name = "get"
        else:
            raise refuse(f"operator does not exist: jsonb {symbol} {kt}", node)
    return op(f"{name}_text" if text else name, doc, arg, exp.Boolean(this=text)), T.TEXT if text else T.JSONB


def _path(b: "Binder", node: exp.Expression) -> Typed:
    """``j #> '{a,0}'`` and ``j #>> '{a,0}'``: the value at a path of keys and array positions."""
    text = isinstance(node, exp.JSONBExtractScalar)
    doc = _document(b, node.this, "#>>" if text else "#>")
    keys, kt = b.value(node.expression)
    path_type = T.array_of(T.TEXT)
    keys = b.cast_to((keys, kt), path_type, node.expression) if kt != path_type else keys
    return op("path_text" if text else "path", doc, keys, exp.Boolean(this=text)), T.TEXT if text else T.JSONB


def _exists(b: "Binder", node: exp.Expression) -> Typed:
    doc = _document(b, node.this, "?")
    key, kt = b.value(node.expression)
    if kt.kind not in ("text", "unknown"):
        raise refuse(f"operator does not exist: jsonb ? {kt}", node)
    return op("exists", doc, key), T.BOOLEAN


def _one(b: "Binder", node: exp.Expression, fn: str) -> exp.Expression:
    args = list(node.expressions)
    if len(args) != 1:
        raise refuse(f"{fn} takes one jsonb value", node)
    value, t = b.value(args[0])
    if t.kind == "unknown":
        return constant(value.name, args[0])
    if t.kind != "jsonb":
        raise refuse(f"function {fn}({t}) does not exist", node)
    return value


def _elements(text: bool):  # noqa: ANN202
    fn = ELEMENTS[text]

    def rule(b: "Binder", node: exp.Expression) -> Typed:
        if not node.meta.get("set_returning"):  # desugar made it unnest(...) where it may stand
            raise refuse(f"{fn}() returns a set of rows: use it as a whole select item or in FROM "
                          f"(FROM t, {fn}(t.j) AS e(value))", node)
        doc = _one(b, node, fn)
        return op("elements_text" if text else "elements", doc, exp.Boolean(this=text), _STRICT.copy()), \
            T.array_of(T.TEXT if text else T.JSONB)
    return rule


def cast_jsonb(node: exp.Expression, source: SqlType, target: SqlType, at: exp.Expression) -> exp.Expression:
    """``text::jsonb`` (parsed per value; a value that is not JSON is a data error) and ``jsonb::text``."""
    if target.kind == "jsonb" and source.kind == "text":
        return op("in", node, _STRICT.copy())
    if source.kind == "jsonb" and target.kind == "text":
        return mp("ATTR", node, exp.Literal.string(jsonb.FIELD))
    if source.kind == "jsonb":
        raise refuse(f"cannot cast type jsonb to {target}: take the value as text (j ->> 'k') and cast that", at)
    raise refuse(f"cannot cast type {source} to jsonb (cast text: x::text::jsonb)", at)


register(
    Function("jsonb_typeof", lambda b, n: (op("typeof", _one(b, n, "jsonb_typeof")), T.TEXT), forms=("JSONB",)),
    Function("jsonb_array_length", lambda b, n: (op("array_length", _one(b, n, "jsonb_array_length"),
                                                    _STRICT.copy()), T.INTEGER), forms=("JSONB",)),
    Function(ELEMENTS[0], _elements(False), forms=("JSONB",)),
    Function(ELEMENTS[1], _elements(True), forms=("JSONB",)),
)
# the operators -> ->> #> #>> ?
CONSTRUCTS = {
    exp.JSONExtract: _extract, exp.JSONExtractScalar: _extract, exp.JSONBExtract: _path,
    exp.JSONBExtractScalar: _path, exp.JSONBContainsTopKey: _exists,
}

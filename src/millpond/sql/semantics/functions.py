"""Function calls bound with PostgreSQL's meaning: the rules of strings and numbers, and the
dispatch of every call to its entry in :mod:`~millpond.sql.semantics.registry` (which this module
fills by importing each family's module); a call of any other function is refused by name.
:data:`FUNCTIONS` is the allow-list docs/sql.md shows.

Each rule types its arguments as PostgreSQL resolves the call (an integer argument of ``round`` is
double precision, ``sum`` of a bigint is numeric...) and returns an expression both engines
evaluate alike.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

from sqlglot import exp

# every family's module registers its entries (numbers, operators: coalesce, power...) as it is imported
from millpond.sql.semantics import numbers, operators, registry, types as T  # noqa: F401
from millpond.sql.semantics.aggregates import CONSTRUCTS as AGGREGATE_CONSTRUCTS
from millpond.sql.semantics.calls import args as _args, call as _call, integer as _int, name as _name, text as _text, \
    to as _to
from millpond.sql.semantics.datetime import CONSTRUCTS as DATETIME_CONSTRUCTS
from millpond.sql.semantics.interval_keys import GROUP_KEY, GROUP_VALUE, group_marker
from millpond.engine.expressions import is_mp, mp
from millpond.pyfunctions import Spec
from millpond.sql.semantics.jsonb import CONSTRUCTS as JSONB_CONSTRUCTS
from millpond.sql.semantics.nested import CONSTRUCTS as NESTED_CONSTRUCTS, array_cat, subscript
from millpond.sql.semantics.regex import CONSTRUCTS as REGEX_CONSTRUCTS, check_pattern, regexp_extract
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.types import Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["function", "FUNCTIONS", "AGGREGATES", "WINDOW_FUNCTIONS"]


# -- strings --------------------------------------------------------------------------------------
def _length(b: Binder, node: exp.Expression) -> Typed:
    return _to(_call("LENGTH", _text(b, node.this, node)), T.INTEGER), T.INTEGER


def _octet_length(b: Binder, node: exp.Expression) -> Typed:
    args = _args(node)
    if len(args) != 1:
        raise refuse("octet_length takes 1 argument(s)", node)
    return _to(mp("OCTET_LENGTH", _text(b, args[0], node)), T.INTEGER), T.INTEGER


def _case_fn(name: str) -> Callable[[Binder, exp.Expression], Typed]:
    def rule(b: Binder, node: exp.Expression) -> Typed:  # PostgreSQL's simple case mapping (millpond.casemap)
        return mp(name, _text(b, node.this, node)), T.TEXT
    return rule


def _strpos(b: Binder, node: exp.StrPosition) -> Typed:
    if node.args.get("position") is not None or node.args.get("occurrence") is not None:
        raise refuse("position/strpos take two arguments", node)
    return mp("STRPOS", _text(b, node.this, node), _text(b, node.args.get("substr"), node)), T.INTEGER


def _substring(b: Binder, node: exp.Substring) -> Typed:
    s = _text(b, node.this, node)
    start_node, length_node = node.args.get("start"), node.args.get("length")
    if start_node is None:
        raise refuse("substring needs a start position", node)
    start_typed = b.value(start_node)
    if start_typed[1].kind in ("text", "unknown"):  # substring(s FROM pattern): a regular expression
        if length_node is not None:
            raise refuse("substring(s FROM pattern FOR escape) (SQL regular expressions) is not supported", node)
        return regexp_extract(b, s, start_node, None, node), T.TEXT
    start = _int(b, start_node, node)
    if length_node is None:
        return _call("SUBSTRING", s, _at_least_one(start)), T.TEXT
    length = _int(b, length_node, node)
    if isinstance(length, exp.Literal) and int(length.this) < 0 or isinstance(length, exp.Neg):
        raise refuse("negative substring length not allowed", node)
    if _positive_literal(start):
        return _call("SUBSTRING", s, start, length), T.TEXT
    # PostgreSQL counts the characters before position 1 against the length
    first = _at_least_one(start)
    count = _call("GREATEST", exp.Sub(this=exp.Add(this=start.copy(), expression=length),
                                      expression=first.copy()), exp.Literal.number(0))
    return _call("SUBSTRING", s, first, count), T.TEXT


def _positive_literal(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and int(node.this) >= 1


def _at_least_one(start: exp.Expression) -> exp.Expression:
    return start if _positive_literal(start) else _call("GREATEST", start, exp.Literal.number(1))


def _trim(b: Binder, node: exp.Trim) -> Typed:
    if node.args.get("collation") is not None:
        raise refuse("TRIM ... COLLATE is not supported", node)
    where = node.args.get("position") or "BOTH"
    if not isinstance(where, str):
        raise refuse("trim takes a string and optional characters", node)
    where = where.upper()
    chars = node.args.get("expression")
    chars_sql = _text(b, chars, node) if chars is not None else exp.Literal.string(" ")
    return mp("TRIM", _text(b, node.this, node), chars_sql, exp.Literal.string(where)), T.TEXT


def _output_text(b: Binder, node: exp.Expression, at: exp.Expression) -> exp.Expression:
    """An argument as its type's output text, as concat() takes it: a boolean is ``t``/``f``
    (its cast to text is ``true``/``false``)."""
    typed = b.value(node)
    if typed[1].kind == "boolean":
        return exp.Case(ifs=[exp.If(this=typed[0].copy(), true=exp.Literal.string("t")),
                             exp.If(this=exp.Not(this=typed[0]), true=exp.Literal.string("f"))])
    return b.cast_to(typed, T.TEXT, at) if typed[1].kind != "text" else typed[0]


def _concat(b: Binder, node: exp.Expression) -> Typed:
    args = [_output_text(b, a, node) for a in node.expressions]
    return mp("CONCAT", *args), T.TEXT


def _concat_ws(b: Binder, node: exp.Expression) -> Typed:
    args = [_output_text(b, a, node) for a in node.expressions]
    if len(args) < 2:
        raise refuse("concat_ws needs a separator and at least one value", node)
    return _call("CONCAT_WS", *args), T.TEXT


def _dpipe(b: Binder, node: exp.DPipe) -> Typed:
    left, right = b.value(node.this), b.value(node.expression)
    if left[1].kind == "array" or right[1].kind == "array":
        return array_cat(b, node, left, right)
    if left[1].kind != "text" and right[1].kind != "text" and not (left[1].untyped or right[1].untyped):
        raise refuse(f"operator does not exist: {left[1]} || {right[1]}", node)
    l = b.cast_to(left, T.TEXT, node) if left[1].kind != "text" else left[0]
    r = b.cast_to(right, T.TEXT, node) if right[1].kind != "text" else right[0]
    return exp.DPipe(this=l, expression=r, safe=False), T.TEXT


def _replace(b: Binder, node: exp.Replace) -> Typed:
    return _call("REPLACE", _text(b, node.this, node), _text(b, node.expression, node),
                 _text(b, node.args.get("replacement"), node)), T.TEXT


def _left_right(b: Binder, node: exp.Expression) -> Typed:
    left = isinstance(node, exp.Left)
    s, n = _text(b, node.this, node), _int(b, node.expression, node)
    name = "LEFT" if left else "RIGHT"
    if isinstance(n, exp.Literal) and int(n.this) >= 0:
        return _call(name, s, n), T.TEXT
    # a negative count: all but the last (LEFT) or first (RIGHT) |n| characters
    if left:
        rest = _call("SUBSTRING", s.copy(), exp.Literal.number(1),
                     _call("GREATEST", exp.Add(this=_call("LENGTH", s.copy()), expression=n.copy()),
                           exp.Literal.number(0)))
    else:
        rest = _call("SUBSTRING", s.copy(), exp.Sub(this=exp.Literal.number(1), expression=n.copy()))
    if isinstance(n, exp.Literal) or isinstance(n, exp.Neg):
        return rest, T.TEXT
    return exp.Case(ifs=[exp.If(this=exp.GTE(this=n.copy(), expression=exp.Literal.number(0)),
                                true=_call(name, s, n))], default=rest), T.TEXT


def _pad(b: Binder, node: exp.Pad) -> Typed:
    fill = node.args.get("fill_pattern")
    args = [_text(b, node.this, node), _int(b, node.expression, node),
            _text(b, fill, node) if fill is not None else exp.Literal.string(" ")]
    return _call("LPAD" if node.args.get("is_left") else "RPAD", *args), T.TEXT


def _simple_text(name: str, arity: int) -> Callable[[Binder, exp.Expression], Typed]:
    def rule(b: Binder, node: exp.Expression) -> Typed:
        args = _args(node)
        if len(args) != arity:
            raise refuse(f"{name.lower()} takes {arity} argument(s)", node)
        return _call(name, *(_text(b, a, node) for a in args)), T.TEXT
    return rule


def _reverse(b: Binder, node: exp.Expression) -> Typed:
    """PostgreSQL reverses code points (a combining accent moves), as Spark does; DuckDB's own
    ``reverse`` reverses grapheme clusters (engine/expressions spells it out)."""
    args = _args(node)
    if len(args) != 1:
        raise refuse("reverse takes 1 argument(s)", node)
    return mp("REVERSE", _text(b, args[0], node)), T.TEXT


def _repeat(b: Binder, node: exp.Expression) -> Typed:
    return _call("REPEAT", _text(b, node.this, node), _int(b, node.args.get("times"), node)), T.TEXT


def _split_part(b: Binder, node: exp.SplitPart) -> Typed:
    n = _int(b, node.args.get("part_index"), node)
    if isinstance(n, exp.Literal) and int(n.this) == 0:
        raise refuse("field position must not be zero", node)
    return _call("SPLIT_PART", _text(b, node.this, node), _text(b, node.args.get("delimiter"), node), n), T.TEXT


def _starts_with(b: Binder, node: exp.StartsWith) -> Typed:
    return exp.StartsWith(this=_text(b, node.this, node), expression=_text(b, node.expression, node)), T.BOOLEAN


def _ascii(b: Binder, node: exp.Expression) -> Typed:
    return _to(_call("ASCII", _text(b, node.this, node)), T.INTEGER), T.INTEGER


def _chr(b: Binder, node: exp.Expression) -> Typed:
    args = node.expressions
    if len(args) != 1:
        raise refuse("chr takes one argument", node)
    return _call("CHR", _int(b, args[0], node)), T.TEXT


def _translate(b: Binder, node: exp.Translate) -> Typed:
    return _call("TRANSLATE", _text(b, node.this, node), _text(b, node.args.get("from_"), node),
                 _text(b, node.args.get("to"), node)), T.TEXT


def _like(b: Binder, node: exp.Expression) -> Typed:
    escape = None
    if isinstance(node, exp.Escape):
        escape = node.expression
        node = node.this
    if not isinstance(node, (exp.Like, exp.ILike)):
        raise refuse(f"ESCAPE is supported after LIKE and ILIKE, not {node.key.upper()}", node)
    value, pattern = _text(b, node.this, node), _text(b, node.expression, node)
    if escape is not None and not (isinstance(escape, exp.Literal) and escape.is_string and len(escape.this) == 1):
        raise refuse("LIKE ... ESCAPE needs a one-character constant", node)
    esc = escape.this if escape is not None else "\\"  # PostgreSQL's default escape; DuckDB has none
    like = exp.Escape(this=type(node)(this=value, expression=pattern), expression=exp.Literal.string(esc))
    return (exp.Not(this=like) if node.args.get("negate") else like), T.BOOLEAN


def _bracket(b: Binder, node: exp.Bracket) -> Typed:
    inner = node.this
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Anonymous) and str(inner.this).lower() == "regexp_match" \
            and len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Literal):
        index = int(node.expressions[0].this) + 1  # sqlglot stores PostgreSQL's 1-based index from 0
        args = inner.expressions
        if len(args) not in (2, 3):
            raise refuse("regexp_match takes a string, a pattern and optional flags", inner)
        return regexp_extract(b, _text(b, args[0], inner), args[1], args[2] if len(args) == 3 else None, inner,
                              group=index), T.TEXT
    return subscript(b, node)


def _anonymous(b: Binder, node: exp.Anonymous) -> Typed:
    name = str(node.this).lower()
    if is_mp(node, "WINDOW"):  # TUMBLE/HOP's window bounds, placed by the planner
        return node, T.TIMESTAMP
    if is_mp(node, "ARG"):  # an argument of a SQL function (millpond.sql.functions)
        return _function_argument(b, node)
    if is_mp(node, "PY"):  # a Python function's call (millpond.pyfunctions), its arguments MP_ARG
        spec, mode, *args = node.expressions
        bound = [b.value(a)[0] for a in args]
        return mp("PY", spec, mode, *bound), T.from_catalog(Spec.decode(spec.name).returns)
    if is_mp(node, GROUP_KEY) or is_mp(node, GROUP_VALUE):  # an interval GROUP BY (interval_keys.group_by_span)
        return group_marker(b, node)
    f = registry.by_name(name)
    if f is None:
        raise refuse(f"function {name}() is not supported (see the list of supported functions in "
                      "docs/sql.md)", node)
    return f.rule(b, node)


def _regexp_match_alone(b: Binder, node: exp.Expression) -> Typed:
    """``regexp_match(s, p [, flags])``: the first match's parenthesized parts (the whole match when
    there are none) as a text array; NULL without a match."""
    args = node.expressions
    if len(args) not in (2, 3):
        raise refuse("regexp_match takes a string, a pattern and optional flags", node)
    s = _text(b, args[0], node)
    flags = args[2] if len(args) == 3 else None
    groups = max(re.compile(check_pattern(args[1], node)).groups, 1)
    parts = [regexp_extract(b, s, args[1].copy(), flags, node, group=g) for g in range(1, groups + 1)]
    array_type = T.array_of(T.TEXT)
    return exp.Case(ifs=[exp.If(this=exp.Is(this=parts[0].copy(), expression=exp.Null()),
                                true=exp.Cast(this=exp.Null(), to=T.datatype(array_type)))],
                    default=exp.Array(expressions=parts)), array_type


register(
    # strings
    Function("length", _length, (exp.Length,), aliases=("char_length", "character_length")),
    Function("octet_length", _octet_length, forms=("OCTET_LENGTH",)),
    Function("lower", _case_fn("LOWER"), (exp.Lower,), forms=("LOWER",)),
    Function("upper", _case_fn("UPPER"), (exp.Upper,), forms=("UPPER",)),
    Function("position", _strpos, (exp.StrPosition,), aliases=("strpos",), forms=("STRPOS",)),
    Function("substring", _substring, (exp.Substring,), aliases=("substr",), forms=("REGEXP_EXTRACT",)),
    Function("btrim", _trim, (exp.Trim,), aliases=("trim", "ltrim", "rtrim"), forms=("TRIM",)),
    Function("concat", _concat, (exp.Concat,), forms=("CONCAT",)),
    Function("concat_ws", _concat_ws, (exp.ConcatWs,)),
    Function("replace", _replace, (exp.Replace,)),
    Function("left", _left_right, (exp.Left,)),
    Function("right", _left_right, (exp.Right,)),
    Function("lpad", _pad, (exp.Pad,), aliases=("rpad",)),
    Function("reverse", _reverse, (exp.Reverse,), forms=("REVERSE",)),
    Function("repeat", _repeat, (exp.Repeat,)),
    Function("md5", _simple_text("MD5", 1), (exp.MD5,)),
    Function("ascii", _ascii, (exp.Ascii,)),
    Function("chr", _chr, (exp.Chr,)),
    Function("translate", _translate, (exp.Translate,)),
    Function("starts_with", _starts_with, (exp.StartsWith,)),
    Function("split_part", _split_part, (exp.SplitPart,)),
    Function("regexp_match", _regexp_match_alone, forms=("REGEXP_EXTRACT",)),
)

# what is not a function call: operators bound here, and the families' constructs
_RULES: dict[type, registry.Rule] = {
    exp.DPipe: _dpipe, exp.Like: _like, exp.ILike: _like, exp.Escape: _like, exp.Bracket: _bracket,
    exp.Anonymous: _anonymous,
    **REGEX_CONSTRUCTS, **AGGREGATE_CONSTRUCTS, **DATETIME_CONSTRUCTS, **NESTED_CONSTRUCTS, **JSONB_CONSTRUCTS,
}

# the allow-list, by PostgreSQL name (docs/sql.md lists it; a test checks it does)
FUNCTIONS = registry.names("scalar")
AGGREGATES = registry.names("aggregate")
WINDOW_FUNCTIONS = registry.names("window")


def _function_argument(b: Binder, node: exp.Anonymous) -> Typed:
    arg, declared, fname = node.expressions
    target = T.from_catalog(declared.name)
    value, t = b.value(arg)
    if not T.implicit(t, target):
        raise refuse(f"function {fname.name}({t}) does not exist: no implicit cast from {t} to {target} "
                      f"(add an explicit cast)", arg)
    return b.cast_to((value, t), target, arg), target


_CONSTRUCTS = {"similarto": "SIMILAR TO", "bytestring": "E'...' (escape string)", "array": "ARRAY",
               "dot": "field access", "placeholder": "parameter"}


def function(b: Binder, node: exp.Expression) -> Typed:
    """A function call (or a construct no operator rule knows), bound or refused by name."""
    f = registry.by_node(type(node))
    rule = f.rule if f is not None else _RULES.get(type(node))
    if rule is None:
        what = _name(node) if isinstance(node, exp.Func) else _CONSTRUCTS.get(node.key, node.key.upper())
        kind = "function" if isinstance(node, exp.Func) else "construct"
        raise refuse(f"{kind} {what}{'()' if kind == 'function' else ''} is not supported (see the list of "
                      "supported functions in docs/sql.md)", node)
    return rule(b, node)


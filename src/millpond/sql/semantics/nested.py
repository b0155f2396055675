"""Arrays, records (STRUCT) and maps, with PostgreSQL's meaning (RisingWave's for maps, which
PostgreSQL has not): ``ARRAY[1, 2]``, subscripts ``a[i]`` (1-based, NULL out of range, as in
PostgreSQL, where Spark and DuckDB count a negative index from the end), ``m['k']``, field access
``(s).f``, ``cardinality``, ``array_length(a, 1)`` (NULL for an empty array), ``a @> b`` and ``a &&
b`` (a NULL element never matches), ``map_keys``/``map_values``. Each becomes an internal call
(``MP_SUBSCRIPT``, ``MP_ATTR``, ...) that :mod:`millpond.engine.expressions` spells for each engine.

    >>> import sqlglot
    >>> from millpond.sql.semantics import bind, to_duckdb
    >>> q = bind(sqlglot.parse_one("SELECT t.a[2] AS x FROM t AS t", dialect="postgres"), {"t": {"a": T.array_of(T.INTEGER)}},
    ...          view=False)
    >>> to_duckdb(q.selects[0])
    '(CASE WHEN 2 >= 1 THEN list_extract(t.a, CAST(2 AS INT)) END) AS x'
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

from sqlglot import exp

from millpond.engine.expressions import mp
from millpond.sql.semantics import types as T
from millpond.sql.semantics.registry import Function, register
from millpond.sql.semantics.types import SqlType, Typed, refuse

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["CONSTRUCTS", "subscript", "record_constant", "map_constant", "array_constant", "cast_nested"]

Cast = Callable[[exp.Expression, SqlType, SqlType, exp.Expression], exp.Expression]  # casts.cast
Literal = Callable[[exp.Expression, SqlType, exp.Expression], exp.Expression]  # casts.literal_as



def _q(text: str) -> str:
    return f'"{text}"'  # PostgreSQL quotes the input it could not read so


def subscript(b: "Binder", node: exp.Bracket) -> Typed:
    """``a[i]`` of an array, ``m[k]`` of a map."""
    if len(node.expressions) != 1:
        raise refuse("subscript one element (a[i]) or one slice (a[i:j])", node)
    if isinstance(node.this, exp.Bracket) and (isinstance(node.expressions[0], exp.Slice) or
                                               isinstance(node.this.expressions[0], exp.Slice)):
        raise refuse("a slice together with another subscript (a[1:2][1], a[1][1:2]) is not supported: PostgreSQL "
                      "reads every subscript of it as a slice", node)
    container, t = b.value(node.this)
    index = node.expressions[0]
    if isinstance(index, exp.Slice):
        return _slice(b, node, container, t, index)
    if t.kind == "map":
        key, kt = b.value(index)
        return mp("MAP_GET", container, b.cast_to((key, kt), t.args[0], index) if kt != t.args[0] else key), t.args[1]
    if t.kind != "array":
        raise refuse(f"cannot subscript type {t} because it is not an array", node)
    # sqlglot keeps a literal index 0-based (PostgreSQL's minus one) and any other index as written
    if isinstance(index, exp.Literal) and index.is_int:
        position: exp.Expression = exp.Literal.number(int(index.name) + 1)
    elif isinstance(index, exp.Neg) and isinstance(index.this, exp.Literal) and index.this.is_int:
        position = exp.Literal.number(1 - int(index.this.name))
    else:
        value, it = b.value(index)
        if not (it.integer or it.untyped):
            raise refuse(f"array subscript must have type integer, not {it}", index)
        position = value
    return mp("SUBSCRIPT", container, position), t.args[0]


def _slice(b: "Binder", node: exp.Expression, container: exp.Expression, t: SqlType, index: exp.Slice) -> Typed:
    """``a[i:j]``: the elements from position i to j (1-based, inclusive, clamped to the array; an
    omitted bound is the array's end; a NULL bound gives NULL)."""
    if t.kind != "array":
        raise refuse(f"cannot subscript type {t} because it is not an array", node)
    if t.args[0].kind == "array":
        raise refuse("slices of a nested array are not supported (PostgreSQL slices every dimension)", node)
    bounds = []
    for bound, default in ((index.this, -(2**31)), (index.expression, 2**31 - 1)):
        if bound is None:
            bounds.append(exp.Literal.number(default))
            continue
        value, bt = b.value(bound)
        if not (bt.integer or bt.untyped):
            raise refuse(f"array subscript must have type integer, not {bt}", bound)
        bounds.append(value)
    return mp("SLICE", container, *bounds), t


def order_key(node: exp.Expression, t: SqlType, at: exp.Expression, null_high: bool | None = None) -> exp.Expression:
    """``node`` as the engines order it the way PostgreSQL orders an array or a record: element by
    element (field by field), a NULL element after every value (Spark puts it first). A record's key
    for sorting (``null_high`` given) is never NULL: a NULL record sorts as its leading flag says
    (after the others in ascending order when ``null_high``); for comparing it is NULL."""
    if t.kind == "map":
        raise refuse("maps have no order (compare a key's value: m['k'])", at)
    if t.kind not in ("array", "record"):
        return node
    inner = [t.args[0]] if t.kind == "array" else [ft for _, ft in t.args]
    if any(x.nested or x.kind in ("jsonb", "interval") for x in inner):
        raise refuse(f"ordering values of type {t} is not supported (an array or record of arrays, records, "
                      "intervals or jsonb)", at)
    if t.kind == "array":
        return mp("ORDER_KEY", node)
    mode = "compare" if null_high is None else "null_high" if null_high else "null_low"
    return mp("ORDER_KEY", node, exp.Literal.string(mode), *(exp.Literal.string(n) for n, _ in t.args))


def _field(b: "Binder", node: exp.Dot) -> Typed:
    record, t = b.value(node.this)
    name = node.expression.name
    if t.kind != "record":
        raise refuse(f"column notation .{name} applied to type {t}, which is not a composite type", node)
    fields = dict(t.args)
    if name not in fields:
        raise refuse(f"column {name!r} not found in data type {_record(t)}", node)
    return mp("ATTR", record, exp.Literal.string(name)), fields[name]


def _record(t: SqlType) -> str:
    return f"STRUCT<{', '.join(f'{n} {ft}' for n, ft in t.args)}>"


def _array(b: "Binder", node: exp.Array) -> Typed:
    typed = b.values(list(node.expressions))
    element = T.common_type([t for _, t in typed]) if typed else None
    if element is None:
        raise refuse("ARRAY[] needs elements of one type (an empty ARRAY[] needs a cast: ARRAY[]::INT[])"
                      if not typed else f"ARRAY elements have no common type ({', '.join(str(t) for _, t in typed)})", node)
    if element.untyped:
        element = T.TEXT
    values = [v if t == element else b.cast_to((v, t), element, e) for (v, t), e in zip(typed, node.expressions)]
    return exp.Array(expressions=values), T.array_of(element)


def _depth(t: SqlType) -> int:
    d = 0
    while t.kind == "array":
        t, d = t.args[0], d + 1
    return d


def _cardinality(b: "Binder", node: exp.Expression) -> Typed:
    args = list(node.expressions) if isinstance(node, exp.Anonymous) else [node.this]
    if len(args) != 1:
        raise refuse("cardinality takes one array", node)
    value, t = b.value(args[0])
    if t.kind != "array":
        raise refuse(f"function cardinality({t}) does not exist", node)
    return mp("CARDINALITY", value, exp.Literal.number(_depth(t))), T.INTEGER


def _array_length(b: "Binder", node: exp.ArraySize) -> Typed:
    value, t = b.value(node.this)
    dim = node.expression
    if t.kind != "array":
        raise refuse(f"function array_length({t}, integer) does not exist", node)
    if not (isinstance(dim, exp.Literal) and dim.is_int and int(dim.name) >= 1):
        raise refuse("array_length(a, n) needs a constant dimension n (1, 2, …)", node)
    return mp("ARRAY_LENGTH", value, exp.Literal.number(int(dim.name))), T.INTEGER


def _two_arrays(b: "Binder", node: exp.Expression, name: str) -> Typed:
    (a, ta), (c, tc) = b.value(node.this), b.value(node.expression)
    if ta.kind != "array" or tc.kind != "array":
        raise refuse(f"operator does not exist: {ta} {node.key} {tc}", node)
    if ta != tc:
        common = T.common_type([ta.args[0], tc.args[0]])
        if common is None:
            raise refuse(f"operator does not exist: {ta} {'@>' if name == 'CONTAINS' else '&&'} {tc}", node)
        a = b.cast_to((a, ta), T.array_of(common), node.this) if ta.args[0] != common else a
        c = b.cast_to((c, tc), T.array_of(common), node.expression) if tc.args[0] != common else c
    return mp(name, a, c), T.BOOLEAN


def _map_part(fn: str, index: int):  # noqa: ANN202
    def rule(b: "Binder", node: exp.Expression) -> Typed:
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else [node.this]
        if len(args) != 1:
            raise refuse(f"{fn} takes one map", node)
        value, t = b.value(args[0])
        if t.kind != "map":
            raise refuse(f"function {fn}({t}) does not exist", node)
        return exp.Anonymous(this=fn.upper(), expressions=[value]), T.array_of(t.args[index])
    return rule


def _unnest(b: "Binder", node: exp.Explode) -> Typed:
    """``unnest(a)`` as a select item (and ``FROM t, unnest(t.a)``, which desugar makes one): a row
    per element, none for an empty or NULL array."""
    parent = node.parent.parent if isinstance(node.parent, exp.Alias) else node.parent
    select = node.parent_select
    if not isinstance(parent, exp.Select) or select is None or select.args.get("group") or \
            any(s.find(exp.AggFunc, exp.Window) for s in select.expressions) or \
            sum(1 for s in select.expressions if s.find(exp.Explode)) > 1:
        what = f"{node.this.this}(jsonb)" if isinstance(node.this, exp.Anonymous) else "unnest(array)"
        raise refuse(f"{what} is supported as a whole select item (one per SELECT, without GROUP BY, "
                      "aggregates or window functions in that SELECT) or in FROM: FROM t, unnest(t.a) AS u(x)", node)
    value, t = b.value(node.this)
    if t.kind != "array":
        raise refuse(f"function unnest({t}) does not exist", node)
    return exp.Explode(this=value), t.args[0]


def cast_nested(node: exp.Expression, source: SqlType, target: SqlType, at: exp.Expression, cast: Cast
                ) -> exp.Expression:
    """An array as an array of another element type, element by element (where the elements' cast
    is one both engines make alike: between numbers, or to text from text); a ``ROW(...)`` as a
    record type of as many fields, field by field, each by ``cast`` (:func:`~millpond.sql.semantics.casts.cast`,
    which calls this one for nested types)."""
    if source.kind == target.kind == "record" and isinstance(node, exp.Struct) and \
            len(source.args) == len(target.args):  # ROW(...) as a record type: field by position
        return exp.Struct(expressions=[
            exp.PropertyEQ(this=exp.to_identifier(name), expression=cast(
                field.expression if isinstance(field, exp.PropertyEQ) else field, st, tt, at))
            for field, (_, st), (name, tt) in zip(node.expressions, source.args, target.args)])
    s, t = source, target
    while s.kind == "array" and t.kind == "array":
        s, t = s.args[0], t.args[0]
    if source.kind == "array" and target.kind == "array" and (s == t or (s.number and t.number) or s.kind == "null"):
        return exp.Cast(this=node, to=T.datatype(target))
    raise refuse(f"cannot cast type {source} to {target}", at)


def array_constant(text: str, target: SqlType, at: exp.Expression, literal_as: Literal) -> exp.Expression:
    """PostgreSQL's array input ``{1,2,NULL}``, ``{{1,2},{3,4}}``, ``{"a b","q\\"x"}`` as an
    ``ARRAY[...]`` of constants of ``target``'s element type, each read by ``literal_as``
    (:func:`~millpond.sql.semantics.casts.literal_as`, which calls this one for arrays)."""
    items, rest = _array_items(text.strip(), at)
    if rest.strip():
        raise refuse(f"malformed array literal: {_q(text)}", at, sqlstate="22P02")
    return _array_of(items, target, at, literal_as)


def _array_of(items: list, target: SqlType, at: exp.Expression, literal_as: Literal) -> exp.Expression:
    element = target.args[0]
    values = []
    for item in items:
        if isinstance(item, list):
            if element.kind != "array":
                raise refuse(f"malformed array literal: a nested array for {target}", at, sqlstate="22P02")
            values.append(_array_of(item, element, at, literal_as))
        elif item is None:
            values.append(exp.Cast(this=exp.Null(), to=T.datatype(element)))
        else:
            values.append(literal_as(exp.Literal.string(item), element, at))
    if not values:
        return exp.Cast(this=exp.Array(), to=T.datatype(target))
    return exp.Array(expressions=values)


def _array_items(text: str, at: exp.Expression) -> tuple[list, str]:
    """The items of the array text at the start of ``text`` (a str, None for NULL, or a list for a
    nested array) and what follows it."""
    if not text.startswith("{"):
        raise refuse(f"malformed array literal: {_q(text)} (an array constant is written '{{1,2,3}}')", at, sqlstate="22P02")
    items: list = []
    i, n = 1, len(text)
    while i < n:
        c = text[i]
        if c == "}" and not items:
            return items, text[i + 1:]
        if c == "{":
            sub, rest = _array_items(text[i:], at)
            items.append(sub)
            i = n - len(rest)
        elif c == '"':
            j, out = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    j += 1
                out.append(text[j])
                j += 1
            items.append("".join(out))
            i = j + 1
        else:
            j = i
            while j < n and text[j] not in ",}":
                j += 1
            word = text[i:j].strip()
            items.append(None if word.upper() == "NULL" else word)
            i = j
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "}":
            return items, text[i + 1:]
        break
    raise refuse(f"malformed array literal: {_q(text)}", at, sqlstate="22P02")


def _row(b: "Binder", node: exp.Expression) -> Typed:
    """``ROW(1, 'a')``: a record of the values, its fields named ``f1``, ``f2``... as PostgreSQL
    names an anonymous record's (a string constant or NULL is text, as PostgreSQL resolves it)."""
    if not node.expressions:
        raise refuse("ROW() needs at least one value", node)
    fields, values = [], []
    for i, arg in enumerate(node.expressions, 1):
        value, t = b.value(arg)
        if t.untyped:
            value, t = b.cast_to((value, t), T.TEXT, arg), T.TEXT
        fields.append((f"f{i}", t))
        values.append(exp.PropertyEQ(this=exp.to_identifier(f"f{i}"), expression=value))
    return exp.Struct(expressions=values), SqlType("record", args=tuple(fields))


def record_constant(text: str, target: SqlType, at: exp.Expression, literal_as: Literal) -> exp.Expression:
    """PostgreSQL's record input ``(1,"a b",)`` (an empty field is NULL) as a record of ``target``'s
    fields, each read as a constant of its type (by ``literal_as``, as :func:`array_constant`)."""
    s = text.strip()
    if not (s.startswith("(") and s.endswith(")")):
        raise refuse(f"malformed record literal: {_q(text)} (a record constant is written '(1,x)')", at, sqlstate="22P02")
    items = _fields(s[1:-1], ",")
    if len(items) != len(target.args):
        raise refuse(f"malformed record literal: {_q(text)}: too {'few' if len(items) < len(target.args) else 'many'} "
                      f"columns for {_record(target)}", at, sqlstate="22P02")
    return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier(name), expression=_item(
        item, t, at, literal_as)) for item, (name, t) in zip(items, target.args)])


def map_constant(text: str, target: SqlType, at: exp.Expression, literal_as: Literal) -> exp.Expression:
    """A map's text as millpond writes it (RisingWave's: ``{a:1,b:NULL}``) as a map of ``target``'s
    key and value types (each read by ``literal_as``, as :func:`array_constant`)."""
    s = text.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise refuse(f"malformed map literal: {_q(text)} (a map constant is written '{{a:1,b:2}}')", at, sqlstate="22P02")
    keys, values = [], []
    for entry in _fields(s[1:-1], ",") if s[1:-1].strip() else []:
        parts = _fields(entry, ":", raw=True) if entry is not None else []
        if len(parts) != 2 or parts[0] is None:
            raise refuse(f"malformed map literal: {_q(text)} (each entry is key:value)", at, sqlstate="22P02")
        key = _unquote(parts[0])
        if key is None:
            raise refuse(f"malformed map literal: {_q(text)}: a map key cannot be NULL", at, sqlstate="22P02")
        keys.append(_item(key, target.args[0], at, literal_as))
        values.append(_item(_unquote(parts[1]), target.args[1], at, literal_as))
    return exp.Cast(this=exp.Map(keys=exp.Array(expressions=keys), values=exp.Array(expressions=values)),
                    to=T.datatype(target))


def _item(text: str | None, t: SqlType, at: exp.Expression, literal_as: Literal) -> exp.Expression:
    if text is None:
        return exp.Cast(this=exp.Null(), to=T.datatype(t))
    return literal_as(exp.Literal.string(text), t, at)


def _fields(body: str, sep: str, *, raw: bool = False) -> list[str | None]:
    """The fields of a record's (or map's) text between its brackets, split at ``sep`` outside
    quotes: an unquoted empty field is None (NULL); quotes and backslashes are read (kept with ``raw``)."""
    out: list[str | None] = []
    field: list[str] = []
    quoted = in_quotes = False
    i = 0
    while i <= len(body):
        c = body[i] if i < len(body) else None
        if c is None or c == sep and not in_quotes:
            out.append("".join(field) if field or quoted else None)
            field, quoted = [], False
        elif c == '"':
            if in_quotes and i + 1 < len(body) and body[i + 1] == '"' and not raw:
                field.append('"')
                i += 1
            else:
                in_quotes, quoted = not in_quotes, True
                if raw:
                    field.append(c)
        elif c == "\\" and i + 1 < len(body):
            field.append(body[i:i + 2] if raw else body[i + 1])
            i += 1
        else:
            field.append(c)
        i += 1
    return out


def _unquote(part: str | None) -> str | None:
    """A map key's or value's text: quoted, its characters; else trimmed (``NULL`` is NULL)."""
    if part is None:
        return None
    p = part.strip()
    if p.startswith('"') and p.endswith('"') and len(p) >= 2:
        return re.sub(r"\\(.)", r"\1", p[1:-1])
    return None if p.upper() == "NULL" else p


def array_cat(b: "Binder", node: exp.DPipe, left: Typed, right: Typed) -> Typed:
    """``a || b`` of two arrays (or an array and an element): PostgreSQL's ``array_cat``, where a
    NULL array counts as empty (NULL only when both are)."""
    (a, ta), (c, tc) = left, right
    if ta.kind != "array":
        a, ta = exp.Array(expressions=[b.cast_to((a, ta), tc.args[0], node.this)]), tc
    if tc.kind != "array":
        c, tc = exp.Array(expressions=[b.cast_to((c, tc), ta.args[0], node.expression)]), ta
    if ta != tc:
        common = T.common_type([ta.args[0], tc.args[0]])
        if common is None or common.nested:
            raise refuse(f"operator does not exist: {ta} || {tc}", node)
        a, c = (b.cast_to((v, t), T.array_of(common), node) for v, t in ((a, ta), (c, tc)))
        ta = T.array_of(common)
    return mp("ARRAY_CAT", a, c, exp.Cast(this=exp.Array(), to=T.datatype(ta))), ta


register(
    Function("unnest", _unnest, (exp.Explode,)),
    Function("cardinality", _cardinality, forms=("CARDINALITY",)),
    Function("array_length", _array_length, (exp.ArraySize,), forms=("ARRAY_LENGTH",)),
    Function("map_keys", _map_part("map_keys", 0), (exp.MapKeys,)),
    Function("map_values", _map_part("map_values", 1)),
    Function("row", _row),
)
# ARRAY[...], (s).f, @> and &&
CONSTRUCTS = {
    exp.Dot: _field, exp.Array: _array,
    exp.ArrayContainsAll: lambda b, n: _two_arrays(b, n, "CONTAINS"),
    exp.ArrayOverlaps: lambda b, n: _two_arrays(b, n, "OVERLAPS"),
}

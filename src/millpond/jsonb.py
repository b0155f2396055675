"""JSONB values with PostgreSQL's meaning, over Arrow arrays.

A JSONB value is kept as PostgreSQL prints it — keys sorted shorter first then bytewise, the last
of duplicate keys kept, numbers as ``numeric`` prints them (``1e2`` is ``100``, ``1.50`` stays
``1.50``), ``", "`` and ``": "`` between items — so that two equal documents have equal text:
``=``, ``GROUP BY`` and ``DISTINCT`` compare the text. In the engines and in state it is a
one-field struct ``struct<pg_jsonb: string>`` (:data:`STRUCT`), as an INTERVAL is a struct of
three fields: the type stays known through Spark, the log and state without a catalog of view
column types.

The operations (``->``, ``->>``, ``#>``, ``#>>``, ``jsonb_array_elements``, ``jsonb_typeof``,
``jsonb_array_length``, ``?``, ``text::jsonb``) are Arrow functions (:data:`OPERATIONS`), the same
code in Spark (Arrow UDFs, :mod:`millpond.spark.functions`) and in DuckDB (:mod:`millpond.duck`).
Each parses its documents with the standard library's C JSON parser: a per-value cost, as in
PostgreSQL, which parses a ``json`` value at every operation too.

    >>> canonical('{"b": 1, "aa": [1, 2.50, 1e2], "b": {"x": null}}')
    '{"b": {"x": null}, "aa": [1, 2.50, 100]}'
    >>> get(wrap(['{"a": {"b": "x"}}']), pa.array(["a"]), pa.array([False])).to_pylist()
    [{'pg_jsonb': '{"b": "x"}'}]
    >>> path(wrap(['{"a": {"b": "x"}}']), pa.array([["a", "b"]]), pa.array([True])).to_pylist()
    ['x']
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Callable

import pyarrow as pa

__all__ = ["FIELD", "STRUCT", "JsonbError", "canonical", "is_jsonb", "wrap", "texts", "parse", "get", "path",
           "elements", "typeof", "array_length", "exists", "OPERATIONS", "udf_name"]

FIELD = "pg_jsonb"
STRUCT = pa.struct([pa.field(FIELD, pa.string())])



class JsonbError(ValueError):
    """A JSONB operation's data error, in Spark's error shape (``[CLASS] message SQLSTATE: xxxxx``),
    which the coordinator's fault isolation reads back from a failed Spark task."""

    def __init__(self, error_class: str, message: str, sqlstate: str) -> None:
        super().__init__(f"[{error_class}] {message} SQLSTATE: {sqlstate}")


def is_jsonb(t: pa.DataType) -> bool:
    return t == STRUCT


def udf_name(operation: str) -> str:
    """The name of an operation (:data:`OPERATIONS`) in an engine's SQL."""
    return f"mp_jsonb_{operation}"


# -- text ------------------------------------------------------------------------------------------
def _reject_constant(name: str) -> Any:
    raise ValueError(f"Token \"{name}\" is invalid")


def _value(text: str) -> Any:
    """The document ``text`` holds (numbers as ``int``/``Decimal``); JsonbError when it is not JSON."""
    try:
        value = json.loads(text, parse_float=Decimal, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        detail = str(exc).split(": line")[0]
        raise JsonbError("INVALID_JSON_TEXT", f"invalid input syntax for type json: {detail}; input: "
                         f"{text[:80]!r}", "22P02") from None
    _check_strings(value, text)
    return value


def _check_strings(value: Any, text: str) -> None:
    """PostgreSQL's jsonb refuses ``\\u0000`` and a lone surrogate, which Python's parser takes."""
    if "\\u" not in text:
        return
    stack = [value]
    while stack:
        v = stack.pop()
        items = v.items() if isinstance(v, dict) else ((None, x) for x in v) if isinstance(v, list) else ((None, v),)
        for k, x in items:
            for s in (k, x):
                if isinstance(s, str) and ("\0" in s or any(0xD800 <= ord(c) <= 0xDFFF for c in s)):
                    raise JsonbError("INVALID_JSON_TEXT", "unsupported Unicode escape sequence: \\u0000 or a lone "
                                     f"surrogate cannot be converted to text; input: {text[:80]!r}", "22P02")
            if isinstance(x, (dict, list)):
                stack.append(x)


def _number(d: Decimal) -> str:
    return format(abs(d) if d == 0 else d, "f")


def _key_order(k: str) -> tuple[int, bytes]:
    b = k.encode()
    return len(b), b


def _dump(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Decimal):
        return _number(v)
    if isinstance(v, list):
        return "[" + ", ".join(map(_dump, v)) + "]"
    return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_dump(v[k])}" for k in sorted(v, key=_key_order)) + "}"


def canonical(text: str) -> str:
    """``text`` as PostgreSQL prints it as ``jsonb``; JsonbError when it is not JSON."""
    return _dump(_value(text))


def _as_text(v: Any) -> str | None:
    """``->>``'s text of a value: a string without its quotes, JSON null as NULL."""
    return None if v is None else v if isinstance(v, str) else _dump(v)


# -- Arrow -----------------------------------------------------------------------------------------
def texts(arr: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """The JSONB texts of a column (of :data:`STRUCT`, or strings)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_struct(arr.type):
        return [None if d is None else d[FIELD] for d in arr.to_pylist()]
    return arr.to_pylist()


def wrap(values: list[str | None]) -> pa.StructArray:
    """JSONB texts as a column of :data:`STRUCT`."""
    strings = pa.array(values, pa.string())
    return pa.StructArray.from_arrays([strings], fields=list(STRUCT), mask=strings.is_null())


def _mode(arr: pa.Array) -> bool:
    """An operation's ``mode`` argument (a constant column): True when an error gives NULL."""
    return len(arr) > 0 and arr[0].as_py() == "null"


def parse(text: pa.Array, mode: pa.Array) -> pa.StructArray:
    """``text::jsonb``."""
    lenient = _mode(mode)
    out = []
    for t in texts(text):
        try:
            out.append(None if t is None else canonical(t))
        except JsonbError:
            if not lenient:
                raise
            out.append(None)
    return wrap(out)


def _step(v: Any, key: Any, in_path: bool = False) -> Any:
    """``v -> key``: an object's field by name, an array's element by 0-based position (negative
    from the end); ``_MISSING`` when there is none."""
    if isinstance(v, dict) and isinstance(key, str):
        return v.get(key, _MISSING)
    if isinstance(v, list):
        if isinstance(key, str) and in_path:  # a path's element: an array position when it reads as an integer
            try:
                key = int(key)
            except ValueError:
                return _MISSING
        if isinstance(key, int) and -len(v) <= key < len(v):
            return v[key]
    return _MISSING


_MISSING = object()


def _out(found: list[Any], as_text: pa.Array) -> pa.Array:
    if len(as_text) and as_text[0].as_py():
        return pa.array([None if v is _MISSING else _as_text(v) for v in found], pa.string())
    return wrap([None if v is _MISSING else _dump(v) for v in found])


def get(doc: pa.Array, key: pa.Array, as_text: pa.Array) -> pa.Array:
    """``doc -> key`` (``as_text`` false) or ``doc ->> key``; ``key`` text or integer."""
    found = [_MISSING if d is None or k is None else _step(_value(d), k) for d, k in zip(texts(doc), key.to_pylist())]
    return _out(found, as_text)


def path(doc: pa.Array, keys: pa.Array, as_text: pa.Array) -> pa.Array:
    """``doc #> '{a,1}'`` / ``doc #>> '{a,1}'``: a NULL path element finds nothing."""
    found = []
    for d, ks in zip(texts(doc), keys.to_pylist()):
        if d is None or ks is None or None in ks:
            found.append(_MISSING)
            continue
        v = _value(d)
        for k in ks:
            v = _step(v, k, in_path=True)
            if v is _MISSING:
                break
        found.append(v)
    return _out(found, as_text)


def _kind(v: Any) -> str:
    return ("object" if isinstance(v, dict) else "array" if isinstance(v, list) else "string" if isinstance(v, str)
            else "null" if v is None else "boolean" if isinstance(v, bool) else "number")


def _array(d: str, what: str, lenient: bool) -> list | None:
    v = _value(d)
    if isinstance(v, list):
        return v
    if lenient:
        return None
    kind = "an object" if isinstance(v, dict) else "a scalar"
    raise JsonbError("JSONB_NOT_AN_ARRAY", f"cannot {what} {kind}", "22023")


def elements(doc: pa.Array, as_text: pa.Array, mode: pa.Array) -> pa.Array:
    """``jsonb_array_elements(doc)`` (``jsonb_array_elements_text``) as an array per row, which
    ``unnest`` makes rows."""
    lenient, text = _mode(mode), len(as_text) and as_text[0].as_py()
    out = []
    for d in texts(doc):
        items = None if d is None else _array(d, "extract elements from", lenient)
        out.append(None if items is None else [_as_text(v) if text else _dump(v) for v in items])
    if text:
        return pa.array(out, pa.list_(pa.string()))
    flat = wrap([x for items in out if items is not None for x in items])
    offsets = [0]
    for items in out:
        offsets.append(offsets[-1] + len(items or ()))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat, mask=pa.array([x is None for x in out]))


def typeof(doc: pa.Array) -> pa.Array:
    return pa.array([None if d is None else _kind(_value(d)) for d in texts(doc)], pa.string())


def array_length(doc: pa.Array, mode: pa.Array) -> pa.Array:
    lenient = _mode(mode)
    out = []
    for d in texts(doc):
        items = None if d is None else _array(d, "get array length of", lenient)
        out.append(None if items is None else len(items))
    return pa.array(out, pa.int32())


def exists(doc: pa.Array, key: pa.Array) -> pa.Array:
    """``doc ? key``: an object has the key, or an array has it as a string element, or the
    document is that string."""
    def has(v: Any, k: str) -> bool:
        return k in v if isinstance(v, dict) else k in [x for x in v if isinstance(x, str)] \
            if isinstance(v, list) else v == k
    return pa.array([None if d is None or k is None else has(_value(d), k)
                     for d, k in zip(texts(doc), key.to_pylist())], pa.bool_())


# name: (function, parameter kinds, result kind); kinds: jsonb, text, int, bool, text[], jsonb[]
OPERATIONS: dict[str, tuple[Callable[..., pa.Array], tuple[str, ...], str]] = {
    "in": (parse, ("text", "text"), "jsonb"),
    "get": (get, ("jsonb", "text", "bool"), "jsonb"),
    "get_text": (get, ("jsonb", "text", "bool"), "text"),
    "at": (get, ("jsonb", "int", "bool"), "jsonb"),
    "at_text": (get, ("jsonb", "int", "bool"), "text"),
    "path": (path, ("jsonb", "text[]", "bool"), "jsonb"),
    "path_text": (path, ("jsonb", "text[]", "bool"), "text"),
    "elements": (elements, ("jsonb", "bool", "text"), "jsonb[]"),
    "elements_text": (elements, ("jsonb", "bool", "text"), "text[]"),
    "typeof": (typeof, ("jsonb",), "text"),
    "array_length": (array_length, ("jsonb", "text"), "int"),
    "exists": (exists, ("jsonb", "text"), "bool"),
}

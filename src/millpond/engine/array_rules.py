"""The array operations of :mod:`millpond.sql.semantics.nested` (``MP_SUBSCRIPT``, ``MP_SLICE``,
``MP_CARDINALITY``...) as each engine's SQL: 1-based, NULL out of range, as in PostgreSQL.
:mod:`millpond.engine.expressions` expands them with the rest."""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

__all__ = ["SPARK", "DUCKDB"]

Render = Callable[[list[str], list[exp.Expression]], str]


def _int(node: exp.Expression) -> int:
    return int(node.this)


def _inner(a: str, depth: int, first: str) -> str:
    """The array ``depth - 1`` levels down from ``a`` by its first elements (``first``: the engine's
    1-based element function)."""
    for _ in range(depth - 1):
        a = f"{first}({a}, 1)"
    return a


def _flat(a: str, depth: int) -> str:
    for _ in range(depth - 1):
        a = f"flatten({a})"
    return a


def _guarded(a: list[str], test: str) -> str:
    """``test`` over two arrays, NULL when either is (PostgreSQL's strict operators)."""
    return f"CASE WHEN {a[0]} IS NOT NULL AND {a[1]} IS NOT NULL THEN {test} END"


def _rules(at: str, size: str, concat: str, has: str, every: Callable[[str, str], str],
                 some: Callable[[str, str], str], positions: Callable[[str, str], str]) -> dict[str, Render]:
    """The array operations in an engine whose 1-based element, length, concatenation and
    membership functions are these, whose ``every``/``some`` test ``mp_x`` over an array's elements,
    and whose ``positions`` keeps the elements whose 1-based position ``mp_i`` passes a test."""
    def length(a: list[str], e: list[exp.Expression]) -> str:
        inner = _inner(a[0], _int(e[1]), at)
        return f"CASE WHEN {size}({a[0]}) > 0 AND {size}({inner}) > 0 THEN {size}({inner}) END"

    return {
        "SUBSCRIPT": lambda a, e: f"CASE WHEN {a[1]} >= 1 THEN {at}({a[0]}, CAST({a[1]} AS INT)) END",
        "CARDINALITY": lambda a, e: f"CASE WHEN {a[0]} IS NOT NULL THEN {size}({_flat(a[0], _int(e[1]))}) END",
        "ARRAY_LENGTH": length,
        "SLICE": lambda a, e: f"CASE WHEN {a[1]} IS NOT NULL AND {a[2]} IS NOT NULL THEN {positions(a[0], f'mp_i BETWEEN {a[1]} AND {a[2]}')} END",
        "ARRAY_CAT": lambda a, e: (f"CASE WHEN {a[0]} IS NULL AND {a[1]} IS NULL THEN NULL "
                                   f"ELSE {concat}(coalesce({a[0]}, {a[2]}), coalesce({a[1]}, {a[2]})) END"),
        "CONTAINS": lambda a, e: _guarded(a, every(a[1], f"coalesce({has}({a[0]}, mp_x), false)")),
        "OVERLAPS": lambda a, e: _guarded(a, some(a[0], f"coalesce({has}({a[1]}, mp_x), false)")),
    }


def _order_key(struct: Callable[[list[tuple[str, str]]], str], transform: str, quote: str) -> Render:
    """An array or record as an engine orders it the way PostgreSQL does: each element (field) as
    (is NULL, value), so a NULL element sorts after every value (Spark and polars put it first)."""
    def key(x: str) -> str:
        return struct([("n", f"{x} IS NULL"), ("v", x)])

    def render(a: list[str], e: list[exp.Expression]) -> str:
        if len(e) == 1:  # an array
            return transform.format(a=a[0], key=key("mp_x"))
        mode, names = e[1].name, [n.name for n in e[2:]]
        fields = [(n, key(f"{a[0]}.{quote}{n}{quote}")) for n in names]
        if mode == "compare":  # NULL for a NULL record
            return f"CASE WHEN {a[0]} IS NOT NULL THEN {struct(fields)} END"
        return struct([("mp_null", f"{a[0]} IS {'' if mode == 'null_high' else 'NOT '}NULL"), *fields])
    return render


SPARK = _rules("try_element_at", "size", "concat", "array_contains", lambda xs, t: f"forall({xs}, mp_x -> {t})",
               lambda xs, t: f"exists({xs}, mp_x -> {t})",
               lambda xs, t: f"filter({xs}, (mp_x, mp_j) -> {t.replace('mp_i', '(mp_j + 1)')})")
DUCKDB = _rules("list_extract", "len", "list_concat", "list_contains",
                lambda xs, t: f"len(list_filter({xs}, lambda mp_x: NOT ({t}))) = 0",
                lambda xs, t: f"len(list_filter({xs}, lambda mp_x: {t})) > 0",
                lambda xs, t: f"list_filter({xs}, lambda mp_x, mp_i: {t})")
SPARK["ORDER_KEY"] = _order_key(lambda fs: f"named_struct({', '.join(f'{chr(39)}{n}{chr(39)}, {v}' for n, v in fs)})",
                                "transform({a}, mp_x -> {key})", "`")
DUCKDB["ORDER_KEY"] = _order_key(lambda fs: f"struct_pack({', '.join(f'{chr(34)}{n}{chr(34)} := {v}' for n, v in fs)})",
                                 "list_transform({a}, lambda mp_x: {key})", '"')

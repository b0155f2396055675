"""Intervals as keys: equal intervals (``'24 hours'``, ``'1 day'``) are one group, one DISTINCT row,
one extreme, though the engines' own equality compares their fields apart (see
:mod:`~millpond.sql.semantics.intervals`, "Equality").

- :func:`sort_key` — a text that orders intervals by span and keeps them whole; MIN/MAX of it find
  the extreme interval itself (:func:`of_sort_key` reads it back);
- :func:`group_by_span` — rewrites a SELECT before it is bound: ``GROUP BY d`` by its span, ``d``
  shown as one member of its group (the MIN sort key);
- :func:`normalize_keys` — a SELECT DISTINCT it could not group: the interval's normal form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from millpond.engine.expressions import is_mp, mp
from millpond.errors import SqlError
from millpond.sql.semantics import types as T
from millpond.sql.semantics.types import Typed
from millpond.sql.semantics.intervals import DAY, make, normal, parts, span

if TYPE_CHECKING:
    from millpond.sql.semantics.rewrite import Binder

__all__ = ["sort_key", "of_sort_key", "group_by_span", "group_marker", "normalize_keys", "GROUP_KEY", "GROUP_VALUE"]


def _n(v: int) -> exp.Expression:
    return exp.Literal.number(v)


def _p(e: exp.Expression) -> exp.Expression:
    return e if isinstance(e, (exp.Literal, exp.Column, exp.Paren, exp.Anonymous, exp.Cast)) else exp.Paren(this=e)


def _op(cls: type, a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Paren(this=cls(this=_p(a), expression=_p(b)))


def _decimal(x: exp.Expression) -> exp.Expression:
    return exp.Cast(this=x, to=T.datatype(T.numeric(20, 0)))


_SPAN_OFFSET = 2**63  # a span (BIGINT) plus this is 0 .. 2^64 - 1: 20 digits
_FIELD_OFFSET = 2**31  # an INT field plus this is 0 .. 2^32 - 1: 10 digits


def _digits(x: exp.Expression, offset: int, width: int) -> exp.Expression:
    """``x + offset`` (not negative) as ``width`` digits."""
    shifted = _decimal(_op(exp.Add, _decimal(x), _decimal(_n(offset))))
    return exp.Anonymous(this="LPAD", expressions=[exp.Cast(this=shifted, to=T.datatype(T.TEXT)), _n(width),
                                                   exp.Literal.string("0")])


def sort_key(node: exp.Expression) -> exp.Expression:
    """A text that orders intervals as PostgreSQL does (by span) and keeps them whole: the span, the
    months and the days, each as fixed-width digits. MIN and MAX of it find the extreme interval
    itself, which :func:`of_sort_key` reads back (among intervals of equal span, the one with the
    fewest months, then days)."""
    m, d, _ = parts(node)
    pieces = [_digits(span(node), _SPAN_OFFSET, 20), _digits(m, _FIELD_OFFSET, 10), _digits(d, _FIELD_OFFSET, 10)]
    return exp.DPipe(this=exp.DPipe(this=pieces[0], expression=pieces[1], safe=False), expression=pieces[2], safe=False)


def of_sort_key(key: exp.Expression) -> exp.Expression:
    """The interval a :func:`sort_key` holds."""
    def piece(start: int, width: int, offset: int) -> exp.Expression:
        digits = exp.Substring(this=key.copy(), start=_n(start), length=_n(width))
        return exp.Cast(this=_op(exp.Sub, _decimal(digits), _decimal(_n(offset))), to=T.datatype(T.BIGINT))
    total, months, days = piece(1, 20, _SPAN_OFFSET), piece(21, 10, _FIELD_OFFSET), piece(31, 10, _FIELD_OFFSET)
    micros = _op(exp.Sub, total, _op(exp.Mul, _op(exp.Add, _op(exp.Mul, months.copy(), _n(30)), days.copy()), _n(DAY)))
    return make(months, days, micros)


GROUP_KEY, GROUP_VALUE = "GROUP_KEY", "GROUP_VALUE"


def group_by_span(b: Binder, q: exp.Select) -> None:
    """Before a SELECT is bound: equal intervals (``'24 hours'``, ``'1 day'``) made one group.

    Each GROUP BY expression that is an interval becomes ``MP_GROUP_KEY(g)``, bound to its span;
    each copy of it outside an aggregate (SELECT, HAVING, ORDER BY) ``MP_GROUP_VALUE(g)``, bound to
    the group's interval: one of its members (the MIN of :func:`sort_key`), as PostgreSQL shows one
    of them. A SELECT DISTINCT without aggregates and with an interval column is grouped so too."""
    distinct = q.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is None and not q.args.get("group") \
            and not any(e.find(exp.AggFunc, exp.Window) for e in q.expressions) \
            and any(_is_interval(b, _body(e)) for e in q.expressions):
        q.set("distinct", None)
        q.set("group", exp.Group(expressions=[_body(e).copy() for e in q.expressions]))
    group = q.args.get("group")
    for g in list(group.expressions) if group else []:
        if isinstance(g, (exp.Cube, exp.Rollup, exp.GroupingSets)) or not _is_interval(b, g):
            continue
        raw = g.copy()
        for clause in (*q.expressions, q.args.get("having"), q.args.get("order"), q.args.get("qualify")):
            if clause is None:
                continue
            for n in list(clause.walk()):
                if n == raw and n.find_ancestor(exp.AggFunc) is None and n.parent is not None:
                    n.replace(mp(GROUP_VALUE, n.copy()))
        g.replace(mp(GROUP_KEY, g.copy()))


def _is_interval(b: Binder, node: exp.Expression) -> bool:
    """``node`` (not bound yet) is an interval: its copy bound (a copy's subqueries are not the
    scope's; an error here is the real binding's to report)."""
    if node.find(exp.Subquery, exp.Exists) is not None:
        return False
    try:
        return b.value(node.copy())[1].kind == "interval"
    except SqlError:
        return False


def _body(item: exp.Expression) -> exp.Expression:
    return item.this if isinstance(item, exp.Alias) else item


def group_marker(b: Binder, node: exp.Anonymous) -> Typed:
    """``MP_GROUP_KEY`` / ``MP_GROUP_VALUE`` (:func:`group_by_span`) bound."""
    inner, t = b.value(node.expressions[0])
    if is_mp(node, GROUP_KEY):
        return span(inner), T.BIGINT
    return of_sort_key(exp.Min(this=sort_key(inner))), t


def normalize_keys(q: exp.Select, distinct_items: list[int]) -> None:
    """The SELECT DISTINCT items at ``distinct_items`` (intervals) as their :func:`normal` form: equal
    intervals are one row (a DISTINCT over a grouped query: :func:`group_by_span` could not group it)."""
    for i in distinct_items:
        item = q.expressions[i]
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(item, exp.Alias):
            body.replace(normal(body))
        else:
            item.replace(exp.alias_(normal(body), item.alias_or_name, quoted=True))

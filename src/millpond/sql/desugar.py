"""The rewrites every query goes through before it is bound, in a view and in an ad-hoc SELECT
alike: SQL functions inlined (:mod:`millpond.sql.functions`), named windows (``WINDOW w AS
(...)``) written into each ``OVER w``, table column aliases (``t AS p(a, b)``) made subqueries,
grouping sets expanded (:mod:`millpond.sql.grouping`), and ``approx_count_distinct(x)`` (not
PostgreSQL's, but common in streaming SQL) answered exactly, as ``count(DISTINCT x)``.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT rank() OVER w FROM t WINDOW w AS (PARTITION BY a ORDER BY b)")
    >>> desugar(q, {})[0].sql()
    'SELECT RANK() OVER (PARTITION BY a ORDER BY b) FROM t'
"""

from __future__ import annotations

from typing import Mapping

from sqlglot import exp

from millpond.catalog import FunctionDef
from millpond.errors import SqlError
from millpond.sql import functions, grouping
from millpond.sql.semantics.jsonb import ELEMENTS
from millpond.sql.statements import VIEW_ALIAS, position

__all__ = ["desugar", "inline_named_windows", "check_column_aliases"]


def desugar(query: exp.Expression, defined: Mapping[str, FunctionDef]) -> tuple[exp.Expression, set[str]]:
    """``query`` (modified in place) without SQL function calls, named windows or grouping sets,
    and the names of the functions it called."""
    query, used = functions.inline(query, defined)
    query = query.transform(_exact_distinct, copy=False).transform(_json_arrow, copy=False)
    query = _set_returning(query)
    for select in list(query.find_all(exp.Select)):
        _lateral_unnest(select)
    return grouping.expand(inline_named_windows(_table_column_aliases(query))), used


def _exact_distinct(node: exp.Expression) -> exp.Expression:
    """``approx_count_distinct(x)`` as ``count(DISTINCT x)``: exact is within any error bound, and
    it is maintained under deletes, which a sketch is not."""
    if isinstance(node, exp.ApproxDistinct):
        if node.args.get("accuracy") is not None:
            raise SqlError("approx_count_distinct takes one argument (millpond counts exactly)")
        return exp.Count(this=exp.Distinct(expressions=[node.this]))
    return node


def _json_arrow(node: exp.Expression) -> exp.Expression:
    """``f(j -> 'k')``, which sqlglot reads as a lambda ``j -> 'k'`` inside a call, as the jsonb
    operator it is in PostgreSQL (which has no lambdas): ``j -> 'a' ->> 'b'`` is read as
    ``j -> ('a' ->> 'b')``, so the leftmost key takes the column."""
    if not isinstance(node, exp.Lambda) or len(node.expressions) != 1 or not isinstance(node.expressions[0], exp.Identifier):
        return node
    column = exp.Column(this=node.expressions[0].copy())
    body = node.this.copy()
    inner, parent = body, None
    while isinstance(inner, (exp.JSONExtract, exp.JSONExtractScalar)):
        inner, parent = inner.this, inner
    first = exp.JSONExtract(this=column, expression=inner.copy())
    if parent is None:
        return first
    parent.set("this", first)
    return body


def _set_returning(query: exp.Expression) -> exp.Expression:
    """``jsonb_array_elements[_text](j)`` as the ``unnest`` of its elements: in ``FROM`` (its one
    column named ``value``, as PostgreSQL names it) and in the select list. The call is marked
    ``set_returning``: the binder takes it only there (:mod:`millpond.sql.semantics.jsonb`)."""
    def marked(call: exp.Anonymous) -> exp.Anonymous:
        call.meta["set_returning"] = True
        return call

    def is_srf(node: exp.Expression) -> bool:
        return isinstance(node, exp.Anonymous) and str(node.this).lower() in ELEMENTS and \
            not node.meta.get("set_returning")

    for item in list(query.find_all(exp.Table, exp.Lateral)):
        if is_srf(item.this):
            alias = item.args.get("alias")
            alias = alias.copy() if alias is not None else exp.TableAlias(this=exp.to_identifier(str(item.this.this).lower()))
            if not alias.columns:
                alias.set("columns", [exp.to_identifier("value")])
            unnest = exp.Unnest(expressions=[marked(item.this.copy())], alias=None if isinstance(item, exp.Lateral) else alias)
            item.replace(exp.Lateral(this=unnest, alias=alias) if isinstance(item, exp.Lateral) else unnest)
    return query.transform(lambda n: exp.Explode(this=marked(n.copy())) if is_srf(n) else n, copy=False)


def _lateral_unnest(select: exp.Select) -> None:
    """``FROM t [AS a], unnest(a.arr) [AS u(x)]`` (or ``CROSS JOIN [LATERAL] unnest(...)``) as
    ``FROM (SELECT a.*, unnest(a.arr) AS x FROM t AS a) AS a``: one row per element of each row's
    array (none for an empty or NULL array), the element named ``x`` (``u.x`` becomes ``a.x``), as
    PostgreSQL's set-returning ``unnest`` in the select list, which both engines evaluate."""
    joins = select.args.get("joins") or []
    found = [j for j in joins if isinstance(_unnest_of(j.this), exp.Unnest)]
    if not found:
        return
    join = found[0]
    first = select.args["from_"].this
    if join is not joins[0] or len(found) > 1 or not isinstance(first, (exp.Table, exp.Subquery)) or \
            (join.args.get("kind") or "").upper() not in ("", "CROSS") or join.args.get("on") is not None or \
            join.args.get("side"):
        raise SqlError("unnest in FROM is supported as the one item after the first: FROM t, unnest(t.a) AS u(x)",
                       sqlstate="0A000").at(*position(join))
    unnest = _unnest_of(join.this)
    if len(unnest.expressions) != 1 or unnest.args.get("offset"):
        raise SqlError("unnest in FROM takes one array (no WITH ORDINALITY, no several arrays)",
                       sqlstate="0A000").at(*position(unnest))
    alias = join.this.args.get("alias") if isinstance(join.this, exp.Lateral) else unnest.args.get("alias")
    u = alias.name if alias is not None else "unnest"
    x = alias.columns[0].name if alias is not None and alias.columns else u
    a = first.alias_or_name
    inner = exp.select(exp.Star() if not isinstance(first, exp.Table) else exp.Column(this=exp.Star(), table=exp.to_identifier(a)),
                       exp.alias_(exp.Explode(this=unnest.expressions[0].copy()), x)).from_(first.copy())
    select.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(a)))))
    select.set("joins", joins[1:] or None)
    for col in select.find_all(exp.Column):
        if col.table == u and u != a:
            col.set("table", exp.to_identifier(a))


def _unnest_of(item: exp.Expression) -> exp.Expression | None:
    return item.this if isinstance(item, exp.Lateral) else item


def _table_column_aliases(query: exp.Expression) -> exp.Expression:
    """``FROM t AS p(a, b)`` as ``FROM (SELECT * FROM t) AS p(a, b)``: the columns renamed in order,
    as PostgreSQL does, by the form subqueries already have."""
    def fn(node: exp.Expression) -> exp.Expression:
        alias = node.args.get("alias") if isinstance(node, exp.Table) else None
        if not isinstance(alias, exp.TableAlias) or not alias.columns or not isinstance(node.this, exp.Identifier):
            return node
        table = node.copy()
        table.set("alias", None)
        return exp.Subquery(this=exp.select("*").from_(table), alias=alias.copy())
    return query.transform(fn, copy=False)


def inline_named_windows(query: exp.Expression) -> exp.Expression:
    """Every ``OVER w`` / ``OVER (w ...)`` of a SELECT with a ``WINDOW`` clause replaced by the
    window it names, with PostgreSQL's rules for what a reference may add (a frame, or an ORDER BY
    when ``w`` has none) and what it may not."""
    for select in list(query.find_all(exp.Select)):
        defs = select.args.get("windows")
        if not defs:
            continue
        named: dict[str, exp.Window] = {}
        for d in defs:  # a definition may build on an earlier one: WINDOW w2 AS (w1 ORDER BY x)
            name = d.name
            if name in named:
                raise SqlError(f"window {name!r} is already defined")
            base = d.args.get("alias")
            named[name] = _merge(named, base.name, d) if base is not None else d
        for w in list(select.find_all(exp.Window)):
            if w.parent_select is not select or w.args.get("alias") is None or w in defs:
                continue
            merged = _merge(named, w.args["alias"].name, w)
            w.set("alias", None)
            for key in ("partition_by", "order", "spec"):
                w.set(key, merged.args.get(key).copy() if merged.args.get(key) else None)
        select.set("windows", None)
    return query


def _merge(named: Mapping[str, exp.Window], base: str, ref: exp.Window) -> exp.Window:
    """The window ``ref`` means when it refers to the named window ``base``."""
    w = named.get(base)
    if w is None:
        raise SqlError(f"window {base!r} does not exist")
    if ref.args.get("partition_by"):
        raise SqlError(f"cannot override PARTITION BY clause of window {base!r}")
    if ref.args.get("order") and w.args.get("order"):
        raise SqlError(f"cannot override ORDER BY clause of window {base!r}")
    if w.args.get("spec") is not None and (ref.args.get("order") or ref.args.get("spec") is not None):
        raise SqlError(f"cannot copy window {base!r} because it has a frame clause")
    return exp.Window(this=ref.this, partition_by=w.args.get("partition_by"),
                      order=ref.args.get("order") or w.args.get("order"),
                      spec=ref.args.get("spec") or w.args.get("spec"))


def check_column_aliases(query: exp.Expression, tables: Mapping[str, Mapping[str, object]]) -> exp.Expression:
    """Before qualification (which drops the extra names): no FROM item is given more column names
    than it has (``tables``: each table's columns), as PostgreSQL refuses."""
    for sub in query.find_all(exp.Subquery):
        alias, body = sub.args.get("alias"), sub.this
        if not isinstance(alias, exp.TableAlias) or not alias.columns or not isinstance(body, exp.Select):
            continue
        have: int | None = len(body.selects)
        if any(isinstance(s, exp.Star) for s in body.selects):  # SELECT * FROM t: t's columns
            source = body.args.get("from_") or body.args.get("from")
            single = source.this if source is not None and not body.args.get("joins") else None
            have = len(tables[single.name]) if isinstance(single, exp.Table) and single.name in tables \
                and len(body.selects) == 1 else None
        if have is not None and len(alias.columns) > have:
            if alias.name == VIEW_ALIAS:  # CREATE MATERIALIZED VIEW v(a, b, c): PostgreSQL's words for it
                raise SqlError(f"too many column names were specified ({len(alias.columns)} for {have} columns)")
            raise SqlError(f"table {alias.name!r} has {have} columns available but {len(alias.columns)} "
                           "columns specified")
    return query

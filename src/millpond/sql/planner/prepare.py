"""Binding: the rules that turn a view's query into a checked, fully qualified tree.

Applied in order (:data:`RULES`), each a function ``(context, query) -> query``. After them,
every column names the FROM item (alias) of its scope, every table exists, every subquery is a
FROM item (:mod:`~millpond.sql.planner.subqueries` joins those of WHERE, SELECT and HAVING in),
and every expression has PostgreSQL's meaning made explicit (:mod:`millpond.sql.semantics`), or
the query is refused.
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from millpond.catalog import dependency
from millpond.catalog.catalog import missing_relation
from millpond.sql import semantics
from millpond.sql.desugar import desugar
from millpond.sql.names import qualify_names
from millpond.sql.planner.context import Context, err
from millpond.sql.statements import position
from millpond.sql.planner.subqueries import unnest_subqueries
from millpond.sql.planner.windows import expand_table_functions

__all__ = ["prepare", "RULES"]


def inline_functions(ctx: Context, query: exp.Expression) -> exp.Expression:
    """Calls of SQL functions (``CREATE FUNCTION``) replaced by their bodies (the view depends on
    them), named windows and grouping sets rewritten away (:func:`~millpond.sql.desugar.desugar`)."""
    query, used = desugar(query, ctx.catalog.functions)
    ctx.depends.update(dependency(f) for f in used)
    return query


def check_tables(ctx: Context, query: exp.Expression) -> exp.Expression:
    """Every table the query reads exists (as a table, a view or a CTE)."""
    ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
    for t in query.find_all(exp.Table):
        if isinstance(t.this, exp.Identifier) and t.name not in ctes and t.name not in ctx.catalog.views \
                and t.name not in ctx.catalog.tables:
            raise missing_relation(t.name, ctx.catalog).at(*position(t))
    return query


def name_outputs(ctx: Context, query: exp.Expression) -> exp.Expression:
    """Unnamed output columns get PostgreSQL's names (``count``, ``upper``, ``?column?``)."""
    return semantics.name_outputs(query)


def column_types(ctx: Context) -> dict[str, dict[str, semantics.SqlType]]:
    """The column types of every table and view in the catalog."""
    types = {t.name: {c.name: semantics.from_catalog(c.type) for c in t.columns} for t in ctx.catalog.tables.values()}
    types.update({v.name: {f.name: semantics.from_arrow(f.type) for f in v.schema} for v in ctx.catalog.views.values()})
    return types


def qualify_columns(ctx: Context, query: exp.Expression) -> exp.Expression:
    """sqlglot's ``qualify``: each column gets the alias of the FROM item it comes from."""
    return qualify_names(query, column_types(ctx))


def bind_semantics(ctx: Context, query: exp.Expression) -> exp.Expression:
    """PostgreSQL's meaning, explicit in every expression (or the construct refused by name)."""
    fixed, ctx.fixed_outputs = ctx.fixed_outputs, False  # the planned query's own outputs only
    return semantics.bind(query, column_types(ctx), view=True, fixed_outputs=fixed)


RULES: tuple[Callable[[Context, exp.Expression], exp.Expression], ...] = (
    inline_functions,
    expand_table_functions,
    check_tables,
    name_outputs,
    qualify_columns,
    unnest_subqueries,
    bind_semantics,
)


def prepare(ctx: Context, query: exp.Expression) -> exp.Expression:
    if not isinstance(query, (exp.Select, exp.SetOperation, exp.Subquery)):
        raise err(f"a materialized view must be a query, got {query.key.upper()}", query)
    query = query.copy()
    for rule in RULES:
        query = rule(ctx, query)
    return query

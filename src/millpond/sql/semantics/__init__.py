"""One meaning for SQL: PostgreSQL's, in a view (evaluated by Spark) and in a query (by DuckDB).

A query parsed in the postgres dialect and qualified is *bound* (:func:`bind`): every expression
is typed as PostgreSQL types it and rewritten into a form that means the same in both engines —
integer division truncates, a cast to an integer rounds as PostgreSQL rounds, ``EXTRACT(DOW ...)``
counts from Sunday, ``to_char`` reads PostgreSQL's patterns, NULLs sort last ascending and first
descending. Where an engine needs its own spelling the bound tree holds an internal call
(``MP_<NAME>``), expanded only when the SQL of that engine is generated (:func:`to_spark`,
:func:`to_duckdb`). What cannot be given PostgreSQL's meaning is refused by name with a
:class:`~millpond.errors.SqlError`, at CREATE MATERIALIZED VIEW or before a query runs: an
unknown function, a type millpond does not have, a regular expression outside the core both
engines share.

The modules, one concern each:

- :mod:`~millpond.sql.semantics.types` — PostgreSQL's types, numeric result types;
- :mod:`~millpond.sql.semantics.rewrite` — the binder: scopes, columns, the dispatch to the rules;
- :mod:`~millpond.sql.semantics.casts` — literals and casts;
- :mod:`~millpond.sql.semantics.numerics` — quotients: numerics with PostgreSQL's display scale per value;
- :mod:`~millpond.sql.semantics.operators` — arithmetic, comparisons, logic, CASE;
- :mod:`~millpond.sql.semantics.registry` — every SQL function's entry: its PostgreSQL name, rule and forms;
- :mod:`~millpond.sql.semantics.functions` — strings, the dispatch of calls, the allow-list (:data:`FUNCTIONS`);
- :mod:`~millpond.sql.semantics.numbers` — functions of numbers (``round``, ``ceil``, ``sqrt``...);
- :mod:`~millpond.sql.semantics.calls` — a call's arguments as PostgreSQL's parameters take them;
- :mod:`~millpond.sql.semantics.aggregates` — aggregates and window functions;
- :mod:`~millpond.sql.semantics.datetime` — date/time arithmetic, EXTRACT, date_trunc, to_char;
- :mod:`~millpond.sql.semantics.intervals` — INTERVAL values: representation, arithmetic, text, EXTRACT;
- :mod:`~millpond.sql.semantics.interval_keys` — intervals as GROUP BY / DISTINCT keys, MIN and MAX;
- :mod:`~millpond.sql.semantics.regex` — regular expressions;
- :mod:`~millpond.sql.semantics.constants` — typed constants (``'1 day'::interval``);
- :mod:`millpond.engine.expressions` — the internal calls (and DuckDB's division) as engine SQL.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT t.i / 2 AS h FROM t AS t", dialect="postgres")
    >>> bound = bind(q, {"t": {"i": INTEGER}}, view=False)
    >>> to_duckdb(bound)
    'SELECT CAST((t.i // 2) AS INT) AS h FROM t AS t'
    >>> to_spark(bound.selects[0])
    'CAST(t.i DIV 2 AS INT) AS h'
"""

from __future__ import annotations

from typing import Mapping, Sequence

from sqlglot import exp

from millpond.sql.semantics import numerics, registry
from millpond.sql.semantics.functions import AGGREGATES, FUNCTIONS, WINDOW_FUNCTIONS
from millpond.engine.expressions import to_duckdb, to_spark
from millpond.sql.semantics.rewrite import Binder
from millpond.sql.semantics.types import (INTEGER, NUMERIC_DEFAULT, QUOTIENT_VALUE, SqlType, datatype, from_arrow,
                                         from_catalog)

__all__ = ["bind", "name_outputs", "to_spark", "to_duckdb", "sqlglot_schema", "SqlType", "from_arrow",
           "from_catalog", "FUNCTIONS", "AGGREGATES", "WINDOW_FUNCTIONS", "NUMERIC_DEFAULT"]


def bind(query: exp.Expression, tables: Mapping[str, Mapping[str, SqlType]], *, view: bool,
         fixed_outputs: bool = False, assign: Sequence[tuple[str, SqlType]] | None = None) -> exp.Expression:
    """``query`` (qualified: every column names its FROM item) with PostgreSQL's meaning made explicit.
    ``tables`` gives the column types of the tables and views it reads; ``view`` refuses what a
    materialized view cannot keep (``now()``, ``random()``); ``fixed_outputs`` gives the query's
    quotient columns as ``numeric(38,16)`` (a flow's sink columns have one scale). A query's (not a
    view's) quotient columns are divided: a view's may hold a quotient's operands
    (:mod:`millpond.engine.numerics`). ``assign`` gives the columns (name, type) an INSERT or
    UPDATE stores the query's outputs into: PostgreSQL's assignment (:mod:`~millpond.sql.semantics.assign`)."""
    binder = Binder(tables, view=view)
    query = binder.bind(query)
    root = query.this if isinstance(query, exp.Subquery) else query
    for i, (_, t) in enumerate(binder.outputs.get(id(root), [])):
        if t.dynamic and fixed_outputs:
            binder.cast_output(root, i, QUOTIENT_VALUE)
        elif t.dynamic and not view:
            binder.map_output(root, i, lambda body, _: numerics.final(body), t)
    if assign is not None:
        from millpond.sql.semantics.assign import assign_outputs

        assign_outputs(binder, root, assign)
    return query


def sqlglot_schema(tables: Mapping[str, Mapping[str, SqlType]]) -> dict[str, dict[str, str]]:
    """The column types as sqlglot's ``qualify`` takes them."""
    return {t: {c: "INTERVAL" if ty.kind == "interval" else "NUMERIC" if ty.dynamic else datatype(ty).sql("postgres")
                for c, ty in cols.items()} for t, cols in tables.items()}


def _pg_name(e: exp.Expression) -> str:
    """The name PostgreSQL gives an unnamed output column (its FigureColname)."""
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Cast):
        inner = _pg_name(e.this)
        return inner if inner != "?column?" else e.args["to"].sql("postgres").lower().split("(")[0]
    if isinstance(e, exp.Paren):
        return _pg_name(e.this)
    if isinstance(e, exp.Dot):  # (s).f
        return e.expression.name
    if isinstance(e, exp.Bracket):  # a[1], m['k']
        return _pg_name(e.this)
    if isinstance(e, exp.Array):
        return "array"
    if isinstance(e, exp.Explode) and isinstance(e.this, exp.Anonymous):  # jsonb_array_elements(j)
        return str(e.this.this).lower()
    if isinstance(e, exp.Subquery) and isinstance(e.this, exp.Select) and e.this.expressions:
        first = e.this.expressions[0]  # a scalar subquery is named after its one column
        return first.alias_or_name if isinstance(first, (exp.Alias, exp.Column)) else _pg_name(first)
    if isinstance(e, exp.Exists):
        return "exists"
    if isinstance(e, exp.Window):
        return _pg_name(e.this)
    if isinstance(e, (exp.Filter, exp.WithinGroup)):
        return _pg_name(e.this)
    if isinstance(e, exp.Pad):
        return "lpad" if e.args.get("is_left") else "rpad"
    if isinstance(e, exp.Case):
        return "case"
    if isinstance(e, exp.Anonymous):
        return str(e.this).lower()
    if (f := registry.by_node(type(e))) is not None and f.names_output:
        return f.name
    if isinstance(e, exp.Func) and not isinstance(e, (exp.Binary, exp.Unary, exp.Predicate)):
        return e.sql_name().lower()
    return "?column?"


def name_outputs(query: exp.Expression) -> exp.Expression:
    """Every unnamed SELECT item of ``query`` named as PostgreSQL names it (``count``, ``upper``,
    ``?column?``), in place."""
    for select in query.find_all(exp.Select):
        for item in list(select.expressions):
            if isinstance(item, (exp.Alias, exp.Column, exp.Star)) or item.find(exp.Star) is item:
                continue
            item.replace(exp.alias_(item.copy(), _pg_name(item), quoted=True))
    return query

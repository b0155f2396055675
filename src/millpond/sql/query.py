"""Ad-hoc queries with PostgreSQL's meaning: a SELECT is bound here (:mod:`millpond.sql.semantics`)
over the column types of the tables and views it reads, then answered by DuckDB
(:func:`millpond.serve.answer`). ``INSERT ... SELECT``, ``UPDATE`` and ``DELETE`` evaluate their
rows the same way."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.qualify_columns import quote_identifiers

from millpond.columns import ROW_ID
from millpond.engine.runtime import Runtime
from millpond.errors import MillpondError
from millpond.serve import answer
from millpond.serve.query import TARGET, by_key, pushed
from millpond.sql import semantics
from millpond.sql.desugar import desugar
from millpond.sql.names import qualify_names
from millpond.sql.statements import position
from millpond.sql.planner.windows import spell_out_table_functions
from millpond.sql.series import placeholders, spell_out

__all__ = ["run_query", "target_read", "bind_query", "bind_select", "tables_read"]


def run_query(rt: Runtime, query: exp.Expression, *, target: exp.Table | None = None, pending: bool = False,
              assign: Sequence[tuple[str, semantics.SqlType]] | None = None) -> pa.Table:
    """The result of ``query``; ``target``: the table an UPDATE or DELETE changes, which ``query``
    reads FROM (under the target's alias), its rows with their ``_row_id``; ``pending`` reads tables
    as of now: the changes appended since the last epoch too; ``assign``: the columns (name, type) an
    INSERT or UPDATE stores its outputs into."""
    _check_populated(rt, query)
    if target is not None:
        query = _targeted(query, target)
    return answer(rt, bind_query(rt, query, assign=assign), stored=target is not None, pending=pending)


def _check_populated(rt: Runtime, query: exp.Expression) -> None:
    """PostgreSQL's error for a materialized view read before it has rows: a new view is filled by
    its first epoch (``FLUSH``, or the background loop's next one), not by its ``CREATE``."""
    ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
    for table in query.find_all(exp.Table):
        name = table.name
        if name not in ctes and name in rt.catalog.views and not rt.populated(name):
            if (filling := rt.filling(name)) is not None:
                raise MillpondError(f'materialized view "{name}" has not been populated', sqlstate="55000",
                                    hint=f"it is filling in bounded epochs: {filling[0]} of {filling[1]} parts of "
                                         "its backfill read (SHOW JOBS shows its progress; FLUSH waits for it)")
            raise MillpondError(f'materialized view "{name}" has not been populated', sqlstate="55000",
                                hint="a new view is filled by its first epoch: FLUSH, or wait for the next background "
                                     "epoch (SHOW JOBS shows its backfill)")


def target_read(rt: Runtime, query: exp.Expression, target: exp.Table, *, pending: bool = False) -> str:
    """How ``run_query(query, target=target)`` reads the target's rows: ``"key"``, a lookup of the
    keys its WHERE names (:func:`millpond.serve.query.by_key`); ``"filtered"``, a scan whose slices
    lose the rows its WHERE's bounds on integer columns drop as they are read
    (:func:`millpond.serve.query.pushed`); else ``"scan"``, every row through DuckDB."""
    bound = bind_query(rt, _targeted(query, target))
    name = target.name + TARGET
    if by_key(rt, bound, name, pending=pending) is not None:
        return "key"
    return "filtered" if pushed(rt, bound, name) else "scan"


def _targeted(query: exp.Expression, target: exp.Table) -> exp.Expression:
    query = query.copy()
    query.args["from_"].this.replace(exp.Table(this=exp.to_identifier(target.name + TARGET, quoted=True),
                                              alias=exp.TableAlias(this=exp.to_identifier(target.alias_or_name))))
    return query


def bind_query(rt: Runtime, query: exp.Expression, *,
               assign: Sequence[tuple[str, semantics.SqlType]] | None = None) -> exp.Expression:
    """``query`` qualified and bound: PostgreSQL's meaning, explicit for DuckDB."""
    query, _ = desugar(query.copy(), rt.catalog.functions)
    query, series = placeholders(query)
    query = spell_out_table_functions(rt.catalog, query)
    types = {name: {series[name].column: series[name].type} if name in series else
             _located(query, name, lambda n=name: _columns(rt, n)) for name in tables_read(query)}
    return spell_out(bind_select(query, types, assign=assign), series)


def _located(query: exp.Expression, name: str, columns: Callable[[], dict[str, semantics.SqlType]]) \
        -> dict[str, semantics.SqlType]:
    """``columns()`` of relation ``name``; an unknown relation's error at its first mention."""
    try:
        return columns()
    except MillpondError as exc:
        table = next((t for t in query.find_all(exp.Table) if t.name == name), None)
        raise exc.at(*position(table)) from None


def tables_read(query: exp.Expression) -> set[str]:
    """The names of the tables and views a query reads (not its CTEs)."""
    ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
    return {t.name for t in query.find_all(exp.Table) if isinstance(t.this, exp.Identifier)} - ctes


def bind_select(query: exp.Expression, types: Mapping[str, Mapping[str, semantics.SqlType]], *,
                assign: Sequence[tuple[str, semantics.SqlType]] | None = None) -> exp.Expression:
    """A query over relations with the column ``types`` (name -> column -> type), bound."""
    query = qualify_names(semantics.name_outputs(query.copy()), types)
    query = quote_identifiers(query, dialect="postgres", identify=False)  # names such as "?column?" or "a b"
    return semantics.bind(query, types, view=False, assign=assign)


def _columns(rt: Runtime, name: str) -> dict[str, semantics.SqlType]:
    catalog = rt.catalog
    if name.endswith(TARGET) and name.removesuffix(TARGET) in catalog.tables:
        return _columns(rt, name.removesuffix(TARGET)) | {ROW_ID: semantics.from_arrow(pa.int64())}
    if name in catalog.tables:
        return {c.name: semantics.from_catalog(c.type) for c in catalog.tables[name].columns}
    if name in catalog.views:
        return {f.name: semantics.from_arrow(f.type) for f in catalog.views[name].schema}
    schema = rt.snapshot(name).schema  # a system view, or an unknown name (its error)
    return {f.name: semantics.from_arrow(f.type) for f in schema}

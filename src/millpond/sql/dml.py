"""DML: ``INSERT``, ``UPDATE``, ``DELETE`` on tables.

``INSERT ... VALUES`` and ``INSERT ... SELECT`` evaluate their rows with DuckDB, then go through
ingest like any insert. ``UPDATE`` and ``DELETE`` read the rows they touch (with their
``_row_id``) as of now — the committed table and the changes appended since, looked up by key
when the WHERE names the primary key (:mod:`millpond.serve.query`) — and append the retractions
and new rows as one atomic batch. One that reads other tables or views commits the epochs in
flight first, so it reads them with the statements before it.
"""

from __future__ import annotations

from sqlglot import exp

from millpond.catalog import TableDef
from millpond.columns import ROW_ID
from millpond.engine import ingest
from millpond.engine.runtime import Runtime
from millpond.errors import CatalogError, SqlError
from millpond.defaults import default
from millpond.sql.query import run_query, tables_read, target_read
from millpond.sql.semantics.assign import column_type, literal_for
from millpond.sql.statements import position

__all__ = ["insert", "delete", "update"]


def insert(rt: Runtime, s: exp.Insert) -> None:
    target = s.this
    cols = None
    if isinstance(target, exp.Schema):
        cols = [c.name for c in target.expressions]
        target = target.this
    t = _writable(rt, target)
    names = cols or [c.name for c in t.columns]
    body = s.expression
    types = {c.name: c.type for c in t.columns}
    if isinstance(body, exp.Values):
        widest = max((len(row.expressions) for row in body.expressions), default=0)
        if cols is None and widest < len(names):  # PostgreSQL: no column list takes the first N columns
            names = names[:widest]
        for row in body.expressions:
            if len(row.expressions) != len(names):  # PostgreSQL's words
                more = "expressions than target columns" if len(row.expressions) > len(names) else \
                    "target columns than expressions"
                line, col = position(row)
                raise SqlError(f"INSERT has more {more} ({len(row.expressions)} values for {len(names)} columns "
                               f"in {row.sql('postgres')})", line=line, col=col, sqlstate="42601")
            _literals(list(row.expressions), names, types)
        alias = exp.TableAlias(this=exp.to_identifier("_v"), columns=[exp.to_identifier(n) for n in names])
        query = exp.select(*[exp.column(n, "_v") for n in names]).from_(
            exp.Values(expressions=body.expressions, alias=alias))
    else:
        query = body
        if isinstance(query, exp.Select):  # its own string constants are typed by the columns, as VALUES's
            _literals([i.this if isinstance(i, exp.Alias) else i for i in query.expressions], names, types)
        if tables_read(query):  # like DELETE and UPDATE, it reads what the statements before it wrote
            rt.flush()
    rows = run_query(rt, query, assign=[(n, column_type(types[n])) for n in names if n in types])
    if cols is None and rows.num_columns < len(names):  # a query's N columns: the table's first N
        names = names[:rows.num_columns]
    if rows.num_columns != len(names):
        raise SqlError(f"INSERT INTO {t.name}: {rows.num_columns} values for {len(names)} columns")
    rows = rows.rename_columns(names)
    for c in t.columns:
        if c.name not in names:
            rows = rows.append_column(c.name, default(c.field, rows.num_rows))  # its DEFAULT, or NULL
    ingest.insert(rt, t, ingest.conform_rows(t, rows))


def _literals(values: list[exp.Expression], names: list[str], types: dict[str, str]) -> None:
    """Each string constant of ``values`` read by the input rules of its column's type, as PostgreSQL
    reads an unknown-typed literal ('1 day 02:00', '2001-01-01 18:00:00+02', '{1,2}', '\\x0a0b')."""
    for value, name in zip(values, names):
        typed = literal_for(value, types[name]) if name in types else value
        if typed is not value:
            value.replace(typed)


def _writable(rt: Runtime, table: exp.Expression) -> TableDef:
    """The table a statement writes, or PostgreSQL's error at its name."""
    try:
        return rt.catalog.writable(table.name)
    except CatalogError as exc:
        raise exc.at(*position(table)) from None


def _changeable(rt: Runtime, table: exp.Expression, verb: str) -> TableDef:
    t = _writable(rt, table)
    if t.append_only:
        raise SqlError(f"{verb} on table {t.name!r}: it is APPEND ONLY (rows can only be inserted)")
    return t


def _as_of_now(rt: Runtime, t: TableDef, *queries: exp.Expression) -> bool:
    """Whether ``queries`` read only ``t`` (read as of now); else the epochs in flight are committed."""
    if set().union(*(tables_read(q) for q in queries)) <= {t.name}:
        return True
    rt.flush()
    return False


LOOKUP_KEYS = 50_000  # a DELETE of at most this many rows of a keyed table reads the rest of their columns by key


def delete(rt: Runtime, s: exp.Delete) -> None:
    t = _changeable(rt, s.this, "DELETE")
    where = s.args.get("where")
    query = exp.select("*").from_(t.name).where(where.this if where else None)
    pending = _as_of_now(rt, t, query)
    key = rt.key_of(t.name)
    if key and where is not None and target_read(rt, query, s.this, pending=pending) == "scan":
        # the keys the WHERE selects, from the columns it reads; then their rows (a scan of every
        # column of every row through DuckDB costs more than reading twice the columns it needs)
        keys = run_query(rt, exp.select(*(exp.column(k, quoted=True) for k in key)).from_(t.name).where(
            where.this.copy()), target=s.this, pending=pending)
        if keys.num_rows <= LOOKUP_KEYS:  # (TPC-H's RF2 at SF 1, 5,913 of 6M lineitems: 7.6 -> 4.5 s)
            ingest.append_changes(rt, t, rt.rows_by_key(t.name, keys, hidden=True, pending=pending), None)
            return
    ingest.append_changes(rt, t, run_query(rt, query, target=s.this, pending=pending), None)


def update(rt: Runtime, s: exp.Update) -> None:
    t = _changeable(rt, s.this, "UPDATE")
    sets = {eq.this.name: eq.expression for eq in s.expressions}
    unknown = set(sets) - {c.name for c in t.columns}
    if unknown:
        name = sorted(unknown)[0]
        line, col = position(next(eq.this for eq in s.expressions if eq.this.name == name))
        raise SqlError(f'column "{name}" of relation "{t.name}" does not exist', line=line, col=col, sqlstate="42703")
    where = s.args.get("where")
    cond = where.this if where else None
    projections = [exp.alias_(literal_for(sets[c.name].copy(), c.type) if c.name in sets else
                              exp.column(c.name, quoted=True), c.name, quoted=True) for c in t.columns]
    old_query = exp.select("*").from_(t.name).where(cond)
    new_query = exp.select(*projections, exp.column(ROW_ID)).from_(t.name).where(cond)
    pending = _as_of_now(rt, t, old_query, new_query)
    old = run_query(rt, old_query, target=s.this, pending=pending)
    new = run_query(rt, new_query, target=s.this, pending=pending,
                    assign=[(c.name, column_type(c.type)) for c in t.columns])
    rows = ingest.conform_rows(t, new.select([c.name for c in t.columns]))
    ingest.append_changes(rt, t, old, rows.append_column(ROW_ID, new.column(ROW_ID)))

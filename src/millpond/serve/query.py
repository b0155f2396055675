"""Ad-hoc queries: a SELECT answered by DuckDB over the committed snapshots of the tables and
views it reads (read-your-writes after ``FLUSH``). DuckDB SQL is generated here, where it runs.
A relation read only by its key (``WHERE k = …``, ``k IN (…)`` on a table's primary key or a
view's group key) is looked up in state by key: its cost follows the keys, not the relation.

The query comes bound (:func:`millpond.sql.query.bind_query`): its internal calls expand to
DuckDB's spelling of PostgreSQL's meaning (:mod:`millpond.engine.expressions`). An INTERVAL column of
the result is Arrow ``month_day_nano_interval`` (stored, and in DuckDB, it is the struct of
:data:`millpond.catalog.types.INTERVAL`); a quotient column a decimal with each value's display
scale (stored, and in DuckDB, it is its PostgreSQL text: :mod:`millpond.serve.display`)."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from datetime import timezone
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
from sqlglot import exp

from millpond import duck, jsonb, pgerrors
from millpond.catalog.types import INTERVAL
from millpond.engine.expressions import to_duckdb
from millpond.engine.numerics import is_quotient
from millpond.errors import SqlError
from millpond.log.conform import from_interval
from millpond.pyfunctions import raised
from millpond.serve.display import to_decimal

if TYPE_CHECKING:
    from millpond.engine.runtime import Runtime

__all__ = ["answer", "by_key", "pushed", "TARGET"]

TARGET = "#target"  # the table an UPDATE or DELETE changes is read under its name and this: only it has _row_id


def answer(rt: Runtime, query: exp.Expression, *, stored: bool = False, pending: bool = False) -> pa.Table:
    """The result of ``query``; a relation named ``<table>#target`` (:data:`TARGET`) is ``<table>``
    with its ``_row_id`` (the rows an UPDATE or DELETE changes); ``stored``: the result is written
    back, its columns in their stored forms; ``pending`` reads tables as of now (:meth:`~millpond.engine.runtime.Runtime.snapshot`). A
    relation the query reads only by its key (:func:`by_key`) is looked up, not scanned."""
    con = duck.cursor()
    try:
        ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
        query, registered = _as_of(rt, query, con, ctes)
        _upqueries(rt, query, ctes)
        refs = Counter(t.name for t in query.find_all(exp.Table) if isinstance(t.this, exp.Identifier))
        used = _columns_used(query)
        streamed = []
        for name in set(refs) - ctes:
            if name in registered:
                continue
            real, hidden = name.removesuffix(TARGET), name.endswith(TARGET)
            keys = by_key(rt, query, name, pending=pending)
            if keys is not None:
                con.register(name, rt.rows_by_key(real, keys, hidden=hidden, pending=pending))
            elif refs[name] == 1:  # read once: streamed, the rows its WHERE surely drops dropped as read
                con.register(name, rt.reader(real, hidden=hidden, pending=pending, columns=used,
                                             where=pushed(rt, query, name)))
                streamed.append(name)
            else:
                con.register(name, rt.snapshot(real, hidden=hidden, pending=pending, columns=used))
        sql = to_duckdb(query)
        try:
            try:
                result = con.sql(sql).to_arrow_table()
            except duckdb.InvalidInputException as exc:  # a plan that scans a streamed relation twice
                if "already been consumed" not in str(exc):
                    raise
                for name in streamed:
                    con.register(name, rt.snapshot(name.removesuffix(TARGET), hidden=name.endswith(TARGET),
                                                   pending=pending, columns=used))
                result = con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            if (python := raised(exc)) is not None:  # a Python function raised (SQLSTATE 38000)
                raise SqlError(python, sqlstate="38000") from None
            if (pg := pgerrors.translate(str(exc))) is not None:  # a data error, in PostgreSQL's words
                raise SqlError(pg.message, sqlstate=pg.sqlstate) from None
            raise SqlError(f"query failed: {exc}") from None
        return _shown(result, intervals=not stored)
    finally:
        con.close()


def _columns_used(query: exp.Expression) -> set[str] | None:
    """The names of every column the bound query mentions, of any relation (the binder spelled out
    its stars, ``USING`` and ``NATURAL``): a relation it reads needs none of its other columns, and
    a read of fewer converts fewer (a sum over one column of a 6M-row table: 7.8 -> 2.2 s). None (all
    columns) when a star is left that is not ``count(*)``'s."""
    if any(not isinstance(star.parent, exp.Count) for star in query.find_all(exp.Star)):
        return None
    return {column.name for column in query.find_all(exp.Column)}


def _upqueries(rt: Runtime, query: exp.Expression, ctes: set[str]) -> None:
    """Each partial view the query reads (:mod:`millpond.engine.partial`) must be read by its key:
    the keys its WHERE names are filled first (an upquery, :meth:`Runtime.fill`)."""
    for table in query.find_all(exp.Table):
        view = rt.catalog.views.get(table.name)
        if table.name in ctes or view is None or not view.partial:
            continue
        column, select = view.partial["key"], table.find_ancestor(exp.Select)
        keys = _constraint(select, table.alias_or_name, column, integer=False) if select is not None else None
        if keys is None:
            raise SqlError(f"{table.name!r} is a partial view: it is read by its key {column!r} — add "
                           f"WHERE {column} = <value> or {column} IN (<values>) (a condition the WHERE ANDs "
                           "with the rest); to read all of it, create it without partial = true")
        rt.fill(table.name, keys)


MAX_KEYS = 100_000  # more key combinations than this in one query: the relation is scanned


def by_key(rt: Runtime, query: exp.Expression, name: str, *, pending: bool = False) -> pa.Table | None:
    """The keys to read ``name`` by, when every reference to it in ``query`` is filtered by its
    key (:meth:`~millpond.engine.runtime.Runtime.key_of`): key columns compared equal to constants
    (``=``, ``IN``) or, integer ones, bounded (``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``) in
    conjuncts of the WHERE of the SELECT that reads it, at least one key column so. An integer key
    column the WHERE leaves open (or half open) takes the values between the least and greatest it
    has in state (:meth:`~millpond.engine.reads.Reads.key_bounds`: an order's line numbers, 1 to 7).
    Reading only those keys' rows answers the query: every other row fails a conjunct. None (scan
    it) when that is more than :data:`MAX_KEYS` keys."""
    real = name.removesuffix(TARGET)
    key = rt.key_of(real)
    schema = rt.catalog.relation(real).schema if key else None
    if not key or not all(_exact(schema.field(k).type) for k in key):
        return None
    bounds: dict[str, tuple[int, int] | None] = {}
    found: list[pa.Table] = []
    for table in query.find_all(exp.Table):
        if table.name != name:
            continue
        select = table.find_ancestor(exp.Select)
        if select is None:
            return None
        constraints = [_constraint(select, table.alias_or_name, k, pa.types.is_integer(schema.field(k).type))
                       for k in key]
        if all(c is None for c in constraints):
            return None
        columns = []
        for k, c in zip(key, constraints):
            if not isinstance(c, pa.Array):
                if not pa.types.is_integer(schema.field(k).type):
                    return None
                if k not in bounds:
                    bounds[k] = rt.key_bounds(real, k, pending=pending)
                if bounds[k] is None:
                    return None
                low, high = c or (None, None)
                low = bounds[k][0] if low is None else max(low, bounds[k][0])
                high = bounds[k][1] if high is None else min(high, bounds[k][1])
                if high - low >= MAX_KEYS:
                    return None
                c = pa.array(np.arange(low, max(low, high + 1), dtype=np.int64))
            columns.append(c)
        if math.prod(len(c) for c in columns) > MAX_KEYS:
            return None
        combos = pa.table({k: c for k, c in zip(key, columns[:1])})
        for k, c in zip(key[1:], columns[1:]):
            combos = _cross(combos, k, c)
        found.append(combos)
    try:
        return pa.concat_tables([f.cast(pa.schema([schema.field(k) for k in key])) for f in found])
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):  # a constant of another type
        return None


def _exact(t: pa.DataType) -> bool:
    """A key type whose constants convert to the column's values exactly as PostgreSQL compares
    them (times, intervals and floating point are left to the query: time zones, NaN)."""
    return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) \
        or pa.types.is_decimal(t) or pa.types.is_date(t) or pa.types.is_boolean(t)


def _cross(left: pa.Table, name: str, values: pa.Array) -> pa.Table:
    """Every row of ``left`` with every one of ``values`` as column ``name``."""
    idx = np.repeat(np.arange(left.num_rows), len(values))
    return left.take(pa.array(idx)).append_column(name, pa.concat_arrays([values] * left.num_rows)
                                                  if left.num_rows else values.slice(0, 0))


def pushed(rt: Runtime, query: exp.Expression, name: str) -> dict[str, pa.Array | tuple[int | None, int | None]]:
    """What the WHERE of the SELECT reading ``name`` (once) says of its integer columns
    (:func:`_constraint`), as :meth:`~millpond.engine.reads.Reads.reader` drops rows by it: a
    conjunct of that WHERE must hold of every row the SELECT keeps, whatever it joins (a row of
    an outer join's other side that finds no match has NULLs there, which fail it too)."""
    table = next(t for t in query.find_all(exp.Table) if t.name == name)
    select = table.find_ancestor(exp.Select)
    real = name.removesuffix(TARGET)
    rel = rt.catalog.tables.get(real) or rt.catalog.views.get(real)  # (not a system view)
    if select is None or select.args.get("where") is None or rel is None:
        return {}
    out: dict[str, pa.Array | tuple[int | None, int | None]] = {}
    mentioned = {c.name for c in select.args["where"].find_all(exp.Column)}
    for field in rel.schema:
        if field.name not in mentioned or not pa.types.is_integer(field.type):
            continue
        kept = _constraint(select, table.alias_or_name, field.name, integer=True)
        if isinstance(kept, pa.Array):
            try:
                kept = kept.cast(field.type)  # (safe: a value it cannot hold exactly is not pushed)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                continue
        if kept is not None:
            out[field.name] = kept
    return out


def _constraint(select: exp.Select, alias: str, column: str, integer: bool
                ) -> pa.Array | tuple[int | None, int | None] | None:
    """What conjuncts of ``select``'s WHERE say of ``alias.column``: the values it is compared equal
    to (an array), else, for an ``integer`` column, the least and greatest value its comparisons
    with constants leave (either None: open), else None."""
    where = select.args.get("where")
    conjuncts = list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And) else \
        [where.this] if where is not None else []

    def ours(e: exp.Expression) -> bool:
        return isinstance(e, exp.Column) and e.name == column and e.table in ("", alias)

    def value(e: exp.Expression):  # noqa: ANN202
        while isinstance(e, (exp.Cast, exp.Paren)):
            e = e.this
        if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal):
            return -e.this.to_py()
        if isinstance(e, exp.Literal):
            return e.to_py()
        raise ValueError(e)

    def number(e: exp.Expression) -> Decimal:
        v = value(e)
        if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)) or (isinstance(v, float) and not
                                                                                math.isfinite(v)):
            raise ValueError(e)
        return Decimal(str(v))
    low = high = None
    flipped = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}
    for c in conjuncts:
        while isinstance(c, exp.Paren):
            c = c.this
        try:
            if isinstance(c, exp.EQ) and (ours(c.this) or ours(c.expression)):
                return pa.array([value(c.expression if ours(c.this) else c.this)])
            if isinstance(c, exp.In) and ours(c.this) and c.expressions:
                return pa.array([value(e) for e in c.expressions])
            if not integer:
                continue
            bounds: list[tuple[type, Decimal]] = []
            if isinstance(c, exp.Between) and ours(c.this):
                ends = [number(c.args["low"]), number(c.args["high"])]
                if c.args.get("symmetric"):  # BETWEEN SYMMETRIC: either order
                    ends.sort()
                bounds = [(exp.GTE, ends[0]), (exp.LTE, ends[1])]
            elif type(c) in flipped and ours(c.this):
                bounds = [(type(c), number(c.expression))]
            elif type(c) in flipped and ours(c.expression):
                bounds = [(flipped[type(c)], number(c.this))]
            for op, v in bounds:
                if op in (exp.GT, exp.GTE):
                    v = math.floor(v) + 1 if op is exp.GT else math.ceil(v)
                    low = v if low is None else max(low, v)
                else:
                    v = math.ceil(v) - 1 if op is exp.LT else math.floor(v)
                    high = v if high is None else min(high, v)
        except (ValueError, pa.ArrowInvalid, pa.ArrowTypeError):
            continue
    return None if low is None and high is None else (low, high)


def _as_of(rt: Runtime, query: exp.Expression, con: duckdb.DuckDBPyConnection, ctes: set[str]
           ) -> tuple[exp.Expression, set[str]]:
    """Each ``t AS OF EPOCH n`` / ``AS OF TIMESTAMP '...'`` (parsed as ``FOR SYSTEM_TIME AS OF``)
    read as of that epoch (:meth:`~millpond.engine.runtime.Runtime.rows_at`), registered under a
    name of its own; the relations without one are read as of the last committed epoch. All read
    the one manifest version in force, so a join of several relations is consistent. Returns the
    query and the names registered."""
    registered: set[str] = set()
    for table in list(query.find_all(exp.Table)):
        version = table.args.get("version")
        if version is None:
            continue
        if table.name in ctes:
            raise SqlError(f"AS OF applies to tables and views, not to the WITH query {table.name!r}")
        epoch = _epoch(rt, version.expression, con)
        name = f"{table.name}@{epoch}"
        if name not in registered:
            con.register(name, rt.rows_at(table.name, epoch))
            registered.add(name)
        alias = table.alias or table.name
        table.replace(exp.Table(this=exp.to_identifier(name, quoted=True),
                                alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return query, registered


def _epoch(rt: Runtime, when: exp.Expression, con: duckdb.DuckDBPyConnection) -> int:
    """The epoch an ``AS OF`` names: a number is an epoch, a timestamp the last epoch committed at
    or before it (without a time zone: UTC)."""
    if isinstance(when, exp.Literal) and not when.is_string:
        if not when.this.isdigit():
            raise SqlError(f"AS OF EPOCH takes a whole number, got {when.sql('postgres')}")
        return int(when.this)
    try:
        value = con.sql(f"SELECT CAST({to_duckdb(when)} AS TIMESTAMPTZ)").fetchall()[0][0]
    except duckdb.Error as exc:
        raise SqlError(f"AS OF TIMESTAMP {when.sql('postgres')}: not a timestamp ({exc})") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return rt.epoch_at(value)


def _shown(table: pa.Table, *, intervals: bool = True) -> pa.Table:
    """``table`` with its quotients as decimals with their display scales
    (:mod:`millpond.serve.display`: no table column holds the stored form), its INTERVAL
    columns as ``month_day_nano_interval`` and its JSONB columns as ``arrow.json`` text (unless ``intervals`` is False: a ``stored`` read keeps
    them stored, UPDATE and DELETE append the rows they read)."""
    for i, f in enumerate(table.schema):
        if intervals and f.type.equals(INTERVAL):
            table = table.set_column(i, pa.field(f.name, pa.month_day_nano_interval(), f.nullable),
                                     from_interval(table.column(i)))
        elif intervals and jsonb.is_jsonb(f.type):  # its text, as Arrow's JSON type
            table = table.set_column(i, pa.field(f.name, pa.json_(), f.nullable), pa.ExtensionArray.from_storage(
                pa.json_(), pa.array(jsonb.texts(table.column(i)), pa.string())))
        elif is_quotient(f.type):
            table = table.set_column(i, *to_decimal(f.name, table.column(i)))
    return table

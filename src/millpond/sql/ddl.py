"""DDL: ``CREATE TABLE``, ``CREATE MATERIALIZED VIEW``, ``DROP``, ``SET``.

Each statement that changes the catalog writes one catalog version. A view's catalog entry holds
its CREATE statement as written and its bound plan (:func:`millpond.engine.plan.encode`): the plan,
with its state ids, is what every later epoch runs.
"""

from __future__ import annotations

from sqlglot import exp

from millpond.catalog import Column
from millpond.catalog.types import normalize_type
from millpond.columns import RESERVED_PREFIX
from millpond.engine import plan as P
from millpond.engine.runtime import Runtime
from millpond.errors import CatalogError, SqlError
from millpond.sql.planner import plan_view
from millpond.sql.statements import source

__all__ = ["create", "drop", "set_"]


def create(rt: Runtime, s: exp.Create) -> None:
    kind = (s.args.get("kind") or "").upper()
    if kind == "TABLE":
        return _create_table(rt, s)
    if kind == "VIEW":
        return _create_view(rt, s)
    raise SqlError(f"CREATE {kind} is not supported (tables and materialized views are)")


def _create_table(rt: Runtime, s: exp.Create) -> None:
    schema = s.this
    if not isinstance(schema, exp.Schema) or s.expression is not None:
        raise SqlError("CREATE TABLE needs a column list (CREATE TABLE ... AS SELECT is not supported)")
    name = schema.this.name
    if s.args.get("exists") and name in rt.catalog.tables:
        return
    cols, pk = [], []
    for d in schema.expressions:
        if isinstance(d, exp.ColumnDef):
            if d.args.get("kind") is None:
                raise SqlError(f"column {d.name!r} of {name!r} needs a type")
            cols.append(Column(d.name, normalize_type(d.args["kind"])))
            if any(isinstance(c.args.get("kind"), exp.PrimaryKeyColumnConstraint)
                   for c in d.args.get("constraints") or []):
                pk.append(d.name)
        elif isinstance(d, exp.PrimaryKey):
            pk.extend(e.name for e in d.expressions)
    append_only = _append_only_property(name, s)
    if append_only and pk:
        raise SqlError(f"table {name!r}: an APPEND ONLY table cannot have a primary key (an insert of an existing "
                       "key would replace a row)")
    names = [c.name for c in cols]
    for bad in [p for p in pk if p not in names] + [n for n in names if n.startswith(RESERVED_PREFIX)]:
        raise SqlError(f"table {name!r}: invalid column {bad!r} (unknown primary key column, "
                       f"or a name starting with {RESERVED_PREFIX!r}, which millpond reserves)")
    rt.commit_catalog(rt.catalog.with_table(name, tuple(cols), tuple(pk), append_only=append_only))


def _append_only_property(table: str, s: exp.Create) -> bool:
    """``WITH (append_only = true)`` (or ``APPEND ONLY``); any other table property is refused."""
    props = s.args.get("properties")
    found = False
    for p in props.expressions if props else []:
        value = p.args.get("value")
        if isinstance(p, exp.Property) and p.name.lower() == "append_only" and isinstance(value, exp.Boolean):
            found = bool(value.this)
        else:
            raise SqlError(f"table {table!r}: unsupported table option {p.sql('postgres')!r} "
                           "(known: APPEND ONLY, or WITH (append_only = true|false))")
    return found


def _create_view(rt: Runtime, s: exp.Create) -> None:
    props = s.args.get("properties")
    if not (props and any(isinstance(p, exp.MaterializedProperty) for p in props.expressions)):
        raise SqlError("only CREATE MATERIALIZED VIEW is supported")
    name = s.this.name
    if s.args.get("exists") and name in rt.catalog.views:
        return
    plan, depends = plan_view(s.expression, rt.catalog)
    schema = rt.coordinator.executor.output_schema(plan, rt.catalog.tables)
    rt.commit_catalog(rt.catalog.with_view(name, source(s), schema, depends, P.encode(plan)))


def drop(rt: Runtime, s: exp.Drop) -> None:
    kind = (s.args.get("kind") or "").upper()
    for t in s.args.get("tables") or [s.this]:
        name = t.name
        exists = name in (rt.catalog.tables if kind == "TABLE" else rt.catalog.views)
        if not exists:
            if s.args.get("exists"):
                continue
            raise CatalogError(f"no {'table' if kind == 'TABLE' else 'materialized view'} named {name!r}")
        rt.commit_catalog(rt.catalog.without(name))
        if kind == "TABLE":  # after the catalog: a crash in between leaves a channel the next CREATE replaces
            rt.log.drop_channel(name)


def set_(rt: Runtime, s: exp.Set) -> None:
    for item in s.expressions:
        eq = item.this
        if isinstance(eq, exp.EQ) and eq.this.name.lower() == "parallelism":
            n = int(eq.expression.name)
            if n < 1:
                raise SqlError("parallelism must be at least 1")
            rt.coordinator.with_parallelism(n)
        else:
            raise SqlError(f"unknown setting {item.sql('postgres')!r} (known: parallelism)")

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
from millpond.errors import CatalogError, MillpondError, SqlError
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
    try:  # the name names the table's log channel, and so object keys
        rt.log.check_table_name(name)
    except MillpondError as exc:
        raise CatalogError(f"table name not allowed (a table's name is its log channel's): {exc}") from None
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
    t = rt.catalog.tables[name]  # its channel, now: a writer outside the database finds it, with its key
    rt.log.create_channel(t.channel, t.log_schema, id=t.channel_id, table_key=t.primary_key)


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
    on_error = _on_error_property(name, props, rt.on_error)
    plan, depends = plan_view(s.expression, rt.catalog)
    schema = rt.coordinator.executor.output_schema(plan, rt.catalog.tables)
    rt.commit_catalog(rt.catalog.with_view(name, source(s), schema, depends, P.encode(plan), on_error=on_error))


ON_ERROR = ("fail", "null")


def _on_error_property(view: str, props: exp.Properties, default: str) -> str:
    """``WITH (on_error = 'fail' | 'null')``: what a data error in the view's expressions does
    (README, "When a view fails"); any other view option is refused."""
    found = default
    for p in props.expressions:
        if isinstance(p, exp.MaterializedProperty):
            continue
        value = p.args.get("value")
        if isinstance(p, exp.Property) and p.name.lower() == "on_error" and isinstance(value, exp.Literal) \
                and value.is_string and value.this.lower() in ON_ERROR:
            found = value.this.lower()
        else:
            raise SqlError(f"view {view!r}: unsupported view option {p.sql('postgres')!r} "
                           "(known: WITH (on_error = 'fail' | 'null'))")
    return found


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
        elif isinstance(eq, exp.EQ) and eq.this.name.lower() == "on_error":
            value = eq.expression.name.lower()
            if value not in ON_ERROR:
                raise SqlError(f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, got {value!r}")
            rt.on_error = value  # the default of views created from now on
        else:
            raise SqlError(f"unknown setting {item.sql('postgres')!r} (known: parallelism, on_error)")

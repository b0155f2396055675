"""``ALTER``: a view's new definition (``ALTER MATERIALIZED VIEW v AS ...``, ``CREATE OR REPLACE
MATERIALIZED VIEW``; swapped in by :mod:`millpond.engine.alter`), ``ALTER MATERIALIZED VIEW ...
RENAME TO``, ``ALTER TABLE ... ADD COLUMN`` and ``RENAME TO``, and the ``ALTER TABLE`` actions millpond
refuses, by name.

A new definition of ``v`` is planned like a ``CREATE``; every view that reads ``v`` (and the views
that read those) gets a new definition of its own: its query, as stored, planned again over the new
rows (it reads them under their backfilling name until the swap). A reader whose query no longer
binds — a column gone, a type changed — refuses the statement, naming it. A partial view, a flow
reading one of them, or a sink of one whose columns would change refuses it too.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pyarrow as pa
from sqlglot import exp

from millpond.catalog import Catalog, TableDef, ViewDef, index_dependency, replacement
from millpond.columns import RESERVED_PREFIX
from millpond.engine import plan as P
from millpond.engine.runtime import Runtime
from millpond.errors import CatalogError, MillpondError, SqlError
from millpond.sql.column_defs import column_def, with_default
from millpond.sql.indexes import choose
from millpond.sql.query import run_query
from millpond.sql.planner import plan_view
from millpond.sql.statements import command_rest, source, view_query

__all__ = ["replace_view", "alter_command", "alter", "add_columns"]


def replace_view(rt: Runtime, name: str, sql: str, schema: pa.Schema, depends: tuple[str, ...], plan: dict, *,
                 on_error: str, partial: dict | None) -> None:
    """Give view ``name`` the definition (``sql``, ``schema``, ``depends``, encoded ``plan``), and
    the views that read it theirs planned over it, in one catalog version (module docstring)."""
    catalog = rt.catalog
    if partial or catalog.views[name].partial:
        raise SqlError(f"view {name!r}: a partial view cannot be altered in place (DROP it and CREATE it again)")
    if name in depends:
        raise SqlError(f"view {name!r}: its new definition reads the view itself")
    readers = _readers(catalog, name)
    flows = sorted(f.name for f in catalog.flows.values() if {name, *readers} & set(f.depends_on))
    if flows:
        raise CatalogError(f"cannot alter view {name!r} in place: flows {', '.join(flows)} read it; drop them first "
                           "(DROP FLOW), and create them again after the swap", sqlstate="2BP01")
    new = [(name, sql, schema, depends, plan, on_error)]
    _check_sinks(catalog, name, schema)
    pending = {name: replacement(name)}  # the new definitions' names until the swap
    planning = replace(catalog, views={**catalog.views, replacement(name): _planned(name, schema, plan)})
    sizes = rt.table_sizes()
    for w in readers:
        view = catalog.views[w]
        if view.partial:
            raise CatalogError(f"cannot alter view {name!r} in place: the partial view {w!r} reads it", sqlstate="2BP01")
        shares: dict = {}
        try:
            found, deps = plan_view(_reading(view_query(view.sql), pending), planning, views=True, eager=True,
                                    sizes=sizes, shares=shares, sample=rt.filter_share)
            found, found_schema, indexes = choose(found, planning, rt.executor)
        except MillpondError as exc:
            raise CatalogError(f"cannot alter view {name!r}: view {w!r} reads it, and its query does not bind over "
                               f"the new definition: {exc.message}", sqlstate=getattr(exc, "sqlstate", None)
                               or "42P16") from None
        _check_sinks(catalog, w, found_schema)
        back = {v: k for k, v in pending.items()}
        deps = (*(back.get(d, d) for d in deps), *map(index_dependency, indexes))
        used = {t: sizes[t] for t in sorted({s.table for s in P.sources(found)}) if t in sizes}
        encoded = {**P.encode(found), "sizes": used, "shares": shares}
        new.append((w, view.sql, found_schema, deps, encoded, view.on_error))
        pending[w] = replacement(w)
        planning = replace(planning, views={**planning.views, replacement(w): _planned(w, found_schema, encoded)})
    for w, text, s, deps, encoded, on_error_ in new:
        catalog = catalog.with_replacement(w, text, s, deps, encoded, on_error=on_error_)
    rt.commit_catalog(catalog)


def _readers(catalog: Catalog, name: str) -> list[str]:
    """The views that read ``name``, and those that read them, each after the views it reads."""
    out: list[str] = []
    todo = [name]
    while todo:
        for v in sorted(v.name for v in catalog.views.values() if todo[0] in v.depends_on):
            if v in out:
                out.remove(v)  # read by a later one too: after it
            out.append(v)
            todo.append(v)
        todo.pop(0)
    return out


def _planned(name: str, schema: pa.Schema, plan: dict) -> ViewDef:
    """What planning a reader over a new definition needs of it: its backfilling name, its columns,
    its plan (whose row key the planner reads, as it will after the swap)."""
    return ViewDef(0, replacement(name), "", ViewDef.encode_schema(schema), (), plan)


def _reading(query: exp.Expression, names: dict[str, str]) -> exp.Expression:
    """``query`` reading the relations named in ``names`` under the names they map to (aliased by
    their own name, so its columns' qualifiers still resolve); a CTE of the name shadows it."""
    query = query.copy()
    ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
    for table in list(query.find_all(exp.Table)):
        if table.name in names and table.name not in ctes and not table.args.get("db"):
            alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
            table.set("this", exp.to_identifier(names[table.name], quoted=True))
            table.set("alias", alias)
    return query


def _check_sinks(catalog: Catalog, name: str, schema: pa.Schema) -> None:
    old = catalog.views[name].schema
    sinks = sorted(k.name for k in catalog.sinks.values() if k.source == name)
    if sinks and not schema.equals(old):
        raise CatalogError(f"cannot alter view {name!r} with other columns ({', '.join(schema.names)} for "
                           f"{', '.join(old.names)}, or their types): sinks {', '.join(sinks)} write its rows out; "
                           "keep its columns, or drop the sinks first", sqlstate="2BP01")


_NAME = r'("(?:[^"]|"")+"|[\w$]+)'
_RENAME = re.compile(rf"\s*MATERIALIZED\s+VIEW\s+(IF\s+EXISTS\s+)?{_NAME}\s+RENAME\s+TO\s+{_NAME}\s*;?\s*",
                     re.IGNORECASE)


def alter_command(rt: Runtime, s: exp.Command) -> None:
    """``ALTER MATERIALIZED VIEW [IF EXISTS] v RENAME TO w`` (``ALTER MATERIALIZED VIEW v AS ...`` is
    a CREATE OR REPLACE: :func:`millpond.sql.ddl.create`): the view keeps its rows, kept changes and
    sinks under its new name; a view that other views or flows read keeps its name (their SQL names it)."""
    m = _RENAME.fullmatch(command_rest(s))
    if m is None:
        raise SqlError(f"unsupported statement {source(s).strip()[:80]!r}: ALTER MATERIALIZED VIEW v AS <query> and "
                       "ALTER MATERIALIZED VIEW v RENAME TO w are", sqlstate="0A000")
    name, to = (n[1:-1].replace('""', '"') if n.startswith('"') else n.lower() for n in m.group(2, 3))
    if name not in rt.catalog.views and m.group(1) and name not in rt.catalog.tables:
        return
    rt.commit_catalog(rt.catalog.renamed(name, to))


def alter(rt: Runtime, s: exp.Alter) -> None:
    """``ALTER TABLE t ADD [COLUMN] [IF NOT EXISTS] c type [DEFAULT constant] [NOT NULL], ...``
    (:func:`add_columns`); other actions are refused, each by name."""
    kind = (s.args.get("kind") or "").upper()
    name = s.this.name
    actions = s.args.get("actions") or []
    for action in actions:
        if isinstance(action, exp.AlterRename):
            if name in rt.catalog.views:
                raise SqlError("use ALTER MATERIALIZED VIEW to rename a materialized view", sqlstate="42809")
            if len(actions) > 1:
                raise SqlError(f"ALTER TABLE {name}: RENAME TO goes in a statement of its own", sqlstate="42601")
            if name in rt.catalog.tables or not s.args.get("exists"):
                rt.commit_catalog(rt.catalog.table_renamed(name, action.this.name))
            return
        if isinstance(action, exp.AlterColumn) and (
                {k for k, v in action.args.items() if v is not None} - {"this", "default", "drop", "allow_null"}
                or kind != "TABLE"):
            action = None
        if not isinstance(action, (exp.ColumnDef, exp.AlterColumn)):
            raise SqlError(f"ALTER {kind} ... {(action or s).sql('postgres')[:60]!r} is not supported (ALTER TABLE ... "
                           "ADD COLUMN, ALTER COLUMN ... SET/DROP DEFAULT and SET/DROP NOT NULL, RENAME TO, ALTER "
                           "MATERIALIZED VIEW v AS <query> and RENAME TO are)", sqlstate="0A000")
    if len({type(a) for a in actions}) > 1:
        raise SqlError(f"ALTER TABLE {name}: ADD COLUMN and ALTER COLUMN go in statements of their own",
                       sqlstate="0A000")
    if actions and isinstance(actions[0], exp.AlterColumn):
        alter_columns(rt, name, actions, if_exists=bool(s.args.get("exists")))
    elif actions:
        add_columns(rt, name, actions, if_exists=bool(s.args.get("exists")))


def alter_columns(rt: Runtime, name: str, actions: list[exp.AlterColumn], *, if_exists: bool = False) -> None:
    """``ALTER TABLE t ALTER [COLUMN] c SET DEFAULT e | DROP DEFAULT | SET NOT NULL | DROP NOT NULL``:
    what later inserts get or may give. The rows stored before keep their values (a column added
    with a default keeps it for the rows older than it). One catalog version, then the log channel
    (whose appends fill in what a writer leaves out)."""
    if name not in rt.catalog.tables and if_exists and name not in rt.catalog.views:
        return
    t = _alterable(rt, name, "ALTER COLUMN")
    columns = {c.name: c for c in t.columns}
    for a in actions:
        c = columns.get(a.name)
        if c is None:
            raise SqlError(f'column "{a.name}" of relation "{name}" does not exist', sqlstate="42703")
        if a.args.get("allow_null") is None:  # SET DEFAULT e, DROP DEFAULT
            columns[c.name] = with_default(rt, name, c, None if a.args.get("drop") else a.args.get("default"))
        elif a.args["allow_null"]:  # DROP NOT NULL
            if c.name in t.primary_key:
                raise SqlError(f'column "{c.name}" is in a primary key', sqlstate="42P16")
            columns[c.name] = replace(c, not_null=False)
        else:  # SET NOT NULL: every row has a value
            nulls = exp.select("count(*)").from_(exp.to_table(name, quoted=True)).where(
                exp.column(c.name, quoted=True).is_(exp.null()))
            if run_query(rt, nulls, pending=True).column(0)[0].as_py():
                raise SqlError(f'column "{c.name}" of relation "{name}" contains null values', sqlstate="23502")
            columns[c.name] = replace(c, not_null=True)
    rt.commit_catalog(rt.catalog.with_columns(name, tuple(columns.values())))
    t = rt.catalog.tables[name]
    rt.log.create_channel(t.channel, t.log_schema, id=t.channel_id, table_key=t.primary_key)


def _alterable(rt: Runtime, name: str, what: str) -> TableDef:
    """Table ``name``, if its columns may change: not a view, a source table, a flow's sink or a table
    a sink writes out."""
    if name in rt.catalog.views:
        raise SqlError(f'"{name}" is not a table (it is a materialized view: ALTER MATERIALIZED VIEW changes '
                       "its query)", sqlstate="42809")
    t = rt.catalog.table(name)
    if t.source:
        raise SqlError(f"ALTER TABLE {name} {what}: table {name!r} reads its rows from connector "
                       f"{dict(t.source).get('connector')!r}, whose columns it keeps; create it again", sqlstate="0A000")
    if (flow := rt.catalog.sink_of(name)) is not None:
        raise SqlError(f"ALTER TABLE {name} {what}: table {name!r} is the sink of flow {flow.name!r}, whose "
                       "query gives its columns", sqlstate="0A000")
    if sinks := sorted(k.name for k in rt.catalog.sinks.values() if k.source == name):
        raise CatalogError(f"ALTER TABLE {name} {what}: sinks {', '.join(sinks)} write its rows out, to a target "
                           "with its columns; drop them first (DROP SINK), and create them again after", sqlstate="2BP01")
    return t


def add_columns(rt: Runtime, name: str, defs: list[exp.ColumnDef], *, if_exists: bool = False) -> None:
    """Add the columns to table ``name`` in one catalog version, then to its log channel (a crash
    between: the next open adds them there). Nothing is rewritten: records older than a column are
    filled with its default when read, and the views, flows and indexes made before it are planned
    without it (:meth:`~millpond.catalog.TableDef.as_seen_by`): their rows do not change."""
    if name not in rt.catalog.tables and if_exists and name not in rt.catalog.views:
        return
    t = _alterable(rt, name, "ADD COLUMN")
    catalog, names = rt.catalog, {c.name for c in t.columns}
    for d in defs:
        if d.name in names:
            if d.args.get("exists"):
                continue  # PostgreSQL notices and skips it
            raise SqlError(f'column "{d.name}" of relation "{name}" already exists', sqlstate="42701")
        if d.name.startswith(RESERVED_PREFIX):
            raise SqlError(f"ALTER TABLE {name} ADD COLUMN {d.name}: a name starting with {RESERVED_PREFIX!r} is "
                           "reserved by millpond")
        if any(isinstance(c.args.get("kind"), exp.PrimaryKeyColumnConstraint) for c in d.args.get("constraints") or []):
            raise SqlError(f"ALTER TABLE {name} ADD COLUMN {d.name} PRIMARY KEY: a table's primary key is fixed when it "
                           "is created", sqlstate="0A000")
        column = column_def(rt, name, d)
        if column.not_null and column.default is None and rt.log.channel(t.channel).end:
            raise SqlError(f'column "{d.name}" of relation "{name}" contains null values', sqlstate="23502",
                           hint="give it a DEFAULT (its rows so far take it), or add it without NOT NULL")
        catalog, names = catalog.with_column(name, column), names | {d.name}
    if catalog is not rt.catalog:
        rt.commit_catalog(catalog)
        t = rt.catalog.tables[name]
        rt.log.create_channel(t.channel, t.log_schema, id=t.channel_id, table_key=t.primary_key)

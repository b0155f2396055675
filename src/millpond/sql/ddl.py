"""DDL: ``CREATE TABLE``, ``CREATE MATERIALIZED VIEW``, ``CREATE INDEX``, ``CREATE FUNCTION``, ``DROP``, ``SET``.

Each statement that changes the catalog writes one catalog version. A view's catalog entry holds
its CREATE statement as written and its bound plan (:func:`millpond.engine.plan.encode`): the plan,
with its state ids, is what every later epoch runs.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Mapping

import pyarrow as pa
import sqlglot
from sqlglot import exp

from millpond.catalog import FunctionDef, Retention, index_dependency
from millpond.columns import RESERVED_PREFIX
from millpond.connectors import check as check_source, dropped as source_dropped, local_listing_error
from millpond.engine import plan as P
from millpond.engine.filling import BACKFILL_ROWS
from millpond.engine.partial import DEFAULT_MAX_KEYS, NotPartial
from millpond.engine.partial import trace as partial_trace
from millpond.engine.runtime import Runtime
from millpond.errors import CatalogError, MillpondError, MillpondNotice, SqlError
from millpond.sql import functions
from millpond.sql.column_defs import column_def
from millpond.sql.indexes import choose
from millpond.sql.planner import plan_view
from millpond.sql.query import bind_select
from millpond.sql import alter
from millpond.sql.statements import source, view_definition

__all__ = ["create", "drop", "set_"]


def create(rt: Runtime, s: exp.Create) -> None:
    kind = (s.args.get("kind") or "").upper()
    if kind == "TABLE":
        return _create_table(rt, s)
    if kind == "VIEW":
        return _create_view(rt, s)
    if kind == "FUNCTION":
        return _create_function(rt, s)
    if kind == "INDEX":
        return _create_index(rt, s)
    raise SqlError(f"CREATE {kind} is not supported (tables, materialized views, indexes and SQL functions are)")


def _create_table(rt: Runtime, s: exp.Create) -> None:
    schema = s.this
    if isinstance(schema, exp.Table) and s.args.get("properties") is not None and s.expression is None:
        schema = exp.Schema(this=schema, expressions=[])  # CREATE TABLE t WITH (...): a source's columns
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
            cols.append(column_def(rt, name, d))
            if any(isinstance(c.args.get("kind"), exp.PrimaryKeyColumnConstraint)
                   for c in d.args.get("constraints") or []):
                pk.append(d.name)
        elif isinstance(d, exp.PrimaryKey):
            pk.extend(e.name for e in d.expressions)
        else:  # PostgreSQL would enforce it: refused, not ignored
            raise SqlError(f"table {name!r}: {d.sql('postgres')} is not supported (a table takes PRIMARY KEY, "
                           "NOT NULL and DEFAULT)", sqlstate="0A000")
    append_only, source = _table_options(name, s)
    if source:
        source, cols = check_source(name, source, cols, pk)
    if not cols:
        raise SqlError(f"table {name!r} needs at least one column")
    if append_only and pk:
        raise SqlError(f"table {name!r}: an APPEND ONLY table cannot have a primary key (an insert of an existing "
                       "key would replace a row)")
    names = [c.name for c in cols]
    for p in [c.name for c in cols if c.type == "INTERVAL" and c.name in pk]:  # keys are compared field by field
        raise SqlError(f"table {name!r}: an INTERVAL primary key ({p!r}) is not supported (PostgreSQL's key "
                       "equality makes '24 hours' and '1 day' one key)")
    for c in [c for c in cols if c.name in pk and (c.type.endswith(("[]", ">", ")")) and not c.type.startswith("DECIMAL"))]:
        raise SqlError(f"table {name!r}: a primary key of type {c.type} ({c.name!r}) is not supported (a key is "
                       "a scalar column)")
    for bad in [p for p in pk if p not in names] + [n for n in names if n.startswith(RESERVED_PREFIX)]:
        raise SqlError(f"table {name!r}: invalid column {bad!r} (unknown primary key column, "
                       f"or a name starting with {RESERVED_PREFIX!r}, which millpond reserves)")
    rt.commit_catalog(rt.catalog.with_table(name, tuple(cols), tuple(pk), append_only=append_only,
                                            source=tuple(sorted(source.items()))))
    t = rt.catalog.tables[name]  # its channel, now: a writer outside the database finds it, with its key
    rt.log.create_channel(t.channel, t.log_schema, id=t.channel_id, table_key=t.primary_key)
    if source.get("connector") == "files" and (problem := local_listing_error(source["path"])) is not None:
        warnings.warn(f"table {name!r}: its path {source['path']!r} cannot be listed ({problem}); no file comes "
                      "in until it can (millpond_source_errors says why meanwhile)", MillpondNotice, stacklevel=2)


def _table_options(table: str, s: exp.Create) -> tuple[bool, dict[str, str]]:
    """``WITH (append_only = true)`` (or ``APPEND ONLY``), and a source table's options: ``WITH
    (connector = '<name>', ...)`` (:mod:`millpond.connectors`; option names may be dotted,
    ``properties.bootstrap.server``), checked by its connector; any other option is refused."""
    props = s.args.get("properties")
    append_only, source = False, {}
    for p in props.expressions if props else []:
        value = p.args.get("value")
        if isinstance(p, exp.Property) and p.name.lower() == "append_only" and isinstance(value, exp.Boolean):
            append_only = bool(value.this)
        elif isinstance(p, exp.FileFormatProperty):  # format = 'parquet'
            source["format"] = p.name.lower()
        elif isinstance(p, exp.LocationProperty) and isinstance(p.this, exp.Literal):  # location = '...'
            source["location"] = p.this.this
        elif isinstance(p, exp.Property) and isinstance(value, exp.Literal) and value.is_string:
            name = p.this.sql("postgres") if isinstance(p.this, exp.Dot) else p.name
            source[name.replace('"', "").lower()] = value.this
        else:
            raise SqlError(f"table {table!r}: unsupported table option {p.sql('postgres')!r} "
                           "(known: APPEND ONLY, or WITH (append_only = true|false); a source's options as "
                           "strings, WITH (connector = 'files' | 'kafka' | 'deltalake' | 'iceberg', ...))")
    if source and "connector" not in source:
        raise SqlError(f"table {table!r}: its options {', '.join(sorted(source))} need a connector "
                       "(WITH (connector = 'files' | 'kafka' | 'deltalake' | 'iceberg', ...))")
    return append_only, source


def _create_view(rt: Runtime, s: exp.Create) -> None:
    props = s.args.get("properties")
    if not (props and any(isinstance(p, exp.MaterializedProperty) for p in props.expressions)):
        raise SqlError("only CREATE MATERIALIZED VIEW is supported")
    name = (s.this.this if isinstance(s.this, exp.Schema) else s.this).name
    if s.args.get("exists") and name in rt.catalog.views:
        return
    altered = source(s).lstrip().upper().startswith("ALTER")  # ALTER MATERIALIZED VIEW v AS ...
    if altered and name not in rt.catalog.views:
        rt.catalog.relation(name)  # none: PostgreSQL's error
        raise CatalogError(f'"{name}" is not a materialized view', sqlstate="42809")
    replacing = bool(s.args.get("replace")) and name in rt.catalog.views
    on_error, options = _view_options(name, props, rt.on_error)
    background = options.pop("background", True)  # false: the statement returns once the view is filled
    # its joins' order (planner.order) by its tables' sizes and its filters' sampled shares, stored
    # with the plan: derived again alike on open
    sizes, shares = rt.table_sizes(), {}
    plan, depends = plan_view(view_definition(s), rt.catalog, views=True, eager=True, sizes=sizes, shares=shares,
                              sample=rt.filter_share)
    sizes = {t: sizes[t] for t in sorted({src.table for src in P.sources(plan)}) if t in sizes}
    # the indexes its joins read (a partial view reads none: its inputs are restricted to its keys)
    plan, schema, indexes = choose(plan, rt.catalog, rt.executor,
                                   skip=frozenset(i.id for i in rt.catalog.indexes.values()) if options.get("partial")
                                   else frozenset())
    depends = (*depends, *map(index_dependency, indexes))
    if isinstance(s.this, exp.Schema) and len(s.this.expressions) > len(schema):
        raise SqlError(f"view {name!r}: too many column names were specified ({len(s.this.expressions)} "
                       f"for {len(schema)} columns)")
    partial = _partial(rt, name, plan, schema, options)
    encoded = {**P.encode(plan), "sizes": sizes, "shares": shares}
    if replacing:
        alter.replace_view(rt, name, source(s), schema, depends, encoded, on_error=on_error, partial=partial)
    else:
        _add_view(rt, name, source(s), schema, depends, encoded, on_error, partial)
    if not background:  # filled (or swapped in) by the epochs it takes, before the statement returns
        rt.flush()
        view = rt.catalog.views.get(name)
        failure = rt.manifest.failed.get(f"o{view.id}") if view is not None else None
        if view is None or view.sql != source(s) or failure is not None:
            raise MillpondError(f"view {name!r} was not filled: " + (rt.describe_failure(failure) if failure else
                                "its new definition's backfill failed (the log says why); the old one stays"))


def _add_view(rt: Runtime, name: str, sql: str, schema: pa.Schema, depends: tuple[str, ...], encoded: dict,
              on_error: str, partial: dict | None) -> None:
    if (altered := sorted(set(depends) & set(rt.catalog.replacing))):
        raise CatalogError(f"view {name!r} reads {', '.join(altered)}, which an ALTER is replacing: create it once "
                           "the new definition is in force (after the next epoch)", sqlstate="55000")
    for read in depends:
        if read in rt.catalog.views:
            rt.unfilled(read, f"create view {name!r} over it")
    rt.commit_catalog(rt.catalog.with_view(name, sql, schema, depends, encoded, on_error=on_error, partial=partial))


ON_ERROR = ("fail", "null")
VIEW_OPTIONS = ("WITH (on_error = 'fail' | 'null', background = true | false, partial = true | false, "
                "partial_key = '<column>', max_keys = <n>)")


def _view_options(view: str, props: exp.Properties, default: str) -> tuple[str, dict]:
    """``WITH (...)`` of a view: what a data error in its expressions does (``on_error``, README
    "When a view fails"), and the partial view options (``partial``, ``partial_key``,
    ``max_keys``); any other view option is refused."""
    found, options = default, {}
    for p in props.expressions:
        if isinstance(p, exp.MaterializedProperty):
            continue
        value, key = p.args.get("value"), p.name.lower() if isinstance(p, exp.Property) else ""
        if key == "on_error" and isinstance(value, exp.Literal) and value.is_string \
                and value.this.lower() in ON_ERROR:
            found = value.this.lower()
        elif key == "partial" and isinstance(value, exp.Boolean):
            options["partial"] = bool(value.this)
        elif key == "partial_key" and isinstance(value, exp.Literal) and value.is_string:
            options["key"] = value.this
        elif key == "background" and isinstance(value, exp.Boolean):
            options["background"] = bool(value.this)
        elif key == "max_keys" and isinstance(value, exp.Literal) and not value.is_string \
                and value.this.isdigit() and int(value.this) > 0:
            options["max_keys"] = int(value.this)
        else:
            raise SqlError(f"view {view!r}: unsupported view option {p.sql('postgres')!r} (known: {VIEW_OPTIONS})")
    return found, options


def _partial(rt: Runtime, view: str, plan: P.Materialize, schema, options: dict) -> dict | None:  # noqa: ANN001
    """A partial view's catalog entry (:mod:`millpond.engine.partial`): its key column (``partial_key``,
    or the first output column that can be one) and budget; None for a full view."""
    if not options.get("partial"):
        if set(options) - {"partial"}:
            raise SqlError(f"view {view!r}: {', '.join(sorted(set(options) - {'partial'}))} needs "
                           "WITH (partial = true)")
        return None
    wanted = options.get("key")
    if wanted is not None and wanted not in schema.names:
        raise SqlError(f"view {view!r}: partial_key {wanted!r} is not one of its columns ({', '.join(schema.names)})")
    reasons = []
    for column in [wanted] if wanted is not None else schema.names:
        try:
            source, table_column = partial_trace(plan, column)[0]
        except NotPartial as exc:
            reasons.append(f"{column!r}: {exc}")
            continue
        if source.table not in rt.catalog.tables:
            reasons.append(f"{column!r}: it comes from the view {source.table!r} (a partial key is a table's column)")
            continue
        t = rt.catalog.tables[source.table]
        kind = {c.name: c.type for c in t.columns}[table_column]
        if not t.primary_key or source.table in {f.sink for f in rt.catalog.flows.values()}:
            reasons.append(f"{column!r}: its table {t.name!r} keeps no rows to fill keys from (a partial view's key "
                           "must come from a table with a PRIMARY KEY that is not a flow's sink)")
            continue
        if kind in ("INTERVAL", "JSONB") or pa.types.is_nested(schema.field(column).type):
            reasons.append(f"{column!r}: a {kind} key is not supported")
            continue
        return {"key": column, "max_keys": options.get("max_keys", DEFAULT_MAX_KEYS)}
    raise SqlError(f"view {view!r} cannot be partial: no column is a key that its rows can be filled by "
                   f"({'; '.join(reasons)}). A partial key is a column of one table passed through unchanged: "
                   "a group key of every GROUP BY, in every PARTITION BY, from a side no outer join pads")


def _create_index(rt: Runtime, s: exp.Create) -> None:
    """``CREATE INDEX [IF NOT EXISTS] [name] ON table [USING btree|hash] (column, ...)``: the table's rows
    arranged by those columns, for views created from now on to share (:mod:`millpond.sql.indexes`).
    Built by the next epoch, from the table's rows; no name: ``<table>_<columns>_idx``, as PostgreSQL."""
    index = s.this
    table = index.args.get("table")
    params = index.args.get("params")
    if not isinstance(index, exp.Index) or table is None or params is None:
        raise SqlError("CREATE INDEX needs a table and a column list: CREATE INDEX name ON table (column, ...)")
    if table.name not in rt.catalog.tables:
        if table.name in rt.catalog.views:
            raise SqlError(f"CREATE INDEX on materialized view {table.name!r}: not supported (an index arranges a "
                           "table's rows)")
        raise CatalogError(f'relation "{table.name}" does not exist', sqlstate="42P01",
                           hint=f"known tables: {', '.join(sorted(rt.catalog.tables)) or 'none'}")
    t = rt.catalog.tables[table.name]
    cols = []
    for item in params.args.get("columns") or []:
        col = item.this if isinstance(item, exp.Ordered) else item
        if not isinstance(col, exp.Column) or col.table:
            raise SqlError(f"CREATE INDEX on {t.name}: only plain columns can be indexed, not "
                           f"{col.sql('postgres')!r} (an index on an expression is not supported)")
        cols.append(col.name)
    known = {c.name: c.type for c in t.columns}
    bad = [c for c in cols if c not in known]
    if bad:
        raise SqlError(f'column "{bad[0]}" does not exist', sqlstate="42703",
                       hint=f"the columns of {t.name}: {', '.join(known)}")
    if not cols or len(set(cols)) != len(cols):
        raise SqlError(f"CREATE INDEX on {t.name}: columns must be listed once each")
    if s.args.get("unique"):
        raise SqlError("CREATE UNIQUE INDEX is not supported: a millpond index arranges rows for joins; "
                       "a PRIMARY KEY is what keeps a table's rows unique")
    using = params.args.get("using")
    if using is not None and using.name.lower() not in ("btree", "hash"):
        raise SqlError(f"CREATE INDEX ... USING {using.name}: not supported (an index is a hash arrangement; "
                       "USING btree or hash are accepted)")
    if (where := params.args.get("where")) is not None:
        raise SqlError(f"CREATE INDEX ... WHERE {where.this.sql('postgres')}: a partial index is not supported")
    for c in cols:
        if known[c] == "INTERVAL":
            raise SqlError(f"CREATE INDEX on {t.name}: an INTERVAL column ({c!r}) cannot be indexed (PostgreSQL's "
                           "equality makes '24 hours' and '1 day' equal)")
    name = index.this.name if index.this is not None else f"{t.name}_{'_'.join(cols)}_idx"
    if s.args.get("exists") and name in rt.catalog.indexes:
        return
    rt.commit_catalog(rt.catalog.with_index(name, t.name, tuple(cols), source(s)))


def _create_function(rt: Runtime, s: exp.Create) -> None:
    f = functions.define(s)
    if s.args.get("exists") and f.name in rt.catalog.functions:
        return
    _check_function(f, rt.catalog.functions)
    rt.commit_catalog(rt.catalog.with_function(f, replace_=bool(s.args.get("replace"))))


def _check_function(f: FunctionDef, defined: Mapping[str, FunctionDef]) -> None:
    """``f``'s body binds (known functions, operand types that fit), as a call with NULL arguments."""
    if f.language == "python":
        return  # its types were checked at define, and its body compiled
    args = ", ".join(f"CAST(NULL AS {t})" for _, t in f.params)
    query, _ = functions.inline(sqlglot.parse_one(f"SELECT {f.name}({args}) AS r", dialect="postgres"),
                                {**defined, f.name: f})
    try:
        bind_select(query, {})
    except SqlError as exc:
        raise SqlError(f"function {f.name!r}: {exc.args[0]}") from None


_DROP_KINDS = {"TABLE": "table", "MATERIALIZED VIEW": "materialized view", "FUNCTION": "function", "INDEX": "index"}


def drop(rt: Runtime, s: exp.Drop) -> None:
    """``DROP TABLE | MATERIALIZED VIEW | INDEX | FUNCTION [IF EXISTS] name, ...``: each kind drops only its
    kind, as in PostgreSQL (``DROP VIEW`` names no materialized view). A table's indexes go with it."""
    kind = (s.args.get("kind") or "").upper()
    kind = "MATERIALIZED VIEW" if kind == "VIEW" and s.args.get("materialized") else kind
    if kind not in _DROP_KINDS:
        raise SqlError(f"DROP {kind} is not supported (DROP TABLE, DROP MATERIALIZED VIEW, DROP INDEX and DROP "
                       "FUNCTION are)")
    if s.args.get("cascade"):
        raise SqlError(f"DROP {kind} ... CASCADE is not supported: drop the dependent views first")
    what = _DROP_KINDS[kind]
    for t in s.args.get("tables") or [s.this]:
        name = t.name
        found = {"TABLE": rt.catalog.tables, "MATERIALIZED VIEW": rt.catalog.views,
                 "FUNCTION": rt.catalog.functions, "INDEX": rt.catalog.indexes}[kind]
        if name not in found:
            if s.args.get("exists"):
                continue
            other = next((k for k, names in (("TABLE", rt.catalog.tables), ("MATERIALIZED VIEW", rt.catalog.views))
                          if k != kind and name in names), None)
            if other is not None:  # PostgreSQL's own wording
                article = "an" if what[0] in "aeiou" else "a"
                raise CatalogError(f'"{name}" is not {article} {what}', sqlstate="42809",
                                   hint=f"use DROP {other} to remove a {_DROP_KINDS[other]}")
            state = {"TABLE": "42P01", "MATERIALIZED VIEW": "42P01", "INDEX": "42704", "FUNCTION": "42883"}[kind]
            quoted = name if kind == "FUNCTION" else f'"{name}"'
            raise CatalogError(f"{what} {quoted} does not exist", sqlstate=state)
        if kind == "FUNCTION":
            rt.commit_catalog(rt.catalog.without_function(name))
            continue
        if kind == "INDEX":
            rt.commit_catalog(rt.catalog.without_index(name))
            continue
        gone = rt.catalog.tables.get(name)
        rt.commit_catalog(rt.catalog.without(name))
        if kind == "TABLE":  # after the catalog: a crash in between leaves a channel the next CREATE replaces
            rt.log.drop_channel(gone.channel)
            source_dropped(gone)


# RisingWave's session settings seen in scripts: with a millpond meaning they are aliases,
# without one they are accepted and ignored, with a warning that says so
ALIASES = {"streaming_parallelism": "parallelism", "rw_implicit_flush": "implicit_flush"}
_IGNORED = ("rw_", "streaming_", "query_mode", "batch_parallelism", "client_encoding", "search_path",
            "application_name", "timezone", "time zone", "statement_timeout", "extra_float_digits", "datestyle")
SETTINGS = ("parallelism", "on_error", "implicit_flush", "retention", "backfill_rows")


def setting(rt: Runtime, name: str) -> str:
    """A setting's value as ``SHOW name`` prints it."""
    name = ALIASES.get(name, name)
    if name == "parallelism":
        return str(rt.parallelism)
    if name == "on_error":
        return rt.on_error
    if name == "implicit_flush":
        return "on" if rt.implicit_flush else "off"
    if name == "retention":
        return rt.catalog.kept.describe()
    if name == "backfill_rows":
        return str(rt.coordinator.backfill_rows)
    raise SqlError(f"unknown setting {name!r} (known: {', '.join(SETTINGS)})")


def set_(rt: Runtime, s: exp.Set) -> None:
    """``SET name = value`` (or ``TO``): ``parallelism`` (``streaming_parallelism``; ``0``, ``default``
    or ``adaptive`` mean the parallelism the database was opened with), ``on_error``,
    ``implicit_flush`` (``rw_implicit_flush``: every INSERT, UPDATE and DELETE flushes), ``retention``
    (how long the root keeps changes for subscribers and time travel: a number of epochs or a span
    such as ``'1 day'``; ``default``: an hour; stored in the catalog, so it holds for every process),
    ``backfill_rows`` (the input records a new view reads an epoch when it fills in bounded epochs,
    :mod:`millpond.engine.filling`; ``0``: a backfill is one epoch; ``default``: two million)."""
    for item in s.expressions:
        eq = item.this
        if not isinstance(eq, exp.EQ):
            raise SqlError(f"unsupported SET {item.sql('postgres')!r} (SET name = value)")
        name = eq.this.name.lower()
        value = eq.expression.name.lower() if isinstance(eq.expression, (exp.Literal, exp.Column, exp.Identifier,
                                                                          exp.Var, exp.Boolean)) else None
        if isinstance(eq.expression, exp.Boolean):
            value = "true" if eq.expression.this else "false"
        name = ALIASES.get(name, name)
        if name == "parallelism":
            if value in ("default", "adaptive", "0") and eq.this.name.lower() == "streaming_parallelism" \
                    or value == "default":
                rt.set_parallelism(None)
                continue
            if value is None or not value.isdigit() or int(value) < 1:
                raise SqlError(f"parallelism must be an integer of at least 1 (or default), got {eq.expression.sql('postgres')}")
            rt.set_parallelism(int(value))
        elif name == "on_error":
            if value not in ON_ERROR:
                raise SqlError(f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, got {value!r}")
            rt.on_error = value  # the default of views created from now on
        elif name == "implicit_flush":
            if value not in ("true", "false", "on", "off", "1", "0"):
                raise SqlError(f"implicit_flush must be true or false, got {value!r}")
            rt.implicit_flush = value in ("true", "on", "1")
        elif name == "retention":
            written = eq.expression.name if isinstance(eq.expression, (exp.Literal, exp.Column, exp.Identifier,
                                                                        exp.Var)) else eq.expression.sql("postgres")
            try:
                kept = None if written.lower() == "default" else Retention.parse(written)
            except ValueError as exc:
                raise SqlError(f"SET retention: {exc}") from None
            if kept != rt.catalog.retention:
                rt.commit_catalog(replace(rt.catalog, retention=kept))
        elif name == "backfill_rows":
            if value != "default" and (value is None or not value.isdigit()):
                raise SqlError(f"backfill_rows must be an integer of at least 0 (0: a backfill is one epoch) or "
                               f"default, got {eq.expression.sql('postgres')}")
            rt.coordinator.backfill_rows = BACKFILL_ROWS if value == "default" else int(value)
        elif name.startswith(_IGNORED):
            warnings.warn(f"SET {eq.this.name}: setting ignored (it has no meaning in millpond; "
                          f"known: {', '.join(SETTINGS)})", MillpondNotice, stacklevel=2)
        else:
            raise SqlError(f"unknown setting {item.sql('postgres')!r} (known: {', '.join(SETTINGS)})")

"""Statements that show what is inside: ``SHOW TABLES``, ``SHOW MATERIALIZED VIEWS``, ``SHOW FUNCTIONS``, ``SHOW INDEXES``,
``DESCRIBE name`` and ``EXPLAIN CREATE MATERIALIZED VIEW ...`` / ``EXPLAIN MATERIALIZED VIEW name``.

Each returns an Arrow table, like a query:

- ``SHOW TABLES``: ``name``, ``columns``, ``primary_key`` (``"a, b"`` or NULL), ``append_only``,
  ``source`` (a files table's options), ``error`` (its source's problems in force, counted, the
  first of them named: :meth:`millpond.connectors.source_errors.SourceErrors.summary`);
- ``SHOW MATERIALIZED VIEWS`` (or ``SHOW VIEWS``): ``name``, ``columns``, ``depends_on``, ``sql``;
- ``SHOW FUNCTIONS``: ``name``, ``arguments``, ``returns``, ``sql`` (SQL functions, :mod:`millpond.sql.functions`);
- ``SHOW FLOWS``: ``name``, ``sink``, ``key``, ``depends_on``, ``comment``, ``sql`` (:mod:`millpond.sql.flows`);
- ``SHOW INDEXES``: ``name``, ``table``, ``columns``, ``state_bytes``, ``read_by`` (the views that
  read it), ``sql`` (:mod:`millpond.sql.indexes`);
- ``DESCRIBE name``: one row per column (``name``, ``type``, ``description``: ``primary key`` for
  a key column), then one row per property of the relation, its value in ``description``:
  ``kind``, ``primary key``, ``append only``, ``written by`` (a flow's sink), ``indexes`` (tables), ``depends on`` and ``sql`` (views) — the
  shape of RisingWave's ``DESCRIBE``;
- ``EXPLAIN ...``: one column ``plan``, one row per line (:func:`millpond.engine.explain.explain`):
  the incremental plan with its exchanges and state tables. ``EXPLAIN CREATE MATERIALIZED VIEW``
  plans the view without creating it (its state ids are those it would get).
"""

from __future__ import annotations

import re

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from millpond.catalog import TableDef
from millpond.catalog.types import sql_type
from millpond.engine import plan as P
from millpond.engine import runtime as runtime_module
from millpond.engine.explain import explain as explain_plan
from millpond.engine.partial import describe as describe_partial
from millpond.engine.runtime import Runtime
from millpond.errors import CatalogError, SqlError
from millpond.sql import ddl, flows, sinks
from millpond.sql.indexes import choose
from millpond.sql.planner import plan_view
from millpond.sql.statements import command_rest, parse, source

__all__ = ["show", "describe", "explain"]

_SHOW = {"TABLES": "tables", "MATERIALIZED VIEWS": "views", "VIEWS": "views", "FUNCTIONS": "functions"}


def show(rt: Runtime, s: exp.Command) -> pa.Table:
    what = " ".join(_rest(s).upper().split())
    if _SHOW.get(what) == "tables":
        tables = sorted(rt.catalog.tables.values(), key=lambda t: t.name)
        return pa.table({
            "name": pa.array([t.name for t in tables], pa.string()),
            "columns": pa.array([len(t.columns) for t in tables], pa.int32()),
            "primary_key": pa.array([", ".join(t.primary_key) or None for t in tables], pa.string()),
            "append_only": pa.array([t.append_only for t in tables], pa.bool_()),
            "source": pa.array([" ".join(f"{k}={'***' if _secret(k) else v}" for k, v in t.source) or None
                                for t in tables], pa.string()),
            "error": pa.array([rt.sources.errors.summary(t.id) for t in tables], pa.string()),
        })
    if _SHOW.get(what) == "views":
        views = sorted(rt.catalog.views.values(), key=lambda v: v.name)
        return pa.table({
            "name": pa.array([v.name for v in views], pa.string()),
            "columns": pa.array([len(v.schema) for v in views], pa.int32()),
            "depends_on": pa.array([", ".join(v.depends_on) for v in views], pa.string()),
            "sql": pa.array([v.sql for v in views], pa.string()),
        })
    if _SHOW.get(what) == "functions":
        functions = sorted(rt.catalog.functions.values(), key=lambda f: f.name)
        return pa.table({
            "name": pa.array([f.name for f in functions], pa.string()),
            "arguments": pa.array([", ".join(f"{n} {t}".strip() for n, t in f.params) for f in functions], pa.string()),
            "returns": pa.array([f.returns for f in functions], pa.string()),
            "language": pa.array([f.language for f in functions], pa.string()),
            "sql": pa.array([f.sql for f in functions], pa.string()),
        })
    if what == "FLOWS":
        return flows.show(rt)
    if what == "INDEXES":
        return rt.indexes_status()
    if what == "SINKS":
        return sinks.show(rt)
    if what == "SOURCES":
        return rt.snapshot("millpond_sources")
    if what == "JOBS":
        return rt.snapshot("millpond_jobs")
    if what.lower() in (*ddl.SETTINGS, *ddl.ALIASES):  # PostgreSQL's SHOW name: one row, one column
        return pa.table({what.lower(): pa.array([ddl.setting(rt, what.lower())], pa.string())})
    raise SqlError(f"SHOW {what or '(nothing)'} is not supported (known: SHOW TABLES, SHOW MATERIALIZED VIEWS, "
                   f"SHOW FUNCTIONS, SHOW FLOWS, SHOW INDEXES, SHOW SINKS, SHOW SOURCES, SHOW JOBS, SHOW <setting>: {', '.join(ddl.SETTINGS)})")


def _secret(option: str) -> bool:
    """A source's option that SHOW does not show (a password, a secret, a key's file)."""
    return any(word in option for word in ("password", "secret", "sasl.jaas", "ssl.key"))


def describe(rt: Runtime, s: exp.Describe) -> pa.Table:
    target = s.this
    name = target.name if isinstance(target, exp.Table) else target.sql("postgres")
    rows: list[tuple[str, str | None, str | None]] = []
    try:
        rel = rt.catalog.relation(name)
    except CatalogError:
        system = _system_view(rt, name)
        if system is None:
            raise
        rows = [(f.name, sql_type(f.type), None) for f in system.schema]
        return _describe_table(rows + [("kind", None, "system view")])
    if isinstance(rel, TableDef):
        rows = [(c.name, c.type, ", ".join([*(["primary key"] if c.name in rel.primary_key else []),
                                             *(["not null"] if c.not_null else []),
                                             *([f"default {c.default}"] if c.default is not None else [])]) or None)
                for c in rel.columns]
        rows += [("kind", None, "table"),
                 ("primary key", None, ", ".join(rel.primary_key) or "none (rows may repeat)"),
                 ("append only", None, "true" if rel.append_only else "false")]
        if (flow := rt.catalog.sink_of(rel.name)) is not None:
            rows.append(("written by", None, f"flow {flow.name}"))
        indexes = sorted((i for i in rt.catalog.indexes.values() if i.table == rel.name), key=lambda i: i.name)
        if indexes:
            rows.append(("indexes", None, ", ".join(f"{i.name} ({', '.join(i.columns)})" for i in indexes)))
    else:
        rows = [(f.name, sql_type(f.type), None) for f in rel.schema]
        rows += [("kind", None, "materialized view"), ("depends on", None, ", ".join(rel.depends_on)),
                 ("sql", None, rel.sql)]
        consumer = next(c for c in rt.consumers if c.name == rel.name)
        if consumer.partial is not None:
            rows.append(("partial", None, describe_partial(consumer.partial, consumer.object_id, consumer.plan,
                                                           len(rt.filled(rel.name)))))
    return _describe_table(rows)


def explain(rt: Runtime, s: exp.Command) -> pa.Table:
    text = _rest(s)
    m = re.fullmatch(r"\s*(?:MATERIALIZED\s+)?VIEW\s+(.+?)\s*;?\s*", text, flags=re.IGNORECASE | re.DOTALL)
    if m:  # a view that exists: its stored plan and its real state ids
        name = normalize_identifiers(exp.to_table(m.group(1), dialect="postgres"), dialect="postgres").name
        view = rt.catalog.views.get(name)
        if view is None:
            raise CatalogError(f'materialized view "{name}" does not exist', sqlstate="42P01",
                               hint=f"known materialized views: {', '.join(sorted(rt.catalog.views)) or 'none'}")
        if view.plan is None:
            return _plan_table([f"view {view.name}: no stored plan"])
        lines = explain_plan(P.decode(view.plan), object_id=view.id, name=view.name)
        consumer = next(c for c in rt.consumers if c.name == view.name)
        if consumer.partial is not None:
            lines.insert(1, describe_partial(consumer.partial, view.id, consumer.plan))
        return _plan_table(lines)
    statements = parse(text)
    create = statements[0] if len(statements) == 1 else None
    props = create.args.get("properties") if isinstance(create, exp.Create) else None
    if not (isinstance(create, exp.Create) and (create.args.get("kind") or "").upper() == "VIEW" and props
            and any(isinstance(p, exp.MaterializedProperty) for p in props.expressions)):
        raise SqlError("EXPLAIN shows incremental plans: use EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT ... "
                       "(nothing is created) or EXPLAIN MATERIALIZED VIEW v (a view that exists)")
    plan, _ = plan_view(create.expression, rt.catalog, views=True, eager=True, sizes=rt.table_sizes(),
                        sample=rt.filter_share)
    plan, _, _ = choose(plan, rt.catalog, rt.executor)
    return _plan_table(explain_plan(plan, object_id=rt.catalog.next_id, name=create.this.name))


def _rest(s: exp.Command) -> str:
    """What follows the keyword of a statement sqlglot keeps as a command (``SHOW``, ``EXPLAIN``)."""
    rest = s.expression
    return rest.name if isinstance(rest, exp.Literal) else (rest.sql("postgres") if rest is not None else "")


def _system_view(rt: Runtime, name: str) -> pa.Table | None:
    views = getattr(runtime_module, "SYSTEM_VIEWS", {})  # millpond_views, millpond_epochs, millpond_source_errors
    return rt.snapshot(name) if name in views else None


def _describe_table(rows: list[tuple[str, str | None, str | None]]) -> pa.Table:
    names, types, notes = zip(*rows) if rows else ((), (), ())
    return pa.table({"name": pa.array(names, pa.string()), "type": pa.array(types, pa.string()),
                     "description": pa.array(notes, pa.string())})


def _plan_table(lines: list[str]) -> pa.Table:
    return pa.table({"plan": pa.array(lines, pa.string())})


def cancel(rt: Runtime, s: exp.Command) -> pa.Table:
    """``CANCEL JOB n``: the backfills of job ``n`` (``SHOW JOBS``) stop; what they were filling is
    dropped — a new view, index or flow, or an altered view's new definition (the old one stays)
    (:mod:`millpond.engine.jobs`). Runs without waiting for the epoch; returns the jobs cancelled."""
    words = command_rest(s).strip().rstrip(";").split()
    if len(words) != 2 or words[0].upper() != "JOB" or not words[1].isdigit():
        raise SqlError("expected CANCEL JOB <n> (the job's number in SHOW JOBS)", sql=source(s))
    jobs = rt.jobs.cancel(int(words[1]))
    return pa.table({"job": pa.array([j["job"] for j in jobs], pa.int64()),
                     "kind": pa.array([j["kind"] for j in jobs], pa.string()),
                     "relation": pa.array([j["relation"] for j in jobs], pa.string())})

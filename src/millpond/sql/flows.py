"""Flows (seed 000, GreptimeDB's laminar flow): ``CREATE FLOW``, ``DROP FLOW``, ``SHOW FLOWS``.

::

    CREATE FLOW [IF NOT EXISTS] name SINK TO table [EXPIRE AFTER interval] [TRIGGER AFTER n ROWS]
        [COMMENT 'text'] AS SELECT keys..., aggregates... FROM ... [WHERE ...] GROUP BY keys...

A flow is a continuous aggregation whose results are written into an ordinary table, the *sink*:
its primary key is the flow's group keys (a time bucket such as ``date_bin(INTERVAL '1 minute',
ts)`` or a ``TUMBLE`` window's ``window_start``, and the other keys), so it can be queried, read from
Spark, and read by views and other flows (a 1-minute flow under a 1-hour one). ``CREATE FLOW``
creates the sink when it does not exist, or checks that the one that does has the flow's columns
and key; only the flow writes it.

The flow's state — per (window, key), each aggregate's partial state — is operator state in the
state store, committed in the same epoch as the offsets the flow read to: a restart resumes from
it with no refill. Each epoch reads only the records appended since (the sequence range
``[offset, end)`` of each source channel), merges their partial aggregates into the windows they
touch (the *dirty* windows, the only ones whose sink rows change), and the coordinator writes those
changes into the sink after the commit, exactly once (:mod:`millpond.engine.coordinator`, "Flows").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp
from sqlglot.tokens import TokenType

from millpond.catalog import Catalog, Column, FlowDef, TableDef
from millpond.catalog.types import INTERVAL, sql_type
from millpond.engine import plan as P
from millpond.engine.flows import EXPIRED, WATERMARK, shape
from millpond.engine.runtime import Runtime
from millpond.errors import CatalogError, MillpondError, SqlError
from millpond.sql.planner import plan_view
from millpond.sql.query import bind_select
from millpond.sql.semantics import intervals
from millpond.sql.statements import Words, dropped, is_command, parse, source

log = logging.getLogger("millpond")

__all__ = ["FlowSpec", "parse_flow", "is_flow", "create", "drop", "show", "flow_plan"]


@dataclass(frozen=True)
class FlowSpec:
    """What a ``CREATE FLOW`` statement says."""

    name: str
    sink: str
    query: exp.Select
    if_not_exists: bool
    comment: str | None
    sql: str  # the statement as written
    expire: int | None  # EXPIRE AFTER, in microseconds
    trigger_rows: int | None = None  # TRIGGER AFTER n ROWS


def is_flow(s: exp.Expression, verb: str) -> bool:
    """Whether ``s`` is a ``<verb> FLOW`` statement (sqlglot keeps them as commands)."""
    return is_command(s, verb, "FLOW")


_SYNTAX = ("CREATE FLOW [IF NOT EXISTS] name SINK TO table [EXPIRE AFTER interval] [TRIGGER AFTER n ROWS] "
           "[COMMENT 'text'] AS SELECT ... GROUP BY ...")


def parse_flow(text: str) -> FlowSpec:
    """The parts of a ``CREATE FLOW`` statement, or a SqlError saying what is missing."""
    w = Words(text, "CREATE FLOW", _SYNTAX)
    toks = w.toks
    if not w.word("CREATE", "FLOW"):
        raise SqlError(f"not a CREATE FLOW statement ({_SYNTAX})", sql=text)
    if_not_exists = w.word("IF", "NOT", "EXISTS")
    flow = w.name("the flow's name")
    if not w.word("SINK", "TO"):
        raise SqlError(f"CREATE FLOW {flow}: expected SINK TO table ({_SYNTAX})", sql=text)
    sink = w.name("the sink table's name")
    comment = expire = rows = None
    if w.word("EXPIRE", "AFTER"):
        start = w.i
        while w.i < len(toks) and toks[w.i].text.upper() not in ("TRIGGER", "COMMENT", "AS"):
            w.i += 1
        if w.i == start:
            raise SqlError(f"CREATE FLOW {flow}: EXPIRE AFTER takes an interval, e.g. INTERVAL '2 hours'", sql=text)
        expire = _micros(flow, text[toks[start].start:toks[w.i - 1].end + 1], text)
    if w.word("TRIGGER", "AFTER"):
        i = w.i
        if i + 1 >= len(toks) or toks[i].token_type != TokenType.NUMBER or not toks[i].text.isdigit() or \
                int(toks[i].text) < 1 or toks[i + 1].text.upper() not in ("ROWS", "ROW"):
            raise SqlError(f"CREATE FLOW {flow}: TRIGGER AFTER takes a positive whole number of rows, e.g. "
                           "TRIGGER AFTER 10000 ROWS", sql=text)
        rows, w.i = int(toks[i].text), i + 2
    if w.word("COMMENT"):
        if w.i >= len(toks) or toks[w.i].token_type != TokenType.STRING:
            raise SqlError(f"CREATE FLOW {flow}: COMMENT takes a string constant", sql=text)
        comment, w.i = toks[w.i].text, w.i + 1
    if not w.word("AS") or w.i >= len(toks):
        raise SqlError(f"CREATE FLOW {flow}: expected AS SELECT ... ({_SYNTAX})", sql=text)
    body = text[toks[w.i].start:]
    statements = parse(body)
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise SqlError(f"CREATE FLOW {flow}: its AS clause must be one SELECT ... GROUP BY ...", sql=text)
    return FlowSpec(flow, sink, statements[0], if_not_exists, comment, text, expire, rows)


def _micros(flow: str, written: str, text: str) -> int:
    """An ``EXPIRE AFTER`` interval constant in microseconds (a month has no fixed length)."""
    try:
        bound = bind_select(parse(f"SELECT {written} AS x")[0], {}).expressions[0].unalias()
    except MillpondError as exc:
        raise SqlError(f"CREATE FLOW {flow}: EXPIRE AFTER {written}: {exc}", sql=text) from None
    fields = intervals.value(bound)
    if fields is None or fields[0] != 0 or fields[1] * 86_400_000_000 + fields[2] <= 0:
        raise SqlError(f"CREATE FLOW {flow}: EXPIRE AFTER takes a positive interval constant of days, hours, minutes or "
                       f"seconds (months have no fixed length), got {written}", sql=text)
    return fields[1] * 86_400_000_000 + fields[2]


def flow_plan(spec: FlowSpec, catalog: Catalog, *, legacy: bool = False
              ) -> tuple[P.Materialize, tuple[str, ...], tuple[str, ...]]:
    """The flow's plan, the tables and views it reads, and its group keys as output columns
    (``legacy``: as :func:`~millpond.sql.planner.plan_view`'s)."""
    q = spec.query
    group = q.args.get("group")
    if group is None or not group.expressions:
        raise SqlError(f"flow {spec.name!r}: a flow aggregates: its SELECT needs a GROUP BY (the sink's primary key "
                       "is the group keys, e.g. GROUP BY host, date_bin(INTERVAL '1 minute', ts))", sql=spec.sql)
    for clause in ("order", "limit", "offset", "distinct"):
        if q.args.get(clause):
            raise SqlError(f"flow {spec.name!r}: {clause.upper()} is not supported in a flow (its sink holds one row "
                           "per group)", sql=spec.sql)
    if q.find(exp.Window):
        raise SqlError(f"flow {spec.name!r}: window functions (OVER) are not supported in a flow", sql=spec.sql)
    keys = tuple(_key_column(spec, q, g) for g in group.expressions)
    plan, depends = plan_view(q, catalog, fixed_outputs=True, legacy=legacy)  # a quotient as numeric(38,16): the sink's type
    return plan, depends, keys


def _key_column(spec: FlowSpec, q: exp.Select, g: exp.Expression) -> str:
    """The output column a GROUP BY item is: an output name, an ordinal, or a select item's expression."""
    items = q.expressions
    if isinstance(g, exp.Literal) and g.is_int and 1 <= int(g.name) <= len(items):
        return items[int(g.name) - 1].alias_or_name
    if isinstance(g, exp.Column) and not g.table and g.name in [e.alias_or_name for e in items]:
        return g.name
    for e in items:
        if e.unalias() == g:
            return e.alias_or_name
    raise SqlError(f"flow {spec.name!r}: GROUP BY {g.sql('postgres')} must also be an output column (the group keys "
                   "are the sink's primary key): add it to the SELECT list", sql=spec.sql)


def create(rt: Runtime, s: exp.Command) -> None:
    spec = parse_flow(source(s))
    catalog = rt.catalog
    if spec.name in catalog.flows:
        if spec.if_not_exists:
            return
        raise CatalogError(f'relation "{spec.name}" already exists', sqlstate="42P07", hint=f"{spec.name!r} is a flow")
    plan, depends, keys = flow_plan(spec, catalog)
    _check_acyclic(spec, plan, catalog)
    schema = rt.executor.output_schema(plan, catalog.tables)
    columns = tuple(Column(f.name, sql_type(f.type)) for f in schema)
    new_sink = spec.sink not in catalog.tables
    if new_sink:
        if spec.sink in catalog.views or spec.sink in catalog.flows:
            raise CatalogError(f"flow {spec.name!r}: its sink {spec.sink!r} is not a table")
        try:  # the sink's name names its log channel, and so object keys
            rt.log.check_table_name(spec.sink)
        except MillpondError as exc:
            raise CatalogError(f"flow {spec.name!r}: sink table name not allowed (a table's name is its log "
                               f"channel's): {exc}") from None
        catalog = catalog.with_table(spec.sink, columns, keys)
    else:
        _check_sink(spec, catalog.tables[spec.sink], columns, keys)
        if rt.snapshot(spec.sink, pending=True).num_rows:
            raise CatalogError(f"flow {spec.name!r}: sink table {spec.sink!r} already holds rows; a sink holds only its "
                               f"flow's rows: DELETE FROM {spec.sink} first, or sink to a new table")
    time_key = next((k for k in keys if pa.types.is_timestamp(t := schema.field(k).type) or pa.types.is_date(t)), None)
    if spec.expire is not None and time_key is None:
        raise SqlError(f"flow {spec.name!r}: EXPIRE AFTER needs a time window among the group keys (a DATE or TIMESTAMP "
                       "key such as date_bin(INTERVAL '1 minute', ts))", sql=spec.sql)
    merges = shape(plan, schema, time_key) is not None  # one aggregation, its window a group column
    if spec.expire is not None and not merges:
        raise SqlError(f"flow {spec.name!r}: EXPIRE AFTER needs a flow whose SELECT is one aggregation (its "
                       "window key a GROUP BY column), not a union of grouping sets", sql=spec.sql)
    flow = FlowDef(0, spec.name, spec.sql, FlowDef.encode_schema(schema), depends, P.encode(plan), "fail",
                   sink=spec.sink, key=keys, comment=spec.comment, expire_micros=spec.expire,
                   time_key=time_key if spec.expire is not None else None, trigger_rows=spec.trigger_rows,
                   cluster=time_key if merges else None)
    rt.commit_catalog(catalog.with_flow(flow))
    if new_sink:
        t = rt.catalog.tables[spec.sink]
        rt.log.create_channel(t.channel, t.log_schema, id=t.channel_id, table_key=t.primary_key)


def _check_acyclic(spec: FlowSpec, plan: P.Materialize, catalog: Catalog) -> None:
    """A flow may not read its own sink, directly or through other flows (FLUSH would never end)."""
    reads = {f.name: {s.table for s in P.sources(P.decode(f.plan))} for f in catalog.flows.values()}
    reached, todo = set(), [spec.sink]
    while todo:  # the tables that the sink's rows reach through flows
        table = todo.pop()
        if table in reached:
            continue
        reached.add(table)
        todo += [catalog.flows[f].sink for f, tables in reads.items() if table in tables]
    loop = sorted(reached & {s.table for s in P.sources(plan)})
    if loop:
        raise SqlError(f"flow {spec.name!r} reads {loop[0]!r}, which its own sink {spec.sink!r} feeds: flows may not "
                       "form a cycle", sql=spec.sql)


def _check_sink(spec: FlowSpec, table: TableDef, columns: tuple[Column, ...], keys: tuple[str, ...]) -> None:
    want = ", ".join(f"{c.name} {c.type}" for c in columns)
    have = ", ".join(f"{c.name} {c.type}" for c in table.columns)
    if want != have:
        raise CatalogError(f"flow {spec.name!r}: sink table {table.name!r} has columns ({have}); the flow writes "
                           f"({want}): drop the table or write the flow's SELECT to match")
    if tuple(table.primary_key) != keys:
        raise CatalogError(f"flow {spec.name!r}: sink table {table.name!r} has primary key "
                           f"({', '.join(table.primary_key) or 'none'}); the flow's group keys are ({', '.join(keys)})")
    if table.append_only:
        raise CatalogError(f"flow {spec.name!r}: sink table {table.name!r} is APPEND ONLY; a flow updates its rows")


def drop(rt: Runtime, s: exp.Command) -> None:
    """``DROP FLOW [IF EXISTS] name``: the flow stops and its state goes; its sink table stays."""
    name, if_exists = dropped(s, "FLOW")
    if name not in rt.catalog.flows and if_exists:
        return
    rt.flow_targets.settle(rt.catalog, rt.consumers, rt.manifest)  # its sink holds every change it committed
    rt.commit_catalog(rt.catalog.without_flow(name))
    try:  # the sink, a table of its own now, materializes its log: one epoch, so it is never read empty
        rt.run_epoch()
    except MillpondError as exc:
        log.warning("DROP FLOW %s: the epoch that materializes its sink failed (the next one retries): %s", name, exc)


def show(rt: Runtime) -> pa.Table:
    """``SHOW FLOWS``: ``name``, ``sink``, ``key``, ``depends_on``, ``expire_after`` (an INTERVAL),
    ``trigger_rows`` (``TRIGGER AFTER n ROWS``), ``watermark`` (the latest window inserted, UTC),
    ``expired`` (late changes to expired windows dropped so far), ``error`` (a failed flow's
    failure: it sits out epochs, its sink keeps its rows, as a failed view does), ``comment``,
    ``sql``."""
    flows = sorted(rt.catalog.flows.values(), key=lambda f: f.name)
    offsets, failed = rt.manifest.offsets, rt.manifest.failed
    done = [offsets.get(f"o{f.id}", {}) for f in flows]
    return pa.table({
        "name": pa.array([f.name for f in flows], pa.string()),
        "sink": pa.array([f.sink for f in flows], pa.string()),
        "key": pa.array([", ".join(f.key) for f in flows], pa.string()),
        "depends_on": pa.array([", ".join(f.depends_on) for f in flows], pa.string()),
        "expire_after": pa.array([{"months": 0, "days": 0, "micros": f.expire_micros} if f.expire_micros else None
                                  for f in flows], INTERVAL),
        "trigger_rows": pa.array([f.trigger_rows for f in flows], pa.int64()),
        "watermark": pa.array([d.get(WATERMARK) for d in done], pa.int64()).cast(pa.timestamp("us")),
        "expired": pa.array([d.get(EXPIRED, 0) if f.expire_micros else None for f, d in zip(flows, done)], pa.int64()),
        "error": pa.array([rt.describe_failure(failed[k]) if (k := f"o{f.id}") in failed else None for f in flows],
                          pa.string()),
        "comment": pa.array([f.comment for f in flows], pa.string()),
        "sql": pa.array([f.sql for f in flows], pa.string()),
    })


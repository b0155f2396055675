"""The consumers of a catalog: every table's own materialization and every view's and flow's stored plan.

Only a table with a primary key keeps rows of its own (ingest resolves upserts against them). A
key-less table's log *is* its rows: every record carries the row's identity (``_row_id``) and
weight, so its consumer only advances offsets and a read consolidates the log
(:meth:`millpond.engine.runtime.Runtime.snapshot`). A flow's sink table keeps no rows of its own
either: they are its flow's (the flow's rows state), so it runs no epochs while the flow exists;
after ``DROP FLOW`` it materializes its log like any table (from where it left off, or from the
start). An index (``CREATE INDEX``) is a consumer of its table that keeps the table's rows arranged
by the index's columns (:class:`~millpond.engine.plan.Arrange`) for the views that read it. A
partial view's consumer carries its key (:mod:`millpond.engine.partial`).
"""

from __future__ import annotations

from millpond.catalog import Catalog, IndexDef, TableDef, ViewDef
from millpond.columns import ROW_ID
from millpond.engine import plan as P
from millpond.engine.executor import Consumer
from millpond.engine.flows import Expiry, shape
from millpond.engine.partial import PartialKey, trace

__all__ = ["table_plan", "index_plan", "consumers"]


def table_plan(table: TableDef) -> P.Materialize:
    """A table's own materialization: its changelog kept as rows (including ``_row_id``), addressed
    by its primary key (tables made before catalog format 10: by every column)."""
    columns = [*(c.name for c in table.columns), ROW_ID]
    return P.Materialize(P.Source(table.name, tuple((c, c) for c in columns)), node_id=1,
                         key=table.primary_key if table.key_hashed else ())


def index_plan(index: IndexDef, table: TableDef) -> P.Arrange:
    """An index's consumer: every column of the table, arranged by the index's columns."""
    return P.Arrange(P.Source(table.name, tuple((c.name, c.name) for c in table.columns)), index.columns, node_id=1)


def consumers(catalog: Catalog, view_plans: dict[str, P.Materialize]) -> list[Consumer]:
    """Tables first, then indexes, then views and flows with their plans (``view_plans`` by name)."""
    fed = {f.sink: f"o{f.id}" for f in catalog.flows.values()}
    out = [Consumer(f"o{t.id}", t.id, t.name, table_plan(t), (*(c.name for c in t.columns), ROW_ID),
                    log_only=not t.primary_key, fed_by=fed.get(t.name))
           for t in catalog.tables.values()]
    out += [Consumer(f"o{i.id}", i.id, i.name, index_plan(i, catalog.tables[i.table]), ())
            for i in catalog.indexes.values()]
    out += [Consumer(f"o{v.id}", v.id, v.name, view_plans[v.name], tuple(v.schema.names), on_error=v.on_error,
                     sql=v.sql, partial=_partial(catalog, v, view_plans[v.name]), schema=v.schema,
                     views=tuple(sorted({s.table for s in P.sources(view_plans[v.name]) if s.table in catalog.views})))
            for v in catalog.views.values()]
    out += [Consumer(f"o{f.id}", f.id, f.name, view_plans[f.name], tuple(f.schema.names), sql=f.sql, sink=f.sink,
                     schema=f.schema,
                     expiry=Expiry(f.key, f.time_key, f.expire_micros) if f.expire_micros else None,
                     merge=shape(view_plans[f.name], f.schema, f.time_key, f.cluster))
            for f in catalog.flows.values()]
    return out


def _partial(catalog: Catalog, view: ViewDef, plan: P.Materialize) -> PartialKey | None:
    """A partial view's key, traced to the source nodes of its plan that it filters: the one its
    key column is read from, and those joined to it on the key that are of the same type and keep
    rows to be filled from (a table with a primary key, not a flow's sink)."""
    if not view.partial:
        return None
    (first, column), *others = trace(plan, view.partial["key"])

    def kind(source: P.Source, col: str) -> str:
        return {c.name: c.type for c in catalog.tables[source.table].columns}[col]
    sinks = {f.sink for f in catalog.flows.values()}
    others = [(s, c) for s, c in others if s.table in catalog.tables and kind(s, c) == kind(first, column)
              and catalog.tables[s.table].primary_key and s.table not in sinks]
    return PartialKey(view.partial["key"], ((first, column), *others), view.partial["max_keys"])

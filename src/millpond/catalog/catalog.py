"""Definitions of tables and views, persisted under the root as numbered JSON versions.

Each DDL statement writes the whole next version with put-if-absent, so reopening the root
restores exactly the last written catalog, and two writers cannot both change it.

A view keeps the statement the user wrote and its bound plan (the engine's encoding, opaque
here: the catalog sits below the engine). The plan, with its node and so state ids, is what runs;
the SQL is what a user reads and what a re-derivation is checked against when the root opens.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, replace
from typing import Sequence

import pyarrow as pa

from millpond import faults, paths
from millpond.catalog.retention import DEFAULT_RETENTION, Retention
from millpond.catalog.tables import Column, TableDef
from millpond.errors import CatalogError, FencedError
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["missing_relation", "Column", "TableDef", "ViewDef", "FlowDef", "FunctionDef", "IndexDef", "SinkDef", "dependency", "replacement",
           "index_dependency", "Catalog", "CatalogStore", "FORMAT"]

# 2: views carry their CREATE statement as written and their bound plan (1: a re-generated query);
# 3: APPEND ONLY tables (written only when there is one, so other roots stay readable by format 2);
# 4: SQL functions (written only when there is one); 5: flows (likewise); 6: SET retention (likewise);
# 7: indexes (likewise); 8: partial views (likewise); 9: flows whose state is ordered by their window
# (likewise: an older millpond would look their groups up by another key); 10: tables and views
# whose rows are addressed by their key's hash (likewise: an older millpond hashes every column);
# 11: sinks and tables read from files (likewise: an older millpond would not write or read them);
# 12: Python functions (likewise: an older millpond would read their source as SQL); 13: views
# altered in place (a definition backfilling beside the one in force, earlier definitions' keys;
# likewise: an older millpond would drop the new one's state); 14: columns with a DEFAULT or added by
# ALTER TABLE (likewise: an older millpond would not fill them in)
FORMAT = 15


@dataclass(frozen=True)
class ViewDef:
    id: int
    name: str
    sql: str  # the CREATE statement as written (catalog format 1: the query, re-generated)
    schema_b64: str  # Arrow schema of the view's rows
    depends_on: tuple[str, ...]
    plan: dict | None = None  # the encoded plan (millpond.engine.plan.encode); None in format 1
    on_error: str = "fail"  # a data error (e.g. division by zero): "fail" isolates the view, "null" yields NULL
    # a partial view (millpond.engine.partial): {"key": its key column, "max_keys": its budget}
    partial: dict | None = field(default=None, kw_only=True)
    # the definitions it replaced (ALTER MATERIALIZED VIEW ... AS), oldest first: each one's consumer
    # key and the epoch it was last in force at (the swap's: its changes to the new rows are that epoch's)
    replaced: tuple[tuple[str, int], ...] = field(default=(), kw_only=True)

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema_b64)))

    @staticmethod
    def encode_schema(schema: pa.Schema) -> str:
        return base64.b64encode(schema.serialize().to_pybytes()).decode()


@dataclass(frozen=True)
class FlowDef(ViewDef):
    """A flow (``CREATE FLOW``): a view whose changes are written into the table ``sink``, whose
    primary key is the flow's group keys (``key``)."""

    sink: str = ""
    key: tuple[str, ...] = ()
    comment: str | None = None
    expire_micros: int | None = None  # EXPIRE AFTER, in microseconds
    time_key: str | None = None  # the group key windows expire by (a DATE or TIMESTAMP column)
    trigger_rows: int | None = None  # TRIGGER AFTER n ROWS: the background loop runs an epoch early
    # the group key (a DATE or TIMESTAMP window) its state is ordered by: windows' state in time order
    # (millpond.engine.flows.cluster_floor); None for a flow without one, or created before format 9
    cluster: str | None = None


@dataclass(frozen=True)
class FunctionDef:
    name: str
    sql: str  # the CREATE FUNCTION statement as written
    params: tuple[tuple[str, str], ...]  # (name or "", SQL type), in order
    returns: str  # SQL type
    body: str  # the body's expression, in the PostgreSQL dialect; a Python function's source
    language: str = "sql"  # or "python" (millpond.pyfunctions; format 12)
    strict: bool = True  # a Python function: NULL in, NULL out (False: CALLED ON NULL INPUT)

    def to_json(self) -> dict:
        extra = {"language": self.language, "strict": self.strict} if self.language != "sql" else {}
        return {"name": self.name, "sql": self.sql, "params": [list(p) for p in self.params],
                "returns": self.returns, "body": self.body, **extra}

    @classmethod
    def from_json(cls, d: dict) -> "FunctionDef":
        return cls(d["name"], d["sql"], tuple((n, t) for n, t in d["params"]), d["returns"], d["body"],
                   d.get("language", "sql"), d.get("strict", True))

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(t for _, t in self.params)})"


@dataclass(frozen=True)
class IndexDef:
    """An index (``CREATE INDEX``): the rows of ``table`` arranged by ``columns``, kept once by its own
    consumer and read by every view whose join needs that table by those columns."""

    id: int
    name: str
    table: str
    columns: tuple[str, ...]
    sql: str = ""


@dataclass(frozen=True)
class SinkDef:
    """A sink (``CREATE SINK``): the rows of table or view ``source`` kept in an external table
    (``connector``: ``deltalake``), from epoch ``start`` on (its rows then as a first write, then
    every later epoch's changes). ``token`` is unique to this sink: the target records the epochs it
    took under it (:mod:`millpond.engine.sinks`)."""

    id: int
    name: str
    source: str
    connector: str
    kind: str  # "upsert" or "append-only"
    options: tuple[tuple[str, str], ...]  # WITH (...) as written, less connector and type
    start: int  # the committed epoch when it was created
    token: str
    sql: str = ""

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "source": self.source, "connector": self.connector,
                "kind": self.kind, "options": [list(o) for o in self.options], "start": self.start,
                "token": self.token, "sql": self.sql}

    @classmethod
    def from_json(cls, d: dict) -> "SinkDef":
        return cls(d["id"], d["name"], d["source"], d["connector"], d["kind"], tuple((k, v) for k, v in d["options"]),
                   d["start"], d["token"], d.get("sql", ""))


def index_dependency(name: str) -> str:
    """How a view's ``depends_on`` names an index it reads (so the index cannot be dropped under it)."""
    return f"index {name}"


def replacement(name: str) -> str:
    """The name view ``name``'s new definition runs under while it backfills (``Catalog.replacing``)."""
    return f"{name} (new)"


def dependency(name: str) -> str:
    """How a view's ``depends_on`` names a function it calls (apart from tables and views)."""
    return f"{name}()"


@dataclass(frozen=True)
class Catalog:
    version: int = 0
    next_id: int = 1
    tables: dict[str, TableDef] = field(default_factory=dict)
    views: dict[str, ViewDef] = field(default_factory=dict)
    functions: dict[str, FunctionDef] = field(default_factory=dict)
    flows: dict[str, FlowDef] = field(default_factory=dict)
    retention: Retention | None = None  # SET retention (None: DEFAULT_RETENTION)
    indexes: dict[str, IndexDef] = field(default_factory=dict)
    sinks: dict[str, SinkDef] = field(default_factory=dict)
    # new definitions of views, backfilling beside the ones in force until an epoch swaps them in
    # (ALTER MATERIALIZED VIEW v AS ...): by the view's name
    replacing: dict[str, ViewDef] = field(default_factory=dict)

    @property
    def kept(self) -> Retention:
        """The retention in force."""
        return self.retention or DEFAULT_RETENTION

    def relation(self, name: str) -> TableDef | ViewDef:
        found = self.tables.get(name) or self.views.get(name)
        if found is None:
            raise missing_relation(name, self)
        return found

    def table(self, name: str) -> TableDef:
        if name in self.views:  # PostgreSQL's words (only tables accept INSERT, UPDATE and DELETE)
            raise CatalogError(f'cannot change materialized view "{name}"', sqlstate="42809")
        if name not in self.tables:
            raise missing_relation(name, self)
        return self.tables[name]

    def writable(self, name: str) -> TableDef:
        """The table ``name`` if statements may change its rows (a flow's sink is written by its flow only)."""
        t = self.table(name)
        if (flow := self.sink_of(name)) is not None:
            raise CatalogError(f"table {name!r} is the sink of flow {flow.name!r}: only the flow writes its rows "
                               f"(DROP FLOW {flow.name} first to write it yourself)")
        return t

    def sink_of(self, table: str) -> FlowDef | None:
        return next((f for f in self.flows.values() if f.sink == table), None)

    def _check_free(self, name: str) -> None:
        if name in self.tables or name in self.views:
            raise CatalogError(f'relation "{name}" already exists', sqlstate="42P07",
                               hint=f"{name!r} is a {'table' if name in self.tables else 'materialized view'}")
        if name in self.flows:
            raise CatalogError(f'relation "{name}" already exists', sqlstate="42P07", hint=f"{name!r} is a flow")
        if name in self.indexes:
            raise CatalogError(f'relation "{name}" already exists', sqlstate="42P07", hint=f"{name!r} is an index")
        if name in self.sinks:
            raise CatalogError(f'relation "{name}" already exists', sqlstate="42P07", hint=f"{name!r} is a sink")

    def with_views(self, views: dict[str, ViewDef], flows: dict[str, FlowDef] | None = None) -> "Catalog":
        """The same catalog with these view (and flow) definitions (e.g. their plans filled in)."""
        return replace(self, views=views, flows=self.flows if flows is None else flows)

    def with_table(self, name: str, columns: tuple[Column, ...], primary_key: tuple[str, ...], *,
                   append_only: bool = False, source: tuple[tuple[str, str], ...] = ()) -> "Catalog":
        self._check_free(name)
        taken = {t.channel for t in self.tables.values()}  # a renamed table's channel may have this name
        t = TableDef(self.next_id, name, columns, primary_key, append_only, key_hashed=bool(primary_key),
                     source=source, channel_name=f"{name}.t{self.next_id}" if name in taken else "")
        return replace(self, next_id=self.next_id + 1, tables={**self.tables, name: t})

    def with_column(self, table: str, column: Column) -> "Catalog":
        """``ALTER TABLE table ADD COLUMN``: ``column`` numbered by the next id (:meth:`as_seen_by`)."""
        t = self.tables[table]
        added = replace(t, columns=(*t.columns, replace(column, added=self.next_id, fill=column.value)))
        return replace(self, next_id=self.next_id + 1, tables={**self.tables, table: added})

    def with_columns(self, table: str, columns: tuple[Column, ...]) -> "Catalog":
        """Table ``table`` with its columns' defaults and NOT NULL changed (``ALTER COLUMN``)."""
        return replace(self, tables={**self.tables, table: replace(self.tables[table], columns=columns)})

    def as_seen_by(self, id: int) -> "Catalog":
        """The catalog the view, flow or index numbered ``id`` is planned over: its tables without
        the columns added after it (PostgreSQL expands a view's ``*`` when it is created)."""
        return replace(self, tables={n: t.as_seen_by(id) for n, t in self.tables.items()})

    def with_view(self, name: str, sql: str, schema: pa.Schema, depends_on: tuple[str, ...], plan: dict | None,
                  *, on_error: str = "fail", partial: dict | None = None) -> "Catalog":
        self._check_free(name)
        v = ViewDef(self.next_id, name, sql, ViewDef.encode_schema(schema), depends_on, plan, on_error, partial=partial)
        return replace(self, next_id=self.next_id + 1, views={**self.views, name: v})

    def with_replacement(self, name: str, sql: str, schema: pa.Schema, depends_on: tuple[str, ...],
                         plan: dict | None, *, on_error: str = "fail") -> "Catalog":
        """The catalog with a new definition of view ``name`` backfilling beside the one in force
        (one that was backfilling is dropped for it)."""
        if name not in self.views:
            raise missing_relation(name, self) if name not in self.tables else CatalogError(
                f'"{name}" is not a materialized view', sqlstate="42809")
        v = ViewDef(self.next_id, name, sql, ViewDef.encode_schema(schema), depends_on, plan, on_error,
                    replaced=self.views[name].replaced)
        return replace(self, next_id=self.next_id + 1, replacing={**self.replacing, name: v})

    def swapped(self, new: dict[str, ViewDef], epoch: int) -> "Catalog":
        """The catalog with these views' new definitions (by name) in force from after ``epoch`` on."""
        views = {**self.views, **{k: replace(v, replaced=(*self.views[k].replaced, (f"o{self.views[k].id}", epoch)))
                                  for k, v in new.items()}}
        return replace(self, views=views, replacing={k: v for k, v in self.replacing.items() if k not in new})

    def without_replacements(self, names: Sequence[str]) -> "Catalog":
        return replace(self, replacing={k: v for k, v in self.replacing.items() if k not in names})

    def renamed(self, name: str, to: str) -> "Catalog":
        """The catalog with view ``name`` called ``to`` (its state, kept changes and sinks go with it)."""
        if name not in self.views:
            raise missing_relation(name, self) if name not in self.tables else CatalogError(
                f'"{name}" is not a materialized view', sqlstate="42809", hint="use ALTER TABLE to rename a table")
        if name in self.replacing:
            raise CatalogError(f"view {name!r} is being altered: rename it once its new definition is in force")
        self._check_free(to)
        self._check_unused(name, repr(name), verb="rename")
        views = {(to if k == name else k): (replace(v, name=to) if k == name else v) for k, v in self.views.items()}
        sinks = {k: (replace(v, source=to) if v.source == name else v) for k, v in self.sinks.items()}
        return replace(self, views=views, sinks=sinks)

    def table_renamed(self, name: str, to: str) -> "Catalog":
        """The catalog with table ``name`` called ``to``: its rows, log (its channel keeps its name),
        indexes and sinks go with it. Refused while views or flows read it (their SQL names it) or a
        flow writes it."""
        if name not in self.tables:
            raise missing_relation(name, self) if name not in self.views else CatalogError(
                f'"{name}" is not a table', sqlstate="42809", hint="use ALTER MATERIALIZED VIEW to rename a view")
        self._check_free(to)
        self._check_unused(name, repr(name), verb="rename")
        if (flow := self.sink_of(name)) is not None:
            raise CatalogError(f"cannot rename {name!r}: it is the sink of flow {flow.name!r} (its SQL names it); "
                               "drop the flow first (DROP FLOW)", sqlstate="2BP01")
        t = self.tables[name]
        moved = replace(t, name=to, channel_name="" if t.channel == to else t.channel)
        return replace(self, tables={(to if k == name else k): (moved if k == name else v) for k, v in self.tables.items()},
                       indexes={k: (replace(v, table=to) if v.table == name else v) for k, v in self.indexes.items()},
                       sinks={k: (replace(v, source=to) if v.source == name else v) for k, v in self.sinks.items()})

    def with_flow(self, flow: FlowDef) -> "Catalog":
        """The catalog with ``flow`` (its id assigned here); its sink table must be in it."""
        self._check_free(flow.name)
        if flow.sink not in self.tables:
            raise CatalogError(f"flow {flow.name!r}: no sink table named {flow.sink!r}")
        if (other := self.sink_of(flow.sink)) is not None:
            raise CatalogError(f"table {flow.sink!r} is already the sink of flow {other.name!r} (a sink has one flow)")
        return replace(self, next_id=self.next_id + 1,
                       flows={**self.flows, flow.name: replace(flow, id=self.next_id)})

    def without_flow(self, name: str) -> "Catalog":
        if name not in self.flows:
            raise CatalogError(f'flow "{name}" does not exist', sqlstate="42704", hint=_known("flows", self.flows))
        return replace(self, flows={k: v for k, v in self.flows.items() if k != name})

    def without(self, name: str) -> "Catalog":
        """The catalog without table or view ``name`` (and a table's indexes, as in PostgreSQL)."""
        self.relation(name)
        self._check_unused(name, repr(name))
        if (flow := self.sink_of(name)) is not None:
            raise CatalogError(f"cannot drop {name!r}: it is the sink of flow {flow.name!r}; drop the flow first "
                               "(DROP FLOW)")
        return replace(
            self,
            tables={k: v for k, v in self.tables.items() if k != name},
            views={k: v for k, v in self.views.items() if k != name},
            replacing={k: v for k, v in self.replacing.items() if k != name},
            indexes={k: v for k, v in self.indexes.items() if v.table != name},
        )

    def with_index(self, name: str, table: str, columns: tuple[str, ...], sql: str) -> "Catalog":
        self._check_free(name)
        i = IndexDef(self.next_id, name, table, columns, sql)
        return replace(self, next_id=self.next_id + 1, indexes={**self.indexes, name: i})

    def without_index(self, name: str) -> "Catalog":
        if name not in self.indexes:
            raise CatalogError(f'index "{name}" does not exist', sqlstate="42704", hint=_known("indexes", self.indexes))
        self._check_unused(index_dependency(name), f"index {name!r}")
        return replace(self, indexes={k: v for k, v in self.indexes.items() if k != name})

    def with_sink(self, sink: SinkDef) -> "Catalog":
        """The catalog with ``sink`` (its id assigned here); its source must be in it."""
        self._check_free(sink.name)
        self.relation(sink.source)
        return replace(self, next_id=self.next_id + 1, sinks={**self.sinks, sink.name: replace(sink, id=self.next_id)})

    def without_sink(self, name: str) -> "Catalog":
        if name not in self.sinks:
            raise CatalogError(f'sink "{name}" does not exist', sqlstate="42704", hint=_known("sinks", self.sinks))
        return replace(self, sinks={k: v for k, v in self.sinks.items() if k != name})

    def with_function(self, f: FunctionDef, *, replace_: bool = False) -> "Catalog":
        if f.name in self.functions:
            if not replace_:
                raise CatalogError(f"function {self.functions[f.name].signature} already exists", sqlstate="42723",
                                   hint="CREATE OR REPLACE FUNCTION replaces it")
            self._check_unused(dependency(f.name), f"function {f.name}")
        return replace(self, functions={**self.functions, f.name: f})

    def without_function(self, name: str) -> "Catalog":
        self._check_unused(dependency(name), f"function {name}")
        return replace(self, functions={k: v for k, v in self.functions.items() if k != name})

    def _check_unused(self, dep: str, what: str, *, verb: str = "drop or replace") -> None:
        users = sorted({v.name for v in [*self.views.values(), *self.replacing.values()] if dep in v.depends_on})
        if users:
            raise CatalogError(f"cannot {verb} {what} because other objects depend on it: views "
                               f"{', '.join(users)} depend on it", sqlstate="2BP01", hint="drop them first")
        flows = sorted(f.name for f in self.flows.values() if dep in f.depends_on)
        if flows:
            raise CatalogError(f"cannot {verb} {what} because other objects depend on it: flows "
                               f"{', '.join(flows)} read it", sqlstate="2BP01", hint="drop them first (DROP FLOW)")
        sinks = sorted(s.name for s in self.sinks.values() if s.source == dep)
        if sinks and verb != "rename":
            raise CatalogError(f"cannot {verb} {what}: sinks {', '.join(sinks)} write its rows out; "
                               "drop them first (DROP SINK)")

    def to_json(self) -> bytes:
        return json.dumps(
            {
                # an append-only table has no state of its own: older versions must not open the root
                "format": 15 if any(t.channel_name for t in self.tables.values()) else 14 if any(len(c.encode()) > 3 for t in self.tables.values() for c in t.columns) else 13 if self.replacing or any(v.replaced for v in self.views.values()) else 12 if any(f.language != "sql" for f in self.functions.values()) else 11 if self.sinks or any(t.source for t in self.tables.values()) else 10 if any(t.key_hashed for t in self.tables.values()) or any(
                    (v.plan or {}).get("plan", {}).get("key") for v in [*self.views.values(), *self.flows.values()])
                else 9 if any(f.cluster for f in self.flows.values()) else 8 if any(v.partial for v in self.views.values()) else 7 if self.indexes else 6 if self.retention else 5 if self.flows else 4 if self.functions else 3 if any(
                    t.append_only for t in self.tables.values()) else 2,
                "version": self.version,
                "next_id": self.next_id,
                "tables": [
                    {"id": t.id, "name": t.name, "columns": [c.encode() for c in t.columns],
                     "primary_key": list(t.primary_key), **({"append_only": True} if t.append_only else {}),
                     **({"key_hashed": True} if t.key_hashed else {}),
                     **({"source": dict(t.source)} if t.source else {}),
                     **({"channel": t.channel_name} if t.channel_name else {})}
                    for t in self.tables.values()
                ],
                "views": [_view_json(v) for v in self.views.values()],
                **({"replacing": [_view_json(v) for v in self.replacing.values()]} if self.replacing else {}),
                **({"functions": [f.to_json() for f in self.functions.values()]} if self.functions else {}),
                **({"flows": [
                    {"id": f.id, "name": f.name, "sql": f.sql, "schema": f.schema_b64, "depends_on": list(f.depends_on),
                     "plan": f.plan, "on_error": f.on_error, "sink": f.sink, "key": list(f.key), "comment": f.comment,
                     "expire_micros": f.expire_micros, "time_key": f.time_key,
                     **({"trigger_rows": f.trigger_rows} if f.trigger_rows else {}),
                     **({"cluster": f.cluster} if f.cluster else {})}
                    for f in self.flows.values()]} if self.flows else {}),
                **({"retention": self.retention.to_json()} if self.retention else {}),
                **({"indexes": [{"id": i.id, "name": i.name, "table": i.table, "columns": list(i.columns), "sql": i.sql}
                                for i in self.indexes.values()]} if self.indexes else {}),
                **({"sinks": [k.to_json() for k in self.sinks.values()]} if self.sinks else {}),
            },  # no indent: an indent takes json's Python encoder, 100 ms for the 22 TPC-H views' plans
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Catalog":
        body = json.loads(data)
        if body.get("format", 1) > FORMAT:
            raise CatalogError(f"catalog version {body.get('version')} has format {body['format']}; this millpond "
                               f"reads formats 1 to {FORMAT}: open the root with the millpond version that wrote it")
        tables = {
            t["name"]: TableDef(t["id"], t["name"], tuple(Column(*c) for c in t["columns"]), tuple(t["primary_key"]),
                              t.get("append_only", False), key_hashed=t.get("key_hashed", False),
                              source=tuple(sorted(t.get("source", {}).items())), channel_name=t.get("channel", ""))
            for t in body["tables"]
        }
        views = {v["name"]: _view_of(v) for v in body["views"]}
        replacing = {v["name"]: _view_of(v) for v in body.get("replacing", [])}
        functions = {f["name"]: FunctionDef.from_json(f) for f in body.get("functions", [])}
        flows = {
            f["name"]: FlowDef(f["id"], f["name"], f["sql"], f["schema"], tuple(f["depends_on"]), f["plan"],
                               f["on_error"], f["sink"], tuple(f["key"]), f["comment"], f.get("expire_micros"),
                               f.get("time_key"), f.get("trigger_rows"), f.get("cluster"))
            for f in body.get("flows", [])
        }
        retention = Retention.from_json(body["retention"]) if "retention" in body else None
        indexes = {i["name"]: IndexDef(i["id"], i["name"], i["table"], tuple(i["columns"]), i.get("sql", ""))
                   for i in body.get("indexes", [])}
        sinks = {k["name"]: SinkDef.from_json(k) for k in body.get("sinks", [])}
        return cls(version=body["version"], next_id=body["next_id"], tables=tables, views=views, functions=functions,
                   flows=flows, retention=retention, indexes=indexes, sinks=sinks, replacing=replacing)


def _view_json(v: ViewDef) -> dict:
    return {"id": v.id, "name": v.name, "sql": v.sql, "schema": v.schema_b64, "depends_on": list(v.depends_on),
            "plan": v.plan, **({"on_error": v.on_error} if v.on_error != "fail" else {}),
            **({"partial": v.partial} if v.partial else {}),
            **({"replaced": [list(r) for r in v.replaced]} if v.replaced else {})}


def _view_of(v: dict) -> ViewDef:
    return ViewDef(v["id"], v["name"], v["sql"], v["schema"], tuple(v["depends_on"]), v.get("plan"),
                   v.get("on_error", "fail"), partial=v.get("partial"),
                   replaced=tuple((k, e) for k, e in v.get("replaced", ())))


class CatalogStore:
    def __init__(self, store: ObjectStore):
        self.store = store

    def load(self) -> Catalog:
        keys = self.store.list(paths.CATALOG_PREFIX)
        return Catalog.from_json(self.store.get(keys[-1])) if keys else Catalog()

    def commit(self, catalog: Catalog) -> Catalog:
        """Write ``catalog`` as the next version; return it with its new version number."""
        new = replace(catalog, version=catalog.version + 1)
        try:
            self.store.put_if_absent(paths.catalog_key(new.version), new.to_json())
        except AlreadyExists:
            raise FencedError(f"catalog version {new.version} under {self.store.root!r} was written "
                              "by another writer; reopen the root") from None
        faults.point("catalog.after_put")
        return new


def _known(what: str, names: object) -> str:
    return f"known {what}: {', '.join(sorted(names)) or 'none'}"  # type: ignore[call-overload]


def missing_relation(name: str, catalog: Catalog) -> CatalogError:
    """PostgreSQL's error for a table or view that is not there, naming the ones that are."""
    return CatalogError(f'relation "{name}" does not exist', sqlstate="42P01",
                        hint=_known("tables and views", [*catalog.tables, *catalog.views]))

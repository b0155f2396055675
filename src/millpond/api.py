"""The Python API: ``millpond.connect(root)`` returns a :class:`Database`.

    >>> db = millpond.connect("./data")                           # doctest: +SKIP
    >>> db.sql("CREATE TABLE t (k VARCHAR PRIMARY KEY, v INT)")   # doctest: +SKIP
    >>> db.insert("t", pyarrow.table({"k": ["a"], "v": [1]}))     # doctest: +SKIP
    >>> db.flush(); db.sql("SELECT * FROM t")                      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
from sqlglot import exp

from millpond.catalog import Catalog, CatalogStore, Column, TableDef
from millpond.catalog.types import arrow_type, normalize_type
from millpond.columns import COUNT, ROW_ID, W
from millpond.engine.coordinator import Coordinator, EpochReport
from millpond.errors import CatalogError, FencedError, MillpondError, SchemaError, SqlError
from millpond.log import Channel, Log
from millpond.engine.executor import Consumer
from millpond.engine.consumers import consumers
from millpond.sql.planner import plan_view
from millpond.sql.statements import keyword, parse
from millpond.store.objects import ObjectStore

__all__ = ["connect", "Database"]

log = logging.getLogger("millpond")


def connect(root: str, *, spark: Any = None, parallelism: int | None = None,
            interval: str | float | None = "1s", storage_options: dict[str, str] | None = None,
            compaction: str = "local") -> "Database":
    """Open (or create) the database at ``root``: a folder, ``file://...`` or ``s3://bucket/prefix``.

    ``spark``: a SparkSession to run on (default: an embedded ``local[*]`` session).
    ``parallelism``: Spark partitions of stateful stages (default: the session's parallelism).
    ``interval``: run epochs in the background this often ("1s", "500ms", 2.0); None turns it off.
    ``storage_options``: object-store settings for remote roots (``endpoint``, ``access_key_id``,
    ``secret_access_key``, ``region``, ``allow_http``...); they are shipped to every Spark task.
    ``compaction``: where state compaction runs, in the background between epochs: ``"local"`` (a
    thread of this process) or ``"spark"`` (a Spark job over the same root: remote compaction).
    """
    return Database(root, spark=spark, parallelism=parallelism, interval=interval,
                    storage_options=storage_options, compaction=compaction)


def _seconds(interval: str | float | None) -> float | None:
    if interval is None or isinstance(interval, (int, float)):
        return None if interval is None else float(interval)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", interval)
    if not m:
        raise ValueError(f"interval {interval!r}: use e.g. '1s', '250ms', '2m' or a number of seconds")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


class Database:
    def __init__(self, root: str, *, spark: Any = None, parallelism: int | None = None,
                 interval: str | float | None = "1s", storage_options: dict[str, str] | None = None,
                 compaction: str = "local"):
        from millpond.spark import SparkExecutor, local_session, register, spark_runner
        from millpond.store.store import run_in_process

        self.root = root
        self._own_spark = spark is None
        self.spark = spark or local_session()
        register(self.spark)
        self.store = ObjectStore(root, storage_options)
        self.catalogs = CatalogStore(self.store)
        self.catalog = self.catalogs.load()
        self.log = Log(self.store)
        n = parallelism or self.spark.sparkContext.defaultParallelism
        if compaction not in ("local", "spark"):
            raise MillpondError(f"compaction={compaction!r}: use 'local' (a background thread) or 'spark' "
                                "(a Spark job over the same root)")
        self.executor = SparkExecutor(self.spark)
        runner = spark_runner(self.spark) if compaction == "spark" else run_in_process
        self.coordinator = Coordinator(self.executor, self.store, self.log, parallelism=n, compaction=runner)
        self._lock = threading.RLock()
        self._consumers = self._plan_consumers(self.catalog)
        self._closed = threading.Event()
        self._background_error: BaseException | None = None
        self._fenced: FencedError | None = None
        self._thread = None
        period = _seconds(interval)
        if period:
            self._thread = threading.Thread(target=self._background, args=(period,), name="millpond-epochs",
                                            daemon=True)
            self._thread.start()

    # -- public API ---------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The last committed epoch."""
        return self.coordinator.manifest.epoch

    @property
    def parallelism(self) -> int:
        return self.coordinator.parallelism

    def sql(self, text: str) -> pa.Table | None:
        """Run one or more statements; return the result of the last query (None for DDL/DML)."""
        result = None
        for statement in parse(text):
            result = self._execute(statement)
        return result

    def insert(self, table: str, data: Any) -> None:
        """Append rows (pyarrow Table/RecordBatch, pandas or Spark DataFrame, dict of columns)."""
        with self._guard():
            t = self.catalog.table(table)
            self._append(t, _conform(t, _to_arrow(data)))

    def flush(self) -> list[EpochReport]:
        """Run epochs until every view reflects all input appended so far; return their reports."""
        with self._guard():
            reports = []
            while True:
                report = self.coordinator.run_epoch(self.catalog, self._consumers)
                if report is None:
                    return reports
                reports.append(EpochReport(report.epoch, {
                    name: change.cast(self._changelog_schema(name)) for name, change in report.changes.items()}))

    def read(self, name: str) -> pa.Table:
        """The committed snapshot of a table or view as Arrow."""
        with self._guard():
            return self._snapshot(name)

    def table(self, name: str):  # noqa: ANN201
        """A Spark DataFrame over the committed snapshot of a table or view."""
        return self.spark.createDataFrame(self.read(name))

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join()
        self.coordinator.close()
        self.log.close()
        if self._own_spark:
            self.spark.stop()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- statements ---------------------------------------------------------------------------
    def _execute(self, s: exp.Expression) -> pa.Table | None:
        with self._guard():
            word = keyword(s)
            if word == "FLUSH":
                self.flush()
                return None
            if isinstance(s, exp.Create):
                return self._create(s)
            if isinstance(s, exp.Drop):
                return self._drop(s)
            if isinstance(s, exp.Insert):
                return self._insert_sql(s)
            if isinstance(s, exp.Delete):
                return self._delete(s)
            if isinstance(s, exp.Update):
                return self._update(s)
            if isinstance(s, (exp.Select, exp.Union)):
                return self._query(s)
            if isinstance(s, exp.Set):
                return self._set(s)
            raise SqlError(f"unsupported statement: {s.sql('postgres')[:80]!r}")

    def _create(self, s: exp.Create) -> None:
        kind = (s.args.get("kind") or "").upper()
        if kind == "TABLE":
            schema = s.this
            if not isinstance(schema, exp.Schema) or s.expression is not None:
                raise SqlError("CREATE TABLE needs a column list (CREATE TABLE ... AS SELECT is not supported)")
            name = schema.this.name
            if s.args.get("exists") and name in self.catalog.tables:
                return None
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
            names = [c.name for c in cols]
            for bad in [p for p in pk if p not in names] + [n for n in names if n.startswith("_")]:
                raise SqlError(f"table {name!r}: invalid column {bad!r} (unknown primary key column, "
                               "or a name starting with '_', which millpond reserves)")
            self._commit_catalog(self.catalog.with_table(name, tuple(cols), tuple(pk)))
            return None
        if kind == "VIEW":
            props = s.args.get("properties")
            if not (props and any(isinstance(p, exp.MaterializedProperty) for p in props.expressions)):
                raise SqlError("only CREATE MATERIALIZED VIEW is supported")
            name = s.this.name
            if s.args.get("exists") and name in self.catalog.views:
                return None
            plan, depends = plan_view(s.expression, self.catalog)
            schema = self._view_schema(plan)
            self._commit_catalog(self.catalog.with_view(name, s.expression.sql("postgres"), schema, depends))
            return None
        raise SqlError(f"CREATE {kind} is not supported (tables and materialized views are)")

    def _drop(self, s: exp.Drop) -> None:
        kind = (s.args.get("kind") or "").upper()
        for t in s.args.get("tables") or [s.this]:
            name = t.name
            exists = name in (self.catalog.tables if kind == "TABLE" else self.catalog.views)
            if not exists:
                if s.args.get("exists"):
                    continue
                raise CatalogError(f"no {'table' if kind == 'TABLE' else 'materialized view'} named {name!r}")
            self._commit_catalog(self.catalog.without(name))
            if kind == "TABLE":  # after the catalog: a crash in between leaves a channel the next CREATE replaces
                self.log.drop_channel(name)

    def _set(self, s: exp.Set) -> None:
        for item in s.expressions:
            eq = item.this
            if isinstance(eq, exp.EQ) and eq.this.name.lower() == "parallelism":
                n = int(eq.expression.name)
                if n < 1:
                    raise SqlError("parallelism must be at least 1")
                self.coordinator.with_parallelism(n)
            else:
                raise SqlError(f"unknown setting {item.sql('postgres')!r} (known: parallelism)")

    def _insert_sql(self, s: exp.Insert) -> None:
        target = s.this
        cols = None
        if isinstance(target, exp.Schema):
            cols = [c.name for c in target.expressions]
            target = target.this
        t = self.catalog.table(target.name)
        names = cols or [c.name for c in t.columns]
        body = s.expression
        if isinstance(body, exp.Values):
            for row in body.expressions:
                if len(row.expressions) != len(names):
                    raise SqlError(f"INSERT INTO {t.name}: {len(row.expressions)} values for {len(names)} columns "
                                   f"in {row.sql('postgres')}")
            alias = exp.TableAlias(this=exp.to_identifier("_v"), columns=[exp.to_identifier(n) for n in names])
            query = exp.select(*[exp.column(n, "_v") for n in names]).from_(
                exp.Values(expressions=body.expressions, alias=alias))
        else:
            query = body
        rows = self._query(query)
        if rows.num_columns != len(names):
            raise SqlError(f"INSERT INTO {t.name}: {rows.num_columns} values for {len(names)} columns")
        rows = rows.rename_columns(names)
        missing = [c for c in t.columns if c.name not in names]
        for c in missing:
            rows = rows.append_column(c.name, pa.nulls(rows.num_rows, arrow_type(c.type)))
        self._append(t, _conform(t, rows))

    def _delete(self, s: exp.Delete) -> None:
        t = self.catalog.table(s.this.name)
        self.flush()
        where = s.args.get("where")
        old = self._query(exp.select("*").from_(t.name).where(where.this if where else None), hidden=True)
        self._append_changes(t, old, None)

    def _update(self, s: exp.Update) -> None:
        t = self.catalog.table(s.this.name)
        self.flush()
        sets = {eq.this.name: eq.expression for eq in s.expressions}
        unknown = set(sets) - {c.name for c in t.columns}
        if unknown:
            raise SqlError(f"UPDATE {t.name}: no column {sorted(unknown)[0]!r}")
        where = s.args.get("where")
        cond = where.this if where else None
        old = self._query(exp.select("*").from_(t.name).where(cond), hidden=True)
        projections = [exp.alias_(sets[c.name].copy() if c.name in sets else exp.column(c.name, quoted=True),
                                  c.name, quoted=True) for c in t.columns]
        new = self._query(exp.select(*projections, exp.column(ROW_ID)).from_(t.name).where(cond), hidden=True)
        new = _conform(t, new.select([c.name for c in t.columns])).append_column(ROW_ID, new.column(ROW_ID))
        self._append_changes(t, old, new)

    def _query(self, q: exp.Expression, *, hidden: bool = False) -> pa.Table:
        """Answer a SELECT from committed snapshots with DuckDB."""
        con = duckdb.connect()
        try:
            ctes = {c.alias_or_name for c in q.find_all(exp.CTE)}
            for t in {t.name for t in q.find_all(exp.Table)} - ctes:
                snap = self._snapshot(t, hidden=hidden)
                con.register(t, snap)
            try:
                return con.sql(q.sql(dialect="duckdb")).to_arrow_table()
            except duckdb.Error as exc:
                raise SqlError(f"query failed: {exc}") from None
        finally:
            con.close()

    # -- writes -------------------------------------------------------------------------------
    def _append(self, t: TableDef, rows: pa.Table) -> None:
        if t.primary_key:
            self.flush()  # resolve upserts against the committed table
            rows = _last_per_key(rows, t.primary_key)
            current = self._snapshot(t.name, hidden=True)
            key = list(t.primary_key)
            old = pl.from_arrow(current).join(pl.from_arrow(rows).select(key), on=key, how="semi").to_arrow()
            self._append_changes(t, old, rows.append_column(ROW_ID, pa.nulls(rows.num_rows, pa.int64())),
                                 current=current)
            return
        first = self._channel(t).end
        ids = pa.array(np.arange(first, first + rows.num_rows, dtype=np.int64))
        self._append_changes(t, None, rows.append_column(ROW_ID, ids))

    def _append_changes(self, t: TableDef, old: pa.Table | None, new: pa.Table | None, *,
                        current: pa.Table | None = None) -> None:
        """Append retractions of ``old`` and insertions of ``new`` as one durable batch.

        ``current`` is the committed table, if the caller already read it (for the key check).
        """
        parts = []
        for rows, w in ((old, -1), (new, 1)):
            if rows is not None and rows.num_rows:
                rows = rows.select([*(c.name for c in t.columns), ROW_ID])
                weights = pa.array(np.full(rows.num_rows, w, dtype=np.int64))
                parts.append(rows.append_column(W, weights).cast(t.log_schema))
        if not parts:
            return
        batch = pa.concat_tables(parts)
        if t.primary_key and new is not None:
            current = current if current is not None else self._snapshot(t.name, hidden=True)
            keys = pl.from_arrow(current).select(t.primary_key)
            _check_unique(t, keys, pl.from_arrow(batch))
        self._channel(t).append(batch)

    def _channel(self, t: TableDef) -> Channel:
        return self.log.create_channel(t.channel, t.log_schema, id=t.channel_id)

    # -- reads --------------------------------------------------------------------------------
    def _snapshot(self, name: str, *, hidden: bool = False) -> pa.Table:
        rel = self.catalog.relation(name)
        consumer = self._consumers_by_name[name]
        schema = rel.log_schema.remove(rel.log_schema.get_field_index(W)) if isinstance(rel, TableDef) \
            else rel.schema
        found = self.coordinator.rows(consumer).scan()
        if found is None or found.height == 0:
            table = schema.empty_table()
        else:
            counts = found[COUNT].to_numpy()
            idx = np.repeat(np.arange(found.height), counts)
            table = found.select(list(consumer.columns)).to_arrow().take(pa.array(idx)).cast(schema)
        if isinstance(rel, TableDef) and not hidden:
            table = table.drop_columns([ROW_ID])
        return table

    def _changelog_schema(self, name: str) -> pa.Schema:
        rel = self.catalog.relation(name)
        if isinstance(rel, TableDef):
            return rel.log_schema
        return rel.schema.append(pa.field(W, pa.int64()))

    # -- catalog ------------------------------------------------------------------------------
    def _commit_catalog(self, catalog: Catalog) -> None:
        consumers = self._plan_consumers(catalog)
        self.catalog = self.catalogs.commit(catalog)
        self._consumers = consumers

    def _plan_consumers(self, catalog: Catalog) -> list[Consumer]:
        from millpond.sql.statements import view_query
        plans = {v.name: plan_view(view_query(v.sql), catalog)[0] for v in catalog.views.values()}
        out = consumers(catalog, plans)
        self._consumers_by_name = {c.name: c for c in out}
        return out

    def _view_schema(self, plan) -> pa.Schema:  # noqa: ANN001
        return self.executor.output_schema(plan, self.catalog.tables)

    # -- background ---------------------------------------------------------------------------
    def _background(self, period: float) -> None:
        while not self._closed.wait(period):
            try:
                with self._lock:
                    self.coordinator.run_epoch(self.catalog, self._consumers)
            except BaseException as exc:  # surfaced to the next API call
                log.exception("background epoch failed")
                self._background_error = exc
                return

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialize API calls; refuse them once closed, fenced, or after a background failure."""
        if self._background_error is not None:
            raise MillpondError(f"a background epoch failed: {self._background_error}") from self._background_error
        if self._closed.is_set():
            raise MillpondError("the database is closed")
        if self._fenced is not None:
            raise FencedError(f"another writer took over {self.root!r} ({self._fenced}); reopen the root")
        with self._lock:
            try:
                yield
            except FencedError as exc:
                self._fenced = exc
                raise


def _to_arrow(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, dict):
        return pa.table(data)
    if isinstance(data, pl.DataFrame):
        return data.to_arrow()
    mod = type(data).__module__
    if mod.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if mod.startswith("pyspark"):
        return data.toArrow()
    raise SchemaError(f"cannot insert a {type(data).__name__}: use a pyarrow Table, pandas or Spark DataFrame")


def _conform(t: TableDef, rows: pa.Table) -> pa.Table:
    """Cast ``rows`` to the table's schema, or name the column and row that do not fit."""
    want = [c.name for c in t.columns]
    extra = [n for n in rows.column_names if n not in want]
    missing = [n for n in want if n not in rows.column_names]
    if extra or missing:
        raise SchemaError(f"table {t.name!r} has columns {want}; input " +
                          (f"lacks {missing}" if missing else "") + (" and " if extra and missing else "") +
                          (f"has unknown {extra}" if extra else ""))
    cols = []
    for c in t.columns:
        col, target = rows.column(c.name), arrow_type(c.type)
        try:
            col = col.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            bad = _first_bad(rows.column(c.name), target)
            raise SchemaError(f"table {t.name!r}, column {c.name!r} ({c.type}): "
                              + (f"row {bad} has value {rows.column(c.name)[bad].as_py()!r}" if bad is not None
                                 else str(exc))) from None
        if c.name in t.primary_key and col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise SchemaError(f"table {t.name!r}: primary key column {c.name!r} is NULL in row {row}")
        cols.append(col)
    return pa.table(cols, schema=t.schema)


def _first_bad(col: pa.ChunkedArray, target: pa.DataType) -> int | None:
    try:
        source = pl.from_arrow(col)
        cast = source.cast(pl.from_arrow(pa.array([], target)).dtype, strict=False)
    except Exception:
        return None
    bad = np.flatnonzero((source.is_not_null() & cast.is_null()).to_numpy())
    return int(bad[0]) if bad.size else None


def _last_per_key(rows: pa.Table, key: tuple[str, ...]) -> pa.Table:
    return pl.from_arrow(rows).unique(subset=list(key), keep="last", maintain_order=True).to_arrow().cast(rows.schema)


def _check_unique(t: TableDef, current: pl.DataFrame, changes: pl.DataFrame) -> None:
    key = list(t.primary_key)
    delta = changes.group_by(key).agg(pl.col(W).sum().alias("_d"))
    counts = current.group_by(key).len("_n").join(delta, on=key, how="full", coalesce=True, nulls_equal=True)
    counts = counts.with_columns((pl.col("_n").fill_null(0) + pl.col("_d").fill_null(0)).alias("_n"))
    dup = counts.filter(pl.col("_n") > 1)
    if dup.height:
        raise SchemaError(f"table {t.name!r}: duplicate primary key {dup.select(key).row(0, named=True)}")


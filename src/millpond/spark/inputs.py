"""Where a consumer's rows come from, as Spark DataFrames (:class:`Inputs`, the part of
:class:`millpond.spark.build.Builder` that reads): a table's records of the epoch's range (read by
the driver when few, else by the ``millpond`` data source), its committed rows (batch mode, a
partial view's fills and evictions), a partial view's table restricted to its keys
(:mod:`millpond.engine.partial`), and a view's changes and rows for the views that read it.
"""

from __future__ import annotations

import io
from functools import partial, reduce
from typing import Iterator, Mapping

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from sqlglot import exp

from millpond.catalog import TableDef
from millpond.catalog.types import spark_ddl_type
from millpond.columns import COUNT, ROW_ID, VN, W
from millpond.engine import plan as P
from millpond.engine.consumers import Consumer, committed_rows, table_rows_state
from millpond.engine.executor import EpochJob, PieceSource, Ranges, ViewInput
from millpond.engine.filling import bounds
from millpond.engine.reads import SAMPLE_ROWS
from millpond.engine.flows import CLUSTER_MAX, CLUSTER_MIN, CLUSTER_NULL, CLUSTER_UNIT
from millpond.log import read_pieces
from millpond.spark.combine import plan_combine
from millpond.spark.fused import MAX_TASKS
from millpond.spark.log_source import MAX_PARTITION_ROWS, ScanSlots, write_scan
from millpond.spark.jvm import select_expr
from millpond.store.manifest import Levels
from millpond.store.objects import open_store

__all__ = ["Inputs", "DRIVER_READ_ROWS", "read_columns", "read_rows", "quote", "arrow_schema", "key_hash", "cluster_hash"]

DRIVER_READ_ROWS = 10_000  # a smaller range is read by the driver and handed to Spark as Arrow
# a stage whose tasks read the log themselves (spark/fused.py) has one task per this many records:
# each task reads the whole range, and on 2 cores one task did better than two at 1,000,000
# records (benchmarks/per_row.py: count/sum 0.47 vs 0.58-0.64 s, a retractable MAX 0.78 vs 1.31 s,
# a filter 0.17-0.23 vs 0.25-0.30 s, a join the same)
FUSED_ROWS_PER_TASK = 2_000_000
BATCH_ROWS = 1 << 17  # rows per Arrow batch a task hands the JVM


class Inputs:
    """Where one consumer's rows of one epoch come from, as DataFrames: the reading collaborator
    of :class:`~millpond.spark.build.Builder` (and of its fusing and local planning)."""

    def __init__(self, spark: SparkSession, job: EpochJob, consumer: Consumer, ranges: Ranges,
                 tables: Mapping[str, TableDef], pieces: PieceSource, scans: dict, loaded: dict,
                 views: Mapping[str, ViewInput], single: bool, fused_only: bool):
        self.spark, self.job, self.consumer, self.ranges, self.tables = spark, job, consumer, ranges, tables
        self.pieces = pieces
        self.scans = scans  # (channel, start, stop, columns[, how]) -> DataFrame, shared by an epoch's consumers
        self.loaded = loaded  # data source DataFrames reused across epochs
        self.views = views  # the views read as sources: their changes in this epoch
        self.single = single  # read every range in one task (a flow's small trigger: its partials need no shuffle)
        self.fused_only = fused_only  # every source is read by a fused task (as a build found): no range read here
        self._read_columns: dict[int, tuple[str, ...]] | None = None

    def reusable(self) -> bool:
        """Whether this consumer's DataFrame may be re-run by later epochs as far as the consumer
        goes (its reads decide the rest, :meth:`~millpond.spark.build.Builder.reuse_key`): not a
        first epoch, a partial view, a view over views, a flow's merge or a single-task build."""
        c, job = self.consumer, self.job
        return not (c.key not in job.manifest.offsets or job.batch.get(c.key) or c.key in job.partial
                    or c.partial is not None or c.views or c.merge is not None or self.single)

    def records(self) -> int:
        """New records of the epoch over all channels this consumer reads."""
        return sum(b - a for a, b in self.ranges.values())

    def local_records(self) -> int:
        """The records the consumer's epoch reads: its ranges', and the committed rows it reads."""
        committed = sum(ref.rows for t in self.tables.values() if (sid := self.committed(t)) is not None
                        for ref in self.job.manifest.state(sid).files())
        first, last, parts = self.job.slices.get(self.consumer.key, (0, 0, 1))  # a filling view's parts
        return self.records() + committed * (last - first + 1) // parts

    def source(self, node: P.Source) -> DataFrame:
        if node.table not in self.tables:
            return self._view(node)
        t = self.tables[node.table]
        start, stop = self.ranges[t.channel]
        partial = self.consumer.partial
        sources = [s for s, _ in partial.sources] if partial is not None else []
        cols = self.columns(node) if not any(node is s for s in sources) else _all(t)
        scan = self._scanned(t, start, stop, cols)
        renames = _renames(tuple((out, src) for out, src in node.columns if src in cols))
        for source, column in partial.sources if partial is not None else ():
            if node is source:
                return select_expr(self._partial(t, column, self.scans[scan]), *renames, W)
        table = self.job.batch.get(self.consumer.key, {}).get(t.channel)
        if table is not None:  # batch mode (coordinator, step 1): the table's rows, then its log from there
            if (*scan, table) not in self.scans:
                within = self.part()
                rows = select_expr(self._rows(t, table, cols, within=within), *map(quote, cols), W)
                log = self.scans[scan] if within[1] is None else self._below(t, start, stop, cols, within[1])
                self.scans[(*scan, table)] = log.unionByName(rows)
            scan = (*scan, table)
        return select_expr(self.scans[scan], *renames, W)

    def columns(self, node: P.Source) -> tuple[str, ...]:
        """The columns of ``node``'s table the consumer's plan uses (its scan reads only those)."""
        if self._read_columns is None:
            roots = [self.consumer.plan] + ([self.consumer.merge.aggregate] if self.consumer.merge else [])
            self._read_columns = {k: v for root in roots for k, v in read_columns(root).items()}
        found = self._read_columns.get(id(node))
        return found if found is not None else tuple(src for _, src in node.columns)

    def _partial(self, t: TableDef, key: str, delta: DataFrame) -> DataFrame:
        """A partial view's table (:mod:`millpond.engine.partial`), filtered on its column ``key``:
        its new records of the keys filled after this epoch, and its rows of the keys this epoch
        fills (as inserts) and evicts (as deletes), read from its rows state at the pinned version."""
        step = self.job.partial.get(self.consumer.key)
        column = quote(key).replace("{", "{{").replace("}", "}}")
        ddl = f"_pk {spark_ddl_type({c.name: c.type for c in t.columns}[key])}"

        def among(df: DataFrame, keys: pa.Array) -> DataFrame | None:
            if not len(keys):
                return None
            wanted = self.spark.createDataFrame(pa.table({"_pk": keys}), ddl)
            return self.spark.sql(f"SELECT * FROM {{df}} WHERE {column} IN (SELECT _pk FROM {{keys}})", df=df,
                                  keys=wanted)
        parts = [among(delta, step.filled)] if step is not None else []
        if step is not None and (len(step.fill) or len(step.evict)):
            rows = self._rows(t, step.table_keys[t.name])
            parts.append(among(rows, step.fill))
            if (evicted := among(rows, step.evict)) is not None:
                parts.append(select_expr(evicted, *[quote(c) for c in evicted.columns if c != W], f"-{W} AS {W}"))
        parts = [p for p in parts if p is not None]
        return reduce(DataFrame.unionByName, parts) if parts else self.spark.createDataFrame([], _ddl(t))

    def _view(self, node: P.Source) -> DataFrame:
        """A view read by this one: its changes in this epoch (computed by an earlier job of the
        epoch); in this view's first epoch, its rows before them too (its rows state at the
        pinned version), so the view starts from all of them."""
        view = self.views[node.table]
        schema = from_arrow_schema(view.schema.append(pa.field(W, pa.int64())))
        parts = []
        if view.changes is not None and view.changes.rows:  # read by tasks: the driver holds no row of them
            files = view.changes.files
            read = partial(read_changes, self.job.root, self.job.storage, files, arrow_schema(schema))
            parts.append(self.spark.range(0, len(files), 1, len(files)).mapInArrow(read, schema))
        if view.state and self.consumer.key not in self.job.manifest.offsets:
            levels, n = self.job.manifest.state(view.state), self.job.parallelism
            slices = read_slices(levels, n)
            read = partial(read_rows, self.job.root, self.job.storage, levels,
                           tuple(view.schema.names), slices, arrow_schema(schema), row_id=False)
            parts.append(self.spark.range(0, slices, 1, n).mapInArrow(read, schema))
        df = reduce(DataFrame.unionByName, parts) if parts else self.spark.createDataFrame([], schema)
        return select_expr(df, *_renames(node.columns), W)

    def reduces(self, node: P.Aggregate) -> bool:
        """Whether combining ``node``'s delta per group before its exchange pays, in a first epoch in
        batch mode: Catalyst's combine is an aggregation and a shuffle of its own, so it pays only
        when the groups are far fewer than the rows (TPC-H Q1: 4 groups of 6M lineitems) and costs
        a shuffle more where nearly every row is its own group (Q21's lineitems by order and
        supplier). Estimated from a sample of the table's committed rows (:func:`groups_estimate`)
        when the aggregate groups a table's columns through filters; True otherwise (a join's or a
        view's output, a computed group: combined as before)."""
        project = node.input
        if not self.job.batch.get(self.consumer.key) or not isinstance(project, P.Project):
            return True
        source = project.input
        while isinstance(source, P.Filter):
            source = source.input
        if not isinstance(source, P.Source) or source.table not in self.tables:
            return True
        exprs, renames = {name: e for e, name in project.exprs}, dict(source.columns)
        keys = [exprs.get(g) for g in node.group]
        if not keys or not all(isinstance(k, exp.Column) and k.name in renames for k in keys):
            return True
        t = self.tables[source.table]
        sid = self.committed(t)
        if sid is None:
            return True
        levels = self.job.manifest.state(sid)
        stored = sum(ref.rows for ref in levels.files())
        if stored < 4 * SAMPLE_ROWS:
            return True
        cols = tuple(dict.fromkeys(renames[k.name] for k in keys))
        state = committed_rows(open_store(self.job.root, self.job.storage), levels, cols, defaults=t.defaults)
        sample, share = state.sample(SAMPLE_ROWS)
        if sample is None or sample.num_rows == 0:
            return True
        return groups_estimate(sample.select(list(cols)), share) * COMBINE_REDUCTION <= stored

    def committed(self, t: TableDef) -> str | None:
        """The rows state of ``t`` a first epoch in batch mode reads (coordinator, step 1), if any."""
        key = self.job.batch.get(self.consumer.key, {}).get(t.channel)
        return None if key is None else table_rows_state(t)

    def part(self) -> tuple[int | None, int | None]:
        """The key hashes [lo, hi) of a batch table's rows this epoch reads (a view filling in
        bounded epochs, :mod:`millpond.engine.filling`: one part; otherwise all, (None, None))."""
        part = self.job.slices.get(self.consumer.key)
        return (None, None) if part is None else bounds(*part)

    def _below(self, t: TableDef, start: int, stop: int, cols: tuple[str, ...], hi: int) -> DataFrame:
        """The range's records of ``t`` whose key hash is below ``hi``: of the rows a filling view
        has read so far (:mod:`millpond.engine.filling`), as Spark's ``xxhash64`` hashed them."""
        scan = self._scanned(t, start, stop, tuple(dict.fromkeys((*cols, *t.primary_key))))
        below = self.scans[scan].where(f"xxhash64({', '.join(map(quote, t.primary_key))}) < CAST({hi} AS BIGINT)")
        return select_expr(below, *map(quote, cols), W)

    def _scanned(self, t: TableDef, start: int, stop: int, cols: tuple[str, ...]) -> tuple:
        """The key in :attr:`scans` of the DataFrame reading ``cols`` of ``[start, stop)`` of ``t``'s
        channel, made if the epoch has none yet: one source per channel range and epoch (each costs
        planning on the driver; a loaded scan of the range, if any, is re-run)."""
        scan = (t.channel, start, stop, cols)
        if scan not in self.scans and self._by_driver(start, stop):
            scan = (*scan, "driver")
        if scan not in self.scans:
            self.scans[scan] = self._scan(t, start, stop, cols)
        return scan

    def _rows(self, t: TableDef, key: str, cols: tuple[str, ...] | None = None,
              within: tuple[int | None, int | None] = (None, None)) -> DataFrame:
        """The committed rows of ``t`` (its consumer ``key``'s rows state in the job's version) as
        log records weighted by their copies, read by ``parallelism`` tasks in slices of key hashes:
        its columns ``cols`` only (default all; a Python task's output is never pruned by Catalyst,
        and every column crossing into the JVM costs)."""
        names = tuple(c for c in (_all(t) if cols is None else cols) if c != ROW_ID)
        row_id = cols is None or ROW_ID in cols
        ddl, n = _ddl(t, (*names, ROW_ID) if row_id else names), self.job.parallelism
        schema = to_arrow_schema(self.spark.createDataFrame([], ddl).schema, timezone="UTC")
        levels = self.job.manifest.state(table_rows_state(t))
        first, last, parts = self.job.slices.get(self.consumer.key, (0, 0, 1))
        slices = read_slices(levels, n, max(1, parts // (last - first + 1)))
        read = partial(read_rows, self.job.root, self.job.storage, levels, names, slices, schema, row_id=row_id,
                       defaults=t.defaults, within=within)
        return self.spark.range(0, slices, 1, n).mapInArrow(read, ddl)

    def _scan(self, t: TableDef, start: int, stop: int, cols: tuple[str, ...]) -> DataFrame:
        if start >= stop:  # nothing new on this side: an empty local relation plans in no time
            return self.spark.createDataFrame([], _ddl(t, cols))
        if self._by_driver(start, stop):  # a few records: read here, no data source to plan
            rows = read_pieces(open_store(self.job.root, self.job.storage), t.channel_id, t.log_schema,
                               self.pieces(t.channel, start, stop), start, stop)
            return self.spark.createDataFrame(rows.select([*cols, W]), _ddl(t, cols))
        return self.loaded[self.load(t, start, stop, cols)]

    def _by_driver(self, start: int, stop: int) -> bool:
        """Whether the range is read by the driver, its records embedded in the DataFrame (which
        is then built anew every epoch): a few records, when the consumer's DataFrame is built anew
        anyway (a first epoch, a view over views...) or fused tasks read them all. A DataFrame that
        later epochs re-run reads its range through the data source instead: building one costs
        0.1–0.3 s of JVM round trips a consumer, and the scan is shared by the epoch's consumers
        (TPC-H's 22 views, a 0.1% refresh at SF 0.01: 21–26 s an epoch with the ranges read here,
        13–16 s re-run; one-row epochs of 3 views: 0.06 s, 0.04 s re-run; benchmarks/epochs.py)."""
        return 0 < stop - start <= DRIVER_READ_ROWS and not (self.fused_only and self.fused_tasks()) \
            and not self.reusable()

    def load(self, t: TableDef, start: int, stop: int, cols: tuple[str, ...]) -> tuple:
        """Name this epoch's range ``[start, stop)`` of ``t``'s channel for the scan, and return the
        key of the DataFrame that reads its columns ``cols`` (built once, then re-run: it reads
        whatever range the scan object names, :class:`~millpond.spark.log_source.ScanSlots`). The
        weights cross from Python as bytes (a record's weight is +1 or -1): each column a scan
        hands the JVM costs (1M records of 3 BIGINT columns: 0.34 s, of 5: 0.44 s)."""
        key, slots = self.scan_object(t, start, stop)
        cached = (self.job.root, key, _ddl(t, cols), slots)
        if cached not in self.loaded:  # an APPEND ONLY table's weights are all +1: they need not cross
            ones = t.append_only and bool(cols)
            schema = self.spark.createDataFrame([], _ddl(t, cols, weight=None if ones else "TINYINT")).schema
            read = ScanSlots(self.job.root, tuple(sorted(self.job.storage.items())), key, slots, t.read_schema(cols),
                             arrow_schema(schema))
            self.loaded[cached] = select_expr(self.spark.range(0, slots, 1, slots).mapInArrow(read, schema),
                                              *map(quote, cols), f"CAST({1 if ones else W} AS BIGINT) AS {W}")
        return cached

    def scan_object(self, t: TableDef, start: int, stop: int) -> tuple[str, int]:
        """Write the scan object naming this epoch's range of ``t``'s channel: its key, and the slots
        (tasks) that read the range."""
        ranges = list(dict.fromkeys((s[1], s[2]) for s in self.scans if s[0] == t.channel and s[-1] != "driver"))
        k = ranges.index((start, stop)) if (start, stop) in ranges else len(ranges)  # a backfilling view reads another
        key = write_scan(open_store(self.job.root, self.job.storage), t.channel_id, k,
                         self.pieces(t.channel, start, stop), start, stop)
        return key, 1 if self.single else max(self.job.parallelism, -(-(stop - start) // MAX_PARTITION_ROWS))

    def combined(self, node: P.Aggregate, schema: T.StructType) -> DataFrame | None:
        """``node``'s delta combined per group in the scan's own tasks, as ``schema`` (Catalyst's
        combine of it, :mod:`millpond.spark.combine`); None where the scan cannot combine it."""
        source = node.input.input if isinstance(node.input, P.Project) else None
        if not isinstance(source, P.Source) or source.table not in self.tables or self.consumer.partial is not None:
            return None
        t = self.tables[source.table]
        start, stop = self.ranges[t.channel]
        types = {c.name: spark_ddl_type(c.type) for c in t.columns}
        columns = {out: (src, types.get(src, "")) for out, src in source.columns}
        if (stop - start <= DRIVER_READ_ROWS or self.job.batch.get(self.consumer.key)
                or (combine := plan_combine(node, columns)) is None):
            return None
        cols = self.columns(source)
        _, key, _, slots = self.load(t, start, stop, cols)  # the range's scan object, as reuse finds it
        read = ScanSlots(self.job.root, tuple(sorted(self.job.storage.items())), key, slots, t.read_schema(cols),
                         arrow_schema(schema), combine)
        return self.spark.range(0, slots, 1, slots).mapInArrow(read, schema)

    def fused_tasks(self) -> int:
        """How many tasks a fused stage has (each reads the whole range: see ``FUSED_ROWS_PER_TASK``);
        0 where none is fused (a deployment of more than :data:`MAX_TASKS`)."""
        if self.job.parallelism > MAX_TASKS:
            return 0
        records = sum(b - a for a, b in self.ranges.values())
        return max(1, min(self.job.parallelism, -(-records // FUSED_ROWS_PER_TASK)))

    def named(self, source: P.Source) -> tuple | None:
        """How this epoch's range of ``source``'s table is read, if through a DataFrame that every
        epoch can share: ``("empty",)`` (no records: an empty relation), or the key of the loaded
        data source DataFrame that reads it (its scan object now names the range). None when the
        range is read by the driver (its records are in the DataFrame)."""
        t = self.tables[source.table]
        start, stop = self.ranges[t.channel]
        if start >= stop:
            return ("empty",)
        if self._by_driver(start, stop):
            return None
        scan = (t.channel, start, stop, self.columns(source))
        if scan not in self.scans:
            self.scans[scan] = self.loaded[self.load(t, start, stop, scan[3])]
        return next(k for k, df in self.loaded.items() if df is self.scans[scan])

    def reads(self, node: P.Node) -> tuple | None:
        """For a stateless subtree whose every range goes through the data source: name this
        epoch's ranges, and return the loaded DataFrames' keys — a DataFrame built over them
        before reads this epoch's records too (so it is built once). None otherwise."""
        todo = [node]
        while todo:
            n = todo.pop()
            if not isinstance(n, (P.Source, P.Filter, P.Project, P.Window, P.Union)):
                return None
            todo.extend(P.inputs(n))
        if self.job.batch.get(self.consumer.key):  # a first epoch in batch mode reads a table's rows too: once
            return None
        keys = []
        for source in P.sources(node):
            t = self.tables[source.table]
            start, stop = self.ranges[t.channel]
            scan = (t.channel, start, stop, self.columns(source))
            if (stop - start <= DRIVER_READ_ROWS and not self.single) or scan in self.scans:
                return None
            cached = self.load(t, start, stop, scan[3])
            self.scans[scan] = self.loaded[cached]
            keys.append(cached)
        return tuple(keys)


def read_columns(node: P.Node) -> dict[int, tuple[str, ...]]:
    """For each :class:`Source` under ``node`` (by ``id``), the table columns the plan uses of it,
    in the source's order: what a scan must read (the rest it can leave out). Every column reaches
    a join side, top-N, window function, materialization or index, which keep whole rows; above
    an aggregate, a projection or a filter, the columns their expressions and keys name."""
    out: dict[int, set[str]] = {}

    def need(n: P.Node, cols: set[str] | None) -> None:
        if isinstance(n, P.Source):
            used = {src for name, src in n.columns if cols is None or name in cols}
            out.setdefault(id(n), set()).update(used)
        elif isinstance(n, P.Aggregate):
            need(n.input, {*n.group, *(c.arg for c in n.calls if c.arg)})
        elif isinstance(n, P.Project):  # the builder selects every expression
            refs = {c.name for e, _ in n.exprs for c in e.find_all(exp.Column)}
            need(n.input, None if any(e.find(exp.Star) for e, _ in n.exprs) else refs)
        elif isinstance(n, P.Filter):
            need(n.input, None if cols is None else cols | {c.name for c in n.predicate.find_all(exp.Column)})
        elif isinstance(n, P.Window):
            need(n.input, None if cols is None else (cols - {n.start, n.end}) | {n.time})
        elif isinstance(n, P.Union):
            for i in n.inputs:
                need(i, cols)
        else:
            for i in P.inputs(n):
                need(i, None)
    need(node, None)
    return {id(s): tuple(src for _, src in s.columns if src in out[id(s)]) for s in P.sources(node) if id(s) in out}


COMBINE_REDUCTION = 8  # a first epoch's delta is combined before its exchange when it has this many rows a group

SLICE_ROWS = 500_000  # a task reads a table's or view's rows state this many stored rows at a time, at most


def read_slices(levels: Levels, tasks: int, parts: int = 1) -> int:
    """How many slices of key hashes :func:`read_rows` cuts a rows state (or one of its ``parts``)
    into: at least one per task, each of at most :data:`SLICE_ROWS` stored rows (a task of TPC-H's
    backfill at SF 1 read 3M lineitems at once: 1.9 GB)."""
    return tasks * max(1, -(-sum(ref.rows for ref in levels.files()) // (tasks * SLICE_ROWS * parts)))


def groups_estimate(sample: pa.Table, fraction: float) -> float:
    """The distinct rows of a table, estimated from ``sample`` (its rows in a random ``fraction``
    of them) by Haas and Stokes' ``Duj1``: ``d / (1 - (1 - q) * f1 / n)``, with ``d`` the sample's
    distinct rows, ``f1`` those seen once, ``n`` its rows and ``q`` the fraction (PostgreSQL's
    ``ANALYZE`` estimates a column's distinct values so). A sample of nothing but singletons
    says every row may be distinct."""
    counts = pl.from_arrow(sample).group_by(sample.column_names).len()["len"]
    n, d, f1 = sample.num_rows, counts.len(), int((counts == 1).sum())
    denominator = 1 - (1 - fraction) * f1 / n
    return d / fraction if denominator <= 0 else d / denominator


def read_rows(root: str, storage: dict, levels: Levels, columns: tuple[str, ...], slices: int, schema: pa.Schema,
              batches: Iterator[pa.RecordBatch], *, row_id: bool = True, defaults: tuple[pa.Field, ...] = (),
              within: tuple[int | None, int | None] = (None, None)) -> Iterator[pa.RecordBatch]:
    """A Spark task of :meth:`Builder._rows`: for each slice number in ``batches``, the rows of a
    table's rows state (``levels``) whose key hash falls in that slice of the 64-bit range — of
    ``within`` ([lo, hi), None: open; a filling view's part, :mod:`millpond.engine.filling`) — (a
    view's, with no ``_row_id``, for :meth:`Builder._view`)."""
    store = open_store(root, storage)
    extra = (ROW_ID,) if row_id else ()
    state = committed_rows(store, levels, (*columns, *extra), defaults=defaults)
    first = -(1 << 63) if within[0] is None else within[0]
    width = ((1 << 63) if within[1] is None else within[1]) - first
    width //= slices
    for batch in batches:
        for i in batch.column(0).to_pylist():
            lo = first + i * width
            hi = within[1] if i == slices - 1 else lo + width
            found = state.scan_arrow(within[0] if i == 0 else lo, hi)
            if found is None or found.num_rows == 0:
                continue
            rows = found.select([*columns, *extra, COUNT]).rename_columns([*columns, *extra, W]).combine_chunks()
            yield from rows.cast(schema).to_batches(max_chunksize=BATCH_ROWS)  # not a batch per block read:
            # each batch crossing into the JVM costs (TPC-H Q6, SF 1: a 3M-row task 8.2 s in 10,000 batches, 6.8 in 23)


def read_changes(root: str, storage: dict, files: tuple[str, ...], schema: pa.Schema,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A Spark task of :meth:`Inputs._view`: for each file number in ``batches``, the changes file
    a view's task wrote in this epoch (not netted: a reader of changes is linear in them)."""
    store = open_store(root, storage)
    for batch in batches:
        for i in batch.column(0).to_pylist():
            yield from pq.read_table(io.BytesIO(store.get(files[i]))).select(schema.names).cast(schema).to_batches()


def _ddl(t: TableDef, cols: tuple[str, ...] | None = None, *, weight: str | None = "BIGINT") -> str:
    """A table's log records (its columns ``cols``, default all, and the weight unless None) as a
    Spark schema."""
    types = {**{c.name: spark_ddl_type(c.type) for c in t.columns}, ROW_ID: "BIGINT"}
    return ", ".join([f"{quote(c)} {types[c]}" for c in (_all(t) if cols is None else cols)] +
                     ([f"`{W}` {weight}"] if weight else []))


def _all(t: TableDef) -> tuple[str, ...]:
    return (*(c.name for c in t.columns), ROW_ID)


def _renames(columns: tuple[tuple[str, str], ...]) -> list[str]:
    return [f"{quote(src)} AS {quote(out)}" for out, src in columns]


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def without_vnode(schema: pa.Schema) -> pa.Schema:
    """``schema`` less the vnode column (a stateful task drops it from its input)."""
    return schema.remove(schema.get_field_index(VN)) if VN in schema.names else schema


def arrow_schema(schema: T.StructType) -> pa.Schema:
    return to_arrow_schema(schema, prefers_large_types=True, timezone="UTC")  # a TIMESTAMP is a UTC instant


def key_hash(keys: list[str], schema: T.StructType | None = None) -> str:
    """The SQL of the 64-bit key hash of ``keys`` (its vnode is the hash modulo ``VNODES``); a MAP
    column (of ``schema``) by its entries in key order: equal maps, one hash."""
    maps = {f.name for f in schema or () if isinstance(f.dataType, T.MapType)}
    cols = [f"array_sort(map_entries({quote(k)}))" if k in maps else quote(k) for k in keys]
    return f"xxhash64({', '.join(cols)})" if keys else "CAST(0 AS BIGINT)"

def cluster_hash(keys: list[str], column: str, dtype: T.DataType) -> str:
    """The SQL of a flow's key whose high 32 bits are the window ``column``'s minute and low 32 bits
    ``keys``' hash (:func:`millpond.engine.flows.cluster_floor` has the layout). The minute of a
    TIMESTAMP (Spark's TIMESTAMP_NTZ) is read from its fields, whatever the session's time zone."""
    c = quote(column)
    minute = {T.DateType: f"unix_date({c}) * 1440",
              T.TimestampNTZType: f"unix_date(CAST({c} AS DATE)) * 1440 + hour({c}) * 60 + minute({c})",
              T.TimestampType: f"floor(unix_micros({c}) / {CLUSTER_UNIT}D)"}[type(dtype)]
    bounded = f"coalesce(least(greatest(CAST({minute} AS BIGINT), {CLUSTER_MIN}), {CLUSTER_MAX}), {CLUSTER_NULL})"
    return f"(shiftleft({bounded}, 32) | ({key_hash(keys)} & 4294967295))"

"""A consumer's plan as Spark DataFrames: step 3 of the epoch protocol
(:mod:`millpond.engine.coordinator`), on Spark.

Stateless nodes become Spark expressions (Catalyst runs them in the JVM). Each stateful node is an
exchange ``repartitionById(n, _vn)`` on its key's vnode followed by a ``mapInArrow`` task
(:mod:`millpond.spark.task`) that runs the node's operator over its state. Before an aggregation,
Spark pre-aggregates the epoch's delta per group, so the Python task sees one row per changed
group (and MIN/MAX/DISTINCT value).
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce
from typing import Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.functions import pandas_udf
from pyspark.util import PythonEvalType
from sqlglot import exp

from millpond.catalog import TableDef
from millpond.columns import KH, ROW_ID, VN, W
from millpond.engine import plan as P
from millpond.engine.consumers import Consumer, index_rows_state
from millpond.engine.executor import EpochJob, PieceSource, Ranges, ViewInput
from millpond.engine.expressions import for_types, null_on_error, python_calls, to_duckdb, to_spark
from millpond.engine.operators import Arrange, HashAggregate, HashJoin, Materialize, Operator, Over, TopN
from millpond.engine.operators.aggregate import VALUE_FUNCS, nonnull_col, sum_col, value_col
from millpond.engine.operators.join import SIDE
from millpond.errors import IndexMismatch, InvariantError
from millpond.spark.combine import Combine, plan_combine
from millpond.spark.functions import register_calls
from millpond.spark.fusing import Fuser
from millpond.spark.inputs import DRIVER_READ_ROWS, Inputs, arrow_schema, cluster_hash, key_hash, quote
from millpond.spark.jvm import map_in_arrow, select_expr
from millpond.spark.local_plan import LocalPlan, localizing
from millpond.spark.types import common_type, expression_types, over_type
from millpond.spark.task import CONSUMER, FILE, ROWS, Task
from millpond.store.sst import VNODES

__all__ = ["Builder", "DRIVER_READ_ROWS", "PRE_AGGREGATE_ROWS", "FINAL"]

PRE_AGGREGATE_ROWS = 50_000  # a bigger delta is aggregated map-side before the exchange (one more stage)


class Unlocal(Exception):
    """A node of a build for types only is not made in one task: Spark's stages will run it."""


class Builder:
    """Builds one consumer's DataFrame for one epoch: the stateless nodes as Catalyst expressions,
    each stateful node as an exchange and a task. Its collaborators: :class:`~millpond.spark.inputs.Inputs`
    (where the rows come from), a :class:`~millpond.spark.fusing.Fuser` (tasks reading their delta
    themselves) and a :class:`~millpond.spark.local_plan.LocalPlan` (the epoch in one task), the
    last two new for each build."""

    def __init__(self, spark: SparkSession, job: EpochJob, consumer: Consumer, ranges: Ranges,
                 tables: Mapping[str, TableDef], pieces: PieceSource, scans: dict | None = None,
                 loaded: dict | None = None, views: Mapping[str, ViewInput] | None = None, single: bool = False,
                 udfs: dict | None = None, fused_only: bool = False):
        self.spark, self.job, self.consumer, self.ranges, self.tables = spark, job, consumer, ranges, tables
        self.inputs = Inputs(spark, job, consumer, ranges, tables, pieces, {} if scans is None else scans,
                             {} if loaded is None else loaded, views or {}, single, fused_only)
        self.udfs = {} if udfs is None else udfs  # stateful tasks' Python UDFs, kept across epochs (see _map)
        self._start(local=False)

    def _start(self, *, local: bool) -> None:
        """What a build makes, empty: ``local``, each node made in one task too, and the DataFrame's
        types read only (it never runs, see :func:`~millpond.engine.expressions.for_types`)."""
        self.types_only = local
        self.state_ids: set[str] = set()  # the states its tasks read (the job's descriptor holds their levels)
        self.fuser = Fuser(self.inputs)
        self.local_plan = LocalPlan(self.inputs, lambda e: self._sql(e, run=True), active=local)
        self.one_stage: tuple[Task, int] | None = None  # the consumer's whole epoch: one fused task over its slots

    def final(self) -> DataFrame:
        self._start(local=localizing(self.inputs))  # its one task runs it, if every node is made there
        try:
            df = self.build(self.consumer.plan)
        except Unlocal:  # Spark's stages run it: built again, whole
            self._start(local=False)
            df = self.build(self.consumer.plan)
        if self.one_stage is None:  # a fused stage reads the log in several tasks: kept where it is one
            self.one_stage = self.local_plan.stage()
        return df

    def all_fused(self) -> bool:
        """After :meth:`final`: whether every table the consumer reads is read by a fused task
        (:mod:`millpond.spark.fused`): then no range need be read by the driver, and its
        DataFrame is re-run whatever the ranges' sizes (a later build passes ``fused_only``)."""
        sources = P.sources(self.consumer.plan)
        return bool(sources) and all(id(s) in self.fuser.sources for s in sources)

    def reuse_key(self) -> tuple | None:
        """The key under which this consumer's DataFrame of this epoch may be kept and re-run in a
        later epoch, or None when it holds something of this epoch only: rows read by the driver
        (small ranges, a view's changes), a first epoch's or a partial view's reads of state at the
        pinned version. Everything else the build decides from the epoch is in the key (the
        parallelism, whether the delta is pre-aggregated, which inputs are empty), and the rest
        reaches the tasks at run time (:mod:`millpond.spark.task`) or through the scan objects the
        data source reads (:meth:`~millpond.spark.inputs.Inputs.named`, which writes them)."""
        c, job, inputs = self.consumer, self.job, self.inputs
        if not inputs.reusable():
            return None
        reads = []
        for source in P.sources(c.plan):
            t = self.tables.get(source.table)
            if t is None:
                return None
            how = inputs.named(source)
            if how is None:
                return None
            reads.append((t.channel, t.channel_id, how))
        return (c, job.root, job.parallelism, inputs.records() > PRE_AGGREGATE_ROWS, inputs.fused_tasks(),
                localizing(inputs), tuple(sorted(set(reads))))

    def check(self) -> None:
        """The checks a build makes of this epoch's inputs (an index read at the view's offset),
        for a DataFrame that is re-run instead of built."""
        todo: list[P.Node] = [self.consumer.plan]
        while todo:
            n = todo.pop()
            if isinstance(n, P.Join):
                for k, index in enumerate(n.shared):
                    side = (n.left, n.right)[k]
                    if index is not None and isinstance(side, P.Source):
                        self._index_at_offset(self.tables[side.table], index)
            todo.extend(P.inputs(n))

    def build(self, node: P.Node) -> DataFrame:
        df = getattr(self, f"_{type(node).__name__.lower()}")(node)
        if self.local_plan.active and not self.local_plan.made(node, df):
            raise Unlocal(node)
        return df

    def _source(self, node: P.Source) -> DataFrame:
        return self.inputs.source(node)

    # -- stateless ----------------------------------------------------------------------------
    def _sql(self, e: exp.Expression, run: bool = False) -> str:
        """A view's expression as Spark SQL (to be ``run``, whatever :attr:`types_only` says); in an
        ``on_error = 'null'`` view, errors are NULLs."""
        e = null_on_error(e) if self.consumer.on_error == "null" else e
        register_calls(self.spark, e)  # the Python functions it calls
        return to_spark(for_types(e) if self.types_only and not run else e)

    def _filter(self, node: P.Filter) -> DataFrame:
        return self.build(node.input).filter(self._sql(node.predicate))

    def _project(self, node: P.Project) -> DataFrame:
        return select_expr(self.build(node.input), *[f"{self._sql(e)} AS {quote(n)}" for e, n in node.exprs], W)

    def _window(self, node: P.Window) -> DataFrame:
        df, ts = self.build(node.input), quote(node.time)
        durations = f"'{node.size_us} microseconds'" + (
            f", '{node.slide_us} microseconds'" if node.slide_us != node.size_us else "")
        windowed = select_expr(df.filter(f"{ts} IS NOT NULL"), "*", f"window({ts}, {durations}) AS _win")
        return select_expr(windowed, *map(quote, df.columns), f"_win.`start` AS {quote(node.start)}",
                           f"_win.`end` AS {quote(node.end)}")

    def _union(self, node: P.Union) -> DataFrame:
        inputs = [i for i in node.inputs if not self._quiet(i)] or list(node.inputs[:1])
        frames = [self.build(i) for i in inputs]
        cols = list(map(quote, frames[0].columns))
        return reduce(DataFrame.unionByName, [select_expr(f, *cols) for f in frames])

    def _quiet(self, node: P.Node) -> bool:
        """Whether ``node`` is a delta join's term whose input delta is empty in this epoch (its
        probes would find nothing to probe with: the term is left out)."""
        while isinstance(node, P.Project):
            node = node.input
        if not (isinstance(node, P.Join) and node.lookup[0] == "stream"):
            return False
        while isinstance(node, P.Join) and node.lookup[0] == "stream":
            node = node.left
        if not isinstance(node, P.Source) or node.table not in self.tables:
            return False
        channel = self.tables[node.table].channel
        start, stop = self.ranges[channel]
        return start >= stop and self.job.batch.get(self.consumer.key, {}).get(channel) is None

    # -- stateful -----------------------------------------------------------------------------
    def _exchange(self, df: DataFrame, keys: list[str]) -> DataFrame:
        """Rows hashed on ``keys`` (column names) to their vnode, and exchanged on it (SQL text: every
        Column object is a round trip to the JVM, and an epoch builds many exchanges)."""
        kh = key_hash(keys, df.schema)
        df = select_expr(df, "*", f"{kh} AS {KH}", f"CAST(pmod({kh}, {VNODES}) AS INT) AS {VN}")
        if self.job.parallelism == 1:  # one task holds every vnode: no shuffle, its stage is its input's
            return df.coalesce(1)
        if not keys:  # every row has vnode 0, which Spark folds into a constant: repartitionById would no
            # longer satisfy the GROUP BY after it, which then shuffles again by the value columns,
            # splitting the one group over tasks (a MAX of 60,000 rows had two rows); one partition, by
            # an exchange (a coalesce would run the stage before it in one task, as slot 0 of them all)
            return df.repartition(1)
        # task i takes the vnodes v with v mod n = i: an even share (hashing 256 vnode numbers into 2
        # partitions, as repartition(n, vn) does, split a 1M-row join 430,000 / 570,000)
        return df.repartitionById(self.job.parallelism, VN)

    def _task(self, node_id: int, op: Operator, schema: T.StructType, *, final: bool = False,
              emit: bool = True, shared: Mapping[str, str] | None = None) -> "Task":
        """``shared``: parts read from another consumer's state (part -> its state id). The task
        gets its epoch and its states' levels from the job's descriptor when it runs
        (:mod:`millpond.spark.task`): the state ids it reads are recorded in :attr:`state_ids`."""
        shared = shared or {}
        states = {part: shared.get(part) or P.state_id(self.consumer.object_id, node_id, part) for part in op.parts()}
        self.state_ids.update(states.values())
        changes = None
        if final and emit:
            if self.consumer.schema is None:
                raise InvariantError(f"{self.consumer.name}: a consumer that emits changes has no schema for them")
            changes = self.consumer.schema.append(pa.field(W, pa.int64()))
        return Task(op=op, root=self.job.root, storage=self.job.storage, object_id=self.consumer.object_id,
                    node_id=node_id, states=states, out_schema=arrow_schema(schema),
                    consumer=self.consumer.key if final else None, emit=emit, changes=changes)

    def _map(self, df: DataFrame, task: Task, schema: T.StructType) -> DataFrame:
        """``df.mapInArrow(task, schema)``, with the task's Python UDF made once and kept (by the
        executor, across epochs): a task holds nothing of one epoch, and making the UDF (pickling
        the task, a JVM PythonFunction) costs ~10 ms each time. PySpark's own ``mapInArrow``,
        less the UDF it makes anew on every call (pyspark is pinned: its internals are known)."""
        key = task.identity()
        udf = self.udfs.get(key)
        if udf is None:
            if len(self.udfs) >= 1024:
                self.udfs.clear()
            udf = self.udfs[key] = pandas_udf(task, returnType=schema,  # type: ignore[call-overload]
                                              functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
        if task.consumer is None and task.combine is None:  # an operator a view's rows may come from (Fuser.feed)
            self.fuser.made[task.node_id] = (df, task)
        elif task.consumer is not None and id(df) in self.fuser.slot_frames:  # the whole epoch: one fused stage
            self.one_stage = (task, self.fuser.slot_frames[id(df)][1])
        return map_in_arrow(df, udf)

    def _join(self, node: P.Join, combined: tuple[Combine, T.StructType] | None = None) -> DataFrame:
        """``combined``: emit the partials of an aggregate over the join (as that schema) instead."""
        left, right = self.build(node.left), self.build(node.right)
        if node.lookup[1] == "old":  # a delta join's probe of an index as of before the epoch: no delta
            right = right.where("false")
        lcols = [c for c in left.columns if c != W]
        rcols = [c for c in right.columns if c != W]
        lsql, rsql = [self._sql(k) for k in node.left_keys], [self._sql(k) for k in node.right_keys]
        ltypes, rtypes = expression_types(left, lsql), expression_types(right, rsql)
        kcols = [f"_k{i}" for i in range(len(lsql))]
        casts = [common_type(a, b).simpleString() for a, b in zip(ltypes, rtypes)]

        def side(df: DataFrame, n: int, keys: list[str], cols: list[str]) -> DataFrame:
            return select_expr(df, f"CAST({n} AS TINYINT) AS {SIDE}",
                                 *[f"CAST(({k}) AS {t}) AS {c}" for k, t, c in zip(keys, casts, kcols)],
                                 *map(quote, cols), W)
        lsel, rsel = side(left, 0, lsql, lcols), side(right, 1, rsql, rcols)
        both = self._exchange(lsel.unionByName(rsel, allowMissingColumns=True), kcols)
        schema = T.StructType([*[left.schema[c] for c in lcols], *[right.schema[c] for c in rcols],
                               T.StructField(W, T.LongType())])
        if node.kind != "inner":  # padded rows: every column may be NULL
            schema = T.StructType([T.StructField(f.name, f.dataType, True) for f in schema])
        common = [common_type(a, b) for a, b in zip(ltypes, rtypes)]
        stored = {label: self._shared(node, k, types, common, cols)
                  for k, (label, types, cols) in enumerate((("left", ltypes, lcols), ("right", rtypes, rcols)))
                  if node.shared[k] is not None}
        if node.lookup[0] == "stream":  # a delta join's delta: no rows before it, none kept (a state never written)
            stored["left"] = (P.state_id(self.consumer.object_id, node.node_id, "left"), tuple(lcols))
        op = HashJoin(tuple(kcols), tuple(lcols), tuple(rcols), name=f"{self.consumer.name}#{node.node_id}",
                      kind=node.kind,
                      residual=to_duckdb(node.residual) if node.residual is not None else None,
                      functions=tuple((s.encode(), m) for s, m in python_calls(node.residual))
                      if node.residual is not None else (),
                      left_shared=stored["left"][1] if "left" in stored else None,
                      right_shared=stored["right"][1] if "right" in stored else None)
        task = self._task(node.node_id, op, schema, shared={label: sid for label, (sid, _) in stored.items()})
        if combined is None:
            self.local_plan.note(node.node_id, task, both.schema)
        else:
            task, schema = replace(task, combine=combined[0], out_schema=arrow_schema(combined[1])), combined[1]
        if fused := self.fuser.fuse_join(node, both.schema):
            return self._map(fused[1], replace(task, fused=fused[0]), schema)  # its delta read from the log by itself
        if chained := self.fuser.fuse_partial_join(node, both.schema):  # and a partial aggregate's output, made here
            return self._map(chained[2], replace(task, fused=chained[0], feed=chained[1]), schema)
        return self._map(both, task, schema)

    def _shared(self, node: P.Join, k: int, types: list[T.DataType], common: list[T.DataType], cols: list[str]
                ) -> tuple[str, tuple[str, ...]]:
        """Side ``k`` of ``node``, read from an index (``P.Join.shared``): the state id to read it
        from and the table column each of the side's ``cols`` is. Checks what makes the index's rows
        the side's state: its keys hashed as the join's (the join compares them as their own
        types), and the index at the offset the view reads the table from."""
        side, index, keys = (node.left, node.shared[0], node.left_keys) if k == 0 else \
            (node.right, node.shared[1], node.right_keys)
        assert isinstance(side, P.Source) and index is not None
        t = self.tables[side.table]
        if types != common:
            error = IndexMismatch(f"index o{index} on {t.name} keeps {', '.join(k.sql() for k in keys)} as "
                                  f"{', '.join(x.simpleString() for x in types)}; the join compares them as "
                                  f"{', '.join(x.simpleString() for x in common)}")
            error.index = index
            raise error
        srcs = dict(side.columns)
        stored = tuple(srcs[c] for c in cols)
        if self.consumer.key not in self.job.manifest.offsets and \
                t.name not in P.shared_sides(self.consumer.plan, first=True):
            # a first epoch reads this side's table whole, as its delta: no rows before it (the
            # view's own state id for the side, which is never written)
            return P.state_id(self.consumer.object_id, node.node_id, ("left", "right")[k]), stored
        self._index_at_offset(t, index)
        return index_rows_state(index), stored

    def _index_at_offset(self, t: TableDef, index: int) -> None:
        start, done = self.ranges[t.channel][0], self.job.manifest.offsets.get(f"o{index}", {}).get(t.channel, 0)
        if start != done:
            raise InvariantError(f"{self.consumer.name}: reads {t.name} from offset {start}, but its index o{index} "
                                 f"holds {t.name} up to offset {done}")

    def _arrange(self, node: P.Arrange) -> DataFrame:
        """An index's consumer: the table's delta exchanged by the index's key hash and written as
        join side state (:class:`~millpond.engine.operators.join.Arrange`)."""
        df = self.build(node.input)
        cols = [c for c in df.columns if c not in (W, ROW_ID)]
        kcols = [f"_k{i}" for i in range(len(node.keys))]
        df = self._exchange(select_expr(df, *[f"{quote(k)} AS {c}" for k, c in zip(node.keys, kcols)],
                                          *map(quote, cols), W), kcols)
        op = Arrange(tuple(kcols), tuple(cols), name=self.consumer.name)
        out = FINAL
        task = self._task(node.node_id, op, out, final=True, emit=False)
        self.local_plan.note(node.node_id, task, df.schema)
        return self._map(df, task, out)

    def _aggregate(self, node: P.Aggregate) -> DataFrame:
        """Built from SQL text, as :meth:`_exchange` (a Column object costs a JVM round trip)."""
        df, group, values, measures, having = self._delta(node)
        if self.inputs.local_records() > PRE_AGGREGATE_ROWS and not _over_partials(node) and self.inputs.reduces(node):  # a big
            # delta (a first epoch's committed rows too, when it has far fewer groups than rows): combined map-side
            df = self._group(df, [*group, *values], measures)  # before any exchange, in the scan's tasks where
            # they can, else by Catalyst
            df = self.inputs.combined(node, df.schema) or self._combined_join(node, df.schema) or df
        df = self._exchange(df, group)
        # Catalyst consolidates the delta per (group, min/max/distinct values) before Python sees it.
        agged = self._group(df, [VN, KH, *group, *values], measures, having=having)
        out_fields = [agged.schema[g] for g in group]
        for i, call in enumerate(node.calls):
            if call.func in ("count", "count_star", "count_distinct"):
                t = T.LongType()
            elif call.func == "percentile_cont":
                t = T.DoubleType()
            elif call.func == "array_agg":
                t = T.ArrayType(agged.schema[value_col(i)].dataType)
            elif call.func == "sum_distinct":
                t = agged.schema[value_col(i)].dataType
                t = T.LongType() if isinstance(t, T.IntegralType) else T.DoubleType() \
                    if isinstance(t, T.FractionalType) and not isinstance(t, T.DecimalType) else t
            else:
                t = agged.schema[sum_col(i) if call.func == "sum" else value_col(i)].dataType
            out_fields.append(T.StructField(call.name, t))
        schema = T.StructType([*out_fields, T.StructField(W, T.LongType())])
        op = HashAggregate(tuple(group), node.calls, name=f"{self.consumer.name}#{node.node_id}", whole=node.whole,
                           append_only=node.append_only)
        task = self._task(node.node_id, op, schema)
        self.local_plan.note(node.node_id, task, agged.schema, having)
        if fused := self.fuser.fuse_aggregate(node, agged.schema, having):
            return self._map(fused[1], replace(task, fused=fused[0]), schema)  # its delta read from the log by itself
        if fed := self.fuser.fuse_join_aggregate(node, agged.schema, having):
            return self._map(fed[0], replace(task, feed=fed[1]), schema)  # in the one task of the join it reads
        return self._map(agged, task, schema)

    def _combined_join(self, node: P.Aggregate, schema: T.StructType) -> DataFrame | None:
        """``node``'s delta combined per group in the tasks of the join it reads (as :meth:`combined`)."""
        join = node.input.input if isinstance(node.input, P.Project) else None
        if not isinstance(join, P.Join) or any(join.lookup):
            return None
        columns = {f.name: (f.name, f.dataType.simpleString()) for f in self.build(join).schema if f.name != W}
        combine = plan_combine(node, columns)
        return None if combine is None else self._join(join, (combine, schema))

    def partials(self, node: P.Aggregate) -> DataFrame:
        """The epoch's delta of ``node``'s input as partial aggregates per (group, min/max/distinct
        values), with each group's key hash: all of it computed by Catalyst (a flow's trigger,
        :mod:`millpond.engine.flows`, merges them into its state on the driver). ``single``: in
        one task, partial and final aggregation with no exchange between them."""
        df, group, values, measures, having = self._delta(node)
        if self.inputs.single:
            df = df.coalesce(1)
        m = self.consumer.merge
        kh = key_hash(group) if m is None or m.cluster_group is None else \
            cluster_hash(group, m.cluster_group, df.schema[m.cluster_group].dataType)
        return select_expr(self._group(df, [*group, *values], measures, having=having), f"{kh} AS {KH}", "*")

    def _delta(self, node: P.Aggregate) -> tuple[DataFrame, list[str], list[str], list[str], list[str] | None]:
        """An aggregate's input as the columns its partial aggregates are made of; its group and
        value columns, the measures over them, and the columns of which one must be non-zero
        for a partial to change anything."""
        df = self.build(node.input)
        self.fuser.projected[id(node)] = df.schema
        group = list(node.group)
        pre, sums, values, extremes = [], [], [], []
        for i, call in enumerate(node.calls):
            arg = quote(call.arg) if call.arg else None
            if call.func in VALUE_FUNCS:
                pre.append(f"{arg} AS {quote(value_col(i))}")
                if node.append_only and call.func in ("min", "max"):  # one value per group, no multiset
                    extremes.append((value_col(i), call.func))
                else:
                    values.append(value_col(i))
            if call.func == "sum":
                pre.append(f"{arg} * {W} AS {quote(sum_col(i))}")
                sums.append(sum_col(i))
            if call.func in ("sum", "count"):
                pre.append(f"CAST(CASE WHEN {arg} IS NOT NULL THEN {W} ELSE 0 END AS BIGINT) AS {quote(nonnull_col(i))}")
                sums.append(nonnull_col(i))
        df = select_expr(df, *[quote(g) for g in group], *pre, W)
        if node.whole:  # one zero-weight row per epoch: the single group exists from the first epoch
            df = df.unionByName(select_expr(
                self.spark.range(1), *[f"CAST(NULL AS {f.dataType.simpleString()}) AS {quote(f.name)}" for f in df.schema if f.name != W],
                f"CAST(0 AS BIGINT) AS {W}"))
        measures = [f"sum({W}) AS {W}", *[f"sum({quote(c)}) AS {quote(c)}" for c in sums],
                    *[f"{func}({quote(c)}) AS {quote(c)}" for c, func in extremes]]
        return df, group, values, measures, None if node.whole else [W, *sums]

    def _group(self, df: DataFrame, keys: list[str], measures: list[str], having: list[str] | None = None
               ) -> DataFrame:
        """``SELECT keys, measures FROM df GROUP BY keys`` [keeping groups where a ``having`` column is
        not 0], as one SQL statement."""
        def text(sql: str) -> str:  # spark.sql formats the text with str.format: a brace in a name is doubled
            return sql.replace("{", "{{").replace("}", "}}")
        sql = text(f"SELECT {', '.join([*map(quote, keys), *measures])}") + " FROM {df}" \
            + (text(f" GROUP BY {', '.join(map(quote, keys))}") if keys else "")
        if having:
            sql = f"SELECT * FROM ({sql}) WHERE " + text(" OR ".join(f"{quote(c)} != 0" for c in having))
        return self.spark.sql(sql, df=df)

    def _topn(self, node: P.TopN) -> DataFrame:
        df = self.build(node.input)
        cols = [c for c in df.columns if c != W]
        df = self._exchange(df, list(node.partition))
        fields = [df.schema[c] for c in cols]
        if node.row_number:
            fields.append(T.StructField(node.row_number, T.LongType()))
        schema = T.StructType([*fields, T.StructField(W, T.LongType())])
        op = TopN(tuple(cols), node.partition, node.order, node.limit, node.offset, node.row_number,
                  name=f"{self.consumer.name}#{node.node_id}")
        task = self._task(node.node_id, op, schema)
        self.local_plan.note(node.node_id, task, df.schema)
        return self._map(df, task, schema)

    def _over(self, node: P.Over) -> DataFrame:
        df = self.build(node.input)
        cols = [c for c in df.columns if c != W]
        df = self._exchange(df, list(node.partition))
        fields = [*(df.schema[c] for c in cols),
                  *(T.StructField(c.name, over_type(c, df.schema[c.arg].dataType if c.arg else None))
                    for c in node.calls)]
        schema = T.StructType([*fields, T.StructField(W, T.LongType())])
        op = Over(tuple(cols), node.partition, node.order, node.calls, name=f"{self.consumer.name}#{node.node_id}")
        task = self._task(node.node_id, op, schema)
        self.local_plan.note(node.node_id, task, df.schema)
        return self._map(df, task, schema)

    def _materialize(self, node: P.Materialize) -> DataFrame:
        df = self.build(node.input)
        cols = [c for c in df.columns if c != W]
        key = list(node.key) or cols  # what addresses the rows in state (plan.Materialize)
        if P.keyed_by(node.input) is not None:  # no exchange: the rows stay in the stateful task that made them
            df = select_expr(df, "*", f"{key_hash(key, df.schema)} AS {KH}")
        else:
            df = self._exchange(df, key)
        table = self.consumer.name in self.tables  # its retractions were resolved as they were appended
        op = Materialize(tuple(cols), name=self.consumer.name, check=not table)
        out = FINAL
        task = self._task(node.node_id, op, out, final=True, emit=not table)
        self.local_plan.note(node.node_id, task, df.schema)
        if fused := self.fuser.fuse_materialize(node, df.schema, key):
            return self._map(fused[1], replace(task, fused=fused[0]), out)  # its rows read from the log by itself
        if fed := self.fuser.feed(node.input, key, df.schema):
            return self._map(fed[0], replace(task, feed=fed[1]), out)  # its rows made in the operator's task
        return self._map(df, task, out)



# a final task's output: one row per changes file it wrote (spark/task.py)
FINAL = T.StructType([T.StructField(CONSUMER, T.StringType()), T.StructField(FILE, T.StringType()),
                      T.StructField(ROWS, T.LongType())])



def _over_partials(node: P.Node) -> bool:
    """Whether ``node``'s input rows are already one per key of an eager partial aggregate below
    (``sql/planner/eager.py``): however big the epoch, there are no more of them than keys."""
    return any(isinstance(n, P.Aggregate) and n.eager or _over_partials(n) for n in P.inputs(node))

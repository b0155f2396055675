"""Where a consumer's whole epoch runs as one Python task (:mod:`millpond.spark.local`): the
planning half, run beside the build of its Spark DataFrame, whose Catalyst types every value of
the tree takes.

A consumer's epoch runs so when it is small (at most :data:`LOCAL_RECORDS` records), its
DataFrame is one later epochs re-run (not a first epoch, a partial view, a view over views, a
batch read), errors fail it (``on_error = 'fail'``), and every node of its plan is made here:

- a table's columns, read from the log (the range's scan object);
- filters and projections whose every expression DuckDB evaluates as Spark does
  (:func:`~millpond.spark.agreement.cannot_raise`), after the constant subexpressions Spark alone
  may evaluate (an interval added to a date literal) are folded by Spark, once per build;
- joins on keys of such expressions typed as the join compares them (widened exactly), their
  sides read from indexes and delta joins' probes included; aggregates whose partials :func:`~millpond.spark.combine.plan_combine` combines;
  top-N, windows (``OVER``), unions of columns widened exactly, a view's rows, an index.

Everything else keeps Spark's path, one stage per operator.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from sqlglot import exp

from millpond.columns import KH, ROW_ID, W
from millpond.engine import plan as P
from millpond.engine.expressions import is_mp, to_duckdb
from millpond.engine.numerics import is_quotient
from millpond.spark.agreement import arrow_type, cannot_raise
from millpond.spark.combine import plan_combine
from millpond.spark.fused import hashed_here
from millpond.spark.fusing import _chain_sql, _dq, _spark_name, _widens
from millpond.spark.inputs import Inputs, arrow_schema, without_vnode
from millpond.spark.local import Committed, Concat, Empty, Keyed, Log, Op, Rows, Sql
from millpond.spark.task import Task

__all__ = ["LocalPlan", "localizing", "LOCAL_RECORDS"]

# an epoch reading at most this many records runs each consumer it can as one task (a bigger one
# spreads its operators over Spark's tasks); $MILLPOND_LOCAL_RECORDS sets it (0: never). Measured
# (TPC-H SF 0.1, first epochs of 870,000 records, benchmarks/tpch.py): one task 2.9-8.5x Spark's
# batch at a peak of 5.5 GiB, Spark's stages 12-28x at 9.2 GiB (then in one task: a first epoch's
# parallelism counted new records only; with two, 8.9-17.7x, q1/q3/q5/q9/q18 41.0 s against 13.2 s)
LOCAL_RECORDS = int(os.environ.get("MILLPOND_LOCAL_RECORDS", 2_000_000))


def localizing(inputs: Inputs) -> bool:
    """Whether this epoch of the consumer may run as one task (the module's docstring)."""
    c, job = inputs.consumer, inputs.job
    if c.on_error != "fail" or c.key in job.partial or c.partial is not None or c.views or c.merge is not None \
            or inputs.single:
        return False
    return 0 < inputs.local_records() <= LOCAL_RECORDS


class LocalPlan:
    """The local collaborator of a build (:class:`~millpond.spark.build.Builder`): how each node's
    rows are made in one task, beside the DataFrame the build makes of it. ``active``: the build
    makes each node here too (:meth:`Builder.final <millpond.spark.build.Builder.final>`, when
    :func:`localizing`); ``sql``: the build's Spark SQL of an expression, to be run."""

    def __init__(self, inputs: Inputs, sql: Callable[[exp.Expression], str], *, active: bool):
        self.inputs, self.sql, self.active = inputs, sql, active
        self.spark, self.job, self.consumer, self.tables = inputs.spark, inputs.job, inputs.consumer, inputs.tables
        self._local: dict[int, Rows | None] = {}  # each node's (by id) rows made here, or None
        # stateful nodes' tasks, their input, having
        self._noted: dict[int, tuple[Task, T.StructType, tuple[str, ...]]] = {}
        self._folded: dict[str, exp.Expression | None] = {}

    def note(self, node_id: int, task: Task, schema: T.StructType, having: list[str] | None = None) -> None:
        """The task of a stateful node and its input as Spark hands it over (``schema``)."""
        self._noted[node_id] = (task, schema, tuple(having or ()))

    def made(self, node: P.Node, df: DataFrame) -> bool:
        """Record how ``node``'s rows (``df``'s, as Catalyst types them) are made here, if they can
        be, and whether they can."""
        try:
            self._local[id(node)] = self._rows_of(node, arrow_schema(df.schema))
        except Exception:  # noqa: BLE001 - an expression DuckDB's dialect cannot spell, a type it has not: Spark's path
            self._local[id(node)] = None
        return self._local[id(node)] is not None

    def stage(self) -> tuple[Task, int] | None:
        """After the build: the consumer's whole epoch as one task (over one slot), or None."""
        op = self._local.get(id(self.consumer.plan))
        if not isinstance(op, Op) or not self.active:
            return None
        return replace(op.task, local=op.input), 1

    def _rows_of(self, node: P.Node, schema: pa.Schema) -> Rows | None:
        if not all(_local_type(f.type) for f in schema):
            return None
        if isinstance(node, P.Source):
            return self._log(node, schema)
        ins = [self._local.get(id(i)) for i in P.inputs(node)]
        if any(i is None for i in ins):
            return None
        source = dict(ins[0].columns) if isinstance(node, P.Project) and isinstance(ins[0], (Log, Committed)) else {}
        if source and all(isinstance(e, exp.Column) and not e.table and e.name in source for e, _ in node.exprs):
            # a table's columns renamed (an aggregate's arguments): picked as they are read, no query
            return replace(ins[0], columns=tuple((name, source[e.name]) for e, name in node.exprs), schema=schema)
        if isinstance(node, (P.Filter, P.Project, P.Window)):
            types = {f.name: f.type for f in _schema(ins[0])}
            folded = replace(node, predicate=self._fold(node.predicate)) if isinstance(node, P.Filter) else \
                replace(node, exprs=tuple((self._fold(e), name) for e, name in node.exprs)) \
                if isinstance(node, P.Project) else node
            # filters, projections and windows in a row are one query (DuckDB reads only the columns
            # the last one needs: a window's rows are not copied whole for each projection above it)
            below, rows, named = (ins[0].input, ins[0].query, ins[0].columns) if isinstance(ins[0], Sql) else \
                (ins[0], "SELECT * FROM records", ())
            sql = _chain_sql([folded], rows, types)
            if sql is None:
                return None
            if isinstance(folded, P.Project):
                named += tuple((to_duckdb(e), name, rows) for e, name in folded.exprs)
            return Sql(below, sql, schema, named)
        if isinstance(node, P.Union):
            if not all(_exactly(f.type, schema.field(f.name).type) for i in ins for f in _schema(i)):
                return None
            return Concat(tuple(ins), schema)
        noted = self._noted.get(getattr(node, "node_id", -1))
        if noted is None:
            return None
        task, spark_input, having = noted
        keyed = without_vnode(arrow_schema(spark_input))
        if isinstance(node, P.Join):
            made = self._join_input(node, ins[0], ins[1], keyed)
        elif isinstance(node, P.Aggregate):
            made = self._aggregate_input(node, ins[0], keyed, having)
        elif isinstance(node, (P.TopN, P.Over)):
            made = Keyed(ins[0], tuple(node.partition), keyed)
        elif isinstance(node, P.Materialize):
            cols = [f.name for f in _schema(ins[0]) if f.name != W]
            made = Keyed(ins[0], tuple(node.key) or tuple(cols), keyed)
        elif isinstance(node, P.Arrange):
            kcols = [f"_k{i}" for i in range(len(node.keys))]
            cols = [f.name for f in _schema(ins[0]) if f.name not in (W, ROW_ID)]
            renamed = ", ".join([*(f"{_dq(k)} AS {c}" for k, c in zip(node.keys, kcols)), *map(_dq, cols), W])
            made = Keyed(Sql(ins[0], f"SELECT {renamed} FROM records", _unkeyed(keyed)), tuple(kcols), keyed)
        else:
            return None
        return None if made is None else Op(task, made)

    def _log(self, node: P.Source, schema: pa.Schema) -> Rows | None:
        if node.table not in self.tables:  # a view's changes
            return None
        t, cols = self.tables[node.table], self.inputs.columns(node)
        named = tuple((out, src) for out, src in node.columns if src in cols)
        start, stop = self.inputs.ranges[t.channel]
        committed = None
        if (sid := self.inputs.committed(t)) is not None:  # a first epoch in batch mode: the table's rows, then its log
            read = tuple(dict.fromkeys(src for _, src in named if src != ROW_ID))  # only the columns used
            row_id = any(src == ROW_ID for _, src in named)
            stored = pa.schema([*(t.log_schema.field(c) for c in read), *([t.log_schema.field(ROW_ID)] if row_id else []),
                                pa.field(W, pa.int64())])
            committed = Committed(self.job.root, tuple(sorted(self.job.storage.items())), self.job.manifest.state(sid),
                                  read, row_id, stored, named, schema, self.inputs.part())
        if start >= stop:
            return committed or Empty(schema)
        if self.inputs.reusable():  # the scan object the re-run DataFrame reads too
            how = self.inputs.named(node)
            if how is None:
                return None
            key = how[1]
        else:  # a first epoch's: a scan object of its own range, numbered among the epoch's others
            self.inputs.scans.setdefault((t.channel, start, stop, "local"), None)
            key = self.inputs.scan_object(t, start, stop)[0]
        hi = self.inputs.part()[1] if committed is not None else None  # a filling view's parts so far (engine/filling.py)
        below = () if hi is None else (t.primary_key, hi)
        read = t.read_schema(tuple(dict.fromkeys((*cols, *(t.primary_key if below else ())))))
        log = Log(self.job.root, tuple(sorted(self.job.storage.items())), key, read, named, schema, below)
        return log if committed is None else Concat((committed, log), schema)

    def _join_input(self, node: P.Join, left: Rows, right: Rows, keyed: pa.Schema) -> Keyed | None:
        """Both sides' rows with the join's key columns ``_k<i>`` and the side's number, as Spark's
        exchange hands them to the join's task."""
        if node.lookup[1] == "old":  # a delta join's probe of an index as of before the epoch: no delta (as Spark's)
            right = Empty(_schema(right))
        kcols = [f"_k{i}" for i in range(len(node.left_keys))]
        sides = []
        for rows, keys in ((left, node.left_keys), (right, node.right_keys)):
            types = {f.name: f.type for f in _schema(rows)}
            folded = [self._fold(k) for k in keys]
            if not all(cannot_raise(k, types) for k in folded):
                return None
            if not all((t := arrow_type(k, types)) is not None and _exactly(t, keyed.field(c).type)
                       for k, c in zip(folded, kcols)):
                return None
            cols = [f.name for f in _schema(rows) if f.name != W]
            sql = ", ".join([*(f"{to_duckdb(k)} AS {c}" for k, c in zip(folded, kcols)), *map(_dq, cols), W])
            side = pa.schema([*(keyed.field(c) for c in kcols), *(_schema(rows).field(c) for c in cols),
                              pa.field(W, pa.int64())])
            sides.append(Sql(rows, f"SELECT {sql} FROM records", side))
        return Keyed(Concat(tuple(sides), _unkeyed(keyed), sides=(0, 1)), tuple(kcols), keyed)

    def _aggregate_input(self, node: P.Aggregate, rows: Rows, keyed: pa.Schema, having: tuple[str, ...]
                         ) -> Keyed | None:
        """The aggregate's input rows combined per group (and MIN/MAX value), as Catalyst does
        before the aggregate's task."""
        fields = [f for f in _schema(rows) if f.name != W]
        identity = P.Project(node.input, tuple((exp.column(f.name, quoted=True), f.name) for f in fields))
        combine = plan_combine(replace(node, input=identity), {f.name: (f.name, _spark_name(f.type)) for f in fields},
                               whole=True)
        return None if combine is None else Keyed(rows, tuple(node.group), keyed, combine, having)

    def _fold(self, e: exp.Expression) -> exp.Expression:
        """``e`` with each constant subexpression DuckDB may not evaluate as Spark does replaced by
        its value, computed by Spark (a literal both engines read alike), where it has such a literal."""
        def visit(n: exp.Expression) -> exp.Expression:
            if is_mp(n, "NUMERIC_DIV"):  # a quotient kept as Spark keeps it: its operands (engine/numerics.py)
                return exp.Anonymous(this="MP_NUMERIC_DEFER", expressions=[a.transform(visit) for a in n.expressions])
            if isinstance(n, (exp.Literal, exp.Null, exp.Boolean, exp.DataType, exp.DataTypeParam, exp.Identifier)) \
                    or any(isinstance(x, exp.Column) for x in n.walk()) or cannot_raise(n, {}):
                return n
            key = n.sql()
            if key not in self._folded:
                self._folded[key] = self._constant(n)
            found = self._folded[key]
            return n if found is None else found.copy()
        return e.transform(visit)

    def _constant(self, e: exp.Expression) -> exp.Expression | None:
        try:
            df = self.spark.sql(f"SELECT {self.sql(e)} AS v")
            value, t = df.collect()[0][0], df.schema[0].dataType
        except Exception:  # noqa: BLE001 - a constant Spark refuses: its path reports it
            return None
        if value is None:
            return None
        if isinstance(t, T.DateType):
            return exp.Cast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("DATE"))
        if isinstance(t, T.TimestampNTZType):
            return exp.Cast(this=exp.Literal.string(value.isoformat(sep=" ")),
                            to=exp.DataType(this=exp.DataType.Type.TIMESTAMPNTZ))
        if isinstance(t, (T.ShortType, T.IntegerType, T.LongType)):
            return exp.Cast(this=exp.Literal.number(value), to=exp.DataType.build(t.simpleString()))
        if isinstance(t, T.DecimalType):
            return exp.Cast(this=exp.Literal.number(format(value, "f")),
                            to=exp.DataType.build(f"DECIMAL({t.precision}, {t.scale})"))
        if isinstance(t, T.BooleanType):
            return exp.Boolean(this=value)
        if isinstance(t, T.StringType):
            return exp.Literal.string(value)
        return None


def _schema(rows: Rows) -> pa.Schema:
    return rows.task.out_schema if isinstance(rows, Op) else rows.schema


def _unkeyed(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name != KH])


def _local_type(t: pa.DataType) -> bool:
    """A type whose values the tree carries as Spark does."""
    return hashed_here(t) or pa.types.is_floating(t) or pa.types.is_decimal128(t) or is_quotient(t)


def _exactly(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether every value of type ``a`` is one of ``b`` unchanged."""
    if _widens(a, b):
        return True
    if pa.types.is_decimal(b) and (pa.types.is_decimal(a) or pa.types.is_integer(a)):
        p, s = (a.precision, a.scale) if pa.types.is_decimal(a) else ({8: 3, 16: 5, 32: 10, 64: 19}[a.bit_width], 0)
        return p - s <= b.precision - b.scale and s <= b.scale
    return {a, b} <= {pa.string(), pa.large_string()}


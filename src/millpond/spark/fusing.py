"""Where a stateful task's delta is made in Python instead of handed over by Spark: the planning
half of :mod:`millpond.spark.fused` (a task reading its delta from the log itself) and of
:class:`millpond.spark.task.Feed` (a view's rows made in the task of the operator they come
from). Both are planned only where both engines compute the same values: columns of the types
:func:`~millpond.spark.fused.hashed_here` takes, and expressions DuckDB evaluates as Spark does
(:func:`millpond.spark.agreement.cannot_raise`); everything else keeps Catalyst's path.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from sqlglot import exp

from millpond.catalog.types import spark_ddl_type
from millpond.columns import KH, VN, W
from millpond.engine import plan as P
from millpond.engine.expressions import to_duckdb
from millpond.spark.agreement import arrow_type, cannot_raise
from millpond.spark.combine import Combine, plan_combine
from millpond.spark.fused import Fused, Side, hashed_here
from millpond.spark.inputs import Inputs, arrow_schema, without_vnode
from millpond.spark.task import Feed, Task

__all__ = ["Fuser"]


class Fuser:
    """The fusing collaborator of a build (:class:`~millpond.spark.build.Builder`): which stateful
    tasks read their delta from the log themselves, or take it from the task it comes from. One
    per build; it records what that build made (:attr:`made`, :attr:`slot_frames`)."""

    def __init__(self, inputs: Inputs):
        self.inputs = inputs
        self.spark, self.job, self.consumer = inputs.spark, inputs.job, inputs.consumer
        self.tables, self.ranges = inputs.tables, inputs.ranges
        self.sources: set[int] = set()  # the sources (by id) a fused task of this build reads
        self.projected: dict[int, T.StructType] = {}  # an aggregate's (by id) input as Catalyst types it
        self.made: dict[int, tuple[DataFrame, Task]] = {}  # stateful tasks by node id, and their input (feed)
        self.slot_frames: dict[int, tuple[DataFrame, int]] = {}  # the slots of fused stages (by id): their number

    def fuse_aggregate(self, node: P.Aggregate, schema: T.StructType, having: list[str] | None
                       ) -> tuple[Fused, DataFrame] | None:
        """``node``'s task reading its delta from the log itself (:mod:`millpond.spark.fused`), as
        ``schema`` (the Catalyst path's input of the task), and the DataFrame of its slots; None
        where it cannot: its input is not a table's columns (or expressions of them DuckDB may
        evaluate, :meth:`_computed`) combined as :func:`plan_combine` can, or its group is of a
        type not hashed in Python (:func:`hashed_here`)."""
        project = node.input
        chain, source = [], project.input if isinstance(project, P.Project) else None
        while isinstance(source, (P.Filter, P.Project, P.Window)):
            chain.append(source)
            source = source.input
        if not self._fusable([source]):
            return None
        if chain:
            return self._fuse_chain_aggregate(node, [project, *chain], source, schema, having)
        t = self.tables[source.table]
        types = {c.name: spark_ddl_type(c.type) for c in t.columns}
        columns = {out: (src, types.get(src, "")) for out, src in source.columns}
        computed = [(e, name) for e, name in project.exprs if not _plain(e.this if isinstance(e, exp.Cast) else e, columns)]
        query = None
        if computed:  # evaluated by DuckDB over the records first, each a column named _mp<i>
            named = [(e, f"_mp{i}") for i, (e, _) in enumerate(computed)]
            if (query := self._computed(source, named)) is None:
                return None
            projected = self.projected[id(node)]
            renamed = {name: exp.column(f"_mp{i}", quoted=True) for i, (_, name) in enumerate(computed)}
            project = replace(project, exprs=tuple((renamed.get(name, e), name) for e, name in project.exprs))
            columns.update({f"_mp{i}": (f"_mp{i}", projected[name].dataType.simpleString())
                            for i, (_, name) in enumerate(computed)})
        combine = plan_combine(replace(node, input=project), columns)
        arrow = arrow_schema(schema)
        if combine is None or not all(hashed_here(arrow.field(g).type) for g in node.group):
            return None
        cols = self.inputs.columns(source)
        side = Side(self.inputs.load(t, *self.ranges[t.channel], cols)[1], t.read_schema(cols), (), query=query)
        self.sources.add(id(source))
        return self._fused((side,), tuple(node.group), schema, combine, tuple(having or ()))

    def _fuse_chain_aggregate(self, node: P.Aggregate, chain: list, source: P.Source, schema: T.StructType,
                              having: list[str] | None) -> tuple[Fused, DataFrame] | None:
        """As :meth:`fuse_aggregate`, for an aggregate over filters, projections and time windows
        ``chain`` (its own projection first) of a table's columns: the whole chain one DuckDB query
        over the records (:func:`_chain_sql`), whose columns the aggregate then takes as they are."""
        if self.consumer.on_error != "fail":  # a data error is Spark's to report (engine.failures)
            return None
        t, cols, project = self.tables[source.table], self.inputs.columns(source), chain[0]
        if (sql := self._over_table(chain, source)) is None:
            return None
        projected = self.projected[id(node)]
        columns = {name: (name, projected[name].dataType.simpleString()) for _, name in project.exprs}
        plain = replace(project, exprs=tuple((exp.column(name, quoted=True), name) for _, name in project.exprs))
        combine = plan_combine(replace(node, input=plain), columns)
        if combine is None or not all(hashed_here(arrow_schema(schema).field(g).type) for g in node.group):
            return None
        side = Side(self.inputs.load(t, *self.ranges[t.channel], cols)[1], t.read_schema(cols), (), query=sql)
        self.sources.add(id(source))
        return self._fused((side,), tuple(node.group), schema, combine, tuple(having or ()))

    def fuse_join(self, node: P.Join, schema: T.StructType) -> tuple[Fused, DataFrame] | None:
        """As :meth:`fuse_aggregate`, for an equi-join of two tables' columns as they are, on keys
        of types hashed in Python (``schema``: the join task's input): columns, or expressions of
        them DuckDB may evaluate."""
        if (not node.left_keys or any(node.lookup) or any(i is not None for i in node.shared)  # no keys: one partition
                or not self._fusable([node.left, node.right])):
            return None
        sides = [self._join_side(source, keys, k, schema)
                 for k, (source, keys) in enumerate(((node.left, node.left_keys), (node.right, node.right_keys)))]
        if any(s is None for s in sides):
            return None
        self.sources.update((id(node.left), id(node.right)))
        return self._fused(tuple(s for s in sides if s != ()), tuple(f"_k{i}" for i in range(len(node.left_keys))),
                           schema)

    def fuse_partial_join(self, node: P.Join, schema: T.StructType) -> tuple[Fused, Feed, DataFrame] | None:
        """An inner join of a table with an eager partial aggregate (``sql/planner/eager.py``) whose
        task reads the log itself and is grouped by exactly the join key, typed as the join compares
        it: the partial's task runs in the join's task, its output is that side's delta there (a
        :class:`~millpond.spark.task.Feed`), the table's side is read from the log as
        :meth:`fuse_join` reads it — one stage for both operators, whose key hashes, and so tasks,
        are the same. The fused table side, the feed, and the slots."""
        k = next((i for i, n in enumerate((node.left, node.right)) if isinstance(n, P.Aggregate) and n.eager), None)
        if k is None or node.kind != "inner" or any(node.lookup) or any(i is not None for i in node.shared):
            return None
        partial, keys = (node.left, node.left_keys) if k == 0 else (node.right, node.right_keys)
        other, other_keys = (node.right, node.right_keys) if k == 0 else (node.left, node.left_keys)
        made = self.made.get(partial.node_id)
        arrow = arrow_schema(schema)
        if (made is None or made[1].fused is None or made[1].fused.tasks != self.inputs.fused_tasks()
                or not isinstance(other, P.Source) or other.table not in self.tables
                or [e.name if isinstance(e, exp.Column) else None for e in keys] != list(partial.group)
                or any(made[1].out_schema.field(g).type != arrow.field(f"_k{i}").type
                       for i, g in enumerate(partial.group))):
            return None
        side = self._join_side(other, other_keys, 1 - k, schema)
        if side is None:
            return None
        self.sources.add(id(other))
        hashed = tuple(f"_k{i}" for i in range(len(keys)))
        fused, slots = self._fused((side,) if side != () else (), hashed, schema)
        up = made[1].out_schema.names
        columns = tuple((f"_k{i}", g) for i, g in enumerate(partial.group)) + tuple((c, c) for c in up if c != W) \
            + ((W, W),)
        return fused, Feed(made[1], None, columns, hashed, without_vnode(arrow), side=k), slots

    def fuse_join_aggregate(self, node: P.Aggregate, schema: T.StructType, having: list[str] | None
                            ) -> tuple[DataFrame, Feed] | None:
        """``node`` over a join whose task is a fused stage of one task: the aggregate runs in that
        task too, its delta the join's output combined per group there (:class:`~millpond.spark.combine.Combine`,
        as Catalyst's ``schema`` has it) — no exchange, one stage for the join and the aggregate (a
        single task holds every vnode of both). The join's slots and the feed; None otherwise."""
        join = node.input.input if isinstance(node.input, P.Project) else None
        made = self.made.get(join.node_id) if isinstance(join, P.Join) else None
        if made is None or self.slot_frames.get(id(made[0]), (None, 0))[1] != 1 or node.whole:
            return None
        columns = {f.name: (f.name, _spark_name(f.type)) for f in made[1].out_schema if f.name != W}
        arrow = arrow_schema(schema)
        if (combine := plan_combine(node, columns)) is None or not all(
                hashed_here(arrow.field(g).type) for g in node.group):
            return None
        keyed = without_vnode(arrow)
        return made[0], Feed(made[1], None, (), tuple(node.group), keyed, combine=combine, having=tuple(having or ()))

    def _join_side(self, source: P.Source, keys: tuple[exp.Expression, ...], k: int, schema: T.StructType
                   ) -> Side | tuple | None:
        """Side ``k`` of a fused join: its records read from the log; () when its range is empty;
        None when it cannot be read so (a key of a type not hashed here, an expression DuckDB may
        not evaluate as Spark does)."""
        t, srcs = self.tables[source.table], dict(source.columns)
        cols = self.inputs.columns(source)
        types = [arrow_schema(T.StructType([schema[f"_k{i}"]])).field(0).type for i in range(len(keys))]
        if not all(hashed_here(type_) for type_ in types):
            return None
        computed = {i for i, e in enumerate(keys) if not _plain(e, srcs)}
        query = self._computed(source, [(keys[i], f"_mp{i}") for i in sorted(computed)]) if computed else None
        if computed and query is None:
            return None
        typed = tuple((f"_k{i}", f"_mp{i}" if i in computed else srcs[e.name], types[i]) for i, e in enumerate(keys))
        start, stop = self.ranges[t.channel]
        if start >= stop:
            return ()
        return Side(self.inputs.load(t, start, stop, cols)[1], t.read_schema(cols),
                    tuple((out, src) for out, src in source.columns if src in cols), k, typed, query)

    def fuse_materialize(self, node: P.Materialize, schema: T.StructType, key: list[str]
                         ) -> tuple[Fused, DataFrame] | None:
        """As :meth:`fuse_aggregate`, for a view's rows made of one table's by filters,
        projections and time windows, evaluated by DuckDB in the task (``schema``: the task's
        input). Only where both engines give the same values (columns of the types
        :func:`hashed_here` takes, errors failing the view) and every expression translates; an
        ``APPEND ONLY`` table's rows are not exchanged at all."""
        chain, source = [], node.input
        while isinstance(source, (P.Filter, P.Project, P.Window)):
            chain.append(source)
            source = source.input
        arrow = arrow_schema(schema)
        # a DECIMAL is the same value in both engines where every expression making it is exact (agreement.numeric)
        if (self.consumer.on_error != "fail" or not self._fusable([source])
                or not all(hashed_here(f.type) or pa.types.is_decimal128(f.type)
                           for f in arrow if f.name not in (W, KH, VN))):
            return None
        t, cols = self.tables[source.table], self.inputs.columns(source)
        renamed = tuple((out, src) for out, src in source.columns if src in cols)
        sql = None  # a table's columns as they are (its own rows): renamed in the task, no query to copy them
        if chain and (sql := self._over_table(chain, source)) is None:  # a data error is Spark's (engine.failures)
            return None
        side = Side(self.inputs.load(t, *self.ranges[t.channel], cols)[1], t.read_schema(cols), () if sql else renamed,
                    query=sql)
        self.sources.add(id(source))
        return self._fused((side,), tuple(key), schema, share=t.append_only)

    def _over_table(self, chain: list, source: P.Source) -> str | None:
        """DuckDB SQL of ``chain`` (:func:`_chain_sql`) over ``source``'s records, its columns named
        as the source names them; None where the chain cannot be made so."""
        t, cols = self.tables[source.table], self.inputs.columns(source)
        renamed = [(out, src) for out, src in source.columns if src in cols]
        sql = f"SELECT {', '.join([*(f'{_dq(src)} AS {_dq(out)}' for out, src in renamed), W])} FROM records"
        return _chain_sql(chain, sql, {out: t.log_schema.field(src).type for out, src in renamed})

    def _computed(self, source: P.Source, exprs: list[tuple[exp.Expression, str]]) -> str | None:
        """DuckDB SQL over a table's ``records`` adding ``exprs`` (over ``source``'s columns) as the
        columns named; None where one may raise a data error or round (:func:`cannot_raise`: Spark
        reports and rounds those), or DuckDB's dialect cannot spell it."""
        srcs = dict(source.columns)
        log = self.tables[source.table].log_schema
        types = {out: log.field(src).type for out, src in srcs.items() if src in log.names}
        if self.consumer.on_error != "fail" or not all(
                cannot_raise(e, types) and all(c.name in srcs and not c.table for c in e.find_all(exp.Column))
                for e, _ in exprs):
            return None
        try:
            cols = [f"{to_duckdb(e.transform(lambda n: exp.column(srcs[n.name], quoted=True) if isinstance(n, exp.Column) else n))} AS {_dq(name)}"
                    for e, name in exprs]
        except Exception:  # noqa: BLE001 - an expression DuckDB's dialect cannot spell: Spark evaluates it
            return None
        return f"SELECT *, {', '.join(cols)} FROM records"

    def _fusable(self, sources: list) -> bool:
        """Whether a stateful task over ``sources`` may read its delta from the log itself: each
        a table's whole range (no partial view, no batch mode), read through a scan object or
        empty, and few tasks."""
        if (self.consumer.partial is not None or self.job.batch.get(self.consumer.key) or self.inputs.single
                or not self.inputs.fused_tasks()):
            return False
        sizes = []
        for source in sources:
            if not isinstance(source, P.Source) or source.table not in self.tables:
                return False
            start, stop = self.ranges[self.tables[source.table].channel]
            sizes.append(stop - start)
        # no record at all (e.g. a view's schema from empty inputs): nothing to read, no scan object
        return any(n > 0 for n in sizes)

    def _fused(self, sides: tuple[Side, ...], hashed: tuple[str, ...], schema: T.StructType,
               combine: Combine | None = None, having: tuple[str, ...] = (), share: bool = False) -> tuple[Fused, DataFrame]:
        arrow = arrow_schema(schema)
        fused = Fused(self.job.root, tuple(sorted(self.job.storage.items())), sides, hashed, self.inputs.fused_tasks(),
                      without_vnode(arrow), combine, having,
                      share)
        slots = self.spark.range(0, fused.tasks, 1, fused.tasks)
        self.slot_frames[id(slots)] = (slots, fused.tasks)
        return fused, slots

    def feed(self, node: P.Node, key: list[str], schema: T.StructType) -> tuple[DataFrame, Feed] | None:
        """A view's rows ``node`` made in the task of the operator they come from (``P.keyed_by``),
        with no Python/JVM round trip between (:class:`~millpond.spark.task.Feed`): the operator's
        input DataFrame and the feed; None where Spark must evaluate what lies between (an
        expression that may raise or round, or columns of types DuckDB and Spark may differ on)."""
        up = P.keyed_by(node)
        made = self.made.get(up.node_id) if up is not None else None
        if made is None:
            return None
        chain, n = [], node
        while n is not up:
            chain.append(n)
            n = n.input
        target, upstream = arrow_schema(schema), made[1].out_schema
        if not all(hashed_here(target.field(k).type) for k in key):  # keyhash hashes it as Spark would
            return None
        if all(isinstance(n, P.Project) and all(_renamed(e) is not None for e, _ in n.exprs)
               for n in chain):  # renames: the columns as they are (or widened, below)
            def traced(name: str) -> str:
                for n in chain:
                    name = name if name == W else next(_renamed(e) for e, out in n.exprs if out == name)
                return name
            columns = tuple((f.name, traced(f.name)) for f in target if f.name != KH)
            # a cast only where it cannot fail or round: to the same type, or an integer to a wider one
            # (sum(int) is Spark's bigint already; PostgreSQL's types cast it again); Feed casts to target
            if all(not isinstance(e, exp.Cast) for n in chain for e, _ in n.exprs) or (
                    len(chain) == 1 and all(_widens(upstream.field(src).type, target.field(out).type)
                                            for out, src in columns)):
                return made[0], Feed(made[1], None, columns, tuple(key), target)
        if (self.consumer.on_error != "fail" or (sql := _chain_sql(chain, "SELECT * FROM records")) is None
                or not all(hashed_here(f.type) for f in (*upstream, *target) if f.name not in (W, KH))):
            return None
        return made[0], Feed(made[1], sql, (), tuple(key), target)


def _chain_sql(chain: list, sql: str, types: Mapping[str, pa.DataType] | None = None) -> str | None:
    """DuckDB SQL of the filters, projections and time windows ``chain`` (outermost first) over the
    rows of ``sql`` (whose columns' Arrow types are ``types``, where known); None where one may
    raise a data error or round (:func:`cannot_raise`), a window's time is not known to be a
    ``TIMESTAMP`` (:func:`_window_sql`), or DuckDB's dialect cannot spell it."""
    types_in: dict[int, pa.DataType] = {}  # each window's time type
    for n in reversed(chain):
        if isinstance(n, P.Window):
            if types is None or types.get(n.time) not in _WINDOWED:
                return None
            types_in[id(n)] = types[n.time]
            types = {**types, n.start: types[n.time], n.end: types[n.time]}
            continue
        exprs = [n.predicate] if isinstance(n, P.Filter) else [e for e, _ in n.exprs]
        if not all(cannot_raise(e, types) for e in exprs):
            return None
        if isinstance(n, P.Project) and types is not None:  # the types of the projection's columns
            types = {name: t for e, name in n.exprs if (t := arrow_type(e, types)) is not None}
    try:
        for n in reversed(chain):
            if isinstance(n, P.Window):
                sql = _window_sql(n, sql, zoned=types_in[id(n)].tz is not None)
            elif isinstance(n, P.Filter):
                sql = f"SELECT * FROM ({sql}) WHERE {to_duckdb(n.predicate)}"
            else:
                sql = f"SELECT {', '.join([*(f'{to_duckdb(e)} AS {_dq(name)}' for e, name in n.exprs), W])} FROM ({sql})"
    except Exception:  # noqa: BLE001 - an expression DuckDB's dialect cannot spell: Spark evaluates it
        return None
    return sql


_WINDOWED = (pa.timestamp("us"), pa.timestamp("us", tz="UTC"))  # a window's time: TIMESTAMP, TIMESTAMPTZ


def _window_sql(n: P.Window, sql: str, *, zoned: bool = False) -> str:
    """DuckDB SQL adding ``n``'s windows to the rows of ``sql`` as Spark's ``window()`` makes them
    (:meth:`millpond.spark.build.Builder._window`): one row per window of ``size_us`` starting at a
    multiple of ``slide_us`` (counted from 1970, the remainder floored for earlier times) that holds
    the row's time, none for a NULL time. In microseconds, as both engines keep a ``TIMESTAMP``
    (and a ``TIMESTAMPTZ``: ``zoned``, UTC microseconds, whatever the session's time zone)."""
    us, size, slide = f"epoch_us({_dq(n.time)})", n.size_us, n.slide_us
    last = f"{us} - ((({us} % {slide}) + {slide}) % {slide})"  # the latest window start at or before the time

    def at(micros: str) -> str:  # DuckDB's TimeZone is UTC (millpond.duck): the cast keeps the instant
        return f"CAST(make_timestamp({micros}) AS TIMESTAMPTZ)" if zoned else f"make_timestamp({micros})"
    ends = f"{at('_mpw_s')} AS {_dq(n.start)}, {at(f'_mpw_s + {size}')} AS {_dq(n.end)}"
    if size == slide:  # a tumbling window: exactly one
        return (f"SELECT * EXCLUDE (_mpw_s), {ends} FROM ("
                f"SELECT *, {last} AS _mpw_s FROM ({sql}) WHERE {_dq(n.time)} IS NOT NULL)")
    return (f"SELECT * EXCLUDE (_mpw_s, _mpw_us), {ends} FROM ("
            f"SELECT * EXCLUDE (_mpw_k), {us} AS _mpw_us, {last} - _mpw_k * {slide} AS _mpw_s "
            f"FROM ({sql}) CROSS JOIN range(0, {-(-size // slide)}) AS _mpw(_mpw_k) WHERE {_dq(n.time)} IS NOT NULL) "
            f"WHERE _mpw_s + {size} > _mpw_us")


_SPARK = {pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint", pa.string(): "string",
          pa.large_string(): "string", pa.bool_(): "boolean", pa.date32(): "date",
          pa.timestamp("us"): "timestamp_ntz", pa.float64(): "double", pa.float32(): "float"}  # Spark's names of Arrow types (and decimals', _spark_name)


def _spark_name(t: pa.DataType) -> str:
    """Spark's name of the Arrow type ``t`` (\"\": one :func:`plan_combine` takes no column of)."""
    return f"decimal({t.precision},{t.scale})" if pa.types.is_decimal128(t) else _SPARK.get(t, "")


def _renamed(e: exp.Expression) -> str | None:
    """The column ``e`` is (or casts), or None."""
    e = e.this if isinstance(e, exp.Cast) else e
    return e.name if type(e) is exp.Column and not e.table else None


def _widens(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether every value of type ``a`` is one of ``b`` unchanged."""
    return a == b or (pa.types.is_signed_integer(a) and pa.types.is_signed_integer(b) and a.bit_width <= b.bit_width)


def _plain(e: exp.Expression, columns: Mapping[str, object]) -> bool:
    """Whether ``e`` is one of ``columns`` as it is."""
    return isinstance(e, exp.Column) and not e.table and e.name in columns


def _dq(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'

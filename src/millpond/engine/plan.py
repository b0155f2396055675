"""Incremental plans: frozen descriptions of a view's dataflow over changelogs.

Every node's output is a changelog (a Z-set): its columns plus the weight ``_w``. Stateless
nodes (``Filter``, ``Project``, ``Window``, ``Union``) become the executor's expressions; stateful
nodes (``Join``, ``Aggregate``, ``TopN``, ``Over``, ``Materialize``) run as operators after an exchange on
their key, and own state tables named ``o<object id>.n<node id>.<part>`` (:func:`state_id`).

Expressions stay sqlglot trees over plan-internal column names (``<alias>__<column>``); the SQL of
a target engine is generated only where it runs (Spark SQL in :mod:`millpond.spark.build`, DuckDB
SQL for an outer join's residual condition).

A plan is stored in the catalog when its view is created (:func:`encode`, :func:`decode`:
lossless, expressions included) and executed as stored, so its node ids — and with them the
view's state ids — never change after an upgrade. :func:`canonical` renumbers nodes in traversal
order, to compare a stored plan with a re-derived one; :func:`explain` prints a plan.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import Any, Literal
from typing import Union as Union_

from sqlglot import exp

__all__ = ["Source", "Filter", "Project", "Window", "Union", "Join", "AggCall", "Aggregate", "TopN", "Frame",
           "OverCall", "Over", "Materialize", "Arrange", "Node", "shared_sides", "indexes_read", "state_id", "keyed_by", "sources", "encode", "decode",
           "canonical", "explain", "describe", "PLAN_FORMAT"]

PLAN_FORMAT = 1  # the encoding of a stored plan; another one is refused by name


@dataclass(frozen=True)
class Source:
    """A table's changelog for the epoch's range; ``columns`` maps output name -> table column."""

    table: str
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Filter:
    input: "Node"
    predicate: exp.Expression  # boolean, over the input's columns


@dataclass(frozen=True)
class Project:
    input: "Node"
    exprs: tuple[tuple[exp.Expression, str], ...]  # (expression over the input's columns, output name)


@dataclass(frozen=True)
class Window:
    """Time windows over ``time``: adds ``start``/``end`` columns; a row belongs to every window
    of length ``size_us`` starting at a multiple of ``slide_us`` that contains its time (TUMBLE:
    slide = size; HOP: one output row per window). Rows with a NULL time belong to no window."""

    input: "Node"
    time: str
    size_us: int
    slide_us: int
    start: str
    end: str


@dataclass(frozen=True)
class Union:
    """UNION ALL: the sum of the inputs' changelogs (inputs already share column names)."""

    inputs: tuple["Node", ...]


JoinKind = Literal["inner", "left", "right", "full"]


@dataclass(frozen=True)
class Join:
    """Equi-join; keys are expressions over each side's columns (no keys: a cross join on one
    partition). ``residual`` (over both sides' columns) is the rest of an outer join's ON
    condition, evaluated with the join; an inner join's extra conditions are a Filter above it."""

    left: "Node"
    right: "Node"
    left_keys: tuple[exp.Expression, ...]
    right_keys: tuple[exp.Expression, ...]
    node_id: int
    kind: JoinKind = "inner"
    residual: exp.Expression | None = None
    # per side (left, right): the id of the index the side reads in place of state of its own (a
    # physical choice made when the view is created: ``millpond.sql.indexes``), or None
    shared: tuple[int | None, int | None] = (None, None)
    # per side, in a delta join's probe (``millpond.sql.indexes``): "" (a join's side), "stream" (the
    # epoch's delta, probing the other side; no state), "old" (an index as of before the epoch: its
    # delta not read) or "new" (an index with the epoch's delta added)
    lookup: tuple[str, str] = ("", "")


AggFunc = Literal["count_star", "count", "sum", "min", "max", "count_distinct", "sum_distinct", "percentile_cont",
                  "percentile_disc", "array_agg"]


@dataclass(frozen=True)
class AggCall:
    func: AggFunc
    arg: str | None  # an input column name (None for count_star)
    name: str  # output column name
    fraction: float | None = None  # percentile_cont/percentile_disc: the fraction, in [0, 1]
    desc: bool = False  # percentile_cont/percentile_disc: WITHIN GROUP (ORDER BY arg DESC); array_agg's order


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY ``group``; with no GROUP BY at all (``whole``) there is exactly one output row,
    also over empty input (COUNT 0, SUM NULL), as in PostgreSQL."""

    input: "Node"
    group: tuple[str, ...]  # input column names
    calls: tuple[AggCall, ...]
    node_id: int
    whole: bool = False
    append_only: bool = False  # the input never retracts: MIN/MAX keep one value per group
    # a partial aggregate of one side of a join, by its join key, below the aggregate that merges
    # its results (eager aggregation: ``millpond.sql.planner.eager``)
    eager: bool = False


@dataclass(frozen=True)
class TopN:
    """The first ``limit`` rows after ``offset`` of each ``partition`` in ``order`` (column, descending,
    nulls first), ties broken by the remaining columns so the result is deterministic; with
    ``row_number`` set, each output row also carries its 1-based position in its partition."""

    input: "Node"
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool, bool], ...]
    limit: int
    offset: int
    row_number: str | None
    node_id: int


@dataclass(frozen=True)
class Frame:
    """The rows a window aggregate reads around the current row. ``start`` and ``end`` are offsets
    from it (negative: preceding, 0: the current row, positive: following) or None (unbounded). A
    ``rows`` frame counts physical rows; a ``range`` frame's bounds are 0 or None and 0 means the
    current row's peers (rows equal in ORDER BY) up to its first (start) or last (end) one."""

    kind: Literal["rows", "range"]
    start: int | None
    end: int | None


WindowFunc = Literal["row_number", "rank", "dense_rank", "count_star", "count", "sum", "min", "max", "lag", "lead"]


@dataclass(frozen=True)
class OverCall:
    """One window function: aggregates (``count_star``, ``count``, ``sum``, ``min``, ``max``) read
    ``frame``; ``lag``/``lead`` read ``arg`` ``offset`` rows before/after the current one, else the
    ``default`` column (None: NULL); the ranking functions read neither."""

    func: WindowFunc
    arg: str | None  # an input column name
    name: str  # output column name
    frame: Frame | None = None
    offset: int = 1
    default: str | None = None


@dataclass(frozen=True)
class Over:
    """Window functions over each ``partition`` in ``order`` (column, descending, nulls first), with
    PostgreSQL's meaning; ties are broken by the remaining columns, so ROW_NUMBER, ROWS frames,
    LAG and LEAD are deterministic. Outputs every input row with one column per call."""

    input: "Node"
    partition: tuple[str, ...]
    order: tuple[tuple[str, bool, bool], ...]
    calls: tuple[OverCall, ...]
    node_id: int


@dataclass(frozen=True)
class Materialize:
    """Keeps the rows of a view (or table) as a multiset of all of its columns. ``key``: the
    columns whose hash addresses the rows in state (``_kh``), so a read by key looks up only those
    rows — a view's group key, a table's primary key (:func:`row_key`); empty: the hash of every
    column (views and tables made before catalog format 10)."""

    input: "Node"
    node_id: int
    key: tuple[str, ...] = ()


@dataclass(frozen=True)
class Arrange:
    """An index's plan: a table's rows (``input``, a :class:`Source` of all its columns) kept as
    ``HashJoin`` side state keyed by ``keys`` (an arrangement, read by the views that join on them)."""

    input: "Node"
    keys: tuple[str, ...]
    node_id: int


Node = Union_[Source, Filter, Project, Window, Union, Join, Aggregate, TopN, Over, Materialize, Arrange]
_CLASSES = {c.__name__: c for c in (Source, Filter, Project, Window, Union, Join, AggCall, Aggregate, TopN,
                                    Frame, OverCall, Over, Materialize, Arrange)}


def state_id(object_id: int, node_id: int, part: str) -> str:
    return f"o{object_id}.n{node_id}.{part}"


def inputs(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Source):
        return ()
    if isinstance(node, Join):
        return node.left, node.right
    if isinstance(node, Union):
        return node.inputs
    return (node.input,)


def keyed_by(node: Node) -> Node | None:
    """The stateful operator ``node``'s rows come from (through filters and projections), if any.
    A view's rows need no exchange before they are kept when they come from one: the rows a
    retraction cancels were counted by an earlier epoch, or made by the same task in this one (the
    operator's key partitions them). Rows straight from a table need it: an insert and a delete of
    one row in one epoch may be read by two tasks."""
    while isinstance(node, (Project, Filter)):
        node = node.input
    return node if isinstance(node, (Aggregate, Join, TopN, Over)) else None


def row_key(node: Node) -> tuple[str, ...]:
    """Output columns of ``node`` that identify its rows, for a view's rows to be addressed by:
    the group key of the aggregate its rows come from (through filters and projections that keep
    every key column as it is); () if there is none."""
    renames: list[dict[str, str]] = []
    while isinstance(node, (Project, Filter)):
        if isinstance(node, Project) and any(e.find(exp.Explode) for e, _ in node.exprs):
            return ()  # unnest: several rows of one key
        if isinstance(node, Project):
            renames.append({e.name: out for e, out in reversed(node.exprs) if type(e) is exp.Column and not e.table})
        node = node.input
    if not isinstance(node, Aggregate) or node.whole or not node.group:
        return ()
    key = list(node.group)
    for names in reversed(renames):
        if not all(k in names for k in key):
            return ()
        key = [names[k] for k in key]
    return tuple(key)


def sources(node: Node) -> list[Source]:
    if isinstance(node, Source):
        return [node]
    return [s for i in inputs(node) for s in sources(i)]


def indexes_read(node: Node) -> frozenset[int]:
    """The ids of every index ``node`` reads."""
    out: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, Join):
            out.update(i for i in n.shared if i is not None)
        todo.extend(inputs(n))
    return frozenset(out)


def shared_sides(node: Node, *, first: bool = False) -> dict[str, int]:
    """The tables ``node`` reads through an index (table -> index id): a join side that is the
    table's :class:`Source`. In a view's ``first`` epoch, the join's output so far must be empty:
    a side that the join preserves (the left of a LEFT or FULL join, the right of a RIGHT or FULL
    one) and the left of a join whose sides both read indexes are read as having no rows yet (their
    whole table is this epoch's delta, so the epoch emits every row the view starts with): they
    are not listed."""
    out = {}
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, Join):
            whole: set[int] = set()
            if first and any(n.lookup):  # a delta join's first epoch reads every table whole
                whole = {0, 1}
            elif first:
                whole = {k for k, kinds in ((0, ("left", "full")), (1, ("right", "full"))) if n.kind in kinds}
                if n.kind == "inner" and None not in n.shared:
                    whole = {0}
            out.update({side.table: i for k, (side, i) in enumerate(zip((n.left, n.right), n.shared))
                        if i is not None and k not in whole})
        todo.extend(inputs(n))
    return out


# -- storing plans ------------------------------------------------------------------------------
def encode(plan: Node) -> dict:
    """``plan`` as JSON-ready data, losslessly (``decode(encode(p)) == p``)."""
    return {"format": PLAN_FORMAT, "plan": _enc(plan)}


def decode(data: dict) -> Node:
    """The plan :func:`encode` stored; a ``ValueError`` names what this version cannot read."""
    if data.get("format") != PLAN_FORMAT:
        raise ValueError(f"plan format {data.get('format')!r} (this millpond reads format {PLAN_FORMAT})")
    return _dec(data["plan"])


def _enc(value: Any) -> Any:
    if isinstance(value, exp.Expression):
        return {"expr": _enc_expr(value)}
    if dataclasses.is_dataclass(value):  # a field at its default is left out (a reader without it reads the plan)
        return {"node": type(value).__name__,
                **{f.name: _enc(getattr(value, f.name)) for f in dataclasses.fields(value)
                   if f.default is dataclasses.MISSING or getattr(value, f.name) != f.default}}
    if isinstance(value, tuple):
        return [_enc(v) for v in value]
    return value


def _dec(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_dec(v) for v in value)
    if isinstance(value, dict):
        if "expr" in value:
            return _dec_expr(value["expr"])
        cls = _CLASSES.get(value.get("node"))
        if cls is None:
            raise ValueError(f"unknown plan node {value.get('node')!r}")
        return cls(**{k: _dec(v) for k, v in value.items() if k != "node"})
    return value


def _enc_expr(e: Any) -> Any:
    """A sqlglot tree as ``[class, {arg: value}]`` (classes by their name in ``sqlglot.exp``)."""
    if isinstance(e, exp.Expression):
        return [type(e).__name__, {k: _enc_expr(v) for k, v in e.args.items() if v is not None and v != []}]
    if isinstance(e, list):
        return {"list": [_enc_expr(v) for v in e]}
    if isinstance(e, enum.Enum):
        return {"enum": type(e).__name__, "value": e.value}
    return e


def _dec_expr(data: Any) -> Any:
    if isinstance(data, list):
        name, args = data
        cls = getattr(exp, name, None)
        if not (isinstance(cls, type) and issubclass(cls, exp.Expression)):
            raise ValueError(f"unknown SQL expression {name!r} in a stored plan")
        return cls(**{k: _dec_expr(v) for k, v in args.items()})
    if isinstance(data, dict) and "list" in data:
        return [_dec_expr(v) for v in data["list"]]
    if isinstance(data, dict) and "enum" in data:
        return _enum(data["enum"])(data["value"])
    return data


def _enum(name: str) -> type[enum.Enum]:
    if name == exp.DataType.Type.__name__:  # the only enumeration in sqlglot trees: data types
        return exp.DataType.Type
    raise ValueError(f"unknown enumeration {name!r} in a stored plan")


def canonical(plan: Node) -> Node:
    """``plan`` with node ids renumbered 1.. in traversal order (inputs first, left to right):
    two plans that differ only in numbering have the same canonical form."""
    ids: dict[int, int] = {}

    def walk(node: Node) -> Node:
        changes: dict[str, Any] = {}
        if isinstance(node, Join):
            changes = {"left": walk(node.left), "right": walk(node.right)}
        elif isinstance(node, Union):
            changes = {"inputs": tuple(walk(i) for i in node.inputs)}
        elif not isinstance(node, Source):
            changes = {"input": walk(node.input)}
        if hasattr(node, "node_id"):
            changes["node_id"] = ids.setdefault(node.node_id, len(ids) + 1)
        return dataclasses.replace(node, **changes)
    return walk(plan)


def first_difference(a: Node, b: Node) -> str | None:
    """Where two plans first differ (a path and both values), or None if they are equal."""
    def diff(x: Any, y: Any, path: str) -> str | None:
        if type(x) is not type(y):
            return f"{path}: {_short(x)} vs {_short(y)}"
        if isinstance(x, dict):
            if x.get("node") != y.get("node"):
                return f"{path}: {x.get('node')} vs {y.get('node')}"
            for k in dict.fromkeys([*x, *y]):
                found = diff(x.get(k), y.get(k), f"{path}.{k}" if "node" not in x else f"{path}/{x['node']}.{k}")
                if found:
                    return found
            return None
        if isinstance(x, list):
            if len(x) != len(y):
                return f"{path}: {_short(x)} vs {_short(y)}"
            for i, (u, v) in enumerate(zip(x, y)):
                found = diff(u, v, f"{path}[{i}]")
                if found:
                    return found
            return None
        return None if x == y else f"{path}: {_short(x)} vs {_short(y)}"
    return diff(_enc(a), _enc(b), "plan")


def _short(value: Any) -> str:
    if isinstance(value, dict) and "expr" in value:
        return repr(_dec_expr(value["expr"]).sql())
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


# -- printing -----------------------------------------------------------------------------------
def explain(plan: Node) -> str:
    """One line per node, inputs indented below it; expressions in sqlglot's SQL."""
    lines: list[str] = []

    def walk(node: Node, depth: int) -> None:
        lines.append("  " * depth + describe(node))
        for i in inputs(node):
            walk(i, depth + 1)
    walk(plan, 0)
    return "\n".join(lines)


def describe(node: Node) -> str:
    """One node in one line (without its inputs), as :func:`explain` prints it."""
    if isinstance(node, Source):
        cols = ", ".join(out if out == src else f"{out} := {src}" for out, src in node.columns)
        return f"Source {node.table} [{cols}]"
    if isinstance(node, Filter):
        return f"Filter {node.predicate.sql()}"
    if isinstance(node, Project):
        return "Project " + ", ".join(_assign(e, name) for e, name in node.exprs)
    if isinstance(node, Window):
        return f"Window {node.time} size {node.size_us}us slide {node.slide_us}us -> {node.start}, {node.end}"
    if isinstance(node, Union):
        return "Union all"
    if isinstance(node, Join):
        on = " AND ".join(f"{a.sql()} = {b.sql()}" for a, b in zip(node.left_keys, node.right_keys)) or "(cross)"
        residual = f" residual {node.residual.sql()}" if node.residual is not None else ""
        shared = "".join(f" {side} from index o{i}" for side, i in zip(("left", "right"), node.shared) if i is not None)
        if any(node.lookup):  # a delta join's probe
            index = node.shared[1]
            return (f"Probe #{node.node_id} on {on}: the left's delta probes index o{index}"
                    + (" as of before the epoch" if node.lookup[1] == "old" else " with the epoch's delta"))
        return f"Join #{node.node_id} {node.kind} on {on}{residual}{shared}"
    if isinstance(node, Aggregate):
        calls = ", ".join(f"{c.name} := {c.func}({c.arg or ''}"
                          + (f", {c.fraction}{' desc' if c.desc else ''})" if c.fraction is not None else ")")
                          for c in node.calls)
        group = "whole input" if node.whole else f"group [{', '.join(node.group)}]"
        return (f"Aggregate #{node.node_id} {group}" + (f" calls [{calls}]" if calls else "")
                + (" append-only" if node.append_only else "") + (" partial (eager)" if node.eager else ""))
    if isinstance(node, TopN):
        order = ", ".join(f"{c}{' DESC' if d else ''}{' NULLS FIRST' if nf else ''}" for c, d, nf in node.order)
        rn = f" row_number {node.row_number}" if node.row_number else ""
        return (f"TopN #{node.node_id} partition [{', '.join(node.partition)}] order [{order}] "
                f"limit {node.limit} offset {node.offset}{rn}")
    if isinstance(node, Over):
        order = ", ".join(f"{c}{' DESC' if d else ''}{' NULLS FIRST' if nf else ''}" for c, d, nf in node.order)
        calls = ", ".join(f"{c.name} := {_call(c)}" for c in node.calls)
        return f"Over #{node.node_id} partition [{', '.join(node.partition)}] order [{order}] calls [{calls}]"
    if isinstance(node, Arrange):
        return f"Arrange #{node.node_id} by [{', '.join(node.keys)}]"
    return f"Materialize #{node.node_id}"


def _call(c: OverCall) -> str:
    if c.func in ("lag", "lead"):
        return f"{c.func}({c.arg}, {c.offset}{', ' + c.default if c.default else ''})"
    text = f"{c.func}({c.arg or ''})"
    if c.frame is None:
        return text

    def bound(b: int | None, unbounded: str) -> str:
        if b is None:
            return unbounded
        if b == 0:
            return "current row"
        return f"{abs(b)} {'preceding' if b < 0 else 'following'}"
    start, end = bound(c.frame.start, "unbounded preceding"), bound(c.frame.end, "unbounded following")
    return f"{text} {c.frame.kind} {start}..{end}"


def _assign(e: exp.Expression, name: str) -> str:
    text = e.sql()
    return text if isinstance(e, exp.Column) and e.name == name else f"{name} := {text}"

"""Incremental plans: frozen descriptions of a view's dataflow over changelogs.

Every node's output is a changelog (a Z-set): its columns plus the weight ``_w``. Stateless
nodes (``Filter``, ``Project``, ``Window``, ``Union``) become Spark expressions; stateful nodes
(``Join``, ``Aggregate``, ``TopN``, ``Materialize``) run as ``mapInArrow`` tasks after an exchange
on their key and own state tables named ``o<object id>.n<node id>.<part>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from typing import Union as Union_

__all__ = ["Source", "Filter", "Project", "Window", "Union", "Join", "AggCall", "Aggregate", "TopN", "Materialize",
           "Node", "state_id", "sources"]


@dataclass(frozen=True)
class Source:
    """A table's changelog for the epoch's range; ``columns`` maps output name -> table column."""

    table: str
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Filter:
    input: "Node"
    predicate: str  # Spark SQL boolean expression over the input's columns


@dataclass(frozen=True)
class Project:
    input: "Node"
    exprs: tuple[tuple[str, str], ...]  # (Spark SQL expression, output name)


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
    """Equi-join; keys are Spark SQL expressions over each side's columns (no keys: a cross join
    on one partition). ``residual`` (DuckDB SQL over both sides' columns) is the rest of an outer
    join's ON condition; an inner join's extra conditions are a Filter above it instead."""

    left: "Node"
    right: "Node"
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    node_id: int
    kind: JoinKind = "inner"
    residual: str | None = None


AggFunc = Literal["count_star", "count", "sum", "min", "max", "count_distinct", "sum_distinct"]


@dataclass(frozen=True)
class AggCall:
    func: AggFunc
    arg: str | None  # an input column name (None for count_star)
    name: str  # output column name


@dataclass(frozen=True)
class Aggregate:
    """GROUP BY ``group``; with no GROUP BY at all (``whole``) there is exactly one output row,
    also over empty input (COUNT 0, SUM NULL), as in PostgreSQL."""

    input: "Node"
    group: tuple[str, ...]  # input column names
    calls: tuple[AggCall, ...]
    node_id: int
    whole: bool = False


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
class Materialize:
    """Keeps the rows of a view (or table) as a multiset keyed by all of its columns."""

    input: "Node"
    node_id: int


Node = Union_[Source, Filter, Project, Window, Union, Join, Aggregate, TopN, Materialize]


def state_id(object_id: int, node_id: int, part: str) -> str:
    return f"o{object_id}.n{node_id}.{part}"


def sources(node: Node) -> list[Source]:
    if isinstance(node, Source):
        return [node]
    if isinstance(node, Join):
        return sources(node.left) + sources(node.right)
    if isinstance(node, Union):
        return [s for i in node.inputs for s in sources(i)]
    return sources(node.input)

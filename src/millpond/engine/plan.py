"""Incremental plans: frozen descriptions of a view's dataflow over changelogs.

Every node's output is a changelog (a Z-set): its columns plus the weight ``_w``. Stateless
nodes (``Filter``, ``Project``) become Spark expressions; stateful nodes (``Join``,
``Aggregate``, ``Materialize``) run as ``mapInArrow`` tasks after an exchange on their key and
own state tables named ``o<object id>.n<node id>.<part>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

__all__ = ["Source", "Filter", "Project", "Join", "AggCall", "Aggregate", "Materialize", "Node", "state_id"]


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
class Join:
    """Inner equi-join; keys are Spark SQL expressions over each side's columns."""

    left: "Node"
    right: "Node"
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    node_id: int


AggFunc = Literal["count_star", "count", "sum", "min", "max"]


@dataclass(frozen=True)
class AggCall:
    func: AggFunc
    arg: str | None  # an input column name (None for count_star)
    name: str  # output column name


@dataclass(frozen=True)
class Aggregate:
    input: "Node"
    group: tuple[str, ...]  # input column names
    calls: tuple[AggCall, ...]
    node_id: int


@dataclass(frozen=True)
class Materialize:
    """Keeps the rows of a view (or table) as a multiset keyed by all of its columns."""

    input: "Node"
    node_id: int


Node = Union[Source, Filter, Project, Join, Aggregate, Materialize]


def state_id(object_id: int, node_id: int, part: str) -> str:
    return f"o{object_id}.n{node_id}.{part}"


def sources(node: Node) -> list[Source]:
    if isinstance(node, Source):
        return [node]
    if isinstance(node, Join):
        return sources(node.left) + sources(node.right)
    return sources(node.input)

"""EXPLAIN of an incremental plan: the operators, where rows are exchanged, and the state tables
every stateful operator keeps, with their ids and keys.

    >>> print("\\n".join(explain(plan, object_id=7)))                      # doctest: +SKIP
    view plan: 2 stateful operators, 2 exchanges, 3 state tables (vnodes: 256)
    Materialize #4
      state o7.n4.rows  key [category, n]  multiset  read by key [category]
      exchange  none: rows stay in the tasks of Aggregate #3
      Aggregate #3 group [category] calls [n := count_star()]
        state o7.n3.groups  key [category]
        exchange  hash [category] -> 256 vnodes (the epoch's delta consolidated per key first)
        Project category := info__category
          Source info [info__category := category, ...]

Stateless nodes (Source, Filter, Project, Window, Union) are evaluated as Spark expressions in
the JVM; each stateful node runs after an exchange on its key, in tasks that read its state at the
last committed epoch and write this epoch's delta (the epoch protocol,
:mod:`millpond.engine.coordinator`). The state ids and keys printed are those of the operators that
run (:meth:`millpond.engine.operators.Operator.parts`).
"""

from __future__ import annotations

from millpond.engine import plan as P
from millpond.engine.operators import HashAggregate, HashJoin, Materialize, Operator, Over, TopN
from millpond.engine.operators.aggregate import VALUE_FUNCS, value_col
from millpond.store.sst import VNODES

__all__ = ["explain", "columns"]


def explain(plan: P.Materialize, *, object_id: int, name: str = "view") -> list[str]:
    """The lines of ``plan``'s EXPLAIN; state ids as they are (or will be) for ``object_id``."""
    lines: list[str] = []
    counts = {"stateful": 0, "exchanges": 0, "states": 0}

    def walk(node: P.Node, depth: int) -> None:
        pad = "  " * depth
        lines.append(pad + P.describe(node))
        op = _operator(node, name)
        if op is not None:
            counts["stateful"] += 1
            for part, spec in op.parts().items():
                index = dict(zip(("left", "right"), node.shared)).get(part) if isinstance(node, P.Join) else None
                if isinstance(node, P.Join) and dict(zip(("left", "right"), node.lookup)).get(part) == "stream":
                    lines.append(f"{pad}  state none  ({part} side: the epoch's delta, kept nowhere)")
                    continue
                if index is not None:  # read from an index's rows, kept once by the index (sql/indexes.py)
                    lines.append(f"{pad}  state o{index}.n1.rows  (the index's: {part} side, shared)")
                    continue
                counts["states"] += 1
                keys = ", ".join(_annotate(node, k) for k in spec.keys)
                lines.append(f"{pad}  state {P.state_id(object_id, node.node_id, part)}  key [{keys}]"
                             + ("  multiset" if spec.additive else "")
                             + (f"  read by key [{', '.join(node.key)}]" if isinstance(node, P.Materialize)
                                and node.key else ""))
            exchange = _exchange(node)
            if not exchange.startswith("none"):
                counts["exchanges"] += 1
            lines.append(f"{pad}  exchange  {exchange}")
        for child in P.inputs(node):
            walk(child, depth + 1)

    walk(plan, 0)
    head = (f"{name} plan: {counts['stateful']} stateful operator{'s' * (counts['stateful'] != 1)}, "
            f"{counts['exchanges']} exchange{'s' * (counts['exchanges'] != 1)}, "
            f"{counts['states']} state table{'s' * (counts['states'] != 1)} (vnodes: {VNODES})")
    return [head, *lines]


def columns(node: P.Node) -> list[str]:
    """The output columns of ``node`` (without the weight)."""
    if isinstance(node, P.Source):
        return [out for out, _ in node.columns]
    if isinstance(node, P.Project):
        return [name for _, name in node.exprs]
    if isinstance(node, P.Window):
        return [*columns(node.input), node.start, node.end]
    if isinstance(node, P.Union):
        return columns(node.inputs[0])
    if isinstance(node, P.Join):
        return [*columns(node.left), *columns(node.right)]
    if isinstance(node, P.Aggregate):
        return [*node.group, *(c.name for c in node.calls)]
    if isinstance(node, P.TopN):
        return [*columns(node.input), *([node.row_number] if node.row_number else [])]
    if isinstance(node, P.Over):
        return [*columns(node.input), *(c.name for c in node.calls)]
    return columns(node.input)  # Filter, Materialize


def _operator(node: P.Node, name: str) -> Operator | None:
    """The operator a stateful node runs (as the executor builds it), for its state parts."""
    label = f"{name}#{getattr(node, 'node_id', '')}"
    if isinstance(node, P.Join):
        keys = tuple(f"_k{i}" for i in range(len(node.left_keys)))
        return HashJoin(keys, tuple(columns(node.left)), tuple(columns(node.right)), name=label, kind=node.kind)
    if isinstance(node, P.Aggregate):
        return HashAggregate(node.group, node.calls, name=label, whole=node.whole, append_only=node.append_only)
    if isinstance(node, P.TopN):
        return TopN(tuple(columns(node.input)), node.partition, node.order, node.limit, node.offset,
                    node.row_number, name=label)
    if isinstance(node, P.Over):
        return Over(tuple(columns(node.input)), node.partition, node.order, node.calls, name=label)
    if isinstance(node, P.Materialize):
        return Materialize(tuple(columns(node.input)), name=name)
    return None


def _annotate(node: P.Node, key: str) -> str:
    """A state key column, with what it holds when the name is internal (``_k0``, ``_m1``)."""
    if isinstance(node, P.Join) and key.startswith("_k") and key[2:].isdigit():
        i = int(key[2:])
        return f"{key} = {node.left_keys[i].sql()} / {node.right_keys[i].sql()}"
    if isinstance(node, P.Aggregate):
        for i, call in enumerate(node.calls):
            if call.func in VALUE_FUNCS and key == value_col(i):
                return f"{key} = {call.func}({call.arg})"
    return key


def _exchange(node: P.Node) -> str:
    """How rows reach a stateful node's tasks (as :mod:`millpond.spark.build` exchanges them)."""
    if isinstance(node, P.Join):
        if not node.left_keys:
            return "single partition (no equality to hash on: a cross join)"
        on = ", ".join(f"{a.sql()} / {b.sql()}" for a, b in zip(node.left_keys, node.right_keys))
        return f"hash [{on}] -> {VNODES} vnodes (both sides)"
    if isinstance(node, P.Aggregate):
        if not node.group:
            return "single partition (one group: the whole input)"
        return f"hash [{', '.join(node.group)}] -> {VNODES} vnodes (the epoch's delta consolidated per key first)"
    if isinstance(node, P.TopN):
        if not node.partition:
            return "single partition (one ranking over all rows)"
        return f"hash [{', '.join(node.partition)}] -> {VNODES} vnodes"
    if isinstance(node, P.Over):
        if not node.partition:
            return "single partition (one window over all rows)"
        return f"hash [{', '.join(node.partition)}] -> {VNODES} vnodes (each touched partition recomputed)"
    below = P.keyed_by(node.input)
    if below is not None:
        return f"none: rows stay in the tasks of {type(below).__name__} #{below.node_id}"
    if isinstance(node, P.Materialize) and node.key:
        return f"hash [{', '.join(node.key)}] -> {VNODES} vnodes"
    return f"hash [all columns] -> {VNODES} vnodes"

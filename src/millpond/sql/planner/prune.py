"""Column pruning: each node of a plan keeps only the columns the nodes above it use.

A join keeps its sides' rows as state and an exchange carries them: without this pass, every
column of every joined table — comments, addresses, names no expression reads — was carried
through every join of a view and written into each join's state (TPC-H's Q7 kept all 16 of
``lineitem``'s columns, where it reads five). As PostgreSQL's planner only ever fetches the
columns a query references, a source here lists only the columns read above it: by a
projection's kept expressions, a filter's predicate, a join's keys and residual condition, an
aggregate's groups and arguments, or the view's output.

Top-N and window functions break ties by every column of their input (their answer is
deterministic), so their inputs keep every column; so do a union's inputs (their columns must
match) and a materialization. A source keeps at least one column, so a join side is never a
relation of no columns.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from millpond.engine import plan as P
from millpond.engine.explain import columns

__all__ = ["prune"]


def prune(node: P.Node, need: frozenset[str] | None = None) -> P.Node:
    """``node`` whose every input makes only the columns used above it (``need``, None: all)."""
    if isinstance(node, P.Source):
        if need is None:
            return node
        kept = tuple((out, src) for out, src in node.columns if out in need)
        return dataclasses.replace(node, columns=kept or node.columns[:1])
    if isinstance(node, P.Filter):
        return dataclasses.replace(node, input=prune(node.input, _with(need, _refs(node.predicate))))
    if isinstance(node, P.Project):
        exprs = node.exprs
        if need is not None and not any(e.find(exp.Explode, exp.Star) for e, _ in exprs):  # unnest multiplies rows
            exprs = tuple((e, name) for e, name in exprs if name in need) or exprs[:1]
        if any(e.find(exp.Star) for e, _ in exprs):
            return dataclasses.replace(node, input=prune(node.input, None))
        used = frozenset(c for e, _ in exprs for c in _refs(e))
        return dataclasses.replace(node, exprs=exprs, input=prune(node.input, used))
    if isinstance(node, P.Window):
        below = None if need is None else (need - {node.start, node.end}) | {node.time}
        return dataclasses.replace(node, input=prune(node.input, below))
    if isinstance(node, P.Join):
        if need is None:
            return dataclasses.replace(node, left=prune(node.left, None), right=prune(node.right, None))
        residual = _refs(node.residual) if node.residual is not None else frozenset()
        sides = []
        for side, keys in ((node.left, node.left_keys), (node.right, node.right_keys)):
            used = frozenset(columns(side)) & (need | residual)
            sides.append(prune(side, used | frozenset(c for k in keys for c in _refs(k))))
        return dataclasses.replace(node, left=sides[0], right=sides[1])
    if isinstance(node, P.Aggregate):
        used = frozenset(node.group) | {c.arg for c in node.calls if c.arg}
        return dataclasses.replace(node, input=prune(node.input, used))
    if isinstance(node, P.Union):
        return dataclasses.replace(node, inputs=tuple(prune(i, None) for i in node.inputs))
    return dataclasses.replace(node, input=prune(node.input, None))  # TopN, Over, Materialize, Arrange


def _refs(e: exp.Expression) -> frozenset[str]:
    return frozenset(c.name for c in e.find_all(exp.Column))


def _with(need: frozenset[str] | None, more: frozenset[str]) -> frozenset[str] | None:
    return None if need is None else need | more

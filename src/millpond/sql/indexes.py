"""Indexes: ``CREATE INDEX``, ``DROP INDEX``, and the planner's choice of an index for a join side.

An index is a table's rows arranged by some of its columns, kept once by its own consumer
(:class:`~millpond.engine.plan.Arrange`) in the format of a hash join's side state (seed 002's
shared arrangements). A view created while an index exists reads it for every join side that is
the index's table joined on exactly the index's columns (in any order: the join's keys are put in
the index's order), instead of keeping that side's rows itself: ten views joining one table keep
one copy of it. The choice is made once, at ``CREATE MATERIALIZED VIEW``, and stored in the view's
plan (:attr:`~millpond.engine.plan.Join.shared`); the view then depends on the index, which cannot
be dropped while it does. A side may be a subquery or CTE that only selects and renames the
table's columns; its filters are applied after the join instead where the same rows come out (an
inner join's sides, an outer join's preserved side), and the side is then the table's rows. Not
chosen: a side that computes before the join, an outer join's padded side that filters first
(the filter decides which rows are padded), a table the view reads twice, and keys whose type
differs from the other side's (the hashes would not meet: :class:`~millpond.errors.IndexMismatch`).

*Delta joins*: an inner join of three tables whose inputs indexes serve keeps no intermediate
state: each input's delta probes the others' indexes (:func:`_delta_joins`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Iterable

import pyarrow as pa
from sqlglot import exp

from millpond.catalog import Catalog, IndexDef
from millpond.engine import plan as P
from millpond.engine.executor import EpochExecutor
from millpond.engine.explain import columns as plan_columns
from millpond.errors import IndexMismatch

__all__ = ["share", "choose"]


def choose(plan: P.Materialize, catalog: Catalog, executor: EpochExecutor, skip: frozenset[int] = frozenset()
           ) -> tuple[P.Materialize, pa.Schema, tuple[str, ...]]:
    """``plan`` reading the indexes that can serve its joins (:func:`share`; not those in ``skip``),
    its output schema (the executor's analysis, which refuses an index whose key types differ: it
    is then left out), and the names of the indexes it reads."""
    while True:
        shared, names = share(plan, catalog, skip)
        try:
            return shared, executor.output_schema(shared, catalog.tables,
                                                  {v.name: v.schema for v in catalog.views.values()}), names
        except IndexMismatch as exc:
            skip |= {exc.index}


def share(plan: P.Materialize, catalog: Catalog, skip: frozenset[int] = frozenset(),
          only: frozenset[int] | None = None) -> tuple[P.Materialize, tuple[str, ...]]:
    """``plan`` with each join side that can read an index reading it (indexes whose id is in
    ``skip`` excepted; with ``only``, those indexes alone: a stored plan's, to derive it again);
    and the names of the indexes it reads."""
    reads = Counter(s.table for s in P.sources(plan))
    used: list[str] = []

    def walk(node: P.Node) -> P.Node:
        if isinstance(node, P.Source):
            return node
        if isinstance(node, P.Join):
            node = dataclasses.replace(node, left=walk(node.left), right=walk(node.right))
            lifted: list[exp.Expression] = []
            for side in (0, 1):
                node = _side(node, side, lifted)
            for predicate in lifted:
                node = P.Filter(node, predicate)
            return node
        if isinstance(node, P.Union):
            return dataclasses.replace(node, inputs=tuple(walk(i) for i in node.inputs))
        return dataclasses.replace(node, input=walk(node.input))

    def _side(node: P.Join, side: int, lifted: list[exp.Expression]) -> P.Join:
        """``node`` with side ``side`` reading an index if one serves it. Filters on that side
        move above the join where that keeps its meaning, so the side is the table's rows."""
        top, keys = (node.left, node.left_keys) if side == 0 else (node.right, node.right_keys)
        # a filter on a side whose every row is kept (both of an inner join, the preserved side of
        # an outer one) commutes with the join; on a padded side it decides which rows are padded
        lift = node.kind == "inner" or (node.kind, side) in (("left", 0), ("right", 1))
        flat = _flatten(top, lift=lift)
        if flat is None or not keys or reads[flat[0].table] != 1:
            return node
        below, predicates = flat
        srcs = dict(below.columns)
        if len(set(srcs.values())) != len(srcs) or not all(isinstance(k, exp.Column) and k.name in srcs for k in keys):
            return node
        names = [srcs[k.name] for k in keys]
        for index in sorted(catalog.indexes.values(), key=lambda i: i.name):
            if index.table != below.table or index.id in skip or (only is not None and index.id not in only) \
                    or len(set(names)) != len(names) \
                    or sorted(index.columns) != sorted(names) or not _holds(catalog, index, srcs.values()):
                continue
            order = [names.index(c) for c in index.columns]  # the join's keys in the index's order
            shared = (index.id, node.shared[1]) if side == 0 else (node.shared[0], index.id)
            used.append(index.name)
            lifted.extend(predicates)
            return dataclasses.replace(node, left=below if side == 0 else node.left,
                                       right=below if side == 1 else node.right,
                                       left_keys=tuple(node.left_keys[i] for i in order),
                                       right_keys=tuple(node.right_keys[i] for i in order), shared=shared)
        return node

    out = walk(plan)
    assert isinstance(out, P.Materialize)
    out = _delta_joins(out, catalog, skip, only, used)
    return out, tuple(dict.fromkeys(used))


def _delta_joins(plan: P.Materialize, catalog: Catalog, skip: frozenset[int], only: frozenset[int] | None,
                 used: list[str]) -> P.Materialize:
    """``plan`` with each inner join of three tables that indexes serve as a *delta join* (seed
    002; Materialize's): ``(A ⋈ B) ⋈ C`` where both sides of ``A ⋈ B`` and ``C`` read indexes, and the
    table of ``A``/``B`` whose columns ``C`` is joined on has an index on those columns too. Its
    change in an epoch is the sum of one term per input, each that input's delta probing the other
    inputs' indexes in turn — ``dA ⋈ B ⋈ C`` + ``A' ⋈ dB ⋈ C`` + ``A' ⋈ B' ⋈ dC``, where an input before
    the delta's in that order is read as of after the epoch (its index plus its delta: ``'``) and
    one after it as of before — so no intermediate ``A ⋈ B`` is kept anywhere, and nothing at all
    but the indexes. Filters between the joins move above (they commute with inner joins)."""
    ids = [max((n.node_id for n in _nodes(plan) if hasattr(n, "node_id")), default=0)]

    def new_id() -> int:
        ids[0] += 1
        return ids[0]

    def usable(table: str, columns: list[str], reads: Iterable[str]):  # noqa: ANN202
        for index in sorted(catalog.indexes.values(), key=lambda i: i.name):
            if index.table == table and index.id not in skip and (only is None or index.id in only) \
                    and sorted(index.columns) == sorted(columns) and len(set(columns)) == len(columns) \
                    and _holds(catalog, index, reads):
                return index
        return None

    def probe(stream: P.Node, stream_keys: tuple, side: P.Source, side_keys: tuple, index, mode: str) -> P.Join:  # noqa: ANN001
        names = [dict(side.columns)[k.name] for k in side_keys]
        order = [names.index(c) for c in index.columns]  # the keys in the index's order
        return P.Join(stream, side, tuple(stream_keys[i] for i in order), tuple(side_keys[i] for i in order),
                      new_id(), "inner", shared=(None, index.id), lookup=("stream", mode))

    def rewrite(j2: P.Join) -> P.Node | None:
        if j2.kind != "inner" or any(j2.lookup) or j2.residual is not None:
            return None
        for m in (0, 1):  # the side of j2 that is the join of two tables
            mid, c, mid_keys, c_keys, ic = (j2.left, j2.right, j2.left_keys, j2.right_keys, j2.shared[1]) if m == 0 \
                else (j2.right, j2.left, j2.right_keys, j2.left_keys, j2.shared[0])
            filters = []
            while isinstance(mid, P.Filter):
                filters.insert(0, mid.predicate)
                mid = mid.input
            if ic is None or not isinstance(c, P.Source) or not isinstance(mid, P.Join) or mid.kind != "inner" \
                    or None in mid.shared or any(mid.lookup) or mid.residual is not None or not mid_keys \
                    or not all(isinstance(k, exp.Column) and not k.table for k in (*mid_keys, *c_keys)):
                continue
            a, b = mid.left, mid.right
            assert isinstance(a, P.Source) and isinstance(b, P.Source)
            index = {i.id: i for i in catalog.indexes.values()}
            ia, ib, ic_ = index[mid.shared[0]], index[mid.shared[1]], index[ic]
            for x, y, x_keys, y_keys, iy in ((b, a, mid.right_keys, mid.left_keys, ia),
                                             (a, b, mid.left_keys, mid.right_keys, ib)):
                cols = dict(x.columns)
                if not all(k.name in cols for k in mid_keys):
                    continue
                ix = usable(x.table, [cols[k.name] for k in mid_keys], cols.values())
                if ix is None:
                    continue
                terms = [
                    probe(probe(a, mid.left_keys, b, mid.right_keys, ib, "old"), mid_keys, c, c_keys, ic_, "old"),
                    probe(probe(b, mid.right_keys, a, mid.left_keys, ia, "new"), mid_keys, c, c_keys, ic_, "old"),
                    probe(probe(c, c_keys, x, mid_keys, ix, "new"), x_keys, y, y_keys, iy, "new"),
                ]
                order = _cols(j2.left) + _cols(j2.right)
                out: P.Node = P.Union(tuple(P.Project(t, tuple((exp.column(n, quoted=True), n) for n in order))
                                            for t in terms))
                for predicate in filters:
                    out = P.Filter(out, predicate)
                used.extend([ix.name])
                return out
        return None

    def walk(node: P.Node) -> P.Node:
        if isinstance(node, P.Source):
            return node
        if isinstance(node, P.Join):
            node = dataclasses.replace(node, left=walk(node.left), right=walk(node.right))
            return rewrite(node) or node
        if isinstance(node, P.Union):
            return dataclasses.replace(node, inputs=tuple(walk(i) for i in node.inputs))
        return dataclasses.replace(node, input=walk(node.input))

    out = walk(plan)
    assert isinstance(out, P.Materialize)
    return out


def _holds(catalog: Catalog, index: IndexDef, columns: Iterable[str]) -> bool:
    """Whether ``index`` keeps the table's ``columns``: not one added to the table after it (its rows
    are the table's as the index was created: :func:`~millpond.engine.consumers.index_plan`)."""
    return not {c.name for c in catalog.tables[index.table].columns if c.added > index.id} & set(columns)


def _nodes(node: P.Node) -> list[P.Node]:
    return [node, *(n for i in P.inputs(node) for n in _nodes(i))]


def _cols(node: P.Node) -> list[str]:
    return list(plan_columns(node))


def _flatten(node: P.Node, *, lift: bool) -> tuple[P.Source, list[exp.Expression]] | None:
    """A join side as the table it reads, when it is one: a :class:`~millpond.engine.plan.Source`
    under projections that only rename or drop columns (a subquery's or CTE's ``SELECT a, b``) and,
    if ``lift``, filters — as a Source with the side's own column names, and the filters over those
    names (bottom first); a column a filter reads that the side drops is one more of the Source's
    (named as below the projections). None when the side computes anything."""
    names = {c: c for c in _columns(node)}  # this level's name -> the side's name
    predicates: list[exp.Expression] = []
    while not isinstance(node, P.Source):
        if isinstance(node, P.Project) and all(isinstance(e, exp.Column) and not e.table for e, _ in node.exprs):
            below: dict[str, str] = {}
            for e, out in node.exprs:
                if out in names:
                    below.setdefault(e.name, names[out])
            names = below
        elif isinstance(node, P.Filter) and lift:
            cols = {c.name for c in node.predicate.find_all(exp.Column)}
            if any(c.table for c in node.predicate.find_all(exp.Column)) or set(names.values()) & (cols - set(names)):
                return None
            names.update({c: c for c in cols - set(names)})  # a column the side drops: the side keeps it
            predicates.insert(0, node.predicate.transform(
                lambda n: exp.column(names[n.name], quoted=True) if isinstance(n, exp.Column) else n))
        else:
            return None
        node = node.input
    return P.Source(node.table, tuple((names[out], src) for out, src in node.columns if out in names)), predicates


def _columns(node: P.Node) -> list[str]:
    """Output columns of a side made of projections and filters over a Source."""
    while isinstance(node, P.Filter):
        node = node.input
    if isinstance(node, P.Project):
        return [out for _, out in node.exprs]
    return [out for out, _ in node.columns] if isinstance(node, P.Source) else []

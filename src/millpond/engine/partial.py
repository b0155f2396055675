"""Partial views (seed 002's *partial state*, after Noria): a view that keeps state only for the
keys that were read, filled by *upqueries* and evicted under a budget.

**The partial key** is one of the view's output columns that is a column ``c`` of one table ``T``,
passed through unchanged (:func:`trace`): through projections and filters, as a group key of
every aggregation, a partition column of every ``ORDER BY … LIMIT`` / window function, from the
side of each join that the join never pads with NULLs. Then a row of the view with ``key = x``
is made only of rows of ``T`` with ``c = x`` (and any rows of the other inputs): the view
restricted to the keys in a set ``F`` is the same plan over ``T`` restricted to ``F``.

**How an epoch runs one** (step 1 and 3 of the epoch protocol, :mod:`millpond.engine.coordinator`).
The view's *filled* keys are a state table of its own (``o<id>.n<root>.filled``: key, last read
epoch), written by the driver with the epoch, so they commit with the view's rows. In every
epoch the view's ``T`` input is:

- ``T``'s new records whose ``c`` is in the filled set after this epoch (``F' = F - E + N``);
- ``T``'s committed rows with ``c`` in ``N`` (keys filled now) as inserts, and with ``c`` in
  ``E`` (keys evicted now) as deletes — read from ``T``'s rows state at the epoch's pinned
  version, which is ``T`` as of the offset the view reads ``T``'s records from (the view and ``T``'s
  own consumer read ``T`` in lockstep: checked every epoch).

So every operator's state for a key appears when it is filled and is gone when it is evicted,
exactly, and between the two it is maintained incrementally like any view's. A join's other side
joined on the key is restricted (and filled) the same way, on its own key column; other inputs
are kept whole, as in a full view.

**Upqueries** (:meth:`millpond.engine.runtime.Runtime.fill`): a ``SELECT`` of a partial view must
name its keys (``WHERE key = …`` or ``key IN (…)``); keys not filled yet make the runtime run an
epoch that fills them first. **Eviction**: when the filled keys exceed the view's ``max_keys``,
the least recently read ones are evicted by the same epoch.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from millpond.catalog import Catalog, TableDef
from millpond.columns import DEL, KH
from millpond.errors import InvariantError
from millpond.engine import plan as P
from millpond.engine.epoch import EpochPlan, EpochReport, EpochStep
from millpond.engine.explain import columns
from millpond.store.manifest import Manifest
from millpond.store.objects import ObjectStore
from millpond.store.state_table import StateTable

if TYPE_CHECKING:
    from millpond.engine.consumers import Consumer

__all__ = ["PartialKey", "PartialStep", "NotPartial", "Wanted", "trace", "filled_state", "read_filled", "step",
           "plan_partial", "filled_rows", "missing", "describe", "DEFAULT_MAX_KEYS", "KEY", "READ"]

DEFAULT_MAX_KEYS = 10_000
KEY, READ = "key", "read"  # the filled state's columns: a filled key, the epoch it was last read in


class NotPartial(Exception):
    """Why a view cannot be partial by the column asked (the construct that mixes keys)."""


@dataclass(frozen=True)
class PartialKey:
    """A partial view's key: its output ``column``; the plan's source nodes (those very node
    objects) read by it, with the table column each is filtered on — the first is the column the
    key is, the others are joined to it by equality (:func:`trace`); ``max_keys``: its budget."""

    column: str
    sources: tuple[tuple[P.Source, str], ...]
    max_keys: int

    @property
    def table(self) -> str:
        return self.sources[0][0].table

    @property
    def source_column(self) -> str:
        return self.sources[0][1]

    def key_type(self, tables: Mapping[str, TableDef]) -> pa.DataType:
        """The Arrow type of the key's values (its table column's)."""
        return tables[self.table].schema.field(self.source_column).type


@dataclass(frozen=True)
class PartialStep:
    """What one epoch does to a partial view's keys: read each source table's rows (from its
    consumer, ``table_keys`` by table name) for the keys in ``fill`` (as inserts) and ``evict`` (as
    deletes), and its records of keys in ``filled`` (the filled set after the epoch)."""

    table_keys: dict[str, str]
    filled: pa.Array
    fill: pa.Array
    evict: pa.Array


class Wanted(EpochStep):
    """The keys read from each partial view since it last ran (consumer key -> keys): the next epoch
    fills those it does not hold (step 1); a view that ran has filled them (step 7)."""

    def __init__(self) -> None:
        self.keys: dict[str, pa.Array] = {}

    def add(self, key: str, keys: pa.Array) -> None:
        before = self.keys.get(key)
        self.keys[key] = keys if before is None else pa.concat_arrays([before, keys])

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        for c, _ in plan.work:
            if c.name in report.rows_in:
                self.keys.pop(c.key, None)
        return report


def trace(plan: P.Materialize, column: str) -> tuple[tuple[P.Source, str], ...]:
    """The source node and table column the view's output ``column`` is, if every row of the view
    with a value of it is made only of that table's rows with the same value (module docstring);
    else :class:`NotPartial` naming what mixes them. Then the other source nodes (and columns) that
    can be restricted to the same keys: a join's other side, when the column is its join key, to
    its own key column (a row of it with another key joins no row of the view's keys)."""
    node, col, also = plan.input, column, []
    while True:
        if isinstance(node, P.Source):
            return ((node, dict(node.columns)[col]), *also)
        if isinstance(node, P.Filter):
            node = node.input
        elif isinstance(node, P.Project):
            e = {name: e for e, name in node.exprs}[col]
            if not (isinstance(e, exp.Column) and not e.table):
                raise NotPartial(f"it is computed ({e.sql('postgres')}), not a column of a table")
            node, col = node.input, e.name
        elif isinstance(node, P.Window):
            if col in (node.start, node.end):
                raise NotPartial("it is a window's bound, not a column of a table")
            node = node.input
        elif isinstance(node, P.Aggregate):
            if col not in node.group:
                raise NotPartial("it is an aggregate, not a group key") if not node.whole else \
                    NotPartial("the view aggregates all rows into one (no GROUP BY)")
            node = node.input
        elif isinstance(node, (P.TopN, P.Over)):
            if isinstance(node, P.Over) and col in {c.name for c in node.calls}:
                raise NotPartial("it is a window function's result")
            if col not in node.partition and not any(_origin(node.input, p) == _origin(node.input, col) is not None
                                                     for p in node.partition):
                what = "ORDER BY … LIMIT" if isinstance(node, P.TopN) else "a window function"
                raise NotPartial(f"{what} reads rows of every key (its PARTITION BY does not include it)")
            if isinstance(node, P.TopN) and col == node.row_number:
                raise NotPartial("it is a row number")
            node = node.input
        elif isinstance(node, P.Join):
            left = col in columns(node.left)
            if node.kind == "full" or node.kind == ("right" if left else "left"):
                raise NotPartial(f"a {node.kind.upper()} JOIN pads it with NULLs for rows of the other side")
            mine, theirs = (node.left_keys, node.right_keys) if left else (node.right_keys, node.left_keys)
            for a, b in zip(mine, theirs):
                if _bare(a) == col and _bare(b) is not None:
                    with contextlib.suppress(NotPartial):
                        also.extend(trace(P.Materialize(node.right if left else node.left, node_id=0), _bare(b)))
                    break
            node = node.left if left else node.right
        elif isinstance(node, P.Union):
            raise NotPartial("UNION ALL reads it from several inputs")
        else:
            raise NotPartial(f"{type(node).__name__} is not supported in a partial view")


def _origin(node: P.Node, col: str) -> tuple[int, str] | None:
    """The source node (by identity) and table column that ``col`` of ``node`` passes through
    from unchanged, or None."""
    try:
        source, column = trace(P.Materialize(node, node_id=0), col)[0]
    except NotPartial:
        return None
    return id(source), column


def _bare(e: exp.Expression) -> str | None:
    """The column ``e`` is, if it is one."""
    return e.name if isinstance(e, exp.Column) and not e.table else None


def filled_state(object_id: int, plan: P.Materialize) -> str:
    return P.state_id(object_id, plan.node_id, "filled")


def read_filled(store: ObjectStore, manifest: Manifest, object_id: int, plan: P.Materialize
                ) -> pl.DataFrame | None:
    """The filled keys of a partial view in ``manifest`` (columns ``key``, ``read``), or None."""
    sid = filled_state(object_id, plan)
    found = StateTable(store, manifest.state(sid), (KEY,), name=sid).scan()
    return None if found is None or found.height == 0 else found.select(KEY, READ)


def step(filled: pl.DataFrame | None, wanted: pa.Array | None, max_keys: int, epoch: int, key_type: pa.DataType
         ) -> tuple[pa.Array, pa.Array, pa.Array, pl.DataFrame]:
    """One epoch's keys: (filled after it, to fill, to evict, the filled state's writes). Keys in
    ``wanted`` (read since the last epoch) are filled if they are not, and marked read now; then
    the least recently read keys not wanted are evicted down to ``max_keys`` (never a wanted one)."""
    old = pl.DataFrame({KEY: pa.array([], key_type), READ: pa.array([], pa.int64())}) if filled is None \
        else pl.from_arrow(pa.table({KEY: filled[KEY].to_arrow().cast(key_type), READ: filled[READ].to_arrow()}))
    want = pl.from_arrow(pa.table({KEY: (wanted if wanted is not None else pa.array([], key_type)).cast(key_type)})
                         ).unique().drop_nulls().with_columns(pl.lit(epoch, dtype=pl.Int64).alias(READ))
    fill = want.join(old, on=KEY, how="anti")
    kept = old.join(want, on=KEY, how="anti")
    over = kept.height + want.height - max_keys
    evict = kept.sort([READ, KEY]).head(max(0, over)) if over > 0 else kept.head(0)
    after = pl.concat([kept.join(evict, on=KEY, how="anti"), want])
    writes = pl.concat([want.with_columns(pl.lit(False).alias(DEL)),
                        evict.with_columns(pl.lit(True).alias(DEL))]).with_columns(pl.lit(0, dtype=pl.Int64).alias(KH))
    return after[KEY].to_arrow(), fill[KEY].to_arrow(), evict[KEY].to_arrow(), writes.select(KH, KEY, READ, DEL)


def filled_rows(found: pl.DataFrame | None, key_type: pa.DataType) -> pa.Array:
    """The filled keys of :func:`read_filled` as an array of the key's type."""
    if found is None:
        return pa.array([], key_type)
    return found[KEY].to_arrow().cast(key_type)


def missing(filled: pa.Array, keys: pa.Array) -> pa.Array:
    """The ``keys`` not in ``filled``."""
    keys = pc.unique(keys.drop_null())
    return keys.filter(pc.invert(pc.is_in(keys, filled))) if len(filled) else keys


def describe(key: PartialKey, object_id: int, plan: P.Materialize, filled: int | None = None) -> str:
    """One line on a partial view's key, for DESCRIBE and EXPLAIN."""
    held = f"{filled} of " if filled is not None else ""
    reads = ", ".join(f"{source.table}.{column}" for source, column in key.sources)
    return (f"partial by {key.column}: keeps {held}at most {key.max_keys} keys, filled when read, least recently "
            f"read evicted (state {filled_state(object_id, plan)}); reads {reads} for its keys only")


def plan_partial(store: ObjectStore, manifest: Manifest, catalog: Catalog, consumers: list[Consumer], c: Consumer,
                 ranges: Mapping[str, tuple[int, int]], wanted: pa.Array | None) -> tuple[PartialStep, pl.DataFrame]:
    """Step 1 for partial view ``c`` (the coordinator's): the keys it fills and evicts in this epoch,
    and its filled state's writes. Its table's rows at the pinned version must be the table as of
    the offset the view reads its records from: checked here."""
    key = c.partial
    assert key is not None
    tables = {}
    for source, _ in key.sources:
        t = catalog.tables[source.table]
        table = next(x for x in consumers if x.name == t.name)
        start, done = ranges[t.channel][0], manifest.offsets.get(table.key, {}).get(t.channel, 0)
        if start != done:
            raise InvariantError(f"{c.name}: reads {t.name} from offset {start}, but {t.name}'s rows are as of "
                                 f"offset {done}: its keys cannot be filled from them")
        tables[t.name] = table.key
    filled = read_filled(store, manifest, c.object_id, c.plan)
    after, fill, evict, writes = step(filled, wanted, key.max_keys, manifest.epoch + 1, key.key_type(catalog.tables))
    return PartialStep(tables, after, fill, evict), writes

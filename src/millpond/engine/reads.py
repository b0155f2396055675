"""The read side of an open root (:class:`Reads`, which :class:`~millpond.engine.runtime.Runtime`
is): a table's or view's committed rows whole (:meth:`Reads.snapshot`), streamed in slices of the
key-hash space (:meth:`Reads.reader`) or looked up by key (:meth:`Reads.rows_by_key`), and the
pinned version a reader goes by without the database's lock (:meth:`Reads.reading`)."""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Iterator, Mapping

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from millpond import duck
from millpond.catalog import Catalog, TableDef
from millpond.columns import COUNT, ROW_ID, W
from millpond.engine import plan as P
from millpond.engine.changelog import consolidate
from millpond.engine.consumers import Consumer
from millpond.engine.expressions import to_duckdb
from millpond.errors import CatalogError, InvariantError, MillpondError
from millpond.keyhash import xxhash64
from millpond.store.manifest import Manifest

if TYPE_CHECKING:
    from millpond.engine.coordinator import Coordinator
    from millpond.log import Channel

__all__ = ["Reads", "Installed", "READ_SLICE_ROWS", "consolidate_rows", "expand_rows"]

READ_SLICE_ROWS = 1_000_000  # a query reads a relation's rows state in slices of about this many rows
SAMPLE_ROWS = 20_000  # the rows a new view's join order samples of a filtered table (Reads.filter_share)


@dataclass(frozen=True)
class Installed:
    """A catalog and the consumers it runs, installed together."""

    catalog: Catalog
    consumers: list[Consumer]
    by_name: dict[str, Consumer]
    by_key: dict[str, Consumer]


class Reads:
    """Reads of committed rows; the runtime provides the catalog it installed (``_installed``),
    the coordinator, the tables' channels and the system views."""

    coordinator: "Coordinator"
    _installed: Installed
    _local: threading.local

    def channel(self, table: TableDef) -> "Channel":
        raise NotImplementedError

    def describe_failure(self, failure: dict) -> str:
        raise NotImplementedError

    def _system(self, name: str) -> Callable[[], pa.Table] | None:
        """A system view's reader (None: ``name`` is not one)."""
        return None

    @property
    def catalog(self) -> Catalog:
        return self._view().catalog

    @property
    def consumers(self) -> list[Consumer]:
        return self._view().consumers

    @property
    def _by_name(self) -> dict[str, Consumer]:
        return self._view().by_name

    @property
    def _by_key(self) -> dict[str, Consumer]:
        return self._view().by_key

    @property
    def epoch(self) -> int:
        """The last committed epoch."""
        return self.coordinator.manifest.epoch

    @property
    def _manifest(self) -> Manifest:
        """The manifest reads go by: the pinned one of this thread's :meth:`reading`, else the last."""
        pinned = getattr(self._local, "pinned", None)
        return pinned[1] if pinned is not None else self.coordinator.manifest

    def _view(self) -> Installed:
        pinned = getattr(self._local, "pinned", None)
        return pinned[0] if pinned is not None else self._installed

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Reads in this thread go by one committed version until the block exits, without
        :attr:`lock`: the manifest in force (its files are held against garbage collection:
        :meth:`~millpond.store.store.StateStore.hold`) and the catalog installed after it was
        taken. Epochs and DDL go on meanwhile; a query never waits for them, nor they for it."""
        with self.coordinator.state.hold() as manifest:
            self._local.pinned = (self._installed, manifest)
            try:
                yield
            finally:
                self._local.pinned = None


    def populated(self, name: str) -> bool:
        """Whether view ``name`` has rows to read: its first epoch committed (failed or not), and it
        is not filling in bounded epochs still (:mod:`millpond.engine.filling`)."""
        c, manifest = self._by_name.get(name), self._manifest
        return c is None or not c.derived or c.key in manifest.failed or \
            (c.key in manifest.offsets and c.key not in manifest.filling)

    def filling(self, name: str) -> list[int] | None:
        """View ``name``'s backfill in bounded epochs, if it is filling: [parts read, parts]."""
        c = self._by_name.get(name)
        return None if c is None else self._manifest.filling.get(c.key)

    def unfilled(self, name: str, what: str) -> None:
        """Refuse ``what`` over view ``name`` while it fills in bounded epochs (55000, its progress)."""
        if (state := self.filling(name)) is not None:
            raise CatalogError(f"view {name!r} is still filling ({state[0]} of {state[1]} parts of its backfill "
                               f"read; SHOW JOBS): {what} once it is filled", sqlstate="55000")

    def table_sizes(self) -> dict[str, int]:
        """Each table's and view's rows as last committed, roughly: its rows state's stored rows
        (versions an update left uncompacted count too), or a key-less table's log records. What
        orders a new view's joins (:mod:`millpond.sql.planner.order`)."""
        manifest, out = self._manifest, {}
        for rel in [*self.catalog.tables.values(), *self.catalog.views.values()]:
            consumer = self._by_name[rel.name]
            stored = sum(ref.rows for ref in self.coordinator.rows(consumer, manifest).levels.files())
            out[rel.name] = stored or (manifest.offsets.get(consumer.key, {}).get(rel.channel, 0)
                                       if isinstance(rel, TableDef) else 0)
        return out

    def filter_share(self, table: str, columns: dict[str, str], predicate: exp.Expression) -> float | None:
        """The share of ``table``'s committed rows that ``predicate`` (over the names ``columns`` maps
        to the table's columns) keeps, in a sample of about :data:`SAMPLE_ROWS` of them: the rows of
        a slice of the key-hash space (a random sample of the keys), a key-less table's first
        records. None if it has no rows or DuckDB cannot evaluate it. What orders a new view's joins
        (:mod:`millpond.sql.planner.order`), as PostgreSQL's ``ANALYZE`` samples a table."""
        used = {c.name for c in predicate.find_all(exp.Column)}
        if not used <= set(columns):
            return None
        manifest, consumer, rel = self._manifest, self._by_name[table], self.catalog.tables[table]
        cols = tuple(dict.fromkeys(columns[c] for c in sorted(used))) or (rel.columns[0].name,)
        if consumer.log_only:
            stop = min(manifest.offsets.get(consumer.key, {}).get(rel.channel, 0), SAMPLE_ROWS)
            sample = self.channel(rel).read(0, stop).select(list(cols)) if stop else None
        else:
            sample, _ = self.coordinator.rows(consumer, manifest, columns=cols).sample(SAMPLE_ROWS)
        if sample is None or sample.num_rows == 0:
            return None
        sample = sample.select(list(cols))
        con = duck.cursor()
        try:  # as the table's columns are typed (a query's snapshot casts so too)
            named = pa.table({out: sample.column(src).cast(rel.log_schema.field(src).type)
                              for out, src in columns.items() if out in used})
            con.register("sample", named)
            kept = con.execute(f"SELECT count(*) FROM sample WHERE {to_duckdb(predicate)}").fetchall()[0][0]
        except (duckdb.Error, pa.ArrowException):
            return None
        finally:
            con.close()
        return max(int(kept), 1) / named.num_rows

    def snapshot(self, name: str, *, hidden: bool = False, pending: bool = False,
                 columns: Collection[str] | None = None) -> pa.Table:
        """The committed rows of a table or view; ``hidden`` keeps a table's ``_row_id``;
        ``pending`` (tables only) adds the changes appended to its log that no epoch has committed
        yet: the table as of now, with no epoch to wait for. ``columns``: the columns needed (the
        others may be left out, and are when the rows come from state: :func:`_read_columns`)."""
        if (system := self._system(name)) is not None:
            return system()
        rel = self.catalog.relation(name)
        consumer = self._by_name[name]
        if (failure := self._manifest.failed.get(consumer.key)) is not None:
            raise MillpondError(self.describe_failure(failure))
        schema = rel.log_schema.remove(rel.log_schema.get_field_index(W)) if isinstance(rel, TableDef) \
            else rel.schema
        manifest = self._manifest  # one version: its rows and its offsets agree
        stop = manifest.offsets.get(consumer.key, {}).get(rel.channel, 0) if isinstance(rel, TableDef) else 0
        end = None if pending else stop
        if consumer.log_only:  # a key-less table: its log up to the last committed epoch (or the end)
            table = consolidate_rows(self.channel(rel).read(0, end)).select(list(consumer.columns)).cast(schema)
            return table if hidden else table.drop_columns([ROW_ID])
        fed = self._by_key[consumer.fed_by] if consumer.fed_by is not None else None  # a flow's sink: the flow's rows
        if fed is not None:
            table = expand_rows(self.coordinator.rows(fed, manifest).scan(), fed.columns, schema, row_id=True)
            return table if hidden else table.drop_columns([ROW_ID])
        cols = _read_columns(consumer, hidden, columns)
        schema = pa.schema([schema.field(c) for c in cols])
        table = expand_rows(self.coordinator.rows(consumer, manifest, columns=cols).scan_arrow(), cols, schema)
        if pending and isinstance(rel, TableDef):
            table = _with_changes(table, self.channel(rel).read(stop, None), cols, schema)
        if isinstance(rel, TableDef) and not hidden and ROW_ID in table.column_names:
            table = table.drop_columns([ROW_ID])
        return table

    def reader(self, name: str, *, hidden: bool = False, pending: bool = False,
               columns: Collection[str] | None = None, where: Mapping[str, Kept] | None = None
               ) -> pa.RecordBatchReader | pa.Table:
        """The committed rows of ``name`` as :meth:`snapshot` reads them, streamed: a table's or
        view's rows state is read in slices of its key-hash space (:meth:`StateTable.slices`), so
        a query over a large relation never holds all of it at once. With ``pending`` (a keyed
        table), each slice has the changes appended since the last epoch to its keys applied (new
        keys too: the slices cover the whole key-hash space). Read once (a reader); small relations, a key-less table's log,
        a flow's sink and system views come whole. ``where``: what the query's WHERE says of some
        integer columns (their values, or least and greatest); a slice's stored rows outside them
        are dropped as read (a query keeps its WHERE: this only spares it the rows that fail)."""
        consumer = self._by_name.get(name)
        if consumer is None or not consumer.keeps_rows or self._system(name) is not None:
            return self.snapshot(name, hidden=hidden, pending=pending, columns=columns)
        rel = self.catalog.relation(name)
        manifest = self._manifest
        if (failure := manifest.failed.get(consumer.key)) is not None:
            raise MillpondError(self.describe_failure(failure))
        cols = _read_columns(consumer, hidden, columns)
        state = self.coordinator.rows(consumer, manifest, columns=cols)
        keyed = isinstance(rel, TableDef) and rel.key_hashed
        if sum(ref.rows for ref in state.levels.files()) <= READ_SLICE_ROWS or (pending and not keyed):
            return self.snapshot(name, hidden=hidden, pending=pending, columns=columns)
        schema = rel.log_schema.remove(rel.log_schema.get_field_index(W)) if isinstance(rel, TableDef) \
            else rel.schema
        schema = pa.schema([schema.field(c) for c in cols])
        out = pa.schema([f for f in schema if hidden or not isinstance(rel, TableDef) or f.name != ROW_ID])
        changes, hashes = None, None
        if pending and keyed:
            stop = manifest.offsets.get(consumer.key, {}).get(rel.channel, 0)
            changes = self.channel(rel).read(stop, None)
            hashes = xxhash64([changes.column(k) for k in rel.primary_key]) if changes.num_rows else None

        keep = functools.partial(_kept, where=where) if where else None

        def batches() -> Iterator[pa.RecordBatch]:
            for lo, hi in state.slices(READ_SLICE_ROWS):
                table = expand_rows(state.scan_arrow(lo, hi, keep=keep), cols, schema)
                if hashes is not None:  # the changes to this slice's keys
                    mine = (hashes >= (lo if lo is not None else -(1 << 63))) & \
                        (hashes < hi if hi is not None else True)
                    table = _with_changes(table, changes.filter(pa.array(mine)), cols, schema)
                yield from table.select(out.names).combine_chunks().to_batches()  # not a batch per block read
        return pa.RecordBatchReader.from_batches(out, batches())

    def key_of(self, name: str) -> tuple[str, ...]:
        """The columns whose values address a table's or view's committed rows in state (a
        table's primary key, a view's group key: :func:`millpond.engine.plan.row_key`), for
        :meth:`rows_by_key`; () when its rows can only be scanned."""
        consumer = self._by_name.get(name)
        if consumer is None or not consumer.keeps_rows or self._system(name) is not None:
            return ()
        return consumer.plan.key if isinstance(consumer.plan, P.Materialize) else ()

    def key_bounds(self, name: str, column: str, *, pending: bool = False) -> tuple[int, int] | None:
        """The least and greatest value integer key ``column`` of ``name`` may have (every row's
        value lies within; :meth:`StateTable.bounds`), with ``pending`` the changes appended since
        the last epoch too; ``(0, -1)`` when there is none; None when unknown (an older file). What lets a query whose WHERE fixes only some of a
        key's columns read by key (TPC-H's ``DELETE FROM lineitem WHERE l_orderkey …``: each
        order's line numbers lie between 1 and 7)."""
        consumer = self._by_name[name]
        manifest = self._manifest
        bounds = self.coordinator.rows(consumer, manifest).bounds(column)
        rel = self.catalog.relation(name)
        if bounds is not None and pending and isinstance(rel, TableDef):
            stop = manifest.offsets.get(consumer.key, {}).get(rel.channel, 0)
            values = self.channel(rel).read(stop, None).column(column)
            if len(values) and values.null_count < len(values):
                low, high = pc.min_max(values).values()
                bounds = (min(low.as_py(), bounds[0]), max(high.as_py(), bounds[1])) if bounds[0] <= bounds[1] \
                    else (low.as_py(), high.as_py())
        return bounds

    def rows_by_key(self, name: str, keys: pa.Table, *, hidden: bool = False, pending: bool = False) -> pa.Table:
        """The committed rows of ``name`` whose key (:meth:`key_of`, ``keys``' columns in that
        order) equals a row of ``keys``: a lookup of only their hashes' blocks in state (the SSTs'
        key ranges and blooms), whatever the size of the relation. A NULL key matches nothing.
        ``hidden`` and ``pending`` (tables) as in :meth:`snapshot`: with ``pending``, the changes
        appended since the last epoch to those keys too."""
        rel = self.catalog.relation(name)
        consumer = self._by_name[name]
        key = self.key_of(name)
        if not key or tuple(keys.column_names) != key:
            raise InvariantError(f"{name}: rows are addressed by {list(key)}, not {keys.column_names}")
        manifest = self._manifest  # one version: its rows and its offsets agree
        if (failure := manifest.failed.get(consumer.key)) is not None:
            raise MillpondError(self.describe_failure(failure))
        schema = rel.log_schema.remove(rel.log_schema.get_field_index(W)) if isinstance(rel, TableDef) \
            else rel.schema
        keys = keys.cast(pa.schema([schema.field(k) for k in key]))
        wanted = pl.from_arrow(keys).unique()
        found = self.coordinator.rows(consumer, manifest).lookup(xxhash64(keys.columns))
        if found is not None and found.height:
            found = found.join(wanted.with_columns([pl.col(k).cast(found.schema[k]) for k in key]), on=list(key),
                               how="semi")
        table = expand_rows(found, consumer.columns, schema)
        if pending and isinstance(rel, TableDef):
            stop = manifest.offsets.get(consumer.key, {}).get(rel.channel, 0)
            changes = self.channel(rel).read(stop, None)
            if changes.num_rows:
                changes = pl.from_arrow(changes).join(wanted, on=list(key), how="semi").to_arrow().cast(changes.schema)
            table = _with_changes(table, changes, consumer.columns, schema)
        if isinstance(rel, TableDef) and not hidden:
            table = table.drop_columns([ROW_ID])
        return table


def _with_changes(table: pa.Table, changes: pa.Table, columns: tuple[str, ...], schema: pa.Schema) -> pa.Table:
    """A table's committed rows with the changes appended since (its log's records) applied."""
    if not changes.num_rows:
        return table
    changes = changes.select([*columns, W])
    ones = pa.array(np.ones(table.num_rows, dtype=np.int64))
    return consolidate_rows(pa.concat_tables([table.append_column(W, ones).cast(changes.schema), changes])
                            ).select(list(columns)).cast(schema)


def _read_columns(consumer: Consumer, hidden: bool, columns: Collection[str] | None) -> tuple[str, ...]:
    """The columns of ``consumer``'s rows a read of ``columns`` (None: all) takes from state: the
    multiset of their projection is what a query over those columns sees. A read of none (``count(*)``)
    still takes one: its values carry the rows."""
    if columns is None:
        return consumer.columns
    return tuple(c for c in consumer.columns if c in columns and (hidden or c != ROW_ID)) or consumer.columns[:1]


Kept = pa.Array | tuple[int | None, int | None]  # a column's values, or its least and greatest (None: open)


def _kept(rows: pa.Table, where: Mapping[str, Kept]) -> pa.Table:
    """The rows of ``rows`` whose every column of ``where`` is one of its values or within its
    bounds (a NULL is neither). A 6M-row table's slices reach DuckDB as the 60,000 rows of a
    ``DELETE … WHERE l_orderkey >= a AND l_orderkey < b``, not whole."""
    mask = None
    for column, kept in where.items():
        if column not in rows.column_names:
            continue
        values = rows.column(column).combine_chunks()  # one chunk per block read: kernels are slow over many
        if isinstance(kept, pa.Array):
            ok = pc.is_in(values, value_set=kept.cast(values.type))
        else:
            low, high = kept
            ok = pc.and_(pc.greater_equal(values, low) if low is not None else pc.is_valid(values),
                         pc.less_equal(values, high) if high is not None else pc.is_valid(values))
        mask = ok if mask is None else pc.and_(mask, ok)
    if mask is None:
        return rows
    kept = np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
    if kept.size * 2 > rows.num_rows:  # most pass: copying them costs more than DuckDB's WHERE (6M rows
        return rows                   # of lineitem kept whole by l_linenumber >= 1: +0.5 s)
    # a take, not a filter: its rows come in one chunk, not one per block read (3-4x faster, and
    # polars takes one chunk at once, thousands slowly)
    return rows.take(kept)


def expand_rows(found: pa.Table | pl.DataFrame | None, columns: tuple[str, ...], schema: pa.Schema, *,
            row_id: bool = False) -> pa.Table:
    """A rows state's read (a multiset: a row and its count) as a table with one row per copy;
    ``row_id`` adds an empty ``_row_id`` (a flow's rows read as its sink table's)."""
    if isinstance(found, pl.DataFrame):
        found = found.to_arrow()
    if found is None or found.num_rows == 0:
        return schema.empty_table()
    counts = found.column(COUNT)
    table = found.select(list(columns))
    if pc.max(counts).as_py() > 1:  # a table's rows are each there once: nothing to repeat
        table = table.take(pa.array(np.repeat(np.arange(found.num_rows), counts.to_numpy())))
    if row_id:
        table = table.append_column(ROW_ID, pa.nulls(table.num_rows, pa.int64()))
    return table.cast(schema)


def consolidate_rows(changes: pa.Table) -> pa.Table:
    """The rows a changelog leaves: each distinct row once per copy of its net weight (changes
    that only insert, like every APPEND ONLY table's, are their own rows)."""
    if not changes.num_rows or pc.min(changes[W]).as_py() > 0:
        return changes
    net = consolidate(pl.from_arrow(changes)).filter(pl.col(W) > 0)
    idx = np.repeat(np.arange(net.height), net[W].to_numpy())
    return net.to_arrow().take(pa.array(idx)).cast(changes.schema)

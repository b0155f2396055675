"""The lakehouse tables sinks write (:mod:`millpond.engine.sinks`; :class:`millpond.engine.sink_targets.Target`):
Delta Lake (``deltalake``, delta-rs) and Iceberg (``pyiceberg``), neither needing a JVM.

A target takes two kinds of write, each **one commit** of the target that also records the last
epoch it holds under the sink's token — Delta Lake: a transaction identifier (``txn``: app id =
token, version = epoch); Iceberg: a table property ``millpond.sink.<token>`` set in the same
metadata commit as the data — and reads that epoch back (:meth:`Target.written`):

- ``append(rows)``: rows added as they are;
- ``upsert(rows, key)``: ``rows`` hold the source's columns and ``_op``: ``'u'`` rows replace the
  row of their key or are added, ``'d'`` rows delete it (key columns compared with NULLs equal).
  Delta Lake: one ``MERGE`` by key; Iceberg: the changed keys deleted and the new rows appended in
  one transaction. Both formats rewrite the data files holding a changed key (copy on write).
"""

from __future__ import annotations

import warnings
from functools import reduce
from pathlib import Path
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc


from millpond.catalog import SinkDef
from millpond.engine.sink_targets import DELETE, OP, UPSERT, Target
from millpond.work import current_work

__all__ = ["DeltaTarget", "IcebergTarget", "lake_target", "ICEBERG_OPTIONS", "ICEBERG_CATALOG"]

# an Iceberg sink's options: the catalog (pyiceberg's SQL catalog: a SQLAlchemy URL, e.g. sqlite:///c.db
# or postgresql+psycopg://...), the warehouse its files go to, and the table
WRITE_BATCH_ROWS = 65_536  # rows handed to delta-rs at a time (a write's progress)
ICEBERG_APPEND_ROWS = 1_000_000  # rows per append of an Iceberg write (a snapshot each, in one transaction)
ICEBERG_OPTIONS = ("catalog.type", "catalog.uri", "warehouse.path", "database.name", "table.name")
ICEBERG_CATALOG = "millpond"  # the catalog's name (the SQL catalog's rows are keyed by it) unless catalog.name says


def lake_target(sink: SinkDef) -> Target:
    if sink.connector == "iceberg":
        return IcebergTarget(dict(sink.options))
    storage = {k.removeprefix("storage."): v for k, v in sink.options if k.startswith("storage.")}
    return DeltaTarget(sink.option("location") or "", storage)


def _upserts_only(rows: pa.Table) -> pa.Table:
    return rows.filter(pc.equal(rows[OP], UPSERT)).drop_columns([OP])


class DeltaTarget:
    """A Delta Lake table at ``location`` (a path or a URI delta-rs opens)."""

    def __init__(self, location: str, storage: Mapping[str, str] | None = None):
        self.location = location
        self.storage = dict(storage or {}) or None
        self._opened = None  # the table as of this process's last write (a write updates it)

    def _table(self):  # noqa: ANN202
        from deltalake import DeltaTable

        if self._opened is None and DeltaTable.is_deltatable(self.location, storage_options=self.storage):
            self._opened = DeltaTable(self.location, storage_options=self.storage)
        return self._opened

    def forget(self) -> None:
        self._opened = None

    def rows(self) -> int | None:
        table = self._table()
        return None if table is None else table.to_pyarrow_dataset().count_rows()

    def written(self, token: str) -> int | None:
        table = self._table()
        return None if table is None else table.transaction_version(token)

    def append(self, rows: pa.Table, token: str, epoch: int) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        table = self._table()
        work = current_work()  # a first write's progress (SHOW JOBS): its rows delta-rs has taken

        def taken():  # noqa: ANN202 - pulled by delta-rs, maybe from a thread of its own
            for batch in rows.to_batches(max_chunksize=WRITE_BATCH_ROWS):
                yield batch
                work.did(batch.num_rows)
        write_deltalake(self.location if table is None else table,
                        pa.RecordBatchReader.from_batches(rows.schema, taken()), mode="append",
                        storage_options=self.storage,
                        commit_properties=CommitProperties(app_transactions=[Transaction(token, epoch)]))

    def upsert(self, rows: pa.Table, key: tuple[str, ...], token: str, epoch: int) -> None:
        from deltalake import CommitProperties, Transaction

        table = self._table()
        if table is None:  # the first write: the table is made with the source's rows
            self.append(_upserts_only(rows), token, epoch)
            return
        cols = [c for c in rows.column_names if c != OP]
        on = " AND ".join(f"t.{_q(k)} IS NOT DISTINCT FROM s.{_q(k)}" for k in key)
        values = {_q(c): f"s.{_q(c)}" for c in cols}
        props = CommitProperties(app_transactions=[Transaction(token, epoch)])
        (table.merge(rows, predicate=on, source_alias="s", target_alias="t", commit_properties=props)
         .when_matched_update(updates=values, predicate=f"s.{OP} = '{UPSERT}'")
         .when_matched_delete(predicate=f"s.{OP} = '{DELETE}'")
         .when_not_matched_insert(updates=values, predicate=f"s.{OP} = '{UPSERT}'")
         .execute())

    def compact(self) -> None:
        """Small files (one or a few per write) merged into bigger ones: Delta's ``OPTIMIZE``
        (delta-rs checkpoints the log by itself)."""
        table = self._table()
        if table is not None:
            table.optimize.compact()

    def files(self) -> int:
        table = self._table()
        return 0 if table is None else len(table.file_uris())


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class IcebergTarget:
    """An Iceberg table ``database.name``.``table.name`` in pyiceberg's SQL catalog at ``catalog.uri``
    (named ``catalog.name``, default :data:`ICEBERG_CATALOG`), its files under ``warehouse.path``. Compaction is left to the catalog's own maintenance
    (pyiceberg 0.12 rewrites no data files): :meth:`compact` does nothing."""

    def __init__(self, options: Mapping[str, str]):
        warehouse = options["warehouse.path"]
        self.props = {"uri": options["catalog.uri"],
                      "warehouse": warehouse if "://" in warehouse else Path(warehouse).absolute().as_uri()}
        self.ident = (options["database.name"], options["table.name"])
        self.name = options.get("catalog.name", ICEBERG_CATALOG)
        self._catalog_ = None
        self._opened = None

    def _catalog(self):  # noqa: ANN202
        if self._catalog_ is None:
            from pyiceberg.catalog.sql import SqlCatalog

            self._catalog_ = SqlCatalog(self.name, **self.props)
        return self._catalog_

    def _table(self):  # noqa: ANN202
        from pyiceberg.exceptions import NoSuchTableError

        if self._opened is None:
            try:
                self._opened = self._catalog().load_table(self.ident)
            except NoSuchTableError:
                return None
        return self._opened

    def forget(self) -> None:
        self._opened = None

    def rows(self) -> int | None:
        table = self._table()
        return None if table is None else table.scan().to_arrow().num_rows

    def written(self, token: str) -> int | None:
        table = self._table()
        found = None if table is None else table.properties.get(_property(token))
        return None if found is None else int(found)

    def _create(self, schema: pa.Schema):  # noqa: ANN202
        catalog = self._catalog()
        catalog.create_namespace_if_not_exists(self.ident[0])
        self._opened = catalog.create_table(self.ident, schema=schema)
        return self._opened

    def append(self, rows: pa.Table, token: str, epoch: int) -> None:
        """``rows`` appended and the epoch recorded in one transaction; a large write (a first one)
        as appends of :data:`ICEBERG_APPEND_ROWS` (a snapshot each, committed together: its progress)."""
        table = self._table() or self._create(rows.schema)
        work = current_work()
        with table.transaction() as tx:
            for start in range(0, rows.num_rows, ICEBERG_APPEND_ROWS):
                tx.append(part := rows.slice(start, ICEBERG_APPEND_ROWS))
                work.did(part.num_rows)
            tx.set_properties({_property(token): str(epoch)})

    def upsert(self, rows: pa.Table, key: tuple[str, ...], token: str, epoch: int) -> None:
        table = self._table()
        if table is None:
            self.append(_upserts_only(rows), token, epoch)
            return
        ups = _upserts_only(rows)
        with table.transaction() as tx, warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Delete operation did not match any records")  # a new key: nothing to delete
            if rows.num_rows:
                tx.delete(_keys_filter(rows, key))
            if ups.num_rows:
                tx.append(ups)
            tx.set_properties({_property(token): str(epoch)})

    def compact(self) -> None:
        pass

    def files(self) -> int:
        table = self._table()
        return 0 if table is None else len(list(table.scan().plan_files()))


def _property(token: str) -> str:
    return f"millpond.sink.{token}"


def _keys_filter(rows: pa.Table, key: tuple[str, ...]):  # noqa: ANN202
    """An Iceberg row filter matching the keys of ``rows`` (NULL matching NULL)."""
    from pyiceberg.expressions import And, EqualTo, In, IsNull, Or

    def equal(col: str, value: object):  # noqa: ANN202
        return IsNull(col) if value is None else EqualTo(col, value)

    if len(key) == 1:
        values = [v for v in pc.unique(rows[key[0]]).to_pylist()]
        present = [v for v in values if v is not None]
        parts = ([In(key[0], present)] if present else []) + ([IsNull(key[0])] if len(present) < len(values) else [])
        return reduce(Or, parts)
    keys = rows.select(list(key)).group_by(list(key)).aggregate([]).to_pylist()
    return reduce(Or, [reduce(And, [equal(c, r[c]) for c in key]) for r in keys])

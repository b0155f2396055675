"""Connectors: where a table's rows come from besides ``INSERT``, one module per connector.

A **source table** is ``CREATE TABLE t (...) WITH (connector = '<name>', ...)``: ``files``
(:mod:`millpond.connectors.files`: a folder, each new file once), ``kafka``
(:mod:`millpond.connectors.kafka`: a topic's partitions), ``postgres-cdc``
(:mod:`millpond.connectors.postgres_cdc`: a table's snapshot, then its replication slot's
transactions), ``deltalake`` and ``iceberg``
(:mod:`millpond.connectors.delta`, :mod:`millpond.connectors.iceberg`: a table's versions, read by
:mod:`millpond.connectors.versioned`). Its connector is a :class:`Connector`:

- at ``CREATE TABLE``, :func:`check` reads the table's options (unknown ones refused by name), and
  the columns its ``INCLUDE`` clauses add;
- before every epoch (step 0, :class:`Sources`) the writer's connector discovers the table's
  **splits** (a folder's files, a topic's partitions), fixes how far each is read for this epoch,
  and appends what is new to the table's log, each split as an **idempotent producer** of the log
  whose sequence is the split's position (a file's number, a partition's offset). The log applies a
  producer's sequence once, so its producer table *is* the record of how far every split was read:
  a restart (or a retry after an error) reads each split again from the position after the last
  one applied, and nothing is lost or doubled (the log's dedup, seed ``003``);
- the epoch then reads the table's log range like any other table's, in Spark tasks.

**On a cluster** the splits that allow it are read by Spark tasks, not the driver
(:mod:`millpond.spark.source_tasks`): a Kafka partition with new messages, a Delta or Iceberg
table's files (a Delta version's change data files too), a files table's new files on object
storage. The driver fixes what each reads (a partition's start, a version's files), the tasks
read, decode and stage their parts under the root, and the driver appends the staged parts in a
fixed order with the same producers and sequences, so exactly once holds as above. A replication
slot (PostgreSQL) and a local folder's files are read by the driver.

Why a source is copied into the log and not read by the epoch's tasks directly: a table keeps its
rows (``SELECT * FROM t``, time travel, a view created later backfills from them) where the
upstream does not — a topic's retention deletes old messages, a folder's files are moved away; an
upsert or Debezium stream's update needs the key's previous row, which the table's log has; and
one epoch machinery (ranges of log channels in the manifest) serves every table. The copy costs one
durable append per split per chunk (``benchmarks/sources.py`` measures it against a bare Kafka
consumer).

What each source failed on — a refused file, an unreachable broker, a malformed message — is a
row of ``millpond_source_errors`` (:mod:`millpond.connectors.source_errors`); how far each split
is — its position, the upstream's end, the lag, the rate — is ``millpond_sources`` (``SHOW
SOURCES``).
"""

from __future__ import annotations

import importlib
from contextlib import nullcontext
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Protocol

import pyarrow as pa

from millpond.catalog import Column, SinkDef, TableDef
from millpond.connectors.files import Files, local_listing_error
from millpond.connectors.source_errors import SourceErrors
from millpond.engine.epoch import EpochStep
from millpond.errors import SqlError
from millpond.work import current_work

if TYPE_CHECKING:
    from millpond.catalog import Catalog
    from millpond.engine.consumers import Consumer
    from millpond.engine.epoch import EpochPlan, EpochReport
    from millpond.engine.sink_targets import Target
    from millpond.engine.runtime import Runtime
    from millpond.store.manifest import Manifest

__all__ = ["CONNECTORS", "Connector", "SINKS", "Sources", "STATUS_SCHEMA", "check", "dropped", "local_listing_error",
           "target_of"]

log = logging.getLogger("millpond")

CONNECTORS = ("files", "kafka", "deltalake", "iceberg", "postgres-cdc")
VERSIONED = {"deltalake": ("delta", "millpond.connectors.delta", "DeltaReader"),
             "iceberg": ("iceberg", "millpond.connectors.iceberg", "IcebergReader")}

# millpond_sources (SHOW SOURCES): one row per split of every source table
STATUS_SCHEMA = pa.schema([
    ("table_name", pa.string()), ("connector", pa.string()), ("split", pa.string()),
    ("position", pa.int64()), ("upstream_end", pa.int64()), ("lag", pa.int64()), ("rows", pa.int64()),
    ("rows_per_second", pa.float64()), ("last_epoch", pa.int64())])


class Connector(Protocol):
    """What a source connector does in a writable runtime (one object per connector)."""

    def ingest(self, tables: list[TableDef], epoch: int) -> None:
        """Append what is new in each of ``tables``' splits to its log, before ``epoch``; a table's
        failure is its source error, and the other tables go on."""

    def status(self, t: TableDef) -> list[dict]:
        """``t``'s rows of ``millpond_sources`` (``STATUS_SCHEMA``'s columns but the first two)."""

    def close(self) -> None:
        """Let go of clients (a broker's connections)."""


def check(table: str, options: dict[str, str], columns: list[Column], key: list[str]
          ) -> tuple[dict[str, str], list[Column]]:
    """A source table's options checked (the connector's own module says what it knows), and its
    columns: those given, with the ones its ``INCLUDE`` clauses add (Kafka), or the upstream
    table's (Delta Lake, when none are given); a SqlError names what is wrong."""
    connector = options.get("connector")
    if not columns and connector not in VERSIONED:
        raise SqlError(f"table {table!r} needs at least one column (only a Delta or Iceberg table's source gives "
                       "its own)")
    if connector == "files":
        from millpond.connectors.files import check_source

        return check_source(table, options), columns
    if connector == "kafka":
        from millpond.connectors.kafka import check_source

        options, included = check_source(table, options, columns, key)
        return options, [*columns, *included]
    if connector == "postgres-cdc":
        from millpond.connectors.postgres_cdc import check_source

        return check_source(table, options, columns, key)
    if connector in VERSIONED:
        return importlib.import_module(VERSIONED[connector][1]).check_source(table, options, columns, key)
    raise SqlError(f"table {table!r}: connector must be one of {', '.join(map(repr, CONNECTORS))}"
                   f"{', got ' + repr(connector) if connector else ' (its options need one)'}")


SINKS = ("deltalake", "iceberg", "postgres", "kafka")  # CREATE SINK ... WITH (connector = ...)


def target_of(sink: SinkDef) -> Target:
    """What ``sink`` writes to, by its connector."""
    if sink.connector == "postgres":
        from millpond.connectors.postgres_sink import PostgresTarget

        return PostgresTarget(dict(sink.options))
    if sink.connector == "kafka":
        from millpond.connectors.kafka_sink import KafkaTarget

        return KafkaTarget(dict(sink.options))
    from millpond.connectors.lake_sinks import lake_target

    return lake_target(sink)


def dropped(t: TableDef) -> None:
    """What a dropped source table leaves upstream let go of (a PostgreSQL table's slot)."""
    if t.source and dict(t.source).get("connector") == "postgres-cdc":
        from millpond.connectors.postgres_cdc import dropped as pg_dropped

        pg_dropped(t)


class Sources(EpochStep):
    """The epoch step (0) that takes every source table's new rows in, by connector. Ports:
    ``store`` (the root), ``channel`` (a table's log), ``insert`` (rows appended to a table,
    upserts where it has a key; idempotent per producer), ``apply`` (upserts and deletes by key,
    as one idempotent append) and ``task_reads`` (what reads parts in Spark tasks on a cluster, or None,
    asked for when a source is first read: :mod:`millpond.spark.source_tasks`, handed in by the
    entry points)."""

    target_of = staticmethod(target_of)  # the sinks' targets (the entry points hand connectors in as one)

    def __init__(self, store, channel, insert, apply, task_reads=None, jobs=None):
        self.store, self.channel, self.insert, self.apply = store, channel, insert, apply
        self.task_reads = task_reads
        self.jobs = jobs  # what shows a read as a job while it runs (engine/jobs.py), if anything
        self._tasks: list = []  # [what reads parts in Spark tasks, or None], once asked
        self.errors = SourceErrors()  # what each table's source failed on, while it lasts
        self.files = Files(store, channel, insert, self.errors, self.tasks)
        self._kafka = None  # made for the first Kafka table (its client is imported then)
        self._pg = None  # made for the first PostgreSQL CDC table
        self._versioned: dict = {}  # connector -> its step part (a Delta table's, an Iceberg table's)

    @classmethod
    def of(cls, rt: Runtime, tasks: Callable | None = None) -> "Sources":
        from millpond.engine.ingest import apply_by_key, insert

        def inserted(t, rows, producer):  # noqa: ANN001, ANN202 - counted in the source's job (SHOW JOBS)
            current_work().took(rows.num_rows)
            return insert(rt, t, rows, producer=producer)

        def applied(t, upserts, deletes, producer):  # noqa: ANN001, ANN202
            current_work().took((upserts.num_rows if upserts is not None else 0) + (deletes.num_rows if deletes is not None else 0))
            return apply_by_key(rt, t, upserts, deletes, producer=producer)
        return cls(rt.coordinator.store, rt.channel, inserted, applied, tasks, rt.jobs)

    def tasks(self):
        """What reads a table's files and partitions in Spark tasks (on a cluster), or None (the
        driver reads them): asked of the ``task_reads`` port once, when a source first needs it."""
        if not self._tasks:
            self._tasks.append(self.task_reads() if self.task_reads is not None else None)
        return self._tasks[0]

    @property
    def kafka(self):
        if self._kafka is None:
            from millpond.connectors.kafka import Kafka

            self._kafka = Kafka(self.store, self.channel, self.insert, self.apply, self.errors, self.tasks)
        return self._kafka

    @property
    def pg(self):
        if self._pg is None:
            from millpond.connectors.postgres_cdc import PostgresCdc

            self._pg = PostgresCdc(self.store, self.channel, self.insert, self.apply, self.errors)
        return self._pg

    def versioned(self, connector: str):
        """The step part of a connector whose tables are read version by version (Delta, Iceberg)."""
        if connector not in self._versioned:
            from millpond.connectors.versioned import Versioned

            name, module, reader = VERSIONED[connector]
            self._versioned[connector] = Versioned(name, getattr(importlib.import_module(module), reader), self.store,
                                                   self.channel, self.insert, self.apply, self.errors, self.tasks)
        return self._versioned[connector]

    def _by_connector(self, catalog: Catalog) -> dict[str, list[TableDef]]:
        found: dict[str, list[TableDef]] = {}
        for t in catalog.tables.values():
            if t.source:
                found.setdefault(dict(t.source)["connector"], []).append(t)
        return found

    def before(self, catalog: Catalog, consumers: list[Consumer], manifest: Manifest) -> None:
        by = self._by_connector(catalog)
        if not by and self._kafka is None and self._pg is None:
            return
        self.errors.keep(t.id for tables in by.values() for t in tables)
        epoch = manifest.epoch + 1

        def shown(connector: str):  # noqa: ANN202 - a read, a job while it runs (SHOW JOBS: kind source)
            names = ", ".join(sorted(t.name for t in by.get(connector, [])))
            return self.jobs.track("source", names, epoch) if self.jobs is not None and names else nullcontext()
        if "files" in by:
            with shown("files"):
                self.files.ingest(by["files"], epoch)
        if "kafka" in by or self._kafka is not None:  # (none left: the dropped tables' clients are closed)
            with shown("kafka"):
                self.kafka.ingest(by.get("kafka", []), epoch)
        for connector in VERSIONED:
            if connector in by:
                with shown(connector):
                    self.versioned(connector).ingest(by[connector], epoch)
        if "postgres-cdc" in by or self._pg is not None:
            with shown("postgres-cdc"):
                self.pg.ingest(by.get("postgres-cdc", []), epoch)

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        if self._pg is not None:  # PostgreSQL's slots move once what they gave is committed
            self._pg.committed()
        if any(t.source for t in plan.catalog.tables.values()):
            return replace(report, source_errors=self.errors.by_table(plan.catalog))
        return report

    def status(self, catalog: Catalog) -> pa.Table:
        """``millpond_sources``: every split of every source table, how far it is read."""
        rows = []
        for connector, tables in sorted(self._by_connector(catalog).items()):
            reader: Callable | None = {"files": self.files.status,
                                       "kafka": self._kafka.status if self._kafka else None,
                                       "postgres-cdc": self._pg.status if self._pg else None,
                                       **{c: v.status for c, v in self._versioned.items()}}.get(connector)
            for t in sorted(tables, key=lambda t: t.name):
                for row in reader(t) if reader else []:
                    rows.append({"table_name": t.name, "connector": connector, **row})
        return pa.Table.from_pylist(rows, schema=STATUS_SCHEMA)

    def close(self) -> None:
        if self._kafka is not None:
            self._kafka.close()
        if self._pg is not None:
            self._pg.close()

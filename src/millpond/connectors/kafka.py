"""A Kafka topic is a table: RisingWave's syntax, which users switching from it know::

    CREATE TABLE t (k BIGINT, v TEXT, PRIMARY KEY (k))
      [INCLUDE partition | offset | timestamp | key [AS name] ...]
      WITH (connector = 'kafka', topic = 'orders', properties.bootstrap.server = 'host:9092',
            [scan.startup.mode = 'earliest' | 'latest' | 'timestamp', scan.startup.timestamp.millis = '…',]
            [on_error = 'skip' | 'stop',] [properties.<client option> = '…', ...])
      [FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON | CSV | BYTES]

- ``FORMAT PLAIN`` (the default): each message's value is a row (``ENCODE JSON``: an object whose
  fields are the columns, fields it lacks are NULL and others are ignored; ``ENCODE CSV``: the
  columns in order, ``encode.delimiter`` between them; ``ENCODE BYTES``: the one ``BYTEA`` column);
  on a keyed table a row replaces the row of its key;
- ``FORMAT UPSERT ENCODE JSON`` (a keyed table): a value is the row of its key; a message with no
  value (a tombstone) deletes the row of its message key (a JSON object of the key's columns, or
  for a one-column key, the key's JSON value);
- ``FORMAT DEBEZIUM ENCODE JSON`` (a keyed table): Debezium's change events (``before``, ``after``,
  ``op``, bare or inside ``payload``): ``c``/``r`` insert, ``u`` updates (a changed key deletes
  the old one), ``d`` deletes; tombstones are skipped;
- ``INCLUDE`` adds columns of each message: ``partition`` (INTEGER), ``offset`` (BIGINT),
  ``timestamp`` (TIMESTAMPTZ), ``key`` (BYTEA), named ``kafka_<what>`` unless ``AS`` names them;
- ``properties.*`` go to the client (librdkafka): ``properties.security.protocol``,
  ``properties.sasl.mechanism``, ``properties.sasl.username``/``password``,
  ``properties.ssl.ca.location``...; ``properties.bootstrap.server`` is ``bootstrap.servers``.

**Exactly once.** Before every epoch the writer reads each partition from the offset after the last
one the table's log applied, to the end the broker has then, in chunks; each chunk's messages of a
partition are one append to the table's log with the producer ``kafka:t<table id>:<partition>``
and the chunk's last offset as its sequence number. The log applies a producer's sequence once,
so the log's producer table is the record of how far each partition was read: a crash before the
append reads the chunk again, one after it does not (:mod:`millpond.connectors`). A new partition
of the topic is read from its beginning at the next epoch. ``scan.startup.mode`` says where a
partition starts the first time: ``earliest`` (its first message kept), ``latest`` (its end when
the table first reads it) or ``timestamp`` (the first message at or after
``scan.startup.timestamp.millis``), recorded under the root so that a restart starts there again.

**A malformed message** (not JSON, a value that does not fit its column, a missing value) is
skipped and recorded with its partition and offset in ``millpond_source_errors`` (the last 100
per table), or with ``on_error = 'stop'`` stops the table there: the messages before it come in,
none after it (in any partition) until the table is created again. **A broker out of reach** is a
source error of the table: an epoch waits 2 s for its answer, and the next tries wait 5, 10, 20...
up to 60 s apart (epochs meanwhile do not wait for it); the other tables go on.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import polars as pl
import pyarrow as pa

from millpond import faults
from millpond.catalog import Column, TableDef
from millpond.connectors import records
from millpond.connectors.source_errors import SourceErrors, text
from millpond.connectors.kafka_formats import Decoded, decoded
from millpond.errors import SqlError
from millpond.store.objects import ObjectStore
from millpond.work import current_work

if TYPE_CHECKING:
    from millpond.log import Channel

__all__ = ["Kafka", "check_source", "client_config"]

log = logging.getLogger("millpond")

FORMATS = ("plain", "upsert", "debezium")
ENCODES = ("json", "csv", "bytes")
MODES = ("earliest", "latest", "timestamp")
INCLUDES = {"partition": "INTEGER", "offset": "BIGINT", "timestamp": "TIMESTAMPTZ", "key": "BYTEA"}
KNOWN = {"connector", "topic", "properties.bootstrap.server", "scan.startup.mode", "scan.startup.timestamp.millis",
         "format", "encode", "on_error", "encode.delimiter"}
CHUNK = 100_000  # messages per consume: one append per partition per chunk (bounds an ingest's memory)
MAX_EPOCH_MESSAGES = 2_000_000  # per table and epoch: the rest in the next epoch (bounds an epoch)
MAX_SECONDS = 30.0  # reading one table before one epoch, at most
METADATA_SECONDS = 5.0  # a broker's answer about the topic at CREATE, at most
EPOCH_METADATA_SECONDS = 2.0  # ... before an epoch (an epoch waits this long for a broker out of reach)
RETRY_SECONDS = 5.0  # after a broker could not be reached, before trying it again (doubling to MAX_RETRY_SECONDS)
MAX_RETRY_SECONDS = 60.0
KEEP_MESSAGES = 100  # skipped messages kept per table in millpond_source_errors


def check_source(table: str, options: dict[str, str], columns: list[Column], key: list[str]
                 ) -> tuple[dict[str, str], list[Column]]:
    """A Kafka table's options checked against its columns, and the columns ``INCLUDE`` adds; the
    client's options tried, and the topic looked up on the broker (a SqlError names what is wrong)."""
    where = f"table {table!r}"
    unknown = sorted(k for k in options if k not in KNOWN and not k.startswith(("properties.", "include.")))
    if unknown:
        raise SqlError(f"{where}: unknown option {unknown[0]!r} for connector 'kafka' (known: topic, "
                       "properties.bootstrap.server, scan.startup.mode, scan.startup.timestamp.millis, on_error, "
                       "properties.<client option>; FORMAT ... ENCODE ...; INCLUDE ...)")
    for need in ("topic", "properties.bootstrap.server"):
        if not options.get(need):
            raise SqlError(f"{where}: connector 'kafka' needs {need} = '...'")
    fmt, enc = options.setdefault("format", "plain"), options.setdefault("encode", "json")
    if fmt not in FORMATS:
        raise SqlError(f"{where}: FORMAT {fmt.upper()} is not supported (known: PLAIN, UPSERT, DEBEZIUM)")
    if enc not in ENCODES:
        raise SqlError(f"{where}: ENCODE {enc.upper()} is not supported (known: JSON, CSV, BYTES)")
    if fmt != "plain" and enc != "json":
        raise SqlError(f"{where}: FORMAT {fmt.upper()} needs ENCODE JSON (got ENCODE {enc.upper()})")
    if fmt != "plain" and not key:
        raise SqlError(f"{where}: FORMAT {fmt.upper()} needs a primary key (a message changes the row of its key)")
    mode = options.setdefault("scan.startup.mode", "earliest")
    if mode not in MODES:
        raise SqlError(f"{where}: scan.startup.mode must be 'earliest', 'latest' or 'timestamp', got {mode!r}")
    if (mode == "timestamp") != ("scan.startup.timestamp.millis" in options) or \
            not options.get("scan.startup.timestamp.millis", "0").isdigit():
        raise SqlError(f"{where}: scan.startup.mode = 'timestamp' goes with scan.startup.timestamp.millis = "
                       "'<milliseconds since 1970>' (and only with it)")
    if options.setdefault("on_error", "skip") not in ("skip", "stop"):
        raise SqlError(f"{where}: on_error must be 'skip' or 'stop', got {options['on_error']!r}")
    if "encode.delimiter" in options and (enc != "csv" or len(options["encode.delimiter"]) != 1):
        raise SqlError(f"{where}: encode.delimiter is one character, for ENCODE CSV")
    names = {c.name for c in columns}
    included = []
    if fmt != "plain" and any(k.startswith("include.") for k in options):
        raise SqlError(f"{where}: INCLUDE goes with FORMAT PLAIN (a {fmt.upper()} message changes a row, "
                       "it is not one)")
    for opt in sorted(k for k in options if k.startswith("include.")):
        what, name = opt.removeprefix("include."), options[opt]
        if what not in INCLUDES:
            raise SqlError(f"{where}: INCLUDE {what} is not supported (known: {', '.join(INCLUDES)})")
        if name in names:
            raise SqlError(f"{where}: INCLUDE {what} AS {name}: the table already has a column {name!r}")
        names.add(name)
        included.append(Column(name, INCLUDES[what]))
    if enc == "bytes" and (len(columns) != 1 or columns[0].type != "BYTEA"):
        raise SqlError(f"{where}: ENCODE BYTES needs exactly one BYTEA column (besides INCLUDE's), the message's value")
    _check_client(where, options)
    return options, included


def client_config(options: dict[str, str]) -> dict[str, Any]:
    """librdkafka's options from a table's: ``properties.*`` with their prefix taken off."""
    config = {k.removeprefix("properties."): v for k, v in options.items() if k.startswith("properties.")}
    config["bootstrap.servers"] = config.pop("bootstrap.server")
    return config


def _check_client(where: str, options: dict[str, str]) -> None:
    """The client takes the options, the broker answers, the topic is there."""
    from confluent_kafka import Consumer, KafkaException

    try:
        consumer = Consumer({**client_config(options), "group.id": "millpond-check", "logger": _quiet})
    except (KafkaException, ValueError, TypeError) as exc:
        raise SqlError(f"{where}: the Kafka client refuses its properties: {text(exc)}") from None
    try:
        topic = consumer.list_topics(options["topic"], timeout=METADATA_SECONDS).topics.get(options["topic"])
    except KafkaException as exc:
        raise SqlError(f"{where}: broker {options['properties.bootstrap.server']!r} cannot be reached: "
                       f"{text(exc)}") from None
    finally:
        consumer.close()
    if topic is None or topic.error is not None:
        raise SqlError(f"{where}: topic {options['topic']!r} is not on broker "
                       f"{options['properties.bootstrap.server']!r}"
                       f"{f' ({topic.error.str()})' if topic is not None else ''}")


class Kafka:
    """The Kafka tables of one writable runtime, each with its client while it is read (step 0,
    run by :class:`millpond.connectors.Sources`; ports as :class:`millpond.connectors.files.Files`'
    and ``apply``: upserts and deletes by key)."""

    def __init__(self, store: ObjectStore, channel: Callable[[TableDef], Channel], insert: Callable,
                 apply: Callable, errors: SourceErrors, tasks: Callable[[], Callable | None] = lambda: None):
        self.store, self.channel, self.insert, self.apply, self.errors = store, channel, insert, apply, errors
        self.tasks = tasks  # what reads partitions in Spark tasks (on a cluster), or None
        self._topics: dict[int, _Topic] = {}
        self._failed: dict[int, tuple[float, float]] = {}  # table id -> when its broker last failed, the wait

    def ingest(self, tables: list[TableDef], epoch: int) -> None:
        from confluent_kafka import KafkaException

        for gone in set(self._topics) - {t.id for t in tables}:
            self._topics.pop(gone).close()
        now = datetime.now(timezone.utc)
        for t in tables:
            failed, wait = self._failed.get(t.id, (None, 0.0))
            if failed is not None and time.monotonic() - failed < wait:
                continue
            try:
                topic = self._topics.get(t.id)
                if topic is None:
                    topic = self._topics[t.id] = _Topic(t, self)
                topic.ingest(epoch, now)
            except Exception as exc:  # noqa: BLE001 - one table's broker must not stop the epoch
                self._failed[t.id] = (time.monotonic(), min(max(2 * wait, RETRY_SECONDS), MAX_RETRY_SECONDS))
                if (topic := self._topics.pop(t.id, None)) is not None:
                    topic.close()  # a new client next time, from the positions the log applied
                kind = "broker" if isinstance(exc, KafkaException) else "ingest"
                if self.errors.seen(t.id, kind, dict(t.source)["properties.bootstrap.server"], text(exc),
                                    epoch=epoch, now=now):
                    log.warning("table %s: reading Kafka failed (tried again before the epochs): %s", t.name, text(exc))
            else:
                self._failed.pop(t.id, None)
                if self.errors.clear(t.id, "broker") + self.errors.clear(t.id, "ingest"):
                    log.info("table %s: reading Kafka works again", t.name)

    def status(self, t: TableDef) -> list[dict]:
        topic = self._topics.get(t.id)
        return topic.status() if topic is not None else []

    def close(self) -> None:
        for topic in self._topics.values():
            topic.close()
        self._topics.clear()


class _Topic:
    """One Kafka table's client and how far it has read each partition."""

    def __init__(self, t: TableDef, kafka: Kafka):
        from confluent_kafka import Consumer

        self.t, self.kafka, self.options = t, kafka, dict(t.source)
        self.name = self.options["topic"]
        self.consumer = Consumer({**_consumer_config(t), "error_cb": self._error})
        self.next: dict[int, int] = {}  # partition -> the offset read next
        self.taken: dict[int, int] = {}  # partition -> messages taken by this process
        self.ends: dict[int, int] = {}  # partition -> its end, as last asked for (read in Spark tasks)
        self.last: tuple[int, float, int] = (0, 0.0, -1)  # the last ingest: messages, seconds, epoch
        self.stopped: str | None = None  # on_error = 'stop': the message it stopped at
        self._broken: str | None = None  # an error the client reported while reading (all brokers down...)

    def _error(self, err) -> None:
        from confluent_kafka import KafkaError

        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION) or err.fatal():
            self._broken = err.str()

    def close(self) -> None:
        self.consumer.close()

    def ingest(self, epoch: int, now: datetime) -> None:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if self.stopped is not None:
            return
        meta = self.consumer.list_topics(self.name, timeout=EPOCH_METADATA_SECONDS).topics.get(self.name)
        if meta is None or meta.error is not None:
            raise KafkaException(meta.error if meta is not None else f"topic {self.name!r} is gone")
        partitions = sorted(meta.partitions)
        if new := [p for p in partitions if p not in self.next]:
            self.next.update(self._starts(new))
        if (tasks := self.kafka.tasks()) is not None:
            self._ingest_in_tasks(tasks, partitions, epoch, now)
            return
        self.consumer.assign([TopicPartition(self.name, p, self.next[p]) for p in partitions])
        pending, started, taken = set(partitions), time.monotonic(), 0
        while pending and taken < MAX_EPOCH_MESSAGES and time.monotonic() - started < MAX_SECONDS:
            if self._broken:
                broken, self._broken = self._broken, None
                raise KafkaException(broken)
            msgs = self.consumer.consume(min(CHUNK, MAX_EPOCH_MESSAGES - taken), timeout=0.2)
            if not msgs:
                continue
            errors = [m.error() for m in msgs]
            if any(errors):
                for m, e in zip(msgs, errors):
                    if e is None:
                        continue
                    if e.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    elif e.fatal() or not e.retriable():
                        raise KafkaException(e)
                msgs = [m for m, e in zip(msgs, errors) if e is None]
            taken += len(msgs)
            if not msgs:
                continue
            if not self._take(msgs, epoch, now):
                break
            left = sum(max(0, end - max(self.next[p], 0)) for p in pending if (end := self._end(p)) is not None)
            current_work().at(taken, taken + left)  # progress (SHOW JOBS): messages taken of those to the ends
        if taken:
            self.last = (taken, time.monotonic() - started, epoch)
        for p in [p for p in partitions if self.next[p] < 0 and p not in pending]:  # at its end, no message yet
            self.next[p] = self.consumer.get_watermark_offsets(TopicPartition(self.name, p), timeout=METADATA_SECONDS)[0]

    def _end(self, p: int) -> int | None:
        """Partition ``p``'s end as the last fetch answers gave it (cached: no request), else as asked last."""
        from confluent_kafka import TopicPartition

        try:
            end = self.consumer.get_watermark_offsets(TopicPartition(self.name, p), cached=True)[1]
        except Exception:  # noqa: BLE001 - not known yet
            end = None
        return end if end is not None and end >= 0 else self.ends.get(p)

    def _ingest_in_tasks(self, tasks: Callable, partitions: list[int], epoch: int, now: datetime) -> None:
        """On a cluster: each partition with messages past where it was read (the driver asks the
        broker for offsets only) is read on to its end and decoded by a Spark task, then appended
        here partition by partition."""
        from confluent_kafka import TopicPartition

        started, ranges = time.monotonic(), []
        for p in partitions:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(self.name, p), timeout=METADATA_SECONDS,
                                                            cached=False)
            if self.next[p] < 0:  # from the beginning: the first offset the broker keeps
                self.next[p] = low
            self.ends[p] = high
            if high > self.next[p]:  # something new: read on to the end the task's fetches see
                ranges.append(KafkaRange(self.t, p, self.next[p], self.next[p] + MAX_EPOCH_MESSAGES))
        taken = 0
        for got in tasks(ranges, f"{self.t.name}'s topic {self.name}") if ranges else []:
            info = json.loads(got.schema.metadata[RANGE_KEY])
            got = Decoded(info["partition"], got.replace_schema_metadata(None), [tuple(b) for b in info["bad"]],
                          info["last"], info["stopped"], info["kept"])
            taken += got.kept + len(got.bad)
            if not self._took(got, epoch, now):
                break
            self.next[got.partition] = max(self.next[got.partition], info["next"])
            self.ends[got.partition] = max(self.ends[got.partition], info["next"])
        if taken:
            self.last = (taken, time.monotonic() - started, epoch)

    def _starts(self, partitions: list[int]) -> dict[int, int]:
        """Where each of ``partitions`` is read from: after the last offset the log applied, else
        where ``scan.startup.mode`` says (recorded under the root the first time)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        channel = self.kafka.channel(self.t)
        starts = {p: channel.producer_seq(_producer(self.t, p)) + 1 for p in partitions}
        fresh = [p for p, s in starts.items() if s == 0]
        mode = self.options["scan.startup.mode"]
        if fresh and mode != "earliest":
            store = self.kafka.store
            recorded = records.read(store, self.t.id, "kafka-start")
            if recorded is None:  # the first read of the table: its start, fixed once
                if mode == "latest":
                    ends = {p: self.consumer.get_watermark_offsets(TopicPartition(self.name, p),
                                                                   timeout=METADATA_SECONDS, cached=False)[1]
                            for p in fresh}
                else:
                    at = int(self.options["scan.startup.timestamp.millis"])
                    found = self.consumer.offsets_for_times([TopicPartition(self.name, p, at) for p in fresh],
                                                            timeout=METADATA_SECONDS)
                    ends = {tp.partition: tp.offset for tp in found}
                recorded = records.fix(store, self.t.id, "kafka-start", {str(p): o for p, o in ends.items()})
            recorded = {int(p): o for p, o in recorded.items()}
            for p in fresh:
                if p in recorded and recorded[p] >= 0:  # a partition added later starts at its beginning
                    starts[p] = recorded[p]
        return {p: (OFFSET_BEGINNING if s == 0 else s) for p, s in starts.items()}

    def _take(self, msgs: list, epoch: int, now: datetime) -> bool:
        """Append ``msgs`` (one chunk) to the table, one append per partition; False when the table
        stopped at a malformed message."""
        parts = np.fromiter((m.partition() for m in msgs), np.int32, len(msgs))
        if (parts == parts[0]).all():
            groups = [(int(parts[0]), msgs)]
        else:
            groups = []
            for p in np.unique(parts):
                idx = np.flatnonzero(parts == p)
                pick = itemgetter(*idx) if len(idx) > 1 else (lambda seq, i=idx[0]: (seq[i],))
                groups.append((int(p), list(pick(msgs))))
        for p, group in groups:
            if not self._took(decoded(self.t, p, group), epoch, now):
                return False
        return True

    def _took(self, got: Decoded, epoch: int, now: datetime) -> bool:
        """One partition's decoded messages: their errors recorded, their rows appended; False when
        the table stopped at a malformed message."""
        p = got.partition
        for offset, err in got.bad:
            where = f"{self.name}/{p}/{offset}"
            self.kafka.errors.seen(self.t.id, "stopped" if got.stopped else "message", where,
                                   f"{err} (on_error = 'stop')" if got.stopped else err, epoch=epoch, now=now)
            log.warning("table %s: message %s %s: %s", self.t.name, where,
                        "stopped the table" if got.stopped else "was skipped", err)
        if got.bad and not got.stopped:
            self.kafka.errors.trim(self.t.id, "message", KEEP_MESSAGES)
        if got.kept:
            self._append(p, got.rows, got.last)
        if got.last >= 0:
            self.next[p] = got.last + 1
        self.taken[p] = self.taken.get(p, 0) + got.kept
        if got.stopped:
            self.stopped = f"{self.name}/{p}/{got.last + 1}"
            return False
        return True

    def _append(self, p: int, rows: pa.Table, last: int) -> None:
        """One append of a partition's rows, idempotent by the partition's last offset."""
        producer = (_producer(self.t, p), last)
        faults.point("kafka.before_append")
        if "_op" not in rows.column_names:
            self.kafka.insert(self.t, self._fit(rows), producer)
            faults.point("kafka.after_append")
            return
        key = list(self.t.primary_key)
        rows = pl.from_arrow(rows).unique(subset=key, keep="last", maintain_order=True)  # a key's last change
        deleted = rows.get_column("_op") < 0
        upserts = rows.filter(~deleted).drop("_op")
        deletes = rows.filter(deleted).select(key)
        self.kafka.apply(self.t, self._fit(upserts.to_arrow()) if upserts.height else None,
                         deletes.to_arrow() if deletes.height else None, producer)
        faults.point("kafka.after_append")

    def _fit(self, rows: pa.Table) -> pa.Table:
        """Decoded rows (conformed to their columns already, by :func:`decode`) with INCLUDE's
        columns, in the table's order and types: not conformed a second time."""
        return rows.select(self.t.schema.names).cast(self.t.schema)

    def status(self) -> list[dict]:
        out = []
        messages, seconds, epoch = self.last
        for p, position in sorted(self.next.items()):
            end = self._end(p)
            position = position if position >= 0 else None
            out.append({"split": f"{self.name}/{p}", "position": position, "upstream_end": end,
                        "lag": max(end - position, 0) if end is not None and position is not None else None,
                        "rows": self.taken.get(p, 0),
                        "rows_per_second": messages / seconds if seconds > 0 else None,
                        "last_epoch": epoch if epoch >= 0 else None})
        return out


def _producer(t: TableDef, p: int) -> str:
    return f"kafka:t{t.id}:{p}"


def _consumer_config(t: TableDef) -> dict[str, Any]:
    # a partition's end is known when a fetch comes back empty: the broker holds an empty fetch
    # for fetch.wait.max.ms (500 by default), which an epoch would wait for every time
    return {"fetch.wait.max.ms": 10, **client_config(dict(t.source)), "group.id": f"millpond-t{t.id}",
            "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest",
            "logger": _quiet}


RANGE_KEY = b"millpond.kafka"  # a range's Decoded (but its rows), in its table's schema metadata


@dataclass
class KafkaRange:
    """Partition ``partition``'s messages from ``start`` on, to the partition's end as the task's
    fetches see it (before ``end`` at most) of table ``t``'s topic: a part a Spark task reads
    (:mod:`millpond.spark.source_tasks`), with its own consumer, and decodes; its :class:`Decoded`
    travels as its rows, the rest in their schema's metadata. (The end is the fetch's, not the one
    the driver asked for: a broker may answer ListOffsets short — Tansu gives its last batch's first
    offset + 1 — where a fetch's end is right.)"""

    t: TableDef
    partition: int
    start: int
    end: int

    def __call__(self) -> pa.Table:
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        options = dict(self.t.source)
        consumer = Consumer(_consumer_config(self.t))
        msgs: list = []
        position = self.start  # past what was read: a message, or the end (transaction markers skipped)
        try:
            consumer.assign([TopicPartition(options["topic"], self.partition, self.start)])
            deadline = time.monotonic() + MAX_SECONDS
            done = False
            while not done and time.monotonic() < deadline:  # what is left past it: the next epoch's
                for m in consumer.consume(CHUNK, timeout=0.2):
                    if (e := m.error()) is not None:
                        if e.code() == KafkaError._PARTITION_EOF:  # before ``end``: a transaction still open
                            done, position = True, max(position, m.offset())
                        elif e.fatal() or not e.retriable():
                            raise KafkaException(e)
                    elif m.offset() >= self.end:
                        done = True
                        break
                    else:
                        msgs.append(m)
                        position = m.offset() + 1
                done = done or bool(msgs) and msgs[-1].offset() >= self.end - 1
        finally:
            consumer.close()
        got = decoded(self.t, self.partition, msgs)
        info = {"partition": got.partition, "bad": got.bad, "last": got.last, "stopped": got.stopped, "kept": got.kept,
                "next": position}
        return got.rows.replace_schema_metadata({RANGE_KEY: json.dumps(info).encode()})


# librdkafka's own log lines (a connection refused, every retry...) go here, silent by default:
# millpond says a broker's problems once, as the table's source error (the logger "millpond").
# logging.getLogger("millpond.kafka.client").propagate = True shows them.
_quiet = logging.getLogger("millpond.kafka.client")
_quiet.propagate = False
_quiet.addHandler(logging.NullHandler())

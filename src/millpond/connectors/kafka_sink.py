"""A Kafka topic a sink writes (``CREATE SINK s FROM v WITH (connector = 'kafka', type = 'upsert' |
'append-only', topic = '...', properties.bootstrap.server = '...'[, properties.<client option>])
FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON``), a :class:`millpond.engine.sink_targets.Target`.

Each message's value is a JSON object (polars writes the rows: one vectorized pass):

- ``FORMAT UPSERT`` (an upsert sink): key = the key's columns, value = the row; a deleted key's
  value is null (a tombstone: compaction forgets the key).
- ``FORMAT DEBEZIUM`` (an upsert sink): key as above, value = ``{"before": ..., "after": ..., "op":
  "u" | "d"}`` (``before`` of a delete holds its key, ``after`` of an upsert its row), what a
  Debezium consumer — millpond's own Kafka source among them — reads.
- ``FORMAT PLAIN``: the rows as they are: an upsert sink's new rows, or an append-only sink's
  changes (with ``_op`` and ``_epoch``); no key.

**Exactly once.** Each write is one Kafka transaction (the producer's ``transactional.id`` is the
sink's token); every message carries the headers ``millpond-sink`` (the token) and
``millpond-epoch``. :meth:`KafkaTarget.written` reads each partition backwards from its end
(``read_committed``) to the last message of the token, and takes the highest epoch: a restart
writes only the epochs after it; an aborted transaction is never read. A broker that refuses a
transactional producer fails a ``FORMAT PLAIN`` sink's writes, saying so; an ``UPSERT`` or
``DEBEZIUM`` sink writes with an idempotent producer instead, with a warning: a write replayed
after a crash sends its keys' messages again, with the same values (exact for a consumer keeping
each key's last value).
"""

from __future__ import annotations

import io
import logging
import time

import polars as pl
import pyarrow as pa


from millpond.engine.sink_targets import DELETE, OP
from millpond.errors import SqlError
from millpond.work import current_work

__all__ = ["KafkaTarget", "check_options"]

log = logging.getLogger("millpond")
quiet = logging.getLogger("millpond.kafka.client")  # librdkafka's own lines: silent unless asked

FORMATS = ("plain", "upsert", "debezium")
SINK, EPOCH = "millpond-sink", "millpond-epoch"
BACK = 500  # messages a lookup of the last epoch reads per step back through a partition
TIMEOUT = 30.0
PROGRESS_MESSAGES = 10_000  # a write's progress is told every so many messages


def check_options(name: str, options: dict[str, str], kind: str, sql: str) -> str:
    """A Kafka sink's options checked (the format from ``FORMAT ... ENCODE``); where it writes."""
    unknown = sorted(k for k in options if k not in ("topic", "format", "encode") and not k.startswith("properties."))
    if unknown:
        raise SqlError(f"CREATE SINK {name}: unknown option {unknown[0]!r} for connector 'kafka' (known: connector, "
                       "type, topic, properties.bootstrap.server, properties.<client option>; FORMAT ... ENCODE JSON)",
                       sql=sql)
    for need in ("topic", "properties.bootstrap.server"):
        if not options.get(need):
            raise SqlError(f"CREATE SINK {name}: connector 'kafka' needs {need} = '...'", sql=sql)
    fmt = options.setdefault("format", "upsert" if kind == "upsert" else "plain")
    if fmt not in FORMATS:
        raise SqlError(f"CREATE SINK {name}: FORMAT {fmt.upper()} is not supported (known: PLAIN, UPSERT, DEBEZIUM)",
                       sql=sql)
    if options.setdefault("encode", "json") != "json":
        raise SqlError(f"CREATE SINK {name}: ENCODE {options['encode'].upper()} is not supported for a sink (JSON is)",
                       sql=sql)
    if fmt != "plain" and kind != "upsert":
        raise SqlError(f"CREATE SINK {name}: FORMAT {fmt.upper()} needs type = 'upsert' (a key's changes), "
                       "FORMAT PLAIN writes an append-only sink's", sql=sql)
    return f"Kafka topic {options['topic']!r} at {options['properties.bootstrap.server']}"


def _client(options: dict[str, str], **more) -> dict:
    config = {k.removeprefix("properties."): v for k, v in options.items() if k.startswith("properties.")}
    config["bootstrap.servers"] = config.pop("bootstrap.server")
    return {**config, "logger": quiet, **more}


def _json_lines(frame: pl.DataFrame) -> list[bytes]:
    """Each row of ``frame`` as a JSON object (polars: decimals and times as JSON strings)."""
    if frame.height == 0:
        return []
    out = io.BytesIO()
    frame.write_ndjson(out)
    return out.getvalue().splitlines()


def _frame(rows: pa.Table) -> pl.DataFrame:
    """``rows`` for polars (a JSONB column as its JSON text)."""
    from millpond import jsonb

    return pl.DataFrame({name: pl.Series(name, jsonb.texts(col), pl.Utf8) if jsonb.is_jsonb(col.type)
                         else pl.from_arrow(col) for name, col in zip(rows.column_names, rows.columns)})


class KafkaTarget:
    """One Kafka topic, written one transaction per write."""

    def __init__(self, options: dict[str, str]):
        self.options = options
        self.topic = options["topic"]
        self._producer = None
        self._token = None
        self._transactions = True  # False: the broker refused a transactional producer (keyed formats go on)

    def forget(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
        self._producer = None

    def _partitions(self) -> list[int] | None:
        from confluent_kafka.admin import AdminClient

        meta = AdminClient(_client(self.options)).list_topics(self.topic, timeout=TIMEOUT)
        found = meta.topics.get(self.topic)
        if found is None or found.error is not None:
            return None
        return sorted(found.partitions)

    def rows(self) -> int | None:
        from confluent_kafka import Consumer, TopicPartition

        parts = self._partitions()
        if not parts:
            return None
        consumer = Consumer(_client(self.options, **{"group.id": "millpond-sink-check"}))
        try:
            held = sum(hi - lo for lo, hi in (consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                                             timeout=TIMEOUT) for p in parts))
        finally:
            consumer.close()
        return held or None  # an empty topic is taken as the sink's own

    def written(self, token: str) -> int | None:
        """The highest epoch of ``token``'s committed messages: each partition read backwards from
        its end, ``BACK`` messages a step, to its last message of the token."""
        from confluent_kafka import Consumer, TopicPartition

        parts = self._partitions()
        if not parts:
            return None
        consumer = Consumer(_client(self.options, **{"group.id": f"{token}-lookup", "isolation.level": "read_committed",
                                                     "enable.auto.commit": False, "enable.partition.eof": True}))
        best = None
        try:
            for p in parts:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=TIMEOUT)
                end = hi
                while end > lo:
                    start = max(lo, end - BACK)
                    found = self._last_epoch(consumer, p, start, end, token)
                    if found is not None:
                        best = found if best is None else max(best, found)
                        break
                    end = start
        finally:
            consumer.close()
        return best

    def _last_epoch(self, consumer, partition: int, start: int, end: int, token: str) -> int | None:  # noqa: ANN001
        from confluent_kafka import KafkaError, TopicPartition

        consumer.assign([TopicPartition(self.topic, partition, start)])
        found, deadline = None, time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for m in consumer.consume(BACK, timeout=0.1):  # what has come (consume waits for all BACK else)
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return found
                    raise RuntimeError(f"Kafka topic {self.topic!r}: {m.error()}")
                if m.offset() >= end:
                    return found
                headers = dict(m.headers() or [])
                if headers.get(SINK) == token.encode():
                    found = int(headers[EPOCH])
                if m.offset() >= end - 1:
                    return found
        raise RuntimeError(f"Kafka topic {self.topic!r} partition {partition}: no answer in {TIMEOUT:.0f} s")

    def _begin(self, token: str):  # noqa: ANN202
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        if self._producer is None or self._token != token:
            if self._partitions() is None:
                admin = AdminClient(_client(self.options))
                admin.create_topics([NewTopic(self.topic, num_partitions=1)])[self.topic].result(TIMEOUT)
            producer = Producer(_client(self.options, **{"transactional.id": token, "linger.ms": 5}))
            self._transactions = True
            try:
                producer.init_transactions(TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - said with what it means
                where = f"the broker at {self.options['properties.bootstrap.server']}"
                if self.options.get("format") == "plain":
                    raise RuntimeError(f"{where} refused a transactional producer ({exc}); a FORMAT PLAIN Kafka sink "
                                       "writes exactly once only through Kafka transactions") from None
                log.warning("Kafka sink to %r: %s refused a transactional producer (%s): writing with an idempotent "
                            "producer instead; a write replayed after a crash sends its keys' messages again (the "
                            "same values: a consumer keeping each key's last is exact, one reading every message "
                            "sees them twice)", self.topic, where, exc)
                producer = Producer(_client(self.options, **{"enable.idempotence": True, "linger.ms": 5}))
                self._transactions = False
            self._producer, self._token = producer, token
        if self._transactions:
            self._producer.begin_transaction()
        return self._producer

    def _send(self, token: str, epoch: int, values: list[bytes | None], keys: list[bytes] | None) -> None:
        producer = self._begin(token)
        headers = [(SINK, token.encode()), (EPOCH, str(epoch).encode())]
        work = current_work()  # a first write's progress (SHOW JOBS): its messages handed to the client
        try:
            failed = []
            for i, value in enumerate(values):
                if i and i % PROGRESS_MESSAGES == 0:
                    work.did(PROGRESS_MESSAGES)
                while True:
                    try:
                        producer.produce(self.topic, value=value, key=None if keys is None else keys[i], headers=headers,
                                         on_delivery=lambda err, _m: err and failed.append(err))
                        break
                    except BufferError:
                        producer.poll(0.1)
            work.did(len(values) % PROGRESS_MESSAGES or min(len(values), PROGRESS_MESSAGES))  # the rest
            if self._transactions:
                producer.commit_transaction(TIMEOUT)
            elif producer.flush(TIMEOUT):
                raise RuntimeError(f"Kafka topic {self.topic!r}: messages not delivered in {TIMEOUT:.0f} s")
            if failed:
                raise RuntimeError(f"Kafka topic {self.topic!r}: {failed[0]}")
        except BaseException:
            try:
                if self._transactions:
                    producer.abort_transaction(TIMEOUT)
            except Exception:  # noqa: BLE001 - the producer is made anew next time
                pass
            self._producer = None
            raise

    def append(self, rows: pa.Table, token: str, epoch: int) -> None:
        self._send(token, epoch, _json_lines(_frame(rows)), None)

    def upsert(self, rows: pa.Table, key: tuple[str, ...], token: str, epoch: int) -> None:
        frame = _frame(rows)
        fmt = self.options.get("format", "upsert")
        gone = (frame[OP] == DELETE).to_list()
        data = frame.drop(OP)
        if fmt == "plain":  # the new rows only, without keys
            self._send(token, epoch, _json_lines(data.filter(frame[OP] != DELETE)), None)
            return
        keys = _json_lines(data.select(list(key)))
        if fmt == "upsert":
            values = _json_lines(data)
            self._send(token, epoch, [None if g else v for g, v in zip(gone, values)], keys)
            return
        after = data.select(pl.struct(data.columns).alias("after"))["after"]
        before = data.select(pl.struct(list(key)).alias("before"))["before"]
        events = pl.DataFrame({
            "before": pl.select(pl.when(pl.Series(gone)).then(before).otherwise(None)).to_series(),
            "after": pl.select(pl.when(pl.Series(gone)).then(None).otherwise(after)).to_series(),
            "op": pl.select(pl.when(pl.Series(gone)).then(pl.lit("d")).otherwise(pl.lit("u"))).to_series()})
        self._send(token, epoch, _json_lines(events), keys)

    def compact(self) -> None:
        pass  # a topic's retention and compaction are the broker's

    def files(self) -> int:
        return 0

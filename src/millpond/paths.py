"""Every object key under a root is built here, and nowhere else.

Layout::

    catalog/<version:010d>.json                    catalog versions (put-if-absent)
    manifest/<version:020d>.json                   one state version: an epoch commit or a compaction
    log/config.json                                number of physical channels (fixed at the first channel)
    log/channels/<name>.json                       a channel: id, physical channel, Arrow schema
    log/p<k>/LOCK                                  flock of the live writer (local roots)
    log/p<k>/writers/<gen:010d>.json               writer generations (put-if-absent; a newer one fences)
    log/p<k>/wal/<gen:010d>-<n:06d>.wal            a WAL segment: a file (local) or a folder of chunks
    log/p<k>/wal/<gen:010d>-<n:06d>.sealed         its final valid length (see log/wal.py)
    log/p<k>/ckpt/<gen:010d>-<n:06d>.json          flushed through this segment: producers, tick
    log/data/<channel id>/<first>-<end>-<tick>.parquet   flushed records (020d numbers)
    log/data/<channel id>/start-<seq:020d>         retention: records below seq were truncated
    log/staging/<channel>/<id>.arrow               Spark sink tasks' rows until the driver commits; forwarded rows
    log/p<k>/inbox/<forwarder>-<n:012d>.json       an append forwarded to the writer of p<k> (log/forward.py)
    log/p<k>/inbox/<forwarder>-<n:012d>.done       the writer's answer to it
    scan/<channel id>/<k>.json                     the range an epoch's k-th scan of a channel reads (rewritten)
    sst/<version:020d>-e<epoch:020d>.<attempt>/<state>/p<part>.sst   state of one task in one epoch attempt
    sst/<version:020d>-c.<task>/<state>/<n>.sst    outputs of one compaction
    pin/<id>.json                                  a reader's pin (epoch, version): GC keeps its files
    sinks/<token>.json                             a sink's last epoch past which nothing is owed (engine/sinks.py)
    sinks/pending/<name, hex>.json                 a sink whose CREATE SINK wrote its target, not yet the catalog
    files/t<table id>/<n:010d>.json                the n-th file a files table took (connectors/files.py)
    sources/t<table id>/<name>.json                a source table's own record (connectors/kafka.py: start offsets)
    sources/staging/<read id>/<part>.arrow         a part of a source read by a Spark task, until appended
    changes/epochs/<epoch:020d>.json               a committed epoch: when, the views it changed (engine/changefeed.py)
    changes/<view key>/<epoch:020d>.parquet        one view's (or flow's) changes in that epoch
"""

from __future__ import annotations

import re
import uuid

__all__ = [
    "random_id",
    "catalog_key",
    "CATALOG_PREFIX",
    "manifest_key",
    "MANIFEST_PREFIX",
    "LOG_CHANNELS_PREFIX",
    "log_channel_key",
    "log_data_prefix",
    "log_data_key",
    "parse_log_data_key",
    "log_start_key",
    "LOG_CONFIG_KEY",
    "log_lock_key",
    "log_writers_prefix",
    "log_writer_key",
    "parse_log_writer_gen",
    "log_wal_prefix",
    "log_segment_key",
    "log_seal_key",
    "log_chunk_key",
    "parse_log_wal_key",
    "log_ckpt_prefix",
    "log_ckpt_key",
    "log_staging_key",
    "log_inbox_prefix",
    "log_request_key",
    "log_answer_key",
    "scan_key",
    "SST_PREFIX",
    "PIN_PREFIX",
    "sst_attempt_prefix",
    "sst_compaction_prefix",
    "sst_key",
    "parse_sst_version",
    "parse_sst_state",
    "pin_key",
    "sink_key",
    "sink_pending_key",
    "files_prefix",
    "files_key",
    "CHANGES_EPOCHS_PREFIX",
    "changes_part_key",
    "changes_epoch_prefix",
    "changes_epoch_key",
    "changes_key",
    "parse_numbered",
]

CATALOG_PREFIX = "catalog/"
MANIFEST_PREFIX = "manifest/"


def catalog_key(version: int) -> str:
    return f"{CATALOG_PREFIX}{version:010d}.json"


def manifest_key(epoch: int) -> str:
    return f"{MANIFEST_PREFIX}{epoch:020d}.json"


def parse_numbered(key: str) -> int:
    return int(key.rsplit("/", 1)[-1].split(".", 1)[0])


LOG_CHANNELS_PREFIX = "log/channels/"


def log_channel_key(name: str) -> str:
    return f"{LOG_CHANNELS_PREFIX}{name}.json"


def log_data_prefix(channel_id: str) -> str:
    return f"log/data/{channel_id}/"


def log_data_key(channel_id: str, first: int, end: int, tick: int) -> str:
    return f"{log_data_prefix(channel_id)}{first:020d}-{end:020d}-{tick:020d}.parquet"


def parse_log_data_key(key: str) -> tuple[int, int, int]:
    """(first, end, tick) of a flushed file."""
    first, end, tick = key.rsplit("/", 1)[-1][:-len(".parquet")].split("-")
    return int(first), int(end), int(tick)


def log_start_key(channel_id: str, seq: int) -> str:
    return f"{log_data_prefix(channel_id)}start-{seq:020d}"


LOG_CONFIG_KEY = "log/config.json"


def log_lock_key(pchannel: int) -> str:
    return f"log/p{pchannel}/LOCK"


def log_writers_prefix(pchannel: int) -> str:
    return f"log/p{pchannel}/writers/"


def log_writer_key(pchannel: int, gen: int) -> str:
    return f"{log_writers_prefix(pchannel)}{gen:010d}.json"


def parse_log_writer_gen(key: str) -> int:
    return parse_numbered(key)


def log_wal_prefix(pchannel: int) -> str:
    return f"log/p{pchannel}/wal/"


def log_segment_key(pchannel: int, gen: int, n: int) -> str:
    """A WAL segment: a file (local root) or a folder of chunk objects (object storage)."""
    return f"{log_wal_prefix(pchannel)}{gen:010d}-{n:06d}.wal"


def log_seal_key(pchannel: int, gen: int, n: int) -> str:
    return f"{log_wal_prefix(pchannel)}{gen:010d}-{n:06d}.sealed"


def log_chunk_key(pchannel: int, gen: int, n: int, offset: int) -> str:
    return f"{log_segment_key(pchannel, gen, n)}/{offset:020d}"


_WAL_KEY = re.compile(r"^log/p(\d+)/wal/(\d{10})-(\d{6})\.(wal|sealed)(?:/(\d{20}))?$")


def parse_log_wal_key(key: str) -> tuple[int, int, int, str, int | None] | None:
    """(pchannel, gen, n, "wal" or "sealed", chunk offset or None) of a WAL key, else None."""
    m = _WAL_KEY.match(key)
    if m is None or (m.group(4) == "sealed" and m.group(5) is not None):
        return None
    chunk = m.group(5)
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4), int(chunk) if chunk is not None else None


def log_ckpt_prefix(pchannel: int) -> str:
    return f"log/p{pchannel}/ckpt/"


def log_ckpt_key(pchannel: int, gen: int, n: int) -> str:
    """Written when segment (gen, n) is flushed: producers and tick up to it."""
    return f"{log_ckpt_prefix(pchannel)}{gen:010d}-{n:06d}.json"


def log_staging_key(channel: str, staged_id: str) -> str:
    return f"log/staging/{channel}/{staged_id}.arrow"


def log_inbox_prefix(pchannel: int) -> str:
    return f"log/p{pchannel}/inbox/"


def log_request_key(pchannel: int, forwarder: str, n: int) -> str:
    """Sorted by name, one forwarder's requests are in the order it made them."""
    return f"{log_inbox_prefix(pchannel)}{forwarder}-{n:012d}.json"


def log_answer_key(request_key: str) -> str:
    return request_key[:-len(".json")] + ".done"


def scan_key(channel_id: str, k: int) -> str:
    return f"scan/{channel_id}/{k}.json"


SST_PREFIX = "sst/"
PIN_PREFIX = "pin/"


def sst_attempt_prefix(base_version: int, epoch: int, attempt: str) -> str:
    """Files written for ``epoch`` by one attempt of a writer holding version ``base_version``."""
    return f"{SST_PREFIX}{base_version:020d}-e{epoch:020d}.{attempt}/"


def sst_compaction_prefix(base_version: int, task_id: str) -> str:
    return f"{SST_PREFIX}{base_version:020d}-c.{task_id}/"


def sst_key(base_version: int, epoch: int, attempt: str, state: str, partition: int, step: str = "") -> str:
    """A task's state file; ``step`` names one of its steps over a slice of its keys (``-00``...)."""
    return f"{sst_attempt_prefix(base_version, epoch, attempt)}{state}/p{partition:05d}{step}.sst"


def parse_sst_version(key: str) -> int:
    """The version a file's writer held when it wrote the file (GC spares newer ones)."""
    return int(key[len(SST_PREFIX):len(SST_PREFIX) + 20])


def parse_sst_state(key: str) -> str:
    """The state id of an SST key."""
    return key.split("/")[2]


def pin_key(pin_id: str) -> str:
    return f"{PIN_PREFIX}{pin_id}.json"


def sink_key(token: str) -> str:
    return f"sinks/{token}.json"


def sink_pending_key(name: str) -> str:
    return f"sinks/pending/{name.encode().hex()}.json"


def files_prefix(table_id: int) -> str:
    return f"files/t{table_id}/"


def files_key(table_id: int, n: int) -> str:
    return f"{files_prefix(table_id)}{n:010d}.json"


def source_key(table_id: int, name: str) -> str:
    """A source table's record of its own (a Kafka table's start offsets)."""
    return f"sources/t{table_id}/{name}.json"


SOURCE_STAGING = "sources/staging/"


def source_staging_key(read_id: str, part: int) -> str:
    """One part of a source read in Spark tasks (spark/source_tasks.py), until the driver appends it."""
    return f"{SOURCE_STAGING}{read_id}/{part:08d}.arrow"


def random_id() -> str:
    """A fresh random id for a key (attempts, compactions, pins). Components that name objects
    take an ``ids`` callable defaulting to this, so tests can make names deterministic."""
    return uuid.uuid4().hex


CHANGES_EPOCHS_PREFIX = "changes/epochs/"


def changes_epoch_key(epoch: int) -> str:
    return f"{CHANGES_EPOCHS_PREFIX}{epoch:020d}.json"


def changes_key(view_key: str, epoch: int) -> str:
    return f"changes/{view_key}/{epoch:020d}.parquet"


def changes_part_key(view_key: str, epoch: int, attempt: str, partition: int, step: str = "") -> str:
    """A view's changes in ``epoch`` written by one task of one attempt (its files are listed in
    the epoch's entry: a failed attempt's never are); ``step``: of one of its steps (``-g00``...)."""
    return f"{changes_epoch_prefix(view_key, epoch)}{attempt}-{partition:05d}{step}.parquet"


def changes_epoch_prefix(view_key: str, epoch: int) -> str:
    return f"changes/{view_key}/{epoch:020d}/"

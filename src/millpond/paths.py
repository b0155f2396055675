"""Every object key under a root is built here, and nowhere else.

Layout::

    catalog/<version:010d>.json                    catalog versions (put-if-absent)
    manifest/<version:020d>.json                   one state version: an epoch commit or a compaction
    log/<channel>/<first_seq:020d>.arrow           one durable append (put-if-absent)
    sst/<version:020d>-e<epoch:020d>.<attempt>/<state>/p<part>.sst   state of one task in one epoch attempt
    sst/<version:020d>-c.<task>/<state>/<n>.sst    outputs of one compaction
    pin/<id>.json                                  a reader's pin (epoch, version): GC keeps its files
"""

from __future__ import annotations

__all__ = [
    "catalog_key",
    "CATALOG_PREFIX",
    "manifest_key",
    "MANIFEST_PREFIX",
    "log_prefix",
    "log_segment_key",
    "parse_log_segment",
    "SST_PREFIX",
    "PIN_PREFIX",
    "sst_attempt_prefix",
    "sst_compaction_prefix",
    "sst_key",
    "parse_sst_version",
    "parse_sst_state",
    "pin_key",
]

CATALOG_PREFIX = "catalog/"
MANIFEST_PREFIX = "manifest/"


def catalog_key(version: int) -> str:
    return f"{CATALOG_PREFIX}{version:010d}.json"


def manifest_key(epoch: int) -> str:
    return f"{MANIFEST_PREFIX}{epoch:020d}.json"


def parse_numbered(key: str) -> int:
    return int(key.rsplit("/", 1)[-1].split(".", 1)[0])


def log_prefix(channel: str) -> str:
    return f"log/{channel}/"


def log_segment_key(channel: str, first_seq: int) -> str:
    return f"{log_prefix(channel)}{first_seq:020d}.arrow"


def parse_log_segment(key: str) -> int:
    return parse_numbered(key)


SST_PREFIX = "sst/"
PIN_PREFIX = "pin/"


def sst_attempt_prefix(base_version: int, epoch: int, attempt: str) -> str:
    """Files written for ``epoch`` by one attempt of a writer holding version ``base_version``."""
    return f"{SST_PREFIX}{base_version:020d}-e{epoch:020d}.{attempt}/"


def sst_compaction_prefix(base_version: int, task_id: str) -> str:
    return f"{SST_PREFIX}{base_version:020d}-c.{task_id}/"


def sst_key(base_version: int, epoch: int, attempt: str, state: str, partition: int) -> str:
    return f"{sst_attempt_prefix(base_version, epoch, attempt)}{state}/p{partition:05d}.sst"


def parse_sst_version(key: str) -> int:
    """The version a file's writer held when it wrote the file (GC spares newer ones)."""
    return int(key[len(SST_PREFIX):len(SST_PREFIX) + 20])


def parse_sst_state(key: str) -> str:
    """The state id of an SST key."""
    return key.split("/")[2]


def pin_key(pin_id: str) -> str:
    return f"{PIN_PREFIX}{pin_id}.json"

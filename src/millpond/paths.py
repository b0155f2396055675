"""Every object key under a root is built here, and nowhere else.

Layout::

    catalog/<version:010d>.json                    catalog versions (put-if-absent)
    manifest/<epoch:020d>.json                     one committed epoch (put-if-absent)
    log/<channel>/<first_seq:020d>.arrow           one durable append (put-if-absent)
    sst/<epoch:020d>-<attempt>/<state>/<part>.arrow  state written by one task in one epoch attempt
"""

from __future__ import annotations

import re

__all__ = [
    "catalog_key",
    "CATALOG_PREFIX",
    "manifest_key",
    "MANIFEST_PREFIX",
    "log_prefix",
    "log_segment_key",
    "parse_log_segment",
    "sst_attempt_prefix",
    "sst_key",
    "parse_sst_key",
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


def sst_attempt_prefix(epoch: int, attempt: str) -> str:
    return f"sst/{epoch:020d}-{attempt}/"


def sst_key(epoch: int, attempt: str, state: str, partition: int, vnodes_hex: str) -> str:
    return f"{sst_attempt_prefix(epoch, attempt)}{state}/p{partition:05d}-{vnodes_hex}.arrow"


_SST = re.compile(r"^sst/(\d{20})-[0-9a-f]+/(.+)/p\d{5}-([0-9a-f]+)\.arrow$")


def parse_sst_key(key: str) -> tuple[int, str, str]:
    """Return (epoch, state id, vnode bitmap hex) of an SST key."""
    m = _SST.match(key)
    if m is None:
        raise ValueError(f"not an SST key: {key!r}")
    return int(m.group(1)), m.group(2), m.group(3)

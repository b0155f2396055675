"""A source table's own records under the root (``sources/t<id>/<name>.json``): what it fixed
once and must find again after a restart — a Kafka table's start offsets, a Delta table's snapshot
version. Written once (put-if-absent: a second writer's record never replaces the first)."""

from __future__ import annotations

import json

from millpond import paths
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["read", "fix"]


def read(store: ObjectStore, table_id: int, name: str) -> dict | None:
    """The record ``name`` of table ``table_id``, or None when it was never written."""
    key = paths.source_key(table_id, name)
    if key not in store.list(key.rsplit("/", 1)[0] + "/"):
        return None
    return json.loads(store.get(key))


def fix(store: ObjectStore, table_id: int, name: str, record: dict) -> dict:
    """Write ``record`` unless one is there already; the record in force."""
    try:
        store.put_if_absent(paths.source_key(table_id, name), json.dumps(record).encode())
    except AlreadyExists:
        return read(store, table_id, name)
    return record

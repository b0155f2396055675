"""Manifest versions: one JSON object per version, numbered consecutively, written with put-if-absent.

A version holds **together** the last committed epoch, every state table's levels of SSTs and
every consumer's source end offsets. Two kinds of change write a version: an epoch commit
(new L0 files + offsets; the single atomic step that makes the epoch visible) and a compaction
(files replaced by equivalent merged files; the epoch does not change). A reader or a restarted
coordinator that loads a version sees exactly the state of its epoch and knows where to resume
reading the log.

Fencing: a writer writes version ``v + 1`` only on top of the version ``v`` it holds. Two writers
on one root cannot both write ``v + 1``: the second put-if-absent fails and that writer is fenced
with a :class:`FencedError`; the first keeps working and nothing it wrote is touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from millpond import paths
from millpond.errors import FencedError, StorageError
from millpond.store.objects import AlreadyExists, ObjectStore
from millpond.store.sst import SstRef

__all__ = ["Levels", "Manifest", "ManifestStore", "FORMAT_VERSION"]

# 2: materialized rows and MIN/MAX/DISTINCT value multisets are additive (count deltas summed on
#    read); format 1 stored them as full counts, which a format-2 reader would sum wrongly.
# 3: numbered versions with levels of block-indexed SSTs whose rows carry their epoch (``_ep``).
FORMAT_VERSION = 3


@dataclass(frozen=True)
class Levels:
    """One state table's files: L0 (overlapping runs, newest first) and L1.. (each a sorted run
    split into files with disjoint key ranges, ordered by key)."""

    l0: tuple[SstRef, ...] = ()
    levels: tuple[tuple[SstRef, ...], ...] = ()

    def files(self) -> tuple[SstRef, ...]:
        return (*self.l0, *(ref for level in self.levels for ref in level))

    def __bool__(self) -> bool:
        return bool(self.l0) or any(self.levels)

    @cached_property
    def starts(self) -> tuple[np.ndarray, ...]:
        """Per level ≥ 1: the files' smallest keys (a multi-get maps keys to files with one search)."""
        return tuple(np.array([ref.min_kh for ref in level], dtype=np.int64) for level in self.levels)

    def to_json(self) -> dict:
        return {"l0": [r.to_json() for r in self.l0], "levels": [[r.to_json() for r in lv] for lv in self.levels]}

    @classmethod
    def from_json(cls, body: dict) -> "Levels":
        return cls(tuple(SstRef.from_json(r) for r in body["l0"]),
                   tuple(tuple(SstRef.from_json(r) for r in lv) for lv in body["levels"]))


@dataclass(frozen=True)
class Manifest:
    version: int = 0
    epoch: int = 0
    safe_epoch: int = 0  # reads below it may see compacted (merged) history: refused
    states: dict[str, Levels] = field(default_factory=dict)
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # consumer -> channel -> end
    # consumer -> why it stopped (a view's data error): it sits out epochs, its state and offsets
    # stay at its last good epoch (the coordinator's fault isolation)
    failed: dict[str, dict] = field(default_factory=dict)
    # state -> [time column, floor in microseconds since 1970(, key floor)]: its rows of keys with an
    # older time are never read again (a flow's expired windows), and compaction drops them; with a
    # key floor (a state in time order), every key below it is of an older time
    expiry: dict[str, list] = field(default_factory=dict)
    # state -> the Arrow schema (IPC, base64) of columns its older files lack, with their defaults (a
    # table's rows state after ALTER TABLE ... ADD COLUMN): compaction fills them into what it merges
    defaults: dict[str, str] = field(default_factory=dict)
    # consumer -> [parts done, parts]: a view backfilling in bounded epochs (the coordinator's
    # ``Filling``): its keyed tables' rows read one slice of key hashes an epoch; unread: not current
    filling: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT_VERSION,
            "version": self.version,
            "epoch": self.epoch,
            "safe_epoch": self.safe_epoch,
            "states": {sid: levels.to_json() for sid, levels in sorted(self.states.items())},
            "offsets": self.offsets,
            "failed": self.failed,
            **({"expiry": self.expiry} if self.expiry else {}),
            **({"defaults": self.defaults} if self.defaults else {}),
            **({"filling": self.filling} if self.filling else {}),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "manifest") -> "Manifest":
        body = json.loads(data)
        if body.get("format") != FORMAT_VERSION:
            raise StorageError(
                f"{where} has state format {body.get('format')!r}; this millpond reads format {FORMAT_VERSION} "
                "only: open the root with the millpond version that wrote it, or start a new root")
        return cls(
            version=body["version"],
            epoch=body["epoch"],
            safe_epoch=body["safe_epoch"],
            states={sid: Levels.from_json(lv) for sid, lv in body["states"].items()},
            offsets=body["offsets"],
            failed=body.get("failed", {}),
            expiry=body.get("expiry", {}),
            defaults=body.get("defaults", {}),
            filling=body.get("filling", {}),
        )

    def state(self, state_id: str) -> Levels:
        return self.states.get(state_id, Levels())

    def files(self) -> set[str]:
        return {ref.key for levels in self.states.values() for ref in levels.files()}


class ManifestStore:
    def __init__(self, store: ObjectStore):
        self.store = store

    def versions(self) -> list[int]:
        return [paths.parse_numbered(k) for k in self.store.list(paths.MANIFEST_PREFIX)]

    def latest(self) -> Manifest:
        keys = self.store.list(paths.MANIFEST_PREFIX)
        if not keys:
            return Manifest()
        return self.load(paths.parse_numbered(keys[-1]))

    def load(self, version: int) -> Manifest:
        key = paths.manifest_key(version)
        return Manifest.from_json(self.store.get(key), f"manifest {key!r} under {self.store.root!r}")

    def commit(self, manifest: Manifest) -> None:
        """Atomically publish ``manifest``; raise FencedError if its version number is taken, or if a
        newer version exists (garbage collection removes old versions, so a very stale writer could
        otherwise recreate a deleted number: its version is then never the latest, and it stops)."""
        fenced = FencedError(
            f"manifest version {manifest.version} (epoch {manifest.epoch}) under {self.store.root!r} was "
            "written by another writer; this coordinator is fenced and must reopen the root")
        try:
            self.store.put_if_absent(paths.manifest_key(manifest.version), manifest.to_json())
        except AlreadyExists:
            raise fenced from None
        newest = self.store.list(paths.MANIFEST_PREFIX)[-1]
        if paths.parse_numbered(newest) != manifest.version:
            raise fenced

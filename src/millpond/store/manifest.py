"""Manifest versions: one JSON object per committed epoch, written with put-if-absent.

A version holds **together** the epoch, every state table's SST list and every consumer's
source end offsets. Writing it is the single atomic step that commits an epoch; a reader
(or a restarted coordinator) that loads version ``e`` sees exactly the state of epoch ``e``
and knows exactly where to resume reading the log. Two coordinators on one root cannot both
commit ``e``: the second put-if-absent fails and that writer is fenced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from millpond import paths
from millpond.errors import FencedError, StorageError
from millpond.store.objects import AlreadyExists, ObjectStore
from millpond.store.sst import SstRef

__all__ = ["Manifest", "ManifestStore"]

# 2: materialized rows and MIN/MAX/DISTINCT value multisets are additive (count deltas summed on
#    read); format 1 stored them as full counts, which a format-2 reader would sum wrongly.
FORMAT_VERSION = 2


@dataclass(frozen=True)
class Manifest:
    epoch: int
    ssts: dict[str, tuple[SstRef, ...]] = field(default_factory=dict)
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # consumer -> channel -> end

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT_VERSION,
            "epoch": self.epoch,
            "ssts": {state: [ref.to_json() for ref in refs] for state, refs in sorted(self.ssts.items())},
            "offsets": self.offsets,
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
            epoch=body["epoch"],
            ssts={state: tuple(SstRef.from_json(r) for r in refs) for state, refs in body["ssts"].items()},
            offsets=body["offsets"],
        )

    def state(self, state_id: str) -> tuple[SstRef, ...]:
        return self.ssts.get(state_id, ())


class ManifestStore:
    def __init__(self, store: ObjectStore):
        self.store = store

    def latest(self) -> Manifest:
        keys = self.store.list(paths.MANIFEST_PREFIX)
        if not keys:
            return Manifest(epoch=0)
        return Manifest.from_json(self.store.get(keys[-1]), f"manifest {keys[-1]!r} under {self.store.root!r}")

    def commit(self, manifest: Manifest) -> None:
        """Atomically publish ``manifest``; raise FencedError if its epoch is already taken."""
        try:
            self.store.put_if_absent(paths.manifest_key(manifest.epoch), manifest.to_json())
        except AlreadyExists:
            raise FencedError(
                f"epoch {manifest.epoch} under {self.store.root!r} was committed by another writer; "
                "this coordinator is fenced and must reopen the root"
            ) from None

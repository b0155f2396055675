"""Per-table channels of changelog records on object storage.

A channel is a sequence of records numbered from 0. ``append`` writes one batch as one
immutable segment object named by its first sequence number, with put-if-absent (so a second
writer on the channel is fenced) and an fsync on local folders: when ``append`` returns, the
batch is durable, and a crash leaves either the whole batch or none of it. Records are
changelog rows: the table's columns, ``_row_id`` and ``_w`` (+1 insert, -1 delete).
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass

import pyarrow as pa

from millpond import faults, paths
from millpond.errors import FencedError, SchemaError
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["Log", "Channel", "Segment"]


@dataclass(frozen=True)
class Segment:
    key: str
    first: int
    count: int

    @property
    def end(self) -> int:
        return self.first + self.count


class Channel:
    def __init__(self, store: ObjectStore, name: str, schema: pa.Schema):
        self.store, self.name, self.schema = store, name, schema
        self._lock = threading.Lock()
        self._segments: list[Segment] = list_segments(store, name)

    @property
    def end(self) -> int:
        """The sequence number the next appended record gets."""
        return self._segments[-1].end if self._segments else 0

    def append(self, batch: pa.Table) -> tuple[int, int]:
        """Durably append ``batch``; return its ``[first, end)`` sequence range."""
        if batch.num_rows == 0:
            return self.end, self.end
        if not batch.schema.equals(self.schema):
            raise SchemaError(f"channel {self.name!r} expects schema {self.schema}, got {batch.schema}")
        sink = io.BytesIO()
        with pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_table(batch)
        with self._lock:
            first = self.end
            key = paths.log_segment_key(self.name, first)
            faults.point("log.before_put")
            try:
                self.store.put_if_absent(key, sink.getvalue())
            except AlreadyExists:
                raise FencedError(f"log channel {self.name!r}: sequence {first} was written by another writer") from None
            self._segments.append(Segment(key, first, batch.num_rows))
            faults.point("log.after_put")
            return first, first + batch.num_rows

    def segments(self, start: int, stop: int) -> list[Segment]:
        """Segments overlapping ``[start, stop)``."""
        return [s for s in self._segments if s.first < stop and s.end > start]

    def read(self, start: int, stop: int) -> pa.Table:
        """Records ``[start, stop)`` as one table (deterministic replay)."""
        parts = [read_segment(self.store, s, start, stop) for s in self.segments(start, stop)]
        return pa.concat_tables(parts) if parts else self.schema.empty_table()


def list_segments(store: ObjectStore, channel: str) -> list[Segment]:
    """A channel's segments in order; each one's length is the gap to the next (the last is read)."""
    keys = store.list(paths.log_prefix(channel))
    firsts = [paths.parse_log_segment(k) for k in keys]
    segments = []
    for i, (key, first) in enumerate(zip(keys, firsts)):
        if i + 1 < len(firsts):
            count = firsts[i + 1] - first
        else:
            count = pa.ipc.open_file(pa.BufferReader(store.get(key))).read_all().num_rows
        segments.append(Segment(key, first, count))
    return segments


def read_segment(store: ObjectStore, seg: Segment, start: int, stop: int) -> pa.Table:
    table = pa.ipc.open_file(pa.BufferReader(store.get(seg.key))).read_all()
    lo = max(start, seg.first) - seg.first
    hi = min(stop, seg.end) - seg.first
    return table.slice(lo, hi - lo)


class Log:
    """The channels of one root."""

    def __init__(self, store: ObjectStore):
        self.store = store
        self._channels: dict[str, Channel] = {}

    def channel(self, name: str, schema: pa.Schema) -> Channel:
        ch = self._channels.get(name)
        if ch is None:
            ch = self._channels[name] = Channel(self.store, name, schema)
        return ch

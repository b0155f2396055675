"""What a reader knows of the log, read from storage, and reading records from it.

:func:`read_state` builds the index of every channel from the flushed Parquet files, the
flush checkpoints and the WAL frames after them; :func:`read_pieces` reads a channel's records
from the pieces of that index (on Spark workers too: it needs only its arguments).
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from millpond import paths
from millpond.columns import SEQ, TICK
from millpond.errors import MissingError, StorageError
from millpond.defaults import fit
from millpond.log.wal import SegmentName, decode_entry, list_segments, read_segment, rebase, scan
from millpond.store.objects import ObjectStore

__all__ = ["Appended", "ChannelInfo", "Piece", "State", "read_channels", "read_state", "read_pieces", "with_hidden", "merge_producers",
           "copy_channel"]



@dataclass(frozen=True)
class ChannelInfo:
    name: str
    id: str  # a new id per incarnation: a dropped and recreated channel never sees old records
    pchannel: int
    schema: pa.Schema
    # A table's channel: its primary key columns (``()``: key-less); None: a plain channel (or a
    # table's channel written before tables recorded their key: see :mod:`millpond.log.tables`).
    table_key: tuple[str, ...] | None = None

    def encode(self) -> bytes:
        d = {"name": self.name, "id": self.id, "pchannel": self.pchannel,
             "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode()}
        if self.table_key is not None:
            d["table"] = {"key": list(self.table_key)}
        return json.dumps(d).encode()

    @staticmethod
    def decode(data: bytes) -> ChannelInfo:
        d = json.loads(data)
        table = d.get("table")
        return ChannelInfo(d["name"], d["id"], d["pchannel"],
                           pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"]))),
                           tuple(table["key"]) if table is not None else None)


@dataclass(frozen=True)
class Piece:
    """Where records ``[first, first + count)`` of a channel live: a frame of a WAL segment
    (``offset >= 0``: bytes ``[offset, offset + length)`` of object ``key``) or a Parquet file."""

    first: int
    count: int
    tick: int  # the largest tick in the piece
    key: str
    offset: int = -1
    length: int = 0

    @property
    def end(self) -> int:
        return self.first + self.count

    def to_json(self) -> list:
        return [self.first, self.count, self.tick, self.key, self.offset, self.length]


@dataclass(frozen=True)
class Appended:
    """The outcome of one append: records ``[first, end)`` at ``tick``; ``duplicate`` if a
    producer's retry was recognised (then ``first``/``end`` are the original append's, when known)."""

    first: int
    end: int
    tick: int
    duplicate: bool = False


@dataclass
class State:
    """What a reader knows of the log: the index of every channel."""

    pieces: dict[str, list[Piece]] = field(default_factory=lambda: defaultdict(list))
    start: dict[str, int] = field(default_factory=dict)  # truncated below
    producers: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(dict))  # ch -> pid -> [pseq, first, end]
    ticks: dict[int, int] = field(default_factory=dict)  # pchannel -> last persisted tick
    valid: dict[SegmentName, int] = field(default_factory=dict)  # whole-frame prefix of each unflushed segment
    flushed: dict[int, SegmentName | None] = field(default_factory=dict)  # pchannel -> last flushed segment
    channels: list[ChannelInfo] = field(default_factory=list)

    def end(self, ch: str) -> int:
        p = self.pieces.get(ch)
        return p[-1].end if p else self.start.get(ch, 0)


def read_channels(store: ObjectStore) -> list[ChannelInfo]:
    return [ChannelInfo.decode(store.get(k)) for k in store.list(paths.LOG_CHANNELS_PREFIX)]


def read_state(store: ObjectStore, physical_channels: int) -> State:
    """Everything on storage: flushed Parquet files, checkpoints and the WAL frames after them. A
    sealed WAL segment listed and then deleted before it was read was flushed meanwhile (by a
    writer of that physical channel): the read starts over, and finds its Parquet file."""
    for _ in range(READ_ATTEMPTS - 1):
        try:
            return _read_state(store, physical_channels)
        except MissingError:
            continue
    return _read_state(store, physical_channels)


READ_ATTEMPTS = 5


def _read_state(store: ObjectStore, physical_channels: int) -> State:
    state = State()
    state.channels = read_channels(store)
    # the checkpoints before the Parquet files: a flush writes its file, then its checkpoint, then
    # deletes its segment, so every segment a checkpoint read here covers has its file listed below
    # (listed the other way round, a flush between the two hid its records from both)
    for p in range(physical_channels):
        ckpts = store.list(paths.log_ckpt_prefix(p))
        last = None
        if ckpts:
            ck = json.loads(store.get(ckpts[-1]))
            last = SegmentName(p, *ck["segment"])
            for ch, prods in ck["producers"].items():
                merge_producers(state.producers[ch], prods)
            state.ticks[p] = ck["tick"]
        state.flushed[p] = last
    for info in state.channels:
        for key in store.list(paths.log_data_prefix(info.id)):
            name = key.rsplit("/", 1)[-1]
            if name.startswith("start-"):
                state.start[info.id] = max(state.start.get(info.id, 0), int(name[6:26]))
            elif name.endswith(".parquet"):
                first, end, tick = paths.parse_log_data_key(key)
                state.pieces[info.id].append(Piece(first, end - first, tick, key))
    for p in range(physical_channels):
        last = state.flushed[p]
        listing = list_segments(store, p)
        for name in listing.segments:
            if last is not None and name <= last:
                continue
            valid = 0
            for chunk, data in read_segment(store, name, listing):
                frames, n = scan(data, chunk, chunk=chunk)
                local = store.local_path(name.key) is not None
                for f in frames:
                    key = name.key if local else name.chunk_key(chunk)
                    if not local:
                        f = rebase(f, chunk)
                    for e in f.entries:
                        state.pieces[e.channel].append(Piece(e.first, e.count, f.tick, key, f.offset, f.length))
                    if f.producer:
                        e = f.entries[0]
                        merge_producers(state.producers[e.channel],
                                         {f.producer[0]: [f.producer[1], e.first, e.first + e.count]})
                    state.ticks[p] = max(state.ticks.get(p, 0), f.tick)
                valid = chunk + n
                if n < len(data):
                    break  # a torn chunk: nothing after it counts
            state.valid[name] = valid
    for ch, pieces in state.pieces.items():
        # Parquet first where a range is both flushed and still in the WAL; then drop the overlap.
        pieces.sort(key=lambda x: (x.first, x.offset >= 0))
        kept: list[Piece] = []
        for x in pieces:
            if x.end <= state.start.get(ch, 0) or (kept and x.first < kept[-1].end):
                continue
            kept.append(x)
        state.pieces[ch] = kept
    return state


def merge_producers(into: dict[str, list[int]], new: dict[str, list[int]]) -> None:
    for pid, last in new.items():
        if last[0] > into.get(pid, [-1])[0]:
            into[pid] = list(last)


def read_pieces(store: ObjectStore, channel_id: str, schema: pa.Schema, pieces: list[Piece], start: int,
                stop: int) -> pa.Table:
    """Records ``[start, stop)`` of one channel from ``pieces``, with ``_seq`` and ``_tick``: the
    columns of ``schema``, the channel's or some of them (only those are decoded from Parquet).

    Runs on Spark workers too: everything it needs is in its arguments. A WAL piece whose
    segment was flushed and deleted meanwhile is read from the channel's Parquet files."""
    wanted = [p for p in pieces if max(start, p.first) < min(stop, p.end)]
    frames: dict[int, bytes | memoryview | None] = {}
    by_key: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(wanted):
        if p.offset >= 0:
            by_key[p.key].append(i)
    for key, idx in by_key.items():  # one ranged read per object
        try:
            got = store.get_ranges_mapped(key, [wanted[i].offset for i in idx],
                                           [wanted[i].offset + wanted[i].length for i in idx])
        except StorageError:
            got = [None] * len(idx)
        frames.update(zip(idx, got))
    parts = []
    for i, p in enumerate(wanted):
        lo, hi = max(start, p.first), min(stop, p.end)
        if p.offset < 0:
            parts.append(_read_parquet(store, p.key, schema, lo, hi))
            continue
        frame_bytes = frames.get(i)
        if frame_bytes is None:  # flushed and deleted since the pieces were listed
            parts.append(_read_flushed(store, channel_id, schema, lo, hi))
            continue
        frame = scan(frame_bytes)[0]
        if not frame:
            raise StorageError(f"log segment {p.key!r}: the frame at byte {p.offset} is corrupt (checksum)")
        table = fit(decode_entry(frame_bytes, frame[0], channel_id), schema)
        table = with_hidden(table, p.first, frame[0].tick)
        parts.append(table.slice(lo - p.first, hi - lo))
    if not parts:
        return with_hidden(schema.empty_table(), 0, 0)
    return pa.concat_tables(parts)


COMPACTED = b"millpond.compacted"  # a flushed file's metadata: it holds only its range's live rows


def with_hidden(table: pa.Table, first: int, tick: int) -> pa.Table:
    n = table.num_rows
    table = table.append_column(SEQ, pa.array(np.arange(first, first + n, dtype=np.int64)))
    return table.append_column(TICK, pa.array(np.full(n, tick, dtype=np.int64)))


def _read_parquet(store: ObjectStore, key: str, schema: pa.Schema, lo: int, hi: int) -> pa.Table:
    """Records ``[lo, hi)`` of a flushed file, found by their ``_seq`` (a compacted file holds
    some of its range's sequence numbers only: :meth:`~millpond.log.channel.Channel.compact`)."""
    file = pq.ParquetFile(pa.BufferReader(store.get(key)))
    present = set(file.schema_arrow.names)  # a file older than a column added since lacks it
    table = file.read(columns=[*(n for n in schema.names if n in present), SEQ, TICK])
    seq = table.column(SEQ).to_numpy()
    a, b = np.searchsorted(seq, [lo, hi], side="left")
    table = table.slice(int(a), int(b - a))
    out = fit(table, pa.schema([*schema, pa.field(SEQ, pa.int64()), pa.field(TICK, pa.int64())]))
    return out.replace_schema_metadata({COMPACTED: b"1"}) if (table.schema.metadata or {}).get(COMPACTED) else out


def _read_flushed(store: ObjectStore, channel_id: str, schema: pa.Schema, lo: int, hi: int) -> pa.Table:
    parts = []
    for key in store.list(paths.log_data_prefix(channel_id)):
        if not key.endswith(".parquet"):
            continue
        first, end, _ = paths.parse_log_data_key(key)
        if first < hi and end > lo:
            parts.append(_read_parquet(store, key, schema, max(lo, first), min(hi, end)))
    got = pa.concat_tables(parts) if parts else None
    compacted = any((t.schema.metadata or {}).get(COMPACTED) for t in parts)  # holds fewer records than its range
    if got is None or (got.num_rows != hi - lo and not compacted):
        raise StorageError(f"log channel {channel_id}: records [{lo}, {hi}) are neither in the WAL nor flushed")
    return got


def copy_channel(src: State, dst: State, ch: str) -> None:
    dst.pieces[ch] = list(src.pieces.get(ch, []))
    dst.producers[ch] = dict(src.producers.get(ch, {}))
    if ch in src.start:
        dst.start[ch] = src.start[ch]

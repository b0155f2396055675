"""Frames and segments: the bytes of a physical channel's write-ahead log.

A **segment** is an append-only stream of frames. On a local root it is one file, appended
and ``fdatasync``'d once per group commit; on object storage it is a folder of chunk objects,
one per group commit, each named by its byte offset and written with put-if-absent. Both read
back as the same byte stream.

A **frame** is one append, or one transaction (its entries may belong to channels of other
physical channels: a frame is atomic, so a transaction is too)::

    header  <4sIII   magic b"MPW1", meta length, body length, crc32(meta + body)
    meta    JSON     {"tick": t, "entries": [[channel id, first seq, count, bytes], ...],
                      "producer": [id, seq] | null}
    body             one Arrow IPC stream per entry

A crash can leave a torn frame at the tail of a local segment (a short write, or garbage past
the last fsync). :func:`scan` stops at the first frame whose header, length or checksum does
not hold: everything before it is whole, and that prefix is all a reader ever sees.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

import pyarrow as pa

from millpond import paths
from millpond.crc import crc32
from millpond.errors import FencedError
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["Entry", "Frame", "encode_frame", "decode_entry", "scan", "SegmentName", "SegmentWriter",
           "Listing", "list_segments", "read_segment", "rebase", "HEADER"]

MAGIC = b"MPW1"
HEADER = struct.Struct("<4sIII")


@dataclass(frozen=True)
class Entry:
    """One channel's records inside a frame."""

    channel: str  # channel id
    first: int
    count: int
    nbytes: int


@dataclass(frozen=True)
class Frame:
    offset: int  # in the segment's byte stream
    length: int
    tick: int
    entries: tuple[Entry, ...]
    producer: tuple[str, int] | None = None
    chunk: int = 0  # offset of the chunk object holding the frame (object-store segments)


def encode_frame(tick: int, entries: list[tuple[str, int, pa.Table]], *,
                 producer: tuple[str, int] | None = None) -> bytearray:
    """One frame holding ``entries`` of (channel id, first seq, records), written in place: each
    body's IPC stream is measured first, then written into the frame at its offset (building the
    bodies apart and joining them held a 1 GB insert three times at once)."""
    sizes = [_ipc_size(t) for _, _, t in entries]
    meta = json.dumps({"tick": tick, "entries": [[c, f, t.num_rows, n] for (c, f, t), n in zip(entries, sizes)],
                       "producer": list(producer) if producer else None}, separators=(",", ":")).encode()
    frame = bytearray(HEADER.size + len(meta) + sum(sizes))
    view = memoryview(frame)
    pos = HEADER.size + len(meta)
    view[HEADER.size:pos] = meta
    for (_, _, table), n in zip(entries, sizes):
        sink = pa.FixedSizeBufferWriter(pa.py_buffer(view[pos:pos + n]))
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        if sink.tell() != n:
            raise AssertionError(f"an IPC stream of {n} bytes measured wrote {sink.tell()}")
        pos += n
    crc = crc32(view[HEADER.size:])  # meta, then the bodies
    HEADER.pack_into(frame, 0, MAGIC, len(meta), sum(sizes), crc)
    return frame


def _ipc_size(table: pa.Table) -> int:
    """The bytes of ``table`` as an IPC stream (counted, not written)."""
    sink = pa.MockOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.size()


def scan(data: bytes | memoryview, base: int = 0, *, chunk: int = 0) -> tuple[list[Frame], int]:
    """Whole frames at the start of ``data`` and the length they cover (the valid prefix)."""
    frames: list[Frame] = []
    view = memoryview(data)
    pos = 0
    while pos + HEADER.size <= len(view):
        magic, meta_len, body_len, crc = HEADER.unpack_from(view, pos)
        end = pos + HEADER.size + meta_len + body_len
        if magic != MAGIC or end > len(view):
            break
        meta_bytes = view[pos + HEADER.size:pos + HEADER.size + meta_len]
        if crc32(view[pos + HEADER.size:end]) != crc:
            break
        try:
            meta = json.loads(bytes(meta_bytes))
        except ValueError:
            break
        frames.append(Frame(base + pos, end - pos, meta["tick"], tuple(Entry(*e) for e in meta["entries"]),
                            tuple(meta["producer"]) if meta["producer"] else None, chunk))
        pos = end
    return frames, pos


def rebase(frame: Frame, base: int) -> Frame:
    """``frame`` with its offset relative to the chunk object at ``base``."""
    return Frame(frame.offset - base, frame.length, frame.tick, frame.entries, frame.producer, frame.chunk)


def decode_entry(frame_bytes: bytes | memoryview, frame: Frame, channel: str) -> pa.Table | None:
    """The records of ``channel`` in one frame (``frame_bytes`` is exactly the frame)."""
    view = memoryview(frame_bytes)
    _, meta_len, _, _ = HEADER.unpack_from(view, 0)
    pos = HEADER.size + meta_len
    for e in frame.entries:
        if e.channel == channel:
            return pa.ipc.open_stream(pa.py_buffer(view[pos:pos + e.nbytes])).read_all()
        pos += e.nbytes
    return None


@dataclass(frozen=True, order=True)
class SegmentName:
    pchannel: int
    gen: int  # the writer generation that wrote it
    n: int  # its number within the generation

    @property
    def key(self) -> str:
        """The file (local root) or the folder of chunks (object storage)."""
        return paths.log_segment_key(self.pchannel, self.gen, self.n)

    @property
    def seal_key(self) -> str:
        return paths.log_seal_key(self.pchannel, self.gen, self.n)

    def chunk_key(self, offset: int) -> str:
        return paths.log_chunk_key(self.pchannel, self.gen, self.n, offset)


@dataclass
class Listing:
    """The segments of one physical channel on storage, oldest first."""

    segments: list[SegmentName] = field(default_factory=list)
    sealed: dict[SegmentName, int] = field(default_factory=dict)  # valid length fixed at sealing
    chunks: dict[SegmentName, list[int]] = field(default_factory=dict)  # object storage only


def list_segments(store: ObjectStore, pchannel: int) -> Listing:
    out = Listing()
    names: set[SegmentName] = set()
    seals: list[SegmentName] = []
    for key in store.list(paths.log_wal_prefix(pchannel)):
        parsed = paths.parse_log_wal_key(key)
        if parsed is None:
            continue
        p, gen, n, kind, chunk = parsed
        name = SegmentName(p, gen, n)
        if kind == "sealed":
            seals.append(name)
            continue
        names.add(name)
        if chunk is not None:
            out.chunks.setdefault(name, []).append(chunk)
    for name in seals:
        names.add(name)
        out.sealed[name] = json.loads(store.get(name.seal_key))["length"]
    out.segments = sorted(names)
    return out


def read_segment(store: ObjectStore, name: SegmentName, listing: Listing, start: int = 0) -> list[tuple[int, bytes]]:
    """The segment's bytes from ``start`` as (chunk offset, bytes) pieces, cut at a seal."""
    limit = listing.sealed.get(name)
    path = store.local_path(name.key)
    if path is not None:
        try:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read() if limit is None else f.read(max(0, limit - start))
        except FileNotFoundError:
            data = b""
        return [(start, data)]
    pieces = []
    for offset in sorted(listing.chunks.get(name, [])):
        if offset < start or (limit is not None and offset >= limit):
            continue
        pieces.append((offset, store.get(name.chunk_key(offset))))
    return pieces


class SegmentWriter:
    """Appends group commits to one segment: a local file (write + fdatasync) or chunk objects."""

    def __init__(self, store: ObjectStore, name: SegmentName):
        self.store, self.name = store, name
        self.length = 0
        self._fd: int | None = None
        path = store.local_path(name.key)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            _fsync_dir(path.parent)

    @property
    def local(self) -> bool:
        return self._fd is not None

    def append(self, data: bytes) -> int:
        """Durably append ``data``; return the offset it starts at (its chunk's offset)."""
        offset = self.length
        if self._fd is not None:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fdatasync(self._fd)
        else:
            try:
                self.store.put_if_absent(self.name.chunk_key(offset), data)
            except AlreadyExists:
                raise FencedError(f"log segment {self.name.key!r}: offset {offset} was written by another writer") from None
        self.length += len(data)
        return offset

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fsync_dir(path) -> None:  # noqa: ANN001
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The log service: named channels on a few physical write-ahead logs, on object storage.

    log = Log(ObjectStore(root))
    visits = log.create_channel("visit", pa.schema([("user", pa.string()), ("ms", pa.int64())]))
    visits.append({"user": ["ann"], "ms": [12]})          # -> Appended(first=0, end=1, tick=...)
    visits.read(0, 1)                                      # deterministic replay of a range
    with log.transaction() as tx:                          # all or nothing, across channels
        tx.append("visit", batch_a); tx.append("click", batch_b)

**Channels.** A channel (virtual channel) has a name, an id and an Arrow schema
(``log/channels/<name>.json``). It is mapped for life onto one of the root's physical channels
(``log/config.json`` fixes how many). Records of a channel are numbered from 0; every record
carries the time tick of the group commit that made it durable.

**Appending** (one physical channel, one writer):

1. The batch is checked against the schema (a :class:`SchemaError` names the field and row);
   nothing of a rejected batch is written.
2. Concurrent appends queue up; one of them leads a *group commit*: it numbers every queued
   batch, gives them one tick, writes them as checksummed frames in one write, and makes it
   durable with one ``fdatasync`` (local) or one put-if-absent chunk (object storage).
3. The leader checks it is still the writer (no newer generation has claimed the physical
   channel); only then are the records visible and the appends acknowledged.

**Writers.** The first append to a physical channel claims it: on a local root it takes an
``flock`` (a second live writer gets a clear error at once; a crashed writer's lock dies with
it), and on every root it writes the next *writer generation* with put-if-absent, which fences
any older writer at its next group commit. The claim then seals the older generations'
segments at their last whole frame: a torn tail is cut there, and a cross-channel transaction
that reached only some of its physical channels is cut everywhere.

**Flush.** A segment closes when it passes ``segment_bytes`` (or on :meth:`Log.flush`). A
background thread writes each closed segment as one Parquet file per channel
(``log/data/<channel id>/<first>-<end>.parquet``, with ``_seq`` and ``_tick`` columns and the
ranges in the file's metadata), records a checkpoint (producer table, tick), and deletes the
segment: object storage then holds everything, and the WAL only the unflushed tail.

**Ticks.** ``tick`` says "every record with a tick <= t has arrived". Idle channels advance it
in memory only (empty ticks are never persisted); :meth:`Log.snapshot` reads every channel's
end at one tick, which never splits a transaction.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import threading
import time
import uuid
import zlib
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from millpond import faults, paths
from millpond.errors import FencedError, MillpondError, StorageError, TruncatedError
from millpond.log.conform import conform
from millpond.log.wal import (Entry, Frame, Listing, SegmentName, SegmentWriter, decode_entry, encode_frame,
                              list_segments, read_segment, scan)
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["Log", "Channel", "ChannelInfo", "Piece", "Appended", "Transaction", "read_pieces",
           "SEQ", "TICK", "DEFAULT_PHYSICAL_CHANNELS"]

log = logging.getLogger(__name__)

SEQ, TICK = "_seq", "_tick"
DEFAULT_PHYSICAL_CHANNELS = 2
DEFAULT_SEGMENT_BYTES = 64 << 20
CONFIG_KEY = "log/config.json"


@dataclass(frozen=True)
class ChannelInfo:
    name: str
    id: str  # a new id per incarnation: a dropped and recreated channel never sees old records
    pchannel: int
    schema: pa.Schema

    def encode(self) -> bytes:
        return json.dumps({"name": self.name, "id": self.id, "pchannel": self.pchannel,
                           "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode()}).encode()

    @staticmethod
    def decode(data: bytes) -> ChannelInfo:
        d = json.loads(data)
        return ChannelInfo(d["name"], d["id"], d["pchannel"],
                           pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"]))))


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
class _State:
    """What a reader knows of the log: the index of every channel."""

    pieces: dict[str, list[Piece]] = field(default_factory=lambda: defaultdict(list))
    start: dict[str, int] = field(default_factory=dict)  # truncated below
    producers: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(dict))  # ch -> pid -> [pseq, first, end]
    ticks: dict[int, int] = field(default_factory=dict)  # pchannel -> last persisted tick
    valid: dict[SegmentName, int] = field(default_factory=dict)  # whole-frame prefix of each unflushed segment
    flushed: dict[int, SegmentName | None] = field(default_factory=dict)  # pchannel -> last flushed segment

    def end(self, ch: str) -> int:
        p = self.pieces.get(ch)
        return p[-1].end if p else self.start.get(ch, 0)


class Log:
    """The channels of one root. Reads work from any process; the first append to a physical
    channel makes this process its writer."""

    def __init__(self, store: ObjectStore, *, physical_channels: int | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, clock: Callable[[], int] = time.time_ns):
        self.store, self.segment_bytes, self.clock = store, segment_bytes, clock
        self._requested_pchannels = physical_channels
        self._pcount: int | None = None
        self._cv = threading.Condition(threading.RLock())
        self._state = _State()
        self._infos: dict[str, ChannelInfo] = {}
        self._writers: dict[int, _Writer] = {}
        self._claiming = threading.Lock()
        self._last_tick = 0
        self._inflight: set[int] = set()  # ticks handed out, not yet durable
        self._flusher: _Flusher | None = None
        self._closed = False
        self.refresh()

    # -- channels ------------------------------------------------------------------------------
    @property
    def physical_channels(self) -> int:
        """Fixed when the root's first channel is created (``log/config.json``)."""
        if self._pcount is None:
            try:
                self._pcount = json.loads(self.store.get(CONFIG_KEY))["physical_channels"]
            except StorageError:
                return self._requested_pchannels or DEFAULT_PHYSICAL_CHANNELS
        return self._pcount

    def _fix_physical_channels(self) -> int:
        if self._pcount is None and not self.store.list(CONFIG_KEY):
            n = self._requested_pchannels or DEFAULT_PHYSICAL_CHANNELS
            with contextlib.suppress(AlreadyExists):
                self.store.put_if_absent(CONFIG_KEY, json.dumps({"physical_channels": n}).encode())
        return self.physical_channels

    def create_channel(self, name: str, schema: pa.Schema, *, id: str | None = None) -> Channel:
        """Create ``name`` (or return it, if it exists with this schema and id).

        An existing channel with another ``id`` is a dropped incarnation: it is replaced."""
        _check_name(name)
        with self._cv:
            found = self._infos.get(name) or self._load_info(name)
            if found is not None and (id is None or found.id == id):
                if not found.schema.equals(schema):
                    raise MillpondError(f"log channel {name!r} exists with another schema: {found.schema}")
                return Channel(self, found)
            pcount = self._fix_physical_channels()
            info = ChannelInfo(name, id or uuid.uuid4().hex[:16], zlib.crc32(name.encode()) % pcount, schema)
            if found is None:
                try:
                    self.store.put_if_absent(paths.log_channel_key(name), info.encode())
                except AlreadyExists:
                    return self.create_channel(name, schema, id=id)
            else:
                self.store.put(paths.log_channel_key(name), info.encode())
            self._infos[name] = info
            return Channel(self, info)

    def channel(self, name: str) -> Channel:
        with self._cv:
            info = self._infos.get(name) or self._load_info(name)
        if info is None:
            raise MillpondError(f"log channel {name!r} does not exist under {self.store.root!r} "
                                f"(channels: {self.channel_names()})")
        return Channel(self, info)

    def channel_names(self) -> list[str]:
        return [k[len("log/channels/"):-len(".json")] for k in self.store.list("log/channels/")]

    def drop_channel(self, name: str) -> None:
        """Forget ``name``: its flushed files go now, its WAL records with their segments."""
        with self._cv:
            info = self._infos.pop(name, None) or self._load_info(name)
            if info is None:
                return
            self._infos.pop(name, None)
            self.store.delete(paths.log_channel_key(name))
            for key in self.store.list(paths.log_data_prefix(info.id)):
                self.store.delete(key)
            self._state.pieces.pop(info.id, None)

    def _load_info(self, name: str) -> ChannelInfo | None:
        try:
            info = ChannelInfo.decode(self.store.get(paths.log_channel_key(name)))
        except StorageError:
            return None
        self._infos[name] = info
        return info

    # -- reading -------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read what other writers appended since (a no-op for channels this process writes)."""
        if self._writers and len(self._writers) == self.physical_channels:
            return
        state = _read_state(self.store, self.physical_channels)
        with self._cv:
            if self._writers:  # keep our own physical channels' view: it is newer than storage's
                for info in self._infos.values():
                    if info.pchannel in self._writers:
                        _copy_channel(self._state, state, info.id)
                for p in self._writers:
                    state.ticks[p] = self._state.ticks.get(p, 0)
            self._state = state
            self._last_tick = max([self._last_tick, *state.ticks.values()])
            self._cv.notify_all()

    def tick(self) -> int:
        """Every record with a tick <= the returned one has arrived (durable and visible)."""
        with self._cv:
            if self._inflight:
                return min(self._inflight) - 1
            if not self._writers:
                return max(self._state.ticks.values(), default=0)
            return self._next_tick(advance=False)

    def snapshot(self, names: list[str]) -> tuple[int, dict[str, int]]:
        """One tick and each channel's end at it: a cut that never splits a transaction."""
        with self._cv:
            t = self.tick()
            ends = {}
            for name in names:
                ch = self.channel(name)
                pieces = self._state.pieces.get(ch.info.id, [])
                i = bisect_right([p.tick for p in pieces], t)
                ends[name] = pieces[i - 1].end if i else self._state.start.get(ch.info.id, 0)
            return t, ends

    def _next_tick(self, *, advance: bool = True) -> int:
        now = self.clock() // 1000  # microseconds
        t = max(now, self._last_tick + (1 if advance else 0))
        if advance:
            self._last_tick = t
        return t

    # -- writing -------------------------------------------------------------------------------
    def transaction(self) -> Transaction:
        return Transaction(self)

    def _writer(self, pchannel: int) -> _Writer:
        w = self._writers.get(pchannel)
        if w is not None and w.broken is None and not self._closed:
            return w
        with self._claiming:
            return self._claim(pchannel)

    def _claim(self, pchannel: int) -> _Writer:
        if self._closed:
            raise MillpondError(f"the log of {self.store.root!r} is closed")
        w = self._writers.get(pchannel)
        if w is not None and isinstance(w.broken, FencedError):
            raise w.broken  # never fight the newer writer for the channel
        if w is None or w.broken:
            if w is not None:  # an I/O failure: claim again, which recovers the tail
                w.release()
            w = self._writers[pchannel] = _Writer(self, pchannel)
        return w

    def _publish(self, frames: list[tuple[int, Frame, str]]) -> None:
        """Make written frames visible (called with the lock held)."""
        for pchannel, frame, key in frames:
            for e in frame.entries:
                self._state.pieces[e.channel].append(Piece(e.first, e.count, frame.tick, key, frame.offset,
                                                           frame.length))
            if frame.producer:
                pid, pseq = frame.producer
                e = frame.entries[0]
                self._state.producers[e.channel][pid] = [pseq, e.first, e.first + e.count]
            self._state.ticks[pchannel] = max(self._state.ticks.get(pchannel, 0), frame.tick)
        self._cv.notify_all()

    def flush(self) -> None:
        """Close every open segment and wait until everything is flushed to Parquet."""
        for w in list(self._writers.values()):
            w.roll()
        if self._flusher:
            self._flusher.drain()

    def _closed_segment(self, name: SegmentName) -> None:
        if self._flusher is None:
            self._flusher = _Flusher(self)
        self._flusher.submit(name)

    def close(self) -> None:
        """Stop writing: release the physical channels (unflushed records stay in the WAL)."""
        self._closed = True
        if self._flusher:
            self._flusher.drain()
            self._flusher.stop()
        for w in self._writers.values():
            w.release()
        self._writers.clear()


class Channel:
    """A handle on one channel of a :class:`Log`."""

    def __init__(self, log_: Log, info: ChannelInfo):
        self.log, self.info = log_, info

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def schema(self) -> pa.Schema:
        return self.info.schema

    @property
    def end(self) -> int:
        """The sequence number the next record gets."""
        with self.log._cv:
            return self.log._state.end(self.info.id)

    @property
    def start(self) -> int:
        """The first sequence number still readable (records below it were truncated)."""
        with self.log._cv:
            return self.log._state.start.get(self.info.id, 0)

    @property
    def tick(self) -> int:
        return self.log.tick()

    def append(self, data: Any, *, producer: tuple[str, int] | None = None) -> Appended:
        """Durably append one batch; ``producer=(id, seq)`` makes a retried append apply once."""
        table = conform(self.name, self.schema, data)
        if producer is not None:
            producer = (str(producer[0]), int(producer[1]))
        return self.log._writer(self.info.pchannel).commit([(self.info.id, table)], producer=producer)[0]

    def pieces(self, start: int, stop: int) -> list[Piece]:
        """The pieces holding ``[start, stop)``; a range below :attr:`start` is an error."""
        with self.log._cv:
            self._check_range(start)
            pieces = self.log._state.pieces.get(self.info.id, [])
            i = max(0, bisect_right([p.first for p in pieces], start) - 1)
            return [p for p in pieces[i:] if p.first < stop and p.end > start]

    def read(self, start: int | None = None, stop: int | None = None, *, hidden: bool = False) -> pa.Table:
        """Records ``[start, stop)`` (default: all) in sequence order; ``hidden`` adds ``_seq`` and ``_tick``."""
        start = self.start if start is None else start
        stop = self.end if stop is None else min(stop, self.end)
        if start >= stop:
            self._check_range(start)
            return _with_hidden(self.schema.empty_table(), 0, 0) if hidden else self.schema.empty_table()
        table = read_pieces(self.log.store, self.info.id, self.schema, self.pieces(start, stop), start, stop)
        return table if hidden else table.drop_columns([SEQ, TICK])

    def wait(self, position: int, timeout: float | None = None) -> bool:
        """Block until the channel has a record at or past ``position`` (True) or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.log._cv:
                if self.end > position:
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if self.info.pchannel in self.log._writers:  # we write it: appends notify us
                    self.log._cv.wait(remaining)
                    continue
            time.sleep(min(0.05, remaining) if remaining is not None else 0.05)
            self.log.refresh()

    def tail(self, start: int = 0, *, timeout: float | None = None, max_records: int = 100_000) -> Iterator[pa.Table]:
        """Batches from ``start`` on, waiting for new ones; stops after ``timeout`` idle seconds."""
        pos = start
        while self.wait(pos, timeout):
            stop = min(self.end, pos + max_records)
            yield self.read(pos, stop, hidden=True)
            pos = stop

    def truncate(self, upto: int) -> None:
        """Drop records below ``upto``; they must be flushed already (so no WAL frame is lost)."""
        with self.log._cv:
            pieces = self.log._state.pieces.get(self.info.id, [])
            flushed = self.start
            for p in pieces:  # the flushed prefix (a transaction's frame may flush out of order)
                if p.offset >= 0:
                    break
                flushed = p.end
            if upto > flushed:
                raise MillpondError(f"log channel {self.name!r}: cannot truncate to {upto}: records from {flushed} "
                                    "are not flushed yet (Log.flush() first)")
            if upto <= self.start:
                return
            self.log.store.put(paths.log_start_key(self.info.id, upto), b"")
            for p in pieces:
                if p.end <= upto:
                    self.log.store.delete(p.key)
            self.log._state.pieces[self.info.id] = [p for p in pieces if p.end > upto]
            self.log._state.start[self.info.id] = upto

    def _check_range(self, start: int) -> None:
        if start < self.start:
            raise TruncatedError(f"log channel {self.name!r}: records [{start}, {self.start}) were truncated; "
                                 f"the channel now starts at {self.start}", channel=self.name, start=self.start)


class Transaction:
    """Appends that become durable and visible together, or not at all (also across channels on
    different physical channels). Use as a context manager, or call :meth:`commit`."""

    def __init__(self, log_: Log):
        self.log = log_
        self._parts: list[tuple[ChannelInfo, pa.Table]] = []

    def append(self, channel: str, data: Any) -> None:
        ch = self.log.channel(channel)
        self._parts.append((ch.info, conform(channel, ch.schema, data)))

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001
        if exc_type is None:
            self.commit()

    def commit(self) -> dict[str, Appended]:
        """Append everything; return each channel's range (one tick for all)."""
        by_p: dict[int, list[tuple[str, pa.Table]]] = defaultdict(list)
        names = {}
        for info, table in self._parts:
            if table.num_rows:
                by_p[info.pchannel].append((info.id, table))
                names[info.id] = info.name
        if not by_p:
            return {}
        self._parts = []
        # One frame in the lowest physical channel holds every entry: a frame is atomic. Leading
        # the other physical channels too keeps their channels' numbering and ticks in order.
        writers = [self.log._writer(p) for p in sorted(by_p)]
        for w in writers:  # in pchannel order: two transactions never wait on each other in a cycle
            w.lead()
        try:
            with self.log._cv:
                tick = self.log._next_tick()
                self.log._inflight.add(tick)
            try:
                entries = [e for p in sorted(by_p) for e in by_p[p]]
                frame, key = writers[0].write_frames([(entries, None)], tick)[0]
                written = [(writers[0].pchannel, frame, key)]
                for w in writers:
                    w.check_fenced()
                faults.point("log.after_put")
                with self.log._cv:
                    self.log._publish(written)
            finally:
                with self.log._cv:
                    self.log._inflight.discard(tick)
            for w in writers:
                w.roll_if_full()
        finally:
            for w in writers:
                w.unlead()
        out = {}
        for _, frame, _ in written:
            for e in frame.entries:
                out[names[e.channel]] = Appended(e.first, e.first + e.count, frame.tick)
        return out


@dataclass
class _Request:
    entries: list[tuple[str, pa.Table]]
    producer: tuple[str, int] | None
    result: list[Appended] | None = None
    error: BaseException | None = None


class _Writer:
    """The single writer of one physical channel in this process."""

    def __init__(self, log_: Log, pchannel: int):
        self.log, self.pchannel, self.store = log_, pchannel, log_.store
        self.broken: BaseException | None = None
        self._lock_fd = _lock(self.store, pchannel)
        try:
            self.gen = self._claim()
            state = _read_state(self.store, log_.physical_channels)  # older writers are fenced: this is final
            self._seal_older(state)
            with log_._cv:  # this physical channel's channels: exactly what is on storage now
                for info in [ChannelInfo.decode(self.store.get(k)) for k in self.store.list("log/channels/")]:
                    if info.pchannel == pchannel:
                        _copy_channel(state, log_._state, info.id)
                log_._state.ticks[pchannel] = state.ticks.get(pchannel, 0)
                log_._last_tick = max(log_._last_tick, state.ticks.get(pchannel, 0))
            self._n = 0
            self.segment = SegmentWriter(self.store, SegmentName(pchannel, self.gen, self._n))
        except BaseException:
            self.release()
            raise
        self._queue: list[_Request] = []
        self._leading = False
        self._cv = threading.Condition()

    # -- claim and recovery ----------------------------------------------------------------------
    def _claim(self) -> int:
        prefix = f"log/p{self.pchannel}/writers/"
        gens = [int(k[len(prefix):].split(".")[0]) for k in self.store.list(prefix)]
        gen = max(gens, default=0) + 1
        try:
            self.store.put_if_absent(f"{prefix}{gen:010d}.json", json.dumps({"pid": os.getpid(), "at": time.time()}).encode())
        except AlreadyExists:
            raise FencedError(f"log physical channel p{self.pchannel} under {self.store.root!r}: another writer "
                              f"claimed generation {gen} at the same time") from None
        return gen

    def _seal_older(self, state: _State) -> None:
        """Fix every older segment at its last whole frame (cutting torn tails and partial transactions)."""
        listing = list_segments(self.store, self.pchannel)
        flushed = state.flushed.get(self.pchannel)
        for name in listing.segments:
            if name.gen >= self.gen:
                continue
            if flushed is not None and name <= flushed:  # flushed, but its writer died before deleting it
                _delete_segment(self.store, name, listing)
                continue
            if name in listing.sealed:
                self.log._closed_segment(name)
                continue
            valid = state.valid.get(name, 0)
            path = self.store.local_path(name.key)
            if path is not None and path.exists() and path.stat().st_size > valid:
                log.warning("log p%d: cutting segment %s back from %d to %d bytes (torn or unfinished tail)",
                            self.pchannel, name.key, path.stat().st_size, valid)
                os.truncate(path, valid)
            with contextlib.suppress(AlreadyExists):
                self.store.put_if_absent(name.seal_key, json.dumps({"length": valid}).encode())
            self.log._closed_segment(name)

    def check_fenced(self) -> None:
        nxt = f"log/p{self.pchannel}/writers/{self.gen + 1:010d}.json"
        path = self.store.local_path(nxt)
        taken = path.exists() if path is not None else bool(self.store.list(nxt))
        if taken:
            self.broken = FencedError(f"log physical channel p{self.pchannel} under {self.store.root!r}: this writer "
                                      f"(generation {self.gen}) was fenced by a newer writer; its last append is "
                                      "not acknowledged")
            raise self.broken

    # -- group commit ----------------------------------------------------------------------------
    def commit(self, entries: list[tuple[str, pa.Table]], *, producer: tuple[str, int] | None = None) -> list[Appended]:
        req = _Request(entries, producer)
        with self._cv:
            self._queue.append(req)
            while req.result is None and req.error is None:
                if self._leading:
                    self._cv.wait()
                    continue
                self._leading = True
                group, self._queue = self._queue, []
                self._cv.release()
                try:
                    self._commit_group(group)
                finally:
                    self._cv.acquire()
                    self._leading = False
                    self._cv.notify_all()
        if req.error is not None:
            raise req.error
        return req.result

    def lead(self) -> None:
        """Become the only one writing (a transaction, a roll)."""
        with self._cv:
            while self._leading:
                self._cv.wait()
            self._leading = True
        if self.broken:
            self.unlead()
            raise self.broken

    def unlead(self) -> None:
        with self._cv:
            self._leading = False
            self._cv.notify_all()

    def _commit_group(self, group: list[_Request]) -> None:
        try:
            if self.broken:
                raise self.broken
            with self.log._cv:
                tick = self.log._next_tick()
                self.log._inflight.add(tick)
            try:
                todo, dups = [], {}
                seen: dict[tuple[str, str], int] = {}
                for i, req in enumerate(group):
                    if req.producer:
                        ch = req.entries[0][0]
                        pid, pseq = req.producer
                        last = seen.get((ch, pid))
                        if last is None:
                            with self.log._cv:
                                last = self.log._state.producers.get(ch, {}).get(pid, [-1])[0]
                        if pseq <= last:
                            dups[i] = (ch, pid, pseq)
                            continue
                        seen[(ch, pid)] = pseq
                    todo.append(i)
                written = self.write_frames([(group[i].entries, group[i].producer) for i in todo], tick) if todo else []
                self.check_fenced()
                faults.point("log.after_put")
                with self.log._cv:
                    self.log._publish([(self.pchannel, f, k) for f, k in written])
                    for i, (frame, _) in zip(todo, written):
                        group[i].result = [Appended(e.first, e.first + e.count, frame.tick) for e in frame.entries]
                    for i, (ch, pid, pseq) in dups.items():
                        last = self.log._state.producers.get(ch, {}).get(pid, [-1, -1, -1])
                        known = last[0] == pseq
                        group[i].result = [Appended(last[1] if known else -1, last[2] if known else -1, tick, True)]
            finally:
                with self.log._cv:
                    self.log._inflight.discard(tick)
            self.roll_if_full()
        except BaseException as exc:
            for req in group:
                if req.result is None:
                    req.error = exc if isinstance(exc, MillpondError) else StorageError(
                        f"log physical channel p{self.pchannel} under {self.store.root!r}: append failed: {exc}")

    def write_frames(self, frames: list[tuple[list[tuple[str, pa.Table]], tuple[str, int] | None]],
                     tick: int) -> list[tuple[Frame, str]]:
        """Number, encode, write and sync ``frames`` (the caller leads); a failure breaks this writer."""
        nxt: dict[str, int] = {}
        encoded = []
        with self.log._cv:
            for entries, _ in frames:
                for ch, _ in entries:
                    nxt.setdefault(ch, self.log._state.end(ch))
        for entries, producer in frames:
            numbered = []
            for ch, table in entries:
                numbered.append((ch, nxt[ch], table))
                nxt[ch] += table.num_rows
            encoded.append((encode_frame(tick, numbered, producer=producer), numbered, producer))
        faults.point("log.before_put")
        data = encoded[0][0] if len(encoded) == 1 else b"".join(e[0] for e in encoded)
        try:
            base = self.segment.append(data)
        except BaseException as exc:
            self.broken = exc if isinstance(exc, MillpondError) else StorageError(
                f"log segment {self.segment.name.key!r} under {self.store.root!r}: write failed: {exc}")
            raise self.broken from exc
        local = self.segment.local
        key = self.segment.name.key if local else self.segment.name.chunk_key(base)
        out, pos = [], base if local else 0  # a chunk is its own object: offsets are relative to it
        for data, numbered, producer in encoded:
            entries = tuple(Entry(ch, first, t.num_rows, 0) for ch, first, t in numbered)
            out.append((Frame(pos, len(data), tick, entries, producer, base), key))
            pos += len(data)
        return out

    def roll_if_full(self) -> None:
        """(The caller leads.)"""
        if self.segment.length >= self.log.segment_bytes:
            self._roll()

    def roll(self) -> None:
        """Close the open segment (it gets flushed) and start the next one."""
        try:
            self.lead()
        except MillpondError:
            return
        try:
            self._roll()
        finally:
            self.unlead()

    def _roll(self) -> None:
        if self.segment.length == 0 or self.broken:
            return
        old = self.segment
        old.close()
        self.store.put_if_absent(old.name.seal_key, json.dumps({"length": old.length}).encode())
        self._n += 1
        self.segment = SegmentWriter(self.store, SegmentName(self.pchannel, self.gen, self._n))
        self.log._closed_segment(old.name)

    def release(self) -> None:
        if getattr(self, "segment", None) is not None:
            self.segment.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def _rebase(frame: Frame, base: int) -> Frame:
    return Frame(frame.offset - base, frame.length, frame.tick, frame.entries, frame.producer, frame.chunk)


def _lock(store: ObjectStore, pchannel: int) -> int | None:
    path = store.local_path(f"log/p{pchannel}/LOCK")
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise FencedError(f"log physical channel p{pchannel} under {store.root!r} is held by another writer "
                          f"(process {holder}); close it first (one writer per physical channel)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


# -- reading storage ---------------------------------------------------------------------------
def _read_state(store: ObjectStore, physical_channels: int) -> _State:
    """Everything on storage: flushed Parquet files, checkpoints and the WAL frames after them."""
    state = _State()
    infos = [ChannelInfo.decode(store.get(k)) for k in store.list("log/channels/")]
    for info in infos:
        for key in store.list(paths.log_data_prefix(info.id)):
            name = key.rsplit("/", 1)[-1]
            if name.startswith("start-"):
                state.start[info.id] = max(state.start.get(info.id, 0), int(name[6:26]))
            elif name.endswith(".parquet"):
                first, end, tick = paths.parse_log_data_key(key)
                state.pieces[info.id].append(Piece(first, end - first, tick, key))
    for p in range(physical_channels):
        ckpts = store.list(f"log/p{p}/ckpt/")
        last = None
        if ckpts:
            ck = json.loads(store.get(ckpts[-1]))
            last = SegmentName(p, *ck["segment"])
            for ch, prods in ck["producers"].items():
                _merge_producers(state.producers[ch], prods)
            state.ticks[p] = ck["tick"]
        state.flushed[p] = last
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
                        f = _rebase(f, chunk)
                    for e in f.entries:
                        state.pieces[e.channel].append(Piece(e.first, e.count, f.tick, key, f.offset, f.length))
                    if f.producer:
                        e = f.entries[0]
                        _merge_producers(state.producers[e.channel],
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


def _merge_producers(into: dict[str, list[int]], new: dict[str, list[int]]) -> None:
    for pid, last in new.items():
        if last[0] > into.get(pid, [-1])[0]:
            into[pid] = list(last)


def read_pieces(store: ObjectStore, channel_id: str, schema: pa.Schema, pieces: list[Piece], start: int,
                stop: int) -> pa.Table:
    """Records ``[start, stop)`` of one channel from ``pieces``, with ``_seq`` and ``_tick``.

    Runs on Spark workers too: everything it needs is in its arguments. A WAL piece whose
    segment was flushed and deleted meanwhile is read from the channel's Parquet files."""
    wanted = [p for p in pieces if max(start, p.first) < min(stop, p.end)]
    frames: dict[int, bytes | None] = {}
    by_key: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(wanted):
        if p.offset >= 0:
            by_key[p.key].append(i)
    for key, idx in by_key.items():  # one ranged read per object
        try:
            got = store.get_ranges(key, [wanted[i].offset for i in idx], [wanted[i].offset + wanted[i].length for i in idx])
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
        table = decode_entry(frame_bytes, frame[0], channel_id).cast(schema)
        table = _with_hidden(table, p.first, frame[0].tick)
        parts.append(table.slice(lo - p.first, hi - lo))
    if not parts:
        return _with_hidden(schema.empty_table(), 0, 0)
    return pa.concat_tables(parts)


def _with_hidden(table: pa.Table, first: int, tick: int) -> pa.Table:
    n = table.num_rows
    table = table.append_column(SEQ, pa.array(np.arange(first, first + n, dtype=np.int64)))
    return table.append_column(TICK, pa.array(np.full(n, tick, dtype=np.int64)))


def _read_parquet(store: ObjectStore, key: str, schema: pa.Schema, lo: int, hi: int) -> pa.Table:
    table = pq.read_table(pa.BufferReader(store.get(key)))
    first = table.column(SEQ)[0].as_py()
    table = table.slice(lo - first, hi - lo)
    return table.select([*schema.names, SEQ, TICK]).cast(pa.schema([*schema, pa.field(SEQ, pa.int64()),
                                                                       pa.field(TICK, pa.int64())]))


def _read_flushed(store: ObjectStore, channel_id: str, schema: pa.Schema, lo: int, hi: int) -> pa.Table:
    parts = []
    for key in store.list(paths.log_data_prefix(channel_id)):
        if not key.endswith(".parquet"):
            continue
        first, end, _ = paths.parse_log_data_key(key)
        if first < hi and end > lo:
            parts.append(_read_parquet(store, key, schema, max(lo, first), min(hi, end)))
    got = pa.concat_tables(parts) if parts else None
    if got is None or got.num_rows != hi - lo:
        raise StorageError(f"log channel {channel_id}: records [{lo}, {hi}) are neither in the WAL nor flushed")
    return got


# -- flushing -----------------------------------------------------------------------------------
class _Flusher:
    """Writes closed segments as Parquet, one file per channel, in order, on a background thread."""

    def __init__(self, log_: Log):
        self.log = log_
        self._todo: list[SegmentName] = []
        self._cv = threading.Condition()
        self._busy = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="millpond-log-flush", daemon=True)
        self._thread.start()

    def submit(self, name: SegmentName) -> None:
        with self._cv:
            if name not in self._todo:
                self._todo.append(name)
                self._todo.sort()
            self._cv.notify_all()

    def drain(self) -> None:
        with self._cv:
            while (self._todo or self._busy) and not self._stop:
                self._cv.wait(0.1)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._todo and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                name = self._todo.pop(0)
                self._busy = True
            try:
                flush_segment(self.log, name)
            except Exception:  # noqa: BLE001 - retried at the next claim; the WAL still has it
                log.exception("log flush of %s failed; it stays in the WAL", name.key)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


def flush_segment(log_: Log, name: SegmentName) -> None:
    """Steps: 1. one Parquet file per channel in the segment; 2. the checkpoint (producers, tick)
    that says the segment is flushed; 3. the index points at the files; 4. delete the segment."""
    store = log_.store
    listing = list_segments(store, name.pchannel)
    frames_by_ch: dict[str, list[pa.Table]] = defaultdict(list)
    first_by_ch: dict[str, int] = {}
    last_tick = 0
    for chunk, data in read_segment(store, name, listing):
        frames, _ = scan(data, chunk, chunk=chunk)
        for f in frames:
            body = memoryview(data)[f.offset - chunk:f.offset - chunk + f.length]
            for e in f.entries:
                t = decode_entry(body, f, e.channel)
                frames_by_ch[e.channel].append(_with_hidden(t, e.first, f.tick))
                first_by_ch.setdefault(e.channel, e.first)
            last_tick = max(last_tick, f.tick)
    live = {i.id for i in (ChannelInfo.decode(store.get(k)) for k in store.list("log/channels/"))}
    written: dict[str, Piece] = {}
    for ch, tables in frames_by_ch.items():
        if ch not in live:
            continue  # a dropped channel
        table = pa.concat_tables(tables)
        first, end = first_by_ch[ch], first_by_ch[ch] + table.num_rows
        key = paths.log_data_key(ch, first, end, table.column(TICK)[-1].as_py())
        meta = {b"millpond.seq": f"{first}-{end}".encode(),
                b"millpond.tick": f"{table.column(TICK)[0].as_py()}-{table.column(TICK)[-1].as_py()}".encode()}
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        store.put(key, sink.getvalue().to_pybytes())
        written[ch] = Piece(first, end - first, table.column(TICK)[-1].as_py(), key)
    with log_._cv:
        producers = {ch: dict(p) for ch, p in log_._state.producers.items() if p}
        tick = max(last_tick, log_._state.ticks.get(name.pchannel, 0))
    store.put(f"log/p{name.pchannel}/ckpt/{name.gen:010d}-{name.n:06d}.json",
              json.dumps({"segment": [name.gen, name.n], "producers": producers, "tick": tick}).encode())
    with log_._cv:
        for ch, piece in written.items():
            pieces = log_._state.pieces.get(ch, [])
            log_._state.pieces[ch] = sorted([p for p in pieces if not (piece.first <= p.first and p.end <= piece.end)]
                                            + [piece], key=lambda p: p.first)
    _delete_segment(store, name, listing)
    for old in store.list(f"log/p{name.pchannel}/ckpt/")[:-1]:
        store.delete(old)


def _delete_segment(store: ObjectStore, name: SegmentName, listing: Listing) -> None:
    path = store.local_path(name.key)
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    for offset in listing.chunks.get(name, []):
        store.delete(name.chunk_key(offset))
    store.delete(name.seal_key)


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise MillpondError(f"log channel name {name!r}: use 1-200 characters, no '/' and no leading '.'")


def _copy_channel(src: _State, dst: _State, ch: str) -> None:
    dst.pieces[ch] = list(src.pieces.get(ch, []))
    dst.producers[ch] = dict(src.producers.get(ch, {}))
    if ch in src.start:
        dst.start[ch] = src.start[ch]

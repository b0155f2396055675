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
segments at their last whole frame: a torn tail is cut there (:mod:`millpond.log.writer`).

**Transactions** put every entry in one frame of the lowest physical channel involved, while
leading all of them (the same commit path as an append, :meth:`Writer.commit`): a frame is atomic,
so the transaction is too, also across physical channels.

**Shared state.** What this process knows of every channel and of the ticks lives in one
:class:`~millpond.log.live.Live` object, shared by the writers, the flusher, channels and
transactions; :class:`Log` itself owns the channels' definitions and the writers.

**Flush** (:mod:`millpond.log.flush`). A segment closes when it passes ``segment_bytes`` (or on
:meth:`Log.flush`). A background thread writes each closed segment as one Parquet file per channel
(``log/data/<channel id>/<first>-<end>-<tick>.parquet``, with ``_seq`` and ``_tick`` columns and the
ranges in the file's metadata), records a checkpoint (producer table, tick), and deletes the
segment: object storage then holds everything, and the WAL only the unflushed tail.

**Ticks.** ``tick`` says "every record with a tick <= t has arrived". Idle channels advance it
in memory only (empty ticks are never persisted); :meth:`Log.snapshot` reads every channel's
end at one tick, which never splits a transaction.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import zlib
from collections import defaultdict
from typing import Any, Callable, Iterator

import pyarrow as pa

from millpond import faults, paths
from millpond.columns import SEQ, TICK
from millpond.errors import FencedError, MillpondError, StorageError, TruncatedError
from millpond.log.conform import conform
from millpond.log.flush import Flusher
from millpond.log.live import Live
from millpond.log.state import Appended, ChannelInfo, Piece, read_pieces, read_state, with_hidden
from millpond.log.wal import SegmentName
from millpond.log.writer import Writer
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["Log", "Channel", "Appended", "Transaction", "DEFAULT_PHYSICAL_CHANNELS"]

DEFAULT_PHYSICAL_CHANNELS = 2
DEFAULT_SEGMENT_BYTES = 64 << 20


class Log:
    """The channels of one root. Reads work from any process; the first append to a physical
    channel makes this process its writer."""

    def __init__(self, store: ObjectStore, *, physical_channels: int | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, clock: Callable[[], int] = time.time_ns,
                 ids: Callable[[], str] = paths.random_id):
        self.store, self.segment_bytes, self.clock, self.ids = store, segment_bytes, clock, ids
        self._requested_pchannels = physical_channels
        self._pcount: int | None = None
        self.live = Live(clock)
        self._infos: dict[str, ChannelInfo] = {}  # guarded by live.cv, like the index
        self._writers: dict[int, Writer] = {}
        self._claiming = threading.Lock()
        self._flusher: Flusher | None = None
        self._closed = False
        self.refresh()

    # -- channels ------------------------------------------------------------------------------
    @property
    def physical_channels(self) -> int:
        """Fixed when the root's first channel is created (``log/config.json``)."""
        if self._pcount is None:
            try:
                self._pcount = json.loads(self.store.get(paths.LOG_CONFIG_KEY))["physical_channels"]
            except StorageError:
                return self._requested_pchannels or DEFAULT_PHYSICAL_CHANNELS
        return self._pcount

    def _fix_physical_channels(self) -> int:
        if self._pcount is None and not self.store.list(paths.LOG_CONFIG_KEY):
            n = self._requested_pchannels or DEFAULT_PHYSICAL_CHANNELS
            with contextlib.suppress(AlreadyExists):
                self.store.put_if_absent(paths.LOG_CONFIG_KEY, json.dumps({"physical_channels": n}).encode())
        return self.physical_channels

    def create_channel(self, name: str, schema: pa.Schema, *, id: str | None = None) -> Channel:
        """Create ``name`` (or return it, if it exists with this schema and id).

        An existing channel with another ``id`` is a dropped incarnation: it is replaced."""
        _check_name(name)
        with self.live.cv:
            found = self._infos.get(name) or self._load_info(name)
            if found is not None and (id is None or found.id == id):
                if not found.schema.equals(schema):
                    raise MillpondError(f"log channel {name!r} exists with another schema: {found.schema}")
                return Channel(self, found)
            pcount = self._fix_physical_channels()
            info = ChannelInfo(name, id or self.ids()[:16], zlib.crc32(name.encode()) % pcount, schema)
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
        with self.live.cv:
            info = self._infos.get(name) or self._load_info(name)
        if info is None:
            raise MillpondError(f"log channel {name!r} does not exist under {self.store.root!r} "
                                f"(channels: {self.channel_names()})")
        return Channel(self, info)

    def channel_names(self) -> list[str]:
        prefix = paths.LOG_CHANNELS_PREFIX
        return [k[len(prefix):-len(".json")] for k in self.store.list(prefix)]

    def drop_channel(self, name: str) -> None:
        """Forget ``name``: its flushed files go now, its WAL records with their segments."""
        with self.live.cv:
            info = self._infos.pop(name, None) or self._load_info(name)
            if info is None:
                return
            self._infos.pop(name, None)
            self.store.delete(paths.log_channel_key(name))
            for key in self.store.list(paths.log_data_prefix(info.id)):
                self.store.delete(key)
            self.live.drop(info.id)

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
        state = read_state(self.store, self.physical_channels)
        with self.live.cv:  # keep our own physical channels' view: it is newer than storage's
            self.live.refresh(state, set(self._writers), {i.id: i.pchannel for i in self._infos.values()})

    def tick(self) -> int:
        """Every record with a tick <= the returned one has arrived (durable and visible)."""
        return self.live.tick(writing=bool(self._writers))

    def snapshot(self, names: list[str]) -> tuple[int, dict[str, int]]:
        """One tick and each channel's end at it: a cut that never splits a transaction (nothing
        is published while it is taken)."""
        with self.live.cv:
            t = self.tick()
            return t, {name: self.live.end_at(self.channel(name).info.id, t) for name in names}

    def writes(self, pchannel: int) -> bool:
        """Whether this process is the writer of ``pchannel`` (its appends notify local readers)."""
        return pchannel in self._writers

    # -- writing -------------------------------------------------------------------------------
    def transaction(self) -> Transaction:
        return Transaction(self)

    def writer(self, pchannel: int) -> Writer:
        """This process's writer of ``pchannel``, claiming it on first use."""
        w = self._writers.get(pchannel)
        if w is not None and w.broken is None and not self._closed:
            return w
        with self._claiming:
            return self._claim(pchannel)

    def _claim(self, pchannel: int) -> Writer:
        if self._closed:
            raise MillpondError(f"the log of {self.store.root!r} is closed")
        w = self._writers.get(pchannel)
        if w is not None and isinstance(w.broken, FencedError):
            raise w.broken  # never fight the newer writer for the channel
        if w is None or w.broken:
            if w is not None:  # an I/O failure: claim again, which recovers the tail
                w.release()
            w = self._writers[pchannel] = Writer(
                self.store, pchannel, self.live, physical_channels=self.physical_channels,
                segment_bytes=self.segment_bytes, on_closed=self._closed_segment, clock=self.clock)
        return w

    def flush(self) -> None:
        """Close every open segment and wait until everything is flushed to Parquet."""
        for w in list(self._writers.values()):
            w.roll()
        if self._flusher:
            self._flusher.drain()

    def _closed_segment(self, name: SegmentName) -> None:
        if self._flusher is None:
            self._flusher = Flusher(self.store, self.live)
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
        return self.log.live.end(self.info.id)

    @property
    def start(self) -> int:
        """The first sequence number still readable (records below it were truncated)."""
        return self.log.live.start(self.info.id)

    @property
    def tick(self) -> int:
        return self.log.tick()

    def append(self, data: Any, *, producer: tuple[str, int] | None = None) -> Appended:
        """Durably append one batch; ``producer=(id, seq)`` makes a retried append apply once."""
        table = conform(f"channel {self.name!r}", self.schema, data)
        if producer is not None:
            producer = (str(producer[0]), int(producer[1]))
        return self.log.writer(self.info.pchannel).commit([(self.info.id, table)], producer=producer)[0]

    def pieces(self, start: int, stop: int) -> list[Piece]:
        """The pieces holding ``[start, stop)``; a range below :attr:`start` is an error."""
        self._check_range(start)
        return self.log.live.pieces(self.info.id, start, stop)

    def read(self, start: int | None = None, stop: int | None = None, *, hidden: bool = False) -> pa.Table:
        """Records ``[start, stop)`` (default: all) in sequence order; ``hidden`` adds ``_seq`` and ``_tick``."""
        start = self.start if start is None else start
        stop = self.end if stop is None else min(stop, self.end)
        if start >= stop:
            self._check_range(start)
            return with_hidden(self.schema.empty_table(), 0, 0) if hidden else self.schema.empty_table()
        table = read_pieces(self.log.store, self.info.id, self.schema, self.pieces(start, stop), start, stop)
        return table if hidden else table.drop_columns([SEQ, TICK])

    def wait(self, position: int, timeout: float | None = None) -> bool:
        """Block until the channel has a record at or past ``position`` (True) or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.log.live.cv:
                if self.end > position:
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if self.log.writes(self.info.pchannel):  # we write it: appends notify us
                    self.log.live.cv.wait(remaining)
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
        with self.log.live.cv:
            pieces = self.log.live.pieces(self.info.id)
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
            for p in self.log.live.truncated(self.info.id, upto):
                self.log.store.delete(p.key)

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
        self._parts.append((ch.info, conform(f"channel {channel!r}", ch.schema, data)))

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001
        if exc_type is None:
            self.commit()

    def commit(self) -> dict[str, Appended]:
        """Append everything as one frame; return each channel's range (one tick for all)."""
        by_p: dict[int, list[tuple[str, pa.Table]]] = defaultdict(list)
        names = {}
        for info, table in self._parts:
            if table.num_rows:
                by_p[info.pchannel].append((info.id, table))
                names[info.id] = info.name
        if not by_p:
            return {}
        self._parts = []
        writers = [self.log.writer(p) for p in sorted(by_p)]
        entries = [e for p in sorted(by_p) for e in by_p[p]]
        appended = writers[0].commit(entries, also=writers[1:])
        return {names[ch]: a for (ch, _), a in zip(entries, appended)}


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise MillpondError(f"log channel name {name!r}: use 1-200 characters, no '/' and no leading '.'")

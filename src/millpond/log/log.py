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
carries the time tick of the group commit that made it durable. A SQL table's channel takes the
table's rows and writes them as its changelog (:mod:`millpond.log.tables`).

**Appending** (one physical channel, one writer):

1. The batch is checked against the schema (a :class:`SchemaError` names the field and row);
   nothing of a rejected batch is written.
2. Concurrent appends queue up; one of them leads a *group commit*: it numbers every queued
   batch, gives them one tick, writes them as checksummed frames in one write, and makes it
   durable with one ``fdatasync`` (local) or one put-if-absent chunk (object storage).
3. The leader checks it is still the writer (no newer generation has claimed the physical
   channel); only then are the records visible and the appends acknowledged.

**Writers.** The first append to a physical channel claims it: on a local root it takes an
``flock`` (a crashed writer's lock dies with it), and on every root it writes the next *writer
generation* with put-if-absent, which fences any older writer at its next group commit. The claim
then seals the older generations' segments at their last whole frame: a torn tail is cut there
(:mod:`millpond.log.writer`). While another process holds the lock, appends are forwarded to it
(:mod:`millpond.log.forward`); a Database holds every physical channel while it is open
(:meth:`Log.serve`), so producers beside it write through it.

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
from dataclasses import replace
from typing import Callable

import pyarrow as pa

from millpond import paths
from millpond.columns import DEFAULT, FILL
from millpond.errors import FencedError, MillpondError, StorageError
from millpond.log.appends import Part, records, upserts
from millpond.log.channel import Channel, Transaction, check_channel_name
from millpond.log.flush import Flusher
from millpond.log.forward import Forwarder, Inbox
from millpond.log.live import Live
from millpond.log.state import Appended, ChannelInfo, read_state
from millpond.log.tables import is_table, number_rows, numbers_rows
from millpond.log.wal import SegmentName
from millpond.log.writer import HeldError, Writer
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["Log", "Channel", "Appended", "Transaction", "DEFAULT_PHYSICAL_CHANNELS", "check_channel_name",
           "UpsertFn"]

# The Database's ingest of a table's rows (with a primary key: upserts): (the table's channel,
# conformed rows, producer) -> the range appended. It appends through this Log, with the producer.
UpsertFn = Callable[[ChannelInfo, pa.Table, "tuple[str, int] | None"], Appended]

DEFAULT_PHYSICAL_CHANNELS = 2
DEFAULT_SEGMENT_BYTES = 64 << 20
FORWARD_TIMEOUT = 300.0  # seconds a forwarded append waits for the writer (it may be running an epoch)
INBOX_POLL = 0.02  # seconds between a writer's looks for forwarded appends (a local listing: microseconds)


class Log:
    """The channels of one root. Reads work from any process; the first append to a physical
    channel makes this process its writer."""

    def __init__(self, store: ObjectStore, *, physical_channels: int | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, clock: Callable[[], int] = time.time_ns,
                 ids: Callable[[], str] = paths.random_id, forward_timeout: float = FORWARD_TIMEOUT):
        self.store, self.segment_bytes, self.clock, self.ids = store, segment_bytes, clock, ids
        self.forward_timeout = forward_timeout
        self._requested_pchannels = physical_channels
        self._pcount: int | None = None
        self._live = Live(clock)
        self._read = False  # whether storage was read: at the first read (a forwarding writer never does)
        self._infos: dict[str, ChannelInfo] = {}  # guarded by live.cv, like the index
        self._by_id: dict[str, ChannelInfo] = {}
        self._writers: dict[int, Writer] = {}
        self._upsert: UpsertFn | None = None  # set by the Database that serves this root (serve)
        self._forwarder: Forwarder | None = None
        self._inbox: Inbox | None = None
        self._claiming = threading.Lock()
        self._flusher: Flusher | None = None
        self._closed = False

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

    def create_channel(self, name: str, schema: pa.Schema, *, id: str | None = None,
                       table_key: tuple[str, ...] | None = None) -> Channel:
        """Create ``name`` (or return it, if it exists with this schema and id).

        ``table_key``: the channel is a table's changelog with this primary key (``()``: key-less),
        see :mod:`millpond.log.tables`; it is recorded on an existing channel that lacks it. An
        existing table's channel with another ``id`` is a dropped incarnation: it is replaced; a
        plain channel is never replaced (its records would be lost)."""
        check_channel_name(name)
        with self._live.cv:
            found = self._infos.get(name) or self._load_info(name)
            if found is not None and (id is None or found.id == id):
                if not _same(found.schema, schema):
                    found = self._evolve(found, schema)
                if table_key is not None and found.table_key != tuple(table_key):
                    found = replace(found, table_key=tuple(table_key))
                    self.store.put(paths.log_channel_key(name), found.encode())
                    self._remember(found)
                return Channel(self, found)
            if found is not None and not is_table(found):
                raise MillpondError(f"log channel {name!r} exists as a plain channel (id {found.id}), not as a table's "
                                    "changelog: drop it first (Log.drop_channel) or choose another name")
            pcount = self._fix_physical_channels()
            info = ChannelInfo(name, id or self.ids()[:16], zlib.crc32(name.encode()) % pcount, schema,
                               None if table_key is None else tuple(table_key))
            if found is None:
                try:
                    self.store.put_if_absent(paths.log_channel_key(name), info.encode())
                except AlreadyExists:
                    return self.create_channel(name, schema, id=id, table_key=table_key)
            else:
                self.store.put(paths.log_channel_key(name), info.encode())
            self._remember(info)
            return Channel(self, info)

    def _evolve(self, found: ChannelInfo, schema: pa.Schema) -> ChannelInfo:
        """A table's channel with the columns added to it since (``schema`` has them: fields with
        a fill, which readers put into older records: :func:`~millpond.defaults.fit`) and its
        columns' defaults now, or as it is when ``schema`` is an older version of it (a writer whose
        catalog predates the column)."""
        found = self._load_info(found.name) or found  # another process may have added them already
        old, new = ({f.name: f for f in sch} for sch in (found.schema, schema))
        if all(n in new and f.type.equals(new[n].type) for n, f in old.items()) \
                and all(f.metadata and FILL in f.metadata for n, f in new.items() if n not in old):
            if not _same(found.schema, schema):
                found = replace(found, schema=schema)
                self.store.put(paths.log_channel_key(found.name), found.encode())
            self._remember(found)
            return found
        if all(n in old and f.type.equals(old[n].type) for n, f in new.items()) \
                and all(f.metadata and FILL in f.metadata for n, f in old.items() if n not in new):
            return found
        raise MillpondError(f"log channel {found.name!r} exists with another schema: {found.schema}")

    def check_table_name(self, name: str) -> None:
        """Raise unless a new table ``name`` can have its channel: a name the log can store, not
        taken by a plain channel (a dropped table's leftover channel is replaced)."""
        check_channel_name(name)
        with self._live.cv:
            found = self._infos.get(name) or self._load_info(name)
        if found is not None and not is_table(found):
            raise MillpondError(f"a plain log channel named {name!r} exists (a table's channel has the table's "
                                "name): drop it first (Log.drop_channel) or choose another name")

    def channel(self, name: str) -> Channel:
        with self._live.cv:
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
        with self._live.cv:
            info = self._infos.pop(name, None) or self._load_info(name)
            if info is None:
                return
            self._infos.pop(name, None)
            self._by_id.pop(info.id, None)
            self.store.delete(paths.log_channel_key(name))
            for key in self.store.list(paths.log_data_prefix(info.id)):
                self.store.delete(key)
            self._live.drop(info.id)

    def _load_info(self, name: str) -> ChannelInfo | None:
        try:
            info = ChannelInfo.decode(self.store.get(paths.log_channel_key(name)))
        except StorageError:
            return None
        self._remember(info)
        return info

    def _remember(self, info: ChannelInfo) -> None:
        self._infos[info.name] = info
        self._by_id[info.id] = info

    # -- reading -------------------------------------------------------------------------------
    @property
    def live(self) -> Live:
        """What this process knows of the log (storage is read at the first use)."""
        if not self._read:
            self.refresh()
        return self._live

    def refresh(self) -> None:
        """Read what other writers appended since (a no-op for channels this process writes)."""
        self._read = True
        if self._writers and len(self._writers) == self.physical_channels:
            return
        state = read_state(self.store, self.physical_channels)
        with self._live.cv:  # keep our own physical channels' view: it is newer than storage's
            self._live.refresh(state, set(self._writers), {i.id: i.pchannel for i in self._infos.values()})

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
                self.store, pchannel, self._live, physical_channels=self.physical_channels,
                segment_bytes=self.segment_bytes, on_closed=self._closed_segment, clock=self.clock,
                number=self._number, role="database" if self._upsert is not None else "log")
            self._start_inbox()
        return w

    def _start_inbox(self) -> None:
        """A writer serves the appends forwarded to it (only a local root's lock tells others it lives)."""
        if self._inbox is None and self.store.local_path("") is not None:
            self._inbox = Inbox(self.store, held=lambda: sorted(list(self._writers)), channel=self._info,
                                apply=self._apply, tend=self._tend, poll=INBOX_POLL)

    def serve(self, upsert: UpsertFn) -> None:
        """Be the writer of the root while this Log is open (a Database calls this when it opens):
        take every physical channel whose lock is free (and, on a local root, keep taking those
        that come free), serve the appends other processes forward, and resolve rows appended to a
        table's channel with ``upsert`` (the Database's ingest, so a table with a primary key
        gets upserts). A physical channel held by another Database (its lock file says so) refuses
        this one with a :class:`HeldError` (the caller closes this Log); one held by a plain log
        writer (a loader) is taken when it comes free."""
        self._upsert = upsert
        try:
            self._tend(opening=True)
        except BaseException:
            self._upsert = None
            raise
        with self._claiming:
            self._start_inbox()  # also when another writer holds them all: it takes them when they come free

    @property
    def serving(self) -> bool:
        """Whether a Database serves the root through this Log (:meth:`serve`): only it appends a
        table's own changelog records (``_row_id``, ``_w``)."""
        return self._upsert is not None

    def _tend(self, *, opening: bool = False) -> None:
        if self._upsert is None:
            return
        for p in range(self._fix_physical_channels()):  # in order: of two Databases opening, p0's holder wins
            if p not in self._writers and not self._closed:
                try:
                    self.writer(p)
                except HeldError as exc:
                    if opening and exc.holder.get("role") == "database":
                        raise
                    # a loader's (or, once open, anyone's): it keeps it until it closes
                except MillpondError:
                    if not self._closed:
                        raise

    def _append(self, parts: list[Part], producer: tuple[str, int] | None) -> list[Appended]:
        """Append ``parts`` (prepared: :func:`millpond.log.appends.prepare`) as one append: as this
        process's writer, or forwarded to the live writer of another (:mod:`millpond.log.forward`).
        The Database's own changelog records are never forwarded."""
        pchannels = sorted({p.info.pchannel for p in parts})
        try:
            for p in pchannels:
                self.writer(p)
        except HeldError:  # a transaction across physical channels held apart cannot be forwarded either
            if any(p in self._writers for p in pchannels) or any(p.changes for p in parts):
                raise
            return self._forwarding().forward(pchannels[0], parts, producer, claim=lambda: self._try_claim(pchannels),
                                               timeout=self.forward_timeout)
        return self._apply(parts, producer)

    def _apply(self, parts: list[Part], producer: tuple[str, int] | None) -> list[Appended]:
        """Append ``parts`` as this process's writer (it takes the writers it lacks)."""
        rows = upserts(parts)
        if rows is not None and self._upsert is not None:
            return [self._upsert(rows.info, rows.table, producer)]
        entries = records(parts)
        by_p: dict[int, list[tuple[str, pa.Table]]] = defaultdict(list)
        for info, table in entries:
            by_p[info.pchannel].append((info.id, table))
        writers = [self.writer(p) for p in sorted(by_p)]
        flat = [e for p in sorted(by_p) for e in by_p[p]]
        appended = writers[0].commit(flat, producer=producer, also=writers[1:])
        at = {ch: a for (ch, _), a in zip(flat, appended)}
        return [at.get(info.id, appended[0]) for info, _ in entries]

    def _try_claim(self, pchannels: list[int]) -> bool:
        try:
            for p in pchannels:
                self.writer(p)
            return True
        except HeldError:
            return False

    def _forwarding(self) -> Forwarder:
        with self._claiming:
            if self._forwarder is None:
                self._forwarder = Forwarder(self.store, ids=self.ids)
            return self._forwarder

    def _info(self, name: str, id: str) -> ChannelInfo:
        """The definition of ``name`` as of incarnation ``id`` (re-read if this process knew an older one)."""
        info = self.channel(name).info
        if info.id != id:
            with self._live.cv:
                info = self._load_info(name) or info
        return info

    def _number(self, channel_id: str, first: int, table: pa.Table) -> pa.Table:
        info = self._by_id.get(channel_id)
        return number_rows(table, first) if info is not None and numbers_rows(info) else table

    def flush(self) -> None:
        """Close every open segment and wait until everything is flushed to Parquet."""
        for w in list(self._writers.values()):
            w.roll()
        if self._flusher:
            self._flusher.drain()

    def _closed_segment(self, name: SegmentName) -> None:
        if self._flusher is None:
            self._flusher = Flusher(self.store, self._live)
        self._flusher.submit(name)

    def close(self) -> None:
        """Stop writing: release the physical channels (unflushed records stay in the WAL).
        Requests forwarded to this process and not yet served wait for the next writer."""
        self._closed = True
        if self._inbox:
            self._inbox.stop()
        if self._flusher:
            self._flusher.drain()
            self._flusher.stop()
        for w in self._writers.values():
            w.release()
        self._writers.clear()


def _same(a: pa.Schema, b: pa.Schema) -> bool:
    """The same columns, types and defaults (other metadata aside)."""
    def defaults(s: pa.Schema) -> list:
        return [(f.metadata or {}).get(DEFAULT) for f in s] + [(f.metadata or {}).get(FILL) for f in s]
    return a.equals(b) and defaults(a) == defaults(b)

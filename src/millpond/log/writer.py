"""The single writer of one physical channel: claim and recovery, group commit, rolling.

Claiming (the first append to a physical channel in this process):

1. a local root's ``flock`` on ``log/p<k>/LOCK`` (a second live writer is refused at once, with a
   :class:`~millpond.errors.HeldError` naming the holder: the lock file holds its pid, host, role
   — ``database`` for a Database's log, else ``log`` — and program, without its arguments);
2. the next writer generation, written with put-if-absent (it fences every older writer);
3. the older generations' segments sealed at their last whole frame (a torn tail is cut), and
   handed to the flusher; segments already flushed are deleted.

A group commit (:meth:`Writer.commit`; its steps are in :mod:`millpond.log.log`) writes and syncs,
then checks that no newer generation exists before anything is published or acknowledged. A
transaction across physical channels takes the same path, leading every writer involved.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import pyarrow as pa

from millpond import faults, paths
from millpond.errors import FencedError, HeldError, MillpondError, StorageError
from millpond.log.flush import delete_segment
from millpond.log.live import Live
from millpond.log.state import Appended, State, read_state
from millpond.log.wal import Entry, Frame, SegmentName, SegmentWriter, encode_frame, list_segments
from millpond.store.objects import AlreadyExists, ObjectStore

__all__ = ["Writer", "HeldError", "lock", "hold", "describe"]

log = logging.getLogger(__name__)


@dataclass
class _Request:
    entries: list[tuple[str, pa.Table]]
    producer: tuple[str, int] | None
    result: list[Appended] | None = None
    error: BaseException | None = None


class Writer:
    """The single writer of one physical channel in this process."""

    def __init__(self, store: ObjectStore, pchannel: int, live: Live, *, physical_channels: int,
                 segment_bytes: int, on_closed: Callable[[SegmentName], None], clock: Callable[[], int],
                 number: Callable[[str, int, pa.Table], pa.Table] | None = None, role: str = "log"):
        """``number(channel id, first seq, records)``: the records as numbered (a key-less table's
        ``_row_id`` is its sequence number, :mod:`millpond.log.tables`), called while leading.
        ``role``: what the lock file says holds it (``database``: a Database's log, ``log``)."""
        self.store, self.pchannel, self.live = store, pchannel, live
        self.segment_bytes, self.on_closed, self.clock = segment_bytes, on_closed, clock
        self.number = number
        self.broken: BaseException | None = None
        self._lock_fd = lock(self.store, pchannel)
        if self._lock_fd is not None:
            hold(self._lock_fd, role)
        try:
            self.gen = self._claim()
            state = read_state(self.store, physical_channels)  # older writers are fenced: this is final
            self._seal_older(state)
            live.adopt(state, pchannel)  # this physical channel's channels: exactly what is on storage now
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
        gens = [paths.parse_log_writer_gen(k) for k in self.store.list(paths.log_writers_prefix(self.pchannel))]
        gen = max(gens, default=0) + 1
        try:
            self.store.put_if_absent(paths.log_writer_key(self.pchannel, gen),
                                     json.dumps({"pid": os.getpid(), "at": self.clock() / 1e9}).encode())
        except AlreadyExists:
            raise FencedError(f"log physical channel p{self.pchannel} under {self.store.root!r}: another writer "
                              f"claimed generation {gen} at the same time") from None
        return gen

    def _seal_older(self, state: State) -> None:
        """Fix every older segment at its last whole frame (cutting torn tails and partial transactions)."""
        listing = list_segments(self.store, self.pchannel)
        flushed = state.flushed.get(self.pchannel)
        for name in listing.segments:
            if name.gen >= self.gen:
                continue
            if flushed is not None and name <= flushed:  # flushed, but its writer died before deleting it
                delete_segment(self.store, name, listing)
                continue
            if name in listing.sealed:
                self.on_closed(name)
                continue
            valid = state.valid.get(name, 0)
            path = self.store.local_path(name.key)
            if path is not None and path.exists() and path.stat().st_size > valid:
                log.warning("log p%d: cutting segment %s back from %d to %d bytes (torn or unfinished tail)",
                            self.pchannel, name.key, path.stat().st_size, valid)
                os.truncate(path, valid)
            with contextlib.suppress(AlreadyExists):
                self.store.put_if_absent(name.seal_key, json.dumps({"length": valid}).encode())
            self.on_closed(name)

    def check_fenced(self) -> None:
        nxt = paths.log_writer_key(self.pchannel, self.gen + 1)
        path = self.store.local_path(nxt)
        taken = path.exists() if path is not None else bool(self.store.list(nxt))
        if taken:
            self.broken = FencedError(f"log physical channel p{self.pchannel} under {self.store.root!r}: this writer "
                                      f"(generation {self.gen}) was fenced by a newer writer; its last append is "
                                      "not acknowledged")
            raise self.broken

    # -- group commit ----------------------------------------------------------------------------
    def commit(self, entries: list[tuple[str, pa.Table]], *, producer: tuple[str, int] | None = None,
               also: Sequence[Writer] = ()) -> list[Appended]:
        """Append ``entries`` as one frame, durably; concurrent commits share one group commit.

        ``also``: the writers of the other physical channels a transaction's entries belong to
        (their physical channels are higher). The frame goes into this writer's segment while this
        process leads all of them, so their numbering and ticks stay in order, and it is committed
        alone through the same steps."""
        req = _Request(entries, producer)
        if also:
            led: list[Writer] = []
            try:
                for w in (self, *also):  # in physical channel order: transactions never wait in a cycle
                    w.lead()
                    led.append(w)
                self._commit_group([req], also)
            finally:
                for w in led:
                    w.unlead()
            if req.error is not None:
                raise req.error
            return req.result
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

    def _commit_group(self, group: list[_Request], also: Sequence[Writer] = ()) -> None:
        """The group commit: 1. a new tick; 2. skip producers' retries; 3. number, encode, write
        and sync the frames; 4. check no newer writer fenced this one (or ``also``); 5. publish
        and acknowledge; 6. roll full segments."""
        try:
            if self.broken:
                raise self.broken
            with self.live.next_tick() as tick:
                todo, dups = [], {}
                seen: dict[tuple[str, str], int] = {}
                for i, req in enumerate(group):
                    if req.producer:
                        ch = req.entries[0][0]
                        pid, pseq = req.producer
                        last = seen.get((ch, pid))
                        if last is None:
                            last = self.live.last_producer_seq(ch, pid)
                        if pseq <= last:
                            dups[i] = (ch, pid, pseq)
                            continue
                        seen[(ch, pid)] = pseq
                    todo.append(i)
                written = self._write_frames([(group[i].entries, group[i].producer) for i in todo], tick) if todo else []
                for w in (self, *also):
                    w.check_fenced()
                faults.point("log.after_put")
                self.live.publish([(self.pchannel, f, k) for f, k in written])
                for i, (frame, _) in zip(todo, written):
                    group[i].result = [Appended(e.first, e.first + e.count, frame.tick) for e in frame.entries]
                for i, (ch, pid, pseq) in dups.items():
                    last = self.live.producer_range(ch, pid)
                    known = last[0] == pseq
                    group[i].result = [Appended(last[1] if known else -1, last[2] if known else -1, tick, True)]
            for w in (self, *also):
                w.roll_if_full()
        except BaseException as exc:
            for req in group:
                if req.result is None:
                    req.error = exc if isinstance(exc, MillpondError) else StorageError(
                        f"log physical channel p{self.pchannel} under {self.store.root!r}: append failed: {exc}")

    def _write_frames(self, frames: list[tuple[list[tuple[str, pa.Table]], tuple[str, int] | None]],
                     tick: int) -> list[tuple[Frame, str]]:
        """Number, encode, write and sync ``frames`` (the caller leads); a failure breaks this writer."""
        nxt: dict[str, int] = {}
        encoded = []
        for entries, _ in frames:
            for ch, _ in entries:
                if ch not in nxt:
                    nxt[ch] = self.live.end(ch)
        for entries, producer in frames:
            numbered = []
            for ch, table in entries:
                if self.number is not None:
                    table = self.number(ch, nxt[ch], table)
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
        if self.segment.length >= self.segment_bytes:
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
        self.on_closed(old.name)

    def release(self) -> None:
        if getattr(self, "segment", None) is not None:
            self.segment.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def lock(store: ObjectStore, pchannel: int) -> int | None:
    """Hold ``pchannel``'s lock file (a local root; None elsewhere; :func:`hold` writes who holds
    it), or raise a :class:`HeldError` naming the live holder."""
    path = store.local_path(paths.log_lock_key(pchannel))
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(os.pread(fd, 4096, 0))
        os.close(fd)
        raise HeldError(f"log physical channel p{pchannel} under {store.root!r} is held by another writer "
                        f"({describe(holder)}); close it first (one writer per physical channel)",
                        holder=holder) from None
    return fd


def hold(fd: int, role: str) -> None:
    """Write into a held lock file who holds it: this process, its host, ``role`` and program."""
    record = {"pid": os.getpid(), "host": socket.gethostname(), "role": role, "program": _program()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


def _program() -> str:
    """What this process runs, without its arguments (they may hold a password): ``millpond serve``,
    ``job.py``, ``ipykernel_launcher.py`` (a notebook), ``python -c``."""
    argv = sys.argv or [""]
    name = os.path.basename(argv[0]) if argv[0] not in ("", "-c") else f"python {argv[0]}".strip()
    if name in ("millpond", "cli.py") and len(argv) > 1 and not argv[1].startswith("-"):
        name = f"millpond {argv[1]}"  # the subcommand: sql, serve, pipeline, log
    return name[:100]


def _holder(data: bytes) -> dict:
    """What a lock file says of its holder (a millpond before 2026-11 wrote only its pid)."""
    text = data.decode(errors="replace").strip()
    if text.isdigit():
        return {"pid": int(text)}
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def describe(holder: dict) -> str:
    """``process 4242 on host h: millpond serve`` (or what of it is known)."""
    if "pid" not in holder:
        return "a process the lock file does not name"
    where = f" on host {holder['host']}" if holder.get("host") else ""
    same = " (this process)" if holder["pid"] == os.getpid() and holder.get("host", socket.gethostname()) == \
        socket.gethostname() else ""
    return f"process {holder['pid']}{where}{same}" + (f": {holder['program']}" if holder.get("program") else "")

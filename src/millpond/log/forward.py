"""Forwarded appends: writing to a physical channel whose writer lives in another process.

A physical channel has one writer (:mod:`millpond.log.writer`). On a local root its lock tells
a second writer that the first is alive; rather than fail, the second hands its append to the
first through the root, and the first serves it as one of its own appends. The everyday case is a
:class:`~millpond.Database` (the writer of every physical channel while it is open) and producers
beside it: a Spark job's sink, ``millpond log append``, a loader using the Python log API.

The forwarder (:class:`Forwarder`, steps 1-2, then it waits):

1. stages each part's records as an Arrow file (``log/staging/<channel>/<id>.arrow``);
2. writes the request ``log/p<k>/inbox/<forwarder>-<n>.json`` (put-if-absent): the parts and a
   producer, the caller's or ``("fwd:<forwarder>", n)``; ``n`` grows with every request, and a
   forwarder writes its requests one at a time, so sorted by name they are in producer order.

The writer (:class:`Inbox`, a thread of every process that holds a writer, steps 3-6):

3. lists its physical channels' inboxes and takes each request in name order;
4. appends its parts as one append with the request's producer (a frame that is durable before
   anything is answered; with a primary key, the Database resolves the upsert);
5. writes the answer ``<request>.done``: the range appended, or the error;
6. deletes the request and its staged files.

The forwarder reads the answer, deletes it, and only then acknowledges. It never waits on a
writer that is gone: while it waits it tries to take the lock itself, and once it holds it, its
own :class:`Inbox` serves the waiting requests (its own included).

**Exactly once.** Every request carries a producer, and a producer's append is applied once
(the dedup of :meth:`millpond.log.writer.Writer.commit`, recorded in the same frame as the
records). A writer that dies after step 4 leaves the request in the inbox; whoever serves it next
finds the producer applied and answers with the original range. A forwarder that gives up
(its timeout) withdraws its request, but cannot know whether it was applied: the error says so,
and a retry with the same producer applies it once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

import pyarrow as pa

from millpond import errors, paths
from millpond.errors import MillpondError, StorageError
from millpond.log.appends import Part
from millpond.log.state import Appended, ChannelInfo
from millpond.store.objects import ObjectStore

__all__ = ["Forwarder", "Inbox", "ApplyFn", "decode_answer"]

log = logging.getLogger(__name__)

CLAIM_EVERY = 0.25  # seconds between a waiting forwarder's tries to take a writer that went away
ORPHAN_SECONDS = 600.0  # an answer nobody read for this long belongs to a forwarder that died: deleted


ApplyFn = Callable[[list[Part], "tuple[str, int] | None"], list[Appended]]


class Forwarder:
    """The requests of one :class:`~millpond.log.Log` to writers in other processes."""

    def __init__(self, store: ObjectStore, *, ids: Callable[[], str]):
        self.store, self.ids = store, ids
        self.id = ids()[:16]
        self._n = 0
        self._lock = threading.Lock()

    def submit(self, pchannel: int, parts: list[Part], producer: tuple[str, int] | None) -> tuple[str, bool]:
        """Steps 1-2; return the request's key and whether its producer is this forwarder's own."""
        staged = [self._stage(p) for p in parts]
        with self._lock:  # one request at a time: their names are in producer order
            self._n += 1
            key = paths.log_request_key(pchannel, self.id, self._n)
            own = producer is None
            if own:
                producer = (f"fwd:{self.id}", self._n)
            body = {"parts": [[p.info.name, p.info.id, k] for p, k in zip(parts, staged)],
                    "producer": list(producer)}
            self.store.put_if_absent(key, json.dumps(body).encode())
        return key, own

    def forward(self, pchannel: int, parts: list[Part], producer: tuple[str, int] | None, *,
                claim: Callable[[], bool], timeout: float) -> list[Appended]:
        """Hand ``parts`` to the writer of ``pchannel`` and wait for its answer. ``claim()`` tries to
        become the writer (True once this process is): then this process's Inbox serves the request."""
        key, own = self.submit(pchannel, parts, producer)
        deadline = time.monotonic() + timeout
        next_claim = time.monotonic() + CLAIM_EVERY
        delay = 0.002
        while True:
            result = self.answer(key, own=own)
            if result is not None:
                return result
            now = time.monotonic()
            if now >= next_claim:
                claim()
                next_claim = now + CLAIM_EVERY
            if now >= deadline:
                result = self.answer(key, own=own)  # a last look: the writer may have just answered
                if result is not None:
                    return result
                self.withdraw(key)
                raise StorageError(
                    f"log physical channel p{pchannel} under {self.store.root!r}: the writer holding it did not "
                    f"answer within {timeout:g} s; the append was not acknowledged (it may still be applied: a "
                    "retry with the same producer applies it once)")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def answer(self, key: str, *, own: bool) -> list[Appended] | None:
        """The writer's answer to request ``key`` (raised, if it is an error); None until there is one."""
        done = paths.log_answer_key(key)
        try:
            data = self.store.get(done)
        except StorageError:
            return None
        self.store.delete(done)
        return decode_answer(json.loads(data), own=own)

    def withdraw(self, key: str) -> None:
        """Give up on request ``key`` (best effort: a writer may be applying it right now)."""
        for k in _staged_keys(self.store, key):
            self.store.delete(k)
        self.store.delete(key)
        self.store.delete(paths.log_answer_key(key))

    def _stage(self, part: Part) -> str:
        key = paths.log_staging_key(part.info.name, f"fwd-{self.ids()}")
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, part.table.schema) as writer:
            writer.write_table(part.table)
        self.store.put(key, sink.getvalue().to_pybytes())
        return key


class Inbox:
    """Serves the requests forwarded to this process's writers, on a background thread.

    ``held()``: the physical channels this process writes; ``channel(name, id)``: a channel's
    definition (as of incarnation ``id``); ``apply(parts, producer)``: append as this process's own (it must hold the writers);
    ``tend()``: called about once a second (the Log takes free physical channels it should hold)."""

    def __init__(self, store: ObjectStore, *, held: Callable[[], list[int]], channel: Callable[[str, str], ChannelInfo],
                 apply: ApplyFn, tend: Callable[[], None], poll: float, wall: Callable[[], float] = time.time):
        self.store, self.held, self.channel, self.apply, self.tend = store, held, channel, apply, tend
        self.poll, self.wall = poll, wall
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="millpond-log-inbox", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        tended = swept = time.monotonic()
        while not self._stop.is_set():
            try:
                served = self.serve()
                if time.monotonic() - tended >= 1.0:
                    tended = time.monotonic()
                    self.tend()
                if time.monotonic() - swept >= 60.0:
                    swept = time.monotonic()
                    self.sweep()
            except Exception:  # noqa: BLE001 - storage trouble: the requests wait, the forwarders time out
                log.exception("serving forwarded log appends failed; retrying")
                served = 0
            if not served:
                self._stop.wait(self.poll)

    def serve(self) -> int:
        """Steps 3-6 for every waiting request; return how many were served."""
        n = 0
        for p in self.held():
            for key in self.store.list(paths.log_inbox_prefix(p)):
                if self._stop.is_set():
                    return n
                if key.endswith(".json"):
                    self._serve(key)
                    n += 1
        return n

    def sweep(self) -> None:
        """Delete answers whose forwarder died before reading them (local roots: file times)."""
        for p in self.held():
            for key in self.store.list(paths.log_inbox_prefix(p)):
                path = self.store.local_path(key)
                if key.endswith(".done") and path is not None:
                    try:
                        if self.wall() - path.stat().st_mtime > ORPHAN_SECONDS:
                            self.store.delete(key)
                    except FileNotFoundError:
                        pass

    def _serve(self, key: str) -> None:
        done = paths.log_answer_key(key)
        if self.store.list(done):  # answered before a crash: only the cleanup is left
            self._clean(key)
            return
        try:
            request = json.loads(self.store.get(key))
        except StorageError:
            return  # withdrawn
        try:
            parts = []
            for name, channel_id, staged in request["parts"]:
                info = self.channel(name, channel_id)
                if info.id != channel_id:
                    raise MillpondError(f"log channel {name!r} was dropped (and recreated) since the append was made")
                parts.append(Part(info, pa.ipc.open_file(pa.py_buffer(self.store.get(staged))).read_all()))
            appended = self.apply(parts, tuple(request["producer"]))
            answer = {"appended": [[a.first, a.end, a.tick, a.duplicate] for a in appended]}
        except Exception as exc:  # noqa: BLE001 - answered: the forwarder raises it, nothing was acknowledged
            answer = {"error": type(exc).__name__ if isinstance(exc, MillpondError) else "MillpondError",
                      "message": str(exc) if isinstance(exc, MillpondError) else f"unexpected {type(exc).__name__}: {exc}"}
        self.store.put(done, json.dumps(answer).encode())  # 5. (the append itself is durable already)
        self._clean(key)

    def _clean(self, key: str) -> None:
        for k in _staged_keys(self.store, key):
            self.store.delete(k)
        self.store.delete(key)


def decode_answer(answer: dict, *, own: bool) -> list[Appended]:
    """An answer as the forwarder's result. A duplicate of the forwarder's own producer is its
    request applied by a writer that died before answering: the append itself, not a retry."""
    if "error" in answer:
        cls = getattr(errors, answer["error"], None)
        if not (isinstance(cls, type) and issubclass(cls, MillpondError)) or cls is errors.TruncatedError:
            cls = MillpondError
        raise cls(answer["message"])
    return [Appended(first, end, tick, dup and not own) for first, end, tick, dup in answer["appended"]]


def _staged_keys(store: ObjectStore, key: str) -> list[str]:
    try:
        return [staged for _, _, staged in json.loads(store.get(key))["parts"]]
    except (StorageError, ValueError, KeyError):
        return []

"""What this process knows of the log right now, shared by the writers, the flusher, channels and
transactions: the index of every channel (:class:`~millpond.log.state.State`) and the time ticks.

One condition variable guards both. Appends publish through :meth:`Live.publish`, which wakes
tailing readers. Ticks: every group commit takes the next tick (monotonic per process, in
microseconds); while it is being written the tick is *in flight*, and :meth:`Live.tick` stays
below it, so "everything up to tick t has arrived" is never claimed early.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from contextlib import contextmanager
from typing import Callable, Iterator

from millpond.log.state import Piece, State, copy_channel
from millpond.log.wal import Frame

__all__ = ["Live"]


class Live:
    def __init__(self, clock: Callable[[], int]):
        self.cv = threading.Condition(threading.RLock())
        self.state = State()
        self._clock = clock  # nanoseconds
        self._last_tick = 0
        self._inflight: set[int] = set()

    # -- ticks ----------------------------------------------------------------------------------
    @contextmanager
    def next_tick(self) -> Iterator[int]:
        """A new tick for one group commit, in flight until the block exits."""
        with self.cv:
            tick = self._advance()
            self._inflight.add(tick)
        try:
            yield tick
        finally:
            with self.cv:
                self._inflight.discard(tick)

    def tick(self, *, writing: bool) -> int:
        """Every record with a tick <= the returned one has arrived. A process that writes (some
        physical channel) advances it with its clock; a reader knows only what it has read."""
        with self.cv:
            if self._inflight:
                return min(self._inflight) - 1
            if not writing:
                return max(self.state.ticks.values(), default=0)
            return max(self._clock() // 1000, self._last_tick)

    def _advance(self) -> int:
        self._last_tick = max(self._clock() // 1000, self._last_tick + 1)
        return self._last_tick

    # -- the index ------------------------------------------------------------------------------
    def end(self, channel_id: str) -> int:
        with self.cv:
            return self.state.end(channel_id)

    def start(self, channel_id: str) -> int:
        with self.cv:
            return self.state.start.get(channel_id, 0)

    def pieces(self, channel_id: str, start: int = 0, stop: int | None = None) -> list[Piece]:
        """The pieces holding records of ``[start, stop)`` (all by default), in order."""
        with self.cv:
            pieces = self.state.pieces.get(channel_id, [])
            i = max(0, bisect_right([p.first for p in pieces], start) - 1)
            return [p for p in pieces[i:] if p.end > start and (stop is None or p.first < stop)]

    def end_at(self, channel_id: str, tick: int) -> int:
        """The channel's end counting only records with a tick <= ``tick``."""
        with self.cv:
            pieces = self.state.pieces.get(channel_id, [])
            i = bisect_right([p.tick for p in pieces], tick)
            return pieces[i - 1].end if i else self.state.start.get(channel_id, 0)

    def last_producer_seq(self, channel_id: str, producer: str) -> int:
        """The last sequence number applied for ``producer`` on the channel (-1: none)."""
        with self.cv:
            return self.state.producers.get(channel_id, {}).get(producer, [-1])[0]

    def producer_range(self, channel_id: str, producer: str) -> list[int]:
        """[seq, first, end] of the producer's last applied append (-1s when unknown)."""
        with self.cv:
            return list(self.state.producers.get(channel_id, {}).get(producer, [-1, -1, -1]))

    def producers(self) -> dict[str, dict[str, list[int]]]:
        with self.cv:
            return {ch: dict(p) for ch, p in self.state.producers.items() if p}

    def persisted_tick(self, pchannel: int) -> int:
        with self.cv:
            return self.state.ticks.get(pchannel, 0)

    # -- changes --------------------------------------------------------------------------------
    def publish(self, frames: list[tuple[int, Frame, str]]) -> None:
        """Make written frames (pchannel, frame, object key) visible and wake waiting readers."""
        with self.cv:
            for pchannel, frame, key in frames:
                for e in frame.entries:
                    self.state.pieces[e.channel].append(Piece(e.first, e.count, frame.tick, key, frame.offset,
                                                              frame.length))
                if frame.producer:
                    pid, pseq = frame.producer
                    e = frame.entries[0]
                    self.state.producers[e.channel][pid] = [pseq, e.first, e.first + e.count]
                self.state.ticks[pchannel] = max(self.state.ticks.get(pchannel, 0), frame.tick)
            self.cv.notify_all()

    def adopt(self, storage: State, pchannel: int) -> None:
        """A new writer of ``pchannel`` takes its channels exactly as storage has them."""
        with self.cv:
            for info in storage.channels:
                if info.pchannel == pchannel:
                    copy_channel(storage, self.state, info.id)
            self.state.ticks[pchannel] = storage.ticks.get(pchannel, 0)
            self._last_tick = max(self._last_tick, storage.ticks.get(pchannel, 0))

    def refresh(self, storage: State, written: set[int], channel_pchannels: dict[str, int]) -> None:
        """Take what storage has, except for the physical channels this process writes (``written``:
        this process's view of them is newer than storage's)."""
        with self.cv:
            if written:
                for ch, p in channel_pchannels.items():
                    if p in written:
                        copy_channel(self.state, storage, ch)
                for p in written:
                    storage.ticks[p] = self.state.ticks.get(p, 0)
            self.state = storage
            self._last_tick = max([self._last_tick, *storage.ticks.values()])
            self.cv.notify_all()

    def flushed(self, channel_id: str, piece: Piece) -> None:
        """Records of ``piece`` (a Parquet file) replace the WAL pieces they were flushed from."""
        with self.cv:
            pieces = self.state.pieces.get(channel_id, [])
            self.state.pieces[channel_id] = sorted(
                [p for p in pieces if not (piece.first <= p.first and p.end <= piece.end)] + [piece],
                key=lambda p: p.first)

    def truncated(self, channel_id: str, upto: int) -> list[Piece]:
        """Forget records below ``upto``; return the pieces wholly below it (their files go)."""
        with self.cv:
            pieces = self.state.pieces.get(channel_id, [])
            self.state.pieces[channel_id] = [p for p in pieces if p.end > upto]
            self.state.start[channel_id] = upto
            return [p for p in pieces if p.end <= upto]

    def drop(self, channel_id: str) -> None:
        with self.cv:
            self.state.pieces.pop(channel_id, None)

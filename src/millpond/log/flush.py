"""Flushing closed segments to Parquet, one file per channel, on a background thread.

Steps per segment: 1. one Parquet file per channel in it; 2. the checkpoint (producers, tick)
that says the segment is flushed; 3. the index points at the files; 4. delete the segment.
A crash between any two steps redoes the segment: its files are rewritten with the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import defaultdict
import pyarrow as pa
import pyarrow.parquet as pq

from millpond import paths
from millpond.columns import SEQ, TICK
from millpond.defaults import fit
from millpond.log.live import Live
from millpond.log.state import Piece, read_channels, with_hidden
from millpond.log.wal import Listing, SegmentName, decode_entry, list_segments, read_segment, scan
from millpond.store.objects import ObjectStore

__all__ = ["Flusher", "flush_segment", "delete_segment"]

log = logging.getLogger(__name__)


class Flusher:
    """Writes closed segments as Parquet, one file per channel, in order, on a background thread."""

    def __init__(self, store: ObjectStore, live: Live):
        self.store, self.live = store, live
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
                flush_segment(self.store, self.live, name)
            except Exception:  # noqa: BLE001 - retried at the next claim; the WAL still has it
                log.exception("log flush of %s failed; it stays in the WAL", name.key)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


def flush_segment(store: ObjectStore, live: Live, name: SegmentName) -> None:
    """Steps: 1. one Parquet file per channel in the segment; 2. the checkpoint (producers, tick)
    that says the segment is flushed; 3. the index points at the files; 4. delete the segment."""
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
                frames_by_ch[e.channel].append(with_hidden(t, e.first, f.tick))
                first_by_ch.setdefault(e.channel, e.first)
            last_tick = max(last_tick, f.tick)
    existing = {i.id: i for i in read_channels(store)}  # a channel dropped meanwhile is not flushed
    written: dict[str, Piece] = {}
    for ch, tables in frames_by_ch.items():
        if ch not in existing:
            continue  # a dropped channel
        # each record with the channel's columns now: a frame older than a column added since is filled in
        schema = pa.schema([*existing[ch].schema, pa.field(SEQ, pa.int64()), pa.field(TICK, pa.int64())])
        table = pa.concat_tables([fit(t, schema) for t in tables])
        first, end = first_by_ch[ch], first_by_ch[ch] + table.num_rows
        key = paths.log_data_key(ch, first, end, table.column(TICK)[-1].as_py())
        meta = {b"millpond.seq": f"{first}-{end}".encode(),
                b"millpond.tick": f"{table.column(TICK)[0].as_py()}-{table.column(TICK)[-1].as_py()}".encode()}
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        store.put(key, sink.getvalue().to_pybytes())
        written[ch] = Piece(first, end - first, table.column(TICK)[-1].as_py(), key)
    producers = live.producers()
    tick = max(last_tick, live.persisted_tick(name.pchannel))
    store.put(paths.log_ckpt_key(name.pchannel, name.gen, name.n),
              json.dumps({"segment": [name.gen, name.n], "producers": producers, "tick": tick}).encode())
    for ch, piece in written.items():
        live.flushed(ch, piece)
    delete_segment(store, name, listing)
    for old in store.list(paths.log_ckpt_prefix(name.pchannel))[:-1]:
        store.delete(old)


def delete_segment(store: ObjectStore, name: SegmentName, listing: Listing) -> None:
    path = store.local_path(name.key)
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    for offset in listing.chunks.get(name, []):
        store.delete(name.chunk_key(offset))
    store.delete(name.seal_key)

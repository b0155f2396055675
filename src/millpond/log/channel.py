"""Handles on a :class:`~millpond.log.Log`'s channels: appending, reading, tailing, truncating;
and transactions across channels."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from millpond import faults, paths
from millpond.columns import SEQ, TICK, W
from millpond.errors import MillpondError, TruncatedError
from millpond.log.appends import Part, prepare, records
from millpond.log.state import COMPACTED, Appended, ChannelInfo, Piece, read_pieces, with_hidden
from millpond.log.tables import is_table, row_schema

if TYPE_CHECKING:
    from millpond.log.log import Log

__all__ = ["Channel", "Transaction", "check_channel_name"]


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

    def producer_seq(self, producer: str) -> int:
        """The last producer sequence number applied on this channel for ``producer`` (-1: none)."""
        return self.log.live.last_producer_seq(self.info.id, producer)

    @property
    def start(self) -> int:
        """The first sequence number still readable (records below it were truncated)."""
        return self.log.live.start(self.info.id)

    @property
    def tick(self) -> int:
        return self.log.tick()

    @property
    def row_schema(self) -> pa.Schema:
        """What :meth:`append` takes: a table's columns for a table's channel, else :attr:`schema`."""
        return row_schema(self.info)

    def append(self, data: Any, *, producer: tuple[str, int] | None = None) -> Appended:
        """Durably append one batch; ``producer=(id, seq)`` makes a retried append apply once.

        Into a table's channel, ``data`` is rows of the table (:mod:`millpond.log.tables`). When
        another process holds the physical channel (a Database open on the root), the append is
        forwarded to it and acknowledged once it is durable there (:mod:`millpond.log.forward`);
        this Log's reads see it after :meth:`Log.refresh`."""
        part = prepare(self.info, data, database=self.log.serving)
        if producer is not None:
            producer = (str(producer[0]), int(producer[1]))
        return self.log._append([part], producer)[0]

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

    @property
    def flushed(self) -> int:
        """The end of the channel's flushed prefix: records below it are in object storage, not
        only in the write-ahead log (a transaction's frame may flush out of order)."""
        with self.log.live.cv:
            flushed = self.start
            for p in self.log.live.pieces(self.info.id):
                if p.offset >= 0:
                    break
                flushed = p.end
            return flushed

    def truncate(self, upto: int) -> None:
        """Drop records below ``upto``; they must be flushed already (so no WAL frame is lost)."""
        with self.log.live.cv:
            flushed = self.flushed
            if upto > flushed:
                raise MillpondError(f"log channel {self.name!r}: cannot truncate to {upto}: records from {flushed} "
                                    "are not flushed yet (Log.flush() first)")
            if upto <= self.start:
                return
            self.log.store.put(paths.log_start_key(self.info.id, upto), b"")
            faults.point("log.truncate.after_start")
            for p in self.log.live.truncated(self.info.id, upto):
                self.log.store.delete(p.key)
        # files an earlier truncation was stopped before deleting (a crash): nothing reads them
        for key in self.log.store.list(paths.log_data_prefix(self.info.id)):
            name = key.rsplit("/", 1)[-1]
            if name.startswith("start-") and int(name[6:26]) < upto or \
                    name.endswith(".parquet") and paths.parse_log_data_key(key)[1] <= upto:
                self.log.store.delete(key)

    def compact(self, upto: int) -> tuple[int, int] | None:
        """Rewrite a table channel's records ``[start, upto)`` as the rows they leave: records
        that cancel (a row's insert and its delete or update, by every column and ``_row_id``)
        go, the rest stay with their sequence numbers, in one file that replaces the range's
        files. Reads of the range as a whole (a table's rows, a view's backfill) are unchanged;
        ranges inside it no longer read record by record, so ``upto`` must be below every
        reader's position. Must be flushed already. It stops at the last file boundary at or
        below ``upto`` (a file is replaced whole). Returns where it stopped and the records it
        kept (None: nothing to compact)."""
        with self.log.live.cv:
            if upto > self.flushed:
                raise MillpondError(f"log channel {self.name!r}: cannot compact to {upto}: records from "
                                    f"{self.flushed} are not flushed yet (Log.flush() first)")
            start = self.start
            upto = max([p.end for p in self.log.live.pieces(self.info.id) if p.offset < 0 and p.end <= upto],
                       default=start)
        if upto <= start:
            return None
        records = self.read(start, upto, hidden=True)
        columns = [c for c in records.column_names if c not in (W, SEQ, TICK)]
        import polars as pl  # here, not at the top: Spark workers that read the log never load it

        kept = (pl.from_arrow(records).group_by(columns).agg(pl.col(W).sum(), pl.col(SEQ).max(), pl.col(TICK).max())
                .filter(pl.col(W) != 0).sort(SEQ).select(records.column_names).to_arrow().cast(records.schema))
        tick = int(pc.max(records.column(TICK)).as_py())
        key = paths.log_data_key(self.info.id, start, upto, tick)
        kept = kept.replace_schema_metadata({b"millpond.seq": f"{start}-{upto}".encode(), COMPACTED: b"1"})
        sink = pa.BufferOutputStream()
        pq.write_table(kept, sink, compression="zstd")
        self.log.store.put(key, sink.getvalue().to_pybytes())
        faults.point("log.compact.after_put")
        self.log.live.flushed(self.info.id, Piece(start, upto - start, tick, key))
        for old in self.log.store.list(paths.log_data_prefix(self.info.id)):  # the files it replaces
            if old != key and old.endswith(".parquet"):
                first, end, _ = paths.parse_log_data_key(old)
                if start <= first and end <= upto:
                    self.log.store.delete(old)
        return upto, kept.num_rows

    def _check_range(self, start: int) -> None:
        if start < self.start:
            raise TruncatedError(f"log channel {self.name!r}: records [{start}, {self.start}) were truncated; "
                                 f"the channel now starts at {self.start}", channel=self.name, start=self.start)


class Transaction:
    """Appends that become durable and visible together, or not at all (also across channels on
    different physical channels). Use as a context manager, or call :meth:`commit`."""

    def __init__(self, log_: Log):
        self.log = log_
        self._parts: list[Part] = []

    def append(self, channel: str, data: Any) -> None:
        self._parts.append(prepare(self.log.channel(channel).info, data, database=self.log.serving))

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001
        if exc_type is None:
            self.commit()

    def commit(self) -> dict[str, Appended]:
        """Append everything as one frame; return each channel's range (one tick for all). Rows of
        a table with a primary key cannot be part of a transaction (they are upserts)."""
        parts = [p for p in self._parts if p.table.num_rows]
        self._parts = []
        if not parts:
            return {}
        parts.sort(key=lambda p: p.info.pchannel)
        if len(parts) == 1 and is_table(parts[0].info) and not parts[0].changes:
            records(parts)  # a lone upsert is still no transaction: refused like one
        return {p.info.name: a for p, a in zip(parts, self.log._append(parts, None))}


def check_channel_name(name: str) -> None:
    """Raise unless ``name`` can name a channel (its name is part of object keys)."""
    if (not name or "/" in name or name.startswith(".") or len(name.encode()) > 200
            or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name.encode())} bytes)"
        raise MillpondError(f"log channel name {shown}: use 1 to 200 bytes (UTF-8) with no '/', no control "
                            "characters and no leading '.'")

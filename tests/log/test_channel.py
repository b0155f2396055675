"""The log service: channels, group commit, torn tails, fencing, producers, transactions,
flush to Parquet, ticks, tailing and retention, on a local folder and on S3 (moto)."""

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from millpond.errors import FencedError, MillpondError, SchemaError, TruncatedError
from millpond.log import Log
from millpond.log.wal import SegmentName
from millpond.store.objects import ObjectStore
from tests.log import inbox_empty

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


def _batch(xs):
    return {"x": xs, "s": [f"v{x}" for x in xs]}


def _xs(table):
    return table.column("x").to_pylist()


def _open(root, **kw):
    return Log(ObjectStore(str(root)), **kw)


def _segments(root):
    return sorted(Path(root, "log").glob("p*/wal/*.wal"))


def test_append_numbers_records_and_replays_ranges(tmp_path):
    log = _open(tmp_path)
    ch = log.create_channel("visit", SCHEMA)
    a = ch.append(_batch([1, 2, 3]))
    b = ch.append(_batch([4, 5]))
    assert (a.first, a.end, b.first, b.end) == (0, 3, 3, 5)
    assert b.tick > a.tick
    assert _xs(ch.read(2, 4)) == [3, 4]
    hidden = ch.read(0, 5, hidden=True)
    assert hidden.column("_seq").to_pylist() == [0, 1, 2, 3, 4]
    assert hidden.column("_tick").to_pylist() == [a.tick] * 3 + [b.tick] * 2
    log.close()
    again = _open(tmp_path).channel("visit")  # a new process: same end, same records
    assert again.end == 5 and _xs(again.read()) == [1, 2, 3, 4, 5]
    assert again.read(0, 5, hidden=True).equals(hidden)


def test_virtual_channels_share_physical_channels(tmp_path):
    log = _open(tmp_path, physical_channels=2)
    chans = [log.create_channel(f"c{i}", SCHEMA) for i in range(6)]
    assert {c.info.pchannel for c in chans} == {0, 1}
    for i, c in enumerate(chans):
        c.append(_batch([i] * (i + 1)))
    assert len(_segments(tmp_path)) == 2  # one open segment per physical channel, not per channel
    for i, c in enumerate(chans):
        assert _xs(c.read()) == [i] * (i + 1)
    with pytest.raises(MillpondError, match="does not exist.*c0"):
        log.channel("nope")
    with pytest.raises(MillpondError, match="another schema"):
        log.create_channel("c0", pa.schema([("y", pa.int64())]))


def test_bad_records_name_column_and_row_and_append_nothing(tmp_path):
    ch = _open(tmp_path).create_channel("visit", SCHEMA)
    ch.append(_batch([1]))
    with pytest.raises(SchemaError, match=r"channel 'visit': column 'x' expects int64, got string at row 2 \(value '3x'\)"):
        ch.append(pa.table({"x": ["1", "2", "3x"], "s": ["a", "b", "c"]}))
    with pytest.raises(SchemaError, match=r"lacks \['s'\]"):
        ch.append({"x": [1]})
    with pytest.raises(SchemaError, match=r"has unknown \['y'\]"):
        ch.append({"x": [1], "s": ["a"], "y": [2]})
    strict = _open(tmp_path / "strict").create_channel("t", pa.schema([pa.field("x", pa.int64(), nullable=False)]))
    with pytest.raises(SchemaError, match=r"column 'x' is not nullable, but row 1 is null"):
        strict.append({"x": [1, None]})
    assert ch.end == 1 and _xs(ch.read()) == [1]
    assert ch.append(pa.table({"x": ["7"], "s": ["ok"]})).first == 1  # castable input is accepted


def test_group_commit_shares_syncs_and_loses_nothing(tmp_path, monkeypatch):
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd)))
    ch = _open(tmp_path).create_channel("visit", SCHEMA)
    results, threads = [], []

    def producer(p):
        for i in range(50):
            r = ch.append(_batch([p * 1000 + i]))
            results.append((p, i, r.first))

    for p in range(8):
        threads.append(threading.Thread(target=producer, args=(p,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ch.end == 400 and len(results) == 400
    table = ch.read()
    got = dict(zip(table.column("x").to_pylist(), range(400)))
    for p, i, first in results:  # every acknowledged append is where its sequence number says
        assert got[p * 1000 + i] == first
    for p in range(8):  # each producer's appends stay in its order
        seqs = [first for q, _, first in results if q == p]
        assert seqs == sorted(seqs)
    assert len(syncs) < 400  # concurrent appenders shared syncs


def test_torn_tail_is_cut_back_to_the_last_whole_batch(tmp_path):
    log = _open(tmp_path)
    ch = log.create_channel("visit", SCHEMA)
    for i in range(5):
        ch.append(_batch([i, i]))
    log.close()
    [seg] = _segments(tmp_path)
    whole = seg.stat().st_size
    with open(seg, "ab") as f:  # a crash in the middle of the next write
        f.write(b"MPW1\x10\x00\x00\x00garbage")
    reader = _open(tmp_path).channel("visit")
    assert reader.end == 10 and _xs(reader.read()) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    writer = _open(tmp_path)
    assert writer.channel("visit").append(_batch([9])).first == 10  # the next writer cuts and goes on
    try:
        assert seg.stat().st_size == whole  # cut back (unless already flushed and deleted)
    except FileNotFoundError:
        pass
    writer.close()
    assert _xs(_open(tmp_path).channel("visit").read(9, 11)) == [4, 9]


def test_corrupt_frame_ends_the_valid_prefix(tmp_path):
    log = _open(tmp_path)
    ch = log.create_channel("visit", SCHEMA)
    for i in range(4):
        ch.append(_batch([i]))
    log.close()
    [seg] = _segments(tmp_path)
    data = bytearray(seg.read_bytes())
    data[-5] ^= 0xFF  # a flipped bit in the last frame
    seg.write_bytes(bytes(data))
    assert _xs(_open(tmp_path).channel("visit").read()) == [0, 1, 2]


def test_a_second_writer_appends_through_the_live_one(tmp_path):
    """While a physical channel's lock is held, another Log's appends are forwarded to its holder
    (log/forward.py) and acknowledged once they are durable there."""
    a = _open(tmp_path)
    a.create_channel("visit", SCHEMA).append(_batch([1]))
    b = _open(tmp_path)
    got = b.channel("visit").append(_batch([2]))
    assert (got.first, got.end, got.duplicate) == (1, 2, False)
    assert a.channel("visit").append(_batch([3])).first == 2  # the holder numbers both
    assert inbox_empty(tmp_path)  # requests and answers are cleaned up
    assert not list(Path(tmp_path, "log", "staging").rglob("*.arrow"))
    a.close()
    assert b.channel("visit").append(_batch([4])).first == 3  # a closed (or crashed) writer lets go
    assert _xs(b.channel("visit").read()) == [1, 2, 3, 4]


def test_a_newer_generation_fences_the_old_writer(tmp_path, monkeypatch):
    """Without a lock (object storage), the newer writer's claim fences the older one."""
    import millpond.log.writer as W
    monkeypatch.setattr(W, "lock", lambda store, p: None)
    a = _open(tmp_path)
    a.create_channel("visit", SCHEMA).append(_batch([1]))
    b = _open(tmp_path)
    b.channel("visit").append(_batch([2]))
    with pytest.raises(FencedError, match="fenced by a newer writer"):
        a.channel("visit").append(_batch([3]))
    with pytest.raises(FencedError):  # and it stays fenced
        a.channel("visit").append(_batch([3]))
    b.channel("visit").append(_batch([4]))
    assert _xs(_open(tmp_path).channel("visit").read()) == [1, 2, 4]


def test_idempotent_producer_applies_a_retry_once(tmp_path):
    log = _open(tmp_path)
    ch = log.create_channel("visit", SCHEMA)
    first = ch.append(_batch([1, 2]), producer=("app", 1))
    retry = ch.append(_batch([1, 2]), producer=("app", 1))
    assert retry.duplicate and (retry.first, retry.end) == (first.first, first.end)
    assert ch.append(_batch([3]), producer=("app", 2)).first == 2
    assert ch.append(_batch([3]), producer=("other", 1)).first == 3  # producers are independent
    log.close()
    again = _open(tmp_path).channel("visit")  # dedup survives a restart ...
    assert again.append(_batch([3]), producer=("app", 2)).duplicate
    again.log.flush()  # ... and a flush that deletes the WAL segment
    again.log.close()
    again = _open(tmp_path).channel("visit")
    assert again.append(_batch([1, 2]), producer=("app", 1)).duplicate
    assert _xs(again.read()) == [1, 2, 3, 3]


def test_transaction_is_all_or_nothing_across_physical_channels(tmp_path):
    log = _open(tmp_path, physical_channels=2)
    names = [f"c{i}" for i in range(6)]
    for n in names:
        log.create_channel(n, SCHEMA)
    a, b = next((x, y) for x in names for y in names
                if log.channel(x).info.pchannel == 0 and log.channel(y).info.pchannel == 1)
    with log.transaction() as tx:
        tx.append(a, _batch([1]))
        tx.append(b, _batch([2, 2]))
    with pytest.raises(SchemaError):  # a bad batch anywhere: nothing of the transaction is written
        with log.transaction() as tx:
            tx.append(a, _batch([3]))
            tx.append(b, {"x": ["no"], "s": ["x"]})
    with pytest.raises(RuntimeError):
        with log.transaction() as tx:
            tx.append(a, _batch([4]))
            raise RuntimeError("the caller gave up")
    t, ends = log.snapshot([a, b])
    assert ends == {a: 1, b: 2}
    # A crash in the middle of writing a transaction: neither channel shows any of it.
    from millpond.log.wal import SegmentWriter

    def torn(self, data):
        os.write(self._fd, data[:len(data) // 2])
        raise OSError("the machine died")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SegmentWriter, "append", torn)
        with pytest.raises(MillpondError, match="write failed"):
            with log.transaction() as tx:
                tx.append(a, _batch([5]))
                tx.append(b, _batch([6]))
    log.close()
    reader = _open(tmp_path)
    assert (reader.channel(a).end, reader.channel(b).end) == (1, 2)
    writer = _open(tmp_path)
    assert writer.channel(b).append(_batch([7])).first == 2
    assert _xs(writer.channel(a).read()) == [1] and _xs(writer.channel(b).read()) == [2, 2, 7]


def test_flush_writes_parquet_with_ranges_and_the_wal_becomes_empty(tmp_path):
    log = _open(tmp_path, segment_bytes=4096)
    ch = log.create_channel("visit", SCHEMA)
    for i in range(40):
        ch.append(_batch(list(range(i * 10, i * 10 + 10))))
    log.flush()
    files = sorted(Path(tmp_path, "log", "data").rglob("*.parquet"))
    assert len(files) > 1
    meta = pq.read_metadata(files[0]).metadata
    first, end = (int(x) for x in meta[b"millpond.seq"].decode().split("-"))
    lo, hi = (int(x) for x in meta[b"millpond.tick"].decode().split("-"))
    assert first == 0 and end > 0 and lo <= hi
    assert all(p.offset < 0 for p in ch.pieces(0, ch.end))  # every record is read from Parquet now
    assert not _segments(tmp_path) or all(s.stat().st_size == 0 for s in _segments(tmp_path))
    assert _xs(ch.read()) == list(range(400))
    log.close()
    assert _xs(_open(tmp_path).channel("visit").read(95, 105)) == list(range(95, 105))


def test_wal_pieces_stay_readable_after_their_segment_is_flushed(tmp_path):
    log = _open(tmp_path)
    ch = log.create_channel("visit", SCHEMA)
    ch.append(_batch([1, 2, 3]))
    pieces = ch.pieces(0, 3)  # planned for a Spark task ...
    log.flush()  # ... then the segment is flushed and deleted before the task runs
    from millpond.log import read_pieces
    got = read_pieces(log.store, ch.info.id, SCHEMA, pieces, 0, 3)
    assert _xs(got) == [1, 2, 3]


def test_ticks_advance_without_persisting_empty_ones(tmp_path):
    now = [1_000_000_000]
    log = _open(tmp_path, clock=lambda: now[0])
    ch = log.create_channel("visit", SCHEMA)
    t1 = ch.append(_batch([1])).tick
    now[0] += 5_000_000_000  # 5 s idle
    assert log.tick() >= t1 + 5_000_000  # everything up to now has arrived ...
    size = sum(s.stat().st_size for s in _segments(tmp_path))
    assert log.tick() > t1  # ... and asking wrote nothing
    assert sum(s.stat().st_size for s in _segments(tmp_path)) == size
    now[0] -= 10_000_000_000  # the wall clock steps back: ticks still grow
    assert ch.append(_batch([2])).tick > t1


def test_tail_blocks_until_records_arrive(tmp_path):
    log = _open(tmp_path)
    ch = log.create_channel("visit", SCHEMA)
    ch.append(_batch([1]))
    seen = []

    def consume():
        for table in ch.tail(0, timeout=2.0):
            seen.extend(_xs(table))
            if len(seen) >= 3:
                return

    t = threading.Thread(target=consume)
    t.start()
    ch.append(_batch([2]))
    ch.append(_batch([3]))
    t.join(5)
    assert seen == [1, 2, 3]
    assert not ch.wait(3, timeout=0.1)
    # a reader in another process polls storage
    other = _open(tmp_path).channel("visit")
    threading.Timer(0.2, lambda: ch.append(_batch([4]))).start()
    assert other.wait(3, timeout=5) and _xs(other.read(3, 4)) == [4]


def test_truncation_needs_a_flush_and_reads_below_it_fail_clearly(tmp_path):
    log = _open(tmp_path)
    ch = log.create_channel("visit", SCHEMA)
    ch.append(_batch([1, 2]))
    with pytest.raises(MillpondError, match="not flushed yet"):
        ch.truncate(1)
    log.flush()
    ch.append(_batch([3]))
    log.flush()
    ch.truncate(2)
    assert ch.start == 2 and _xs(ch.read()) == [3]
    with pytest.raises(TruncatedError, match=r"records \[0, 2\) were truncated") as err:
        ch.read(0, 3)
    assert err.value.start == 2
    log.close()
    again = _open(tmp_path).channel("visit")
    assert again.start == 2 and again.end == 3
    with pytest.raises(TruncatedError):
        again.pieces(1, 3)


def test_a_dropped_and_recreated_channel_starts_empty(tmp_path):
    log = _open(tmp_path)
    log.create_channel("visit", SCHEMA, id="t1").append(_batch([1]))
    log.drop_channel("visit")
    fresh = log.create_channel("visit", SCHEMA, id="t2")
    assert fresh.end == 0
    fresh.append(_batch([2]))
    log.close()
    assert _xs(_open(tmp_path).channel("visit").read()) == [2]


def test_log_on_s3_chunks_per_group_commit(s3_url, s3_options, tmp_path):
    root, options = f"{s3_url}/{tmp_path.name}", s3_options
    log = Log(ObjectStore(root, options))
    ch = log.create_channel("visit", SCHEMA)
    for i in range(5):
        ch.append(_batch([i]))
    with log.transaction() as tx:
        tx.append("visit", _batch([5, 6]))
    log.close()
    again = Log(ObjectStore(root, options))
    assert _xs(again.channel("visit").read()) == list(range(7))
    again.channel("visit").append(_batch([7]))
    again.flush()
    assert all(p.offset < 0 for p in again.channel("visit").pieces(0, 8))
    again.close()
    assert _xs(Log(ObjectStore(root, options)).channel("visit").read()) == list(range(8))


def test_segment_names_order_by_generation_then_number():
    assert SegmentName(0, 1, 5) < SegmentName(0, 2, 0) < SegmentName(0, 2, 1)


def test_a_state_read_that_finds_a_listed_segment_gone_reads_again(tmp_path, monkeypatch):
    """A sealed WAL segment listed, then flushed and deleted by its writer before it was read: the
    read starts over (and finds the Parquet file) instead of failing."""
    from millpond.errors import MissingError
    from millpond.log import state as log_state
    from millpond.store.objects import ObjectStore

    store = ObjectStore(str(tmp_path / "root"))
    real, calls = log_state._read_state, []

    def racy(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise MissingError("object 'log/p0/wal/0000000006-000000.sealed' is missing")
        return real(*a, **k)

    monkeypatch.setattr(log_state, "_read_state", racy)
    assert log_state.read_state(store, 2).channels == []
    assert len(calls) == 2
    monkeypatch.setattr(log_state, "_read_state", lambda *a, **k: (_ for _ in ()).throw(MissingError("gone")))
    with pytest.raises(MissingError):  # not forever
        log_state.read_state(store, 2)


def test_a_flush_between_a_readers_listings_hides_no_record(tmp_path):
    """A writer's flush of a segment (its Parquet file written, then its checkpoint, then the segment
    deleted) while another process lists the log: the reader reads the checkpoints before it lists
    the Parquet files, so the records are in one or the other (listed the other way round, a flush
    between the two listings hid them from both; make test lost a record so once)."""
    from millpond import paths

    writer = _open(tmp_path)
    writer.create_channel("visit", SCHEMA).append(_batch([1, 2]))
    flushed = []

    class FlushingMeanwhile(ObjectStore):
        def list(self, prefix):  # noqa: ANN001, ANN201
            if prefix == paths.log_ckpt_prefix(0) and not flushed:
                writer.flush()  # the writer's flush lands between this reader's listings
                flushed.append(True)
            return super().list(prefix)

    reader = Log(FlushingMeanwhile(str(tmp_path)))
    assert _xs(reader.channel("visit").read()) == [1, 2] and flushed
    writer.close()

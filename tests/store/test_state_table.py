"""SSTs and state-table reads: newest version wins, tombstones hide, reads at an epoch, pruning."""

import zlib

import numpy as np
import polars as pl
import pytest

from millpond import paths
from millpond.crc import crc32
from millpond.errors import FencedError, InvariantError, StorageError
from millpond.store.cache import block_cache
from millpond.store.manifest import Levels, Manifest, ManifestStore
from millpond.store.objects import ObjectStore
from millpond.store.state_table import StateTable, write_state


def _write(store, epoch, rows, *, keys=("k",), additive=False, part=0):
    return write_state(store, paths.sst_key(0, epoch, "ab", "s", part), pl.DataFrame(rows), epoch, keys=keys,
                       additive=additive)


def test_lookup_merges_newest_first_and_hides_tombstones(tmp_path):
    store = ObjectStore(str(tmp_path))
    e1 = _write(store, 1, {"_kh": [1, 2, 3, 257], "k": ["a", "b", "c", "d"], "v": [10, 20, 30, 40],
                           "_del": [False] * 4})
    e2 = _write(store, 2, {"_kh": [2, 3], "k": ["b", "c"], "v": [21, 0], "_del": [False, True]})
    both = Levels((e2, e1))
    at1 = StateTable(store, both, ("k",), epoch=1)
    at2 = StateTable(store, both, ("k",))
    assert sorted(at1.lookup(np.array([2, 3])).rows()) == [(2, "b", 20), (3, "c", 30)]  # time travel
    assert sorted(at2.lookup(np.array([2, 3])).rows()) == [(2, "b", 21)]
    assert sorted(at2.lookup(np.array([1, 257, 99])).rows()) == [(1, "a", 10), (257, "d", 40)]
    assert sorted(at2.scan()["k"].to_list()) == ["a", "b", "d"]
    assert sorted(at2.scan(2, 257)["k"].to_list()) == ["b"]  # range read: 2 <= _kh < 257
    assert at2.lookup(np.array([], dtype=np.int64)) is None


def test_key_range_index_and_bloom_filters_skip_blocks_without_reading_them(tmp_path):
    from millpond.store.sst import bloom_may_contain, open_sst, read_blooms

    class Counting(ObjectStore):
        ranges = 0

        def _get_ranges(self, key, starts, ends):  # noqa: ANN001, ANN202
            Counting.ranges += len(starts)
            return super()._get_ranges(key, starts, ends)

    store = Counting(str(tmp_path))
    n = 20000
    ref = _write(store, 1, {"_kh": list(range(0, 2 * n, 2)), "k": ["x"] * n, "_del": [False] * n})
    assert (ref.min_kh, ref.max_kh, ref.rows) == (0, 2 * n - 2, n)
    block_cache().clear()
    table = StateTable(store, Levels((ref,)), ("k",))
    assert table.lookup(np.array([4, 6])).height == 2
    meta = open_sst(store, ref)
    assert meta.index.shape[0] > 4, "a file of this size has several blocks"
    Counting.ranges = 0
    assert table.lookup(np.array([2 * n + 1])) is None  # outside the key range: nothing is read
    assert Counting.ranges == 0
    odd = np.arange(1, 2 * n, 2)  # inside the range, never written: the filters answer
    block_cache().clear()
    meta = open_sst(store, ref)
    blocks = np.arange(meta.index.shape[0])
    blooms = read_blooms(store, meta, blocks)
    false_hits = sum(bloom_may_contain(bl, odd[(odd > meta.first_kh[b]) & (odd < meta.last_kh[b])]).sum()
                     for b, bl in zip(blocks, blooms))
    assert false_hits / odd.size < 0.05
    assert all(bloom_may_contain(bl, np.arange(meta.first_kh[b], meta.last_kh[b] + 1, 2)).all()
               for b, bl in zip(blocks, blooms)), "a bloom filter lost a key"
    Counting.ranges = 0
    assert table.lookup(odd[:50]) is None or table.lookup(odd[:50]).height == 0
    assert Counting.ranges <= 3, "absent keys made the lookup read blocks"


def test_the_checksum_is_zlibs_crc32():
    """Frames and blocks carry zlib's CRC-32 whatever computes it (``millpond.crc``): files written
    before read as they did (``data/format3.sst`` below), over every kind of buffer the code passes."""
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 64 << 10, 3 << 20):
        data = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        for buffer in (bytes(data), data, memoryview(data)[min(3, n):]):
            assert crc32(buffer) == zlib.crc32(buffer)


def test_corrupt_sst_is_an_error_naming_the_file(tmp_path):
    store = ObjectStore(str(tmp_path))
    ref = _write(store, 1, {"_kh": list(range(5000)), "k": ["x"] * 5000, "_del": [False] * 5000})
    data = bytearray(store.get(ref.key))
    data[100] ^= 0xFF  # a flipped bit inside the first block
    store.put(ref.key, bytes(data))
    block_cache().clear()
    with pytest.raises(StorageError, match=rf"SST '{ref.key}' .* corrupt: block 0 checksum mismatch"):
        StateTable(store, Levels((ref,)), ("k",)).lookup(np.array([1]))
    data[-40] ^= 0xFF  # and in the footer (its meta)
    store.put(ref.key, bytes(data))
    block_cache().clear()
    with pytest.raises(StorageError, match=rf"SST '{ref.key}' .* corrupt: footer checksum mismatch"):
        StateTable(store, Levels((ref,)), ("k",)).lookup(np.array([1]))
    store.put(ref.key, b"not an sst at all, but long enough to have a tail")
    block_cache().clear()
    from dataclasses import replace
    with pytest.raises(StorageError, match="bad magic"):
        StateTable(store, Levels((replace(ref, size=49),)), ("k",)).lookup(np.array([1]))


def test_manifest_commit_is_put_if_absent(tmp_path):
    store = ObjectStore(str(tmp_path))
    manifests = ManifestStore(store)
    assert manifests.latest().epoch == 0
    ref = _write(store, 1, {"_kh": [1], "k": ["a"], "_del": [False]})
    m = Manifest(version=1, epoch=1, states={"s": Levels((ref,))}, offsets={"o1": {"t@1": 5}})
    manifests.commit(m)
    assert manifests.latest() == m
    with pytest.raises(FencedError, match="version 1 .*another writer"):
        manifests.commit(Manifest(version=1, epoch=1))


def test_additive_table_sums_counts_across_files(tmp_path):
    store = ObjectStore(str(tmp_path))
    kw = dict(keys=("k",), additive=True)
    e1 = _write(store, 1, {"_kh": [1, 1, 2], "k": ["a", "b", "c"], "_count": [2, 1, 1], "_del": [False] * 3}, **kw)
    e2 = _write(store, 2, {"_kh": [1, 2], "k": ["a", "c"], "_count": [-1, -1], "_del": [False] * 2}, **kw)
    table = StateTable(store, Levels((e2, e1)), ("k",), additive=True)
    assert sorted(table.lookup(np.array([1, 2])).rows()) == [(1, "a", 1), (1, "b", 1)]
    e3 = _write(store, 3, {"_kh": [2], "k": ["c"], "_count": [-1], "_del": [False]}, **kw)
    with pytest.raises(InvariantError, match="negative"):
        StateTable(store, Levels((e3, e2, e1)), ("k",), additive=True).lookup(np.array([2]))


def test_a_format_3_sst_reads_as_its_format_4_rewrite(tmp_path):
    """Roots written before format 4 (blocks compressed buffer by buffer) stay readable; format 4
    compresses a block whole. ``data/format3.sst``: 3,000 rows of (_kh, k, name), written by the
    last millpond that wrote format 3."""
    import shutil
    from pathlib import Path

    from millpond.store.sst import describe_sst, lookup_sst, open_sst, read_all, write_sst

    store = ObjectStore(str(tmp_path))
    shutil.copy(Path(__file__).parent / "data" / "format3.sst", tmp_path / "format3.sst")
    old = describe_sst(store, "format3.sst")
    got = read_all(store, old)
    n = 3000
    assert got.column("k").to_pylist() == list(range(n))
    assert got.column("name").to_pylist()[:2] == ["n0", "n1"] and open_sst(store, old).schema is None
    new = write_sst(store, "format4.sst", pl.from_arrow(got), keys=("k",))
    assert open_sst(store, new).schema == got.schema and read_all(store, new).equals(got)
    wanted = np.array([-3000009000, 7 * 1_000_003, 2998008994], dtype=np.int64)  # first, a miss, last
    for ref in (old, new):
        block_cache().clear()
        assert lookup_sst(store, ref, wanted).column("k").to_pylist() == [0, n - 1]


def test_a_multiset_read_unsummed_gives_the_same_rows_and_sums_where_counts_net(tmp_path):
    """``summed=False`` (a task handing a table's rows to Spark as weighted records): positive
    counts are read as they are (a row's copies may come apart); a count that nets is summed."""
    store = ObjectStore(str(tmp_path))
    kw = dict(keys=("k", "v"), additive=True)

    def multiset(df):
        return sorted(k for k, count in df.select("k", "_count").rows() for _ in range(count))

    low = _write(store, 1, {"_kh": [1, 2], "k": ["a", "b"], "v": [1, 2], "_count": [1, 2], "_del": [False] * 2}, **kw)
    high = _write(store, 1, {"_kh": [10, 11], "k": ["a", "c"], "v": [3, 4], "_count": [1, 1], "_del": [False] * 2}, **kw,
                  part=1)
    level = Levels((), ((low, high),))  # one deeper level: its files' key ranges are disjoint
    summed = StateTable(store, level, ("k",), additive=True)
    apart = StateTable(store, level, ("k",), additive=True, summed=False)
    assert multiset(apart.scan()) == multiset(summed.scan()) == ["a", "a", "b", "b", "c"]
    assert apart.scan().height == 4 and summed.scan().height == 4  # (_kh, k) apart in both
    again = _write(store, 2, {"_kh": [1], "k": ["a"], "v": [1], "_count": [1], "_del": [False]}, **kw)
    gone = _write(store, 3, {"_kh": [2], "k": ["b"], "v": [2], "_count": [-2], "_del": [False]}, **kw)
    half = _write(store, 4, {"_kh": [2], "k": ["b"], "v": [2], "_count": [-1], "_del": [False]}, **kw)
    for l0, height in (((again,), 5), ((gone,), 3), ((gone, again), 4), ((half, again), 5)):  # L0 over the level
        levels = Levels(l0, ((low, high),))
        read = StateTable(store, levels, ("k",), additive=True, summed=False).scan()
        assert multiset(read) == multiset(StateTable(store, levels, ("k",), additive=True).scan())
        # a's two copies stay apart; b's -2 nets its +2: only b's key hash is summed, and b is gone
        assert read.height == height and ("b" in read["k"].to_list()) == (gone not in l0)
        assert read.filter(pl.col("k") == "b")["_count"].to_list() == ([] if gone in l0 else [1] if half in l0 else [2])
    lone = StateTable(store, Levels((gone,)), ("k",), additive=True, summed=False)
    with pytest.raises(InvariantError, match="negative"):  # a count that nets against nothing is still caught
        lone.scan()


def test_a_bulk_scan_leaves_the_block_cache_to_lookups(tmp_path):
    """A range read of many blocks decodes them without keeping them (each is read once, and would
    evict the blocks lookups use); a lookup's blocks are kept."""
    from millpond.store.sst import SCAN_CACHED_BLOCKS, open_sst

    store = ObjectStore(str(tmp_path))
    n = 60_000
    ref = _write(store, 1, {"_kh": list(range(n)), "k": [f"key-{i}" for i in range(n)], "_del": [False] * n})
    cache = block_cache()
    cache.clear()
    assert open_sst(store, ref).offsets.size > SCAN_CACHED_BLOCKS
    footer = cache.used
    table = StateTable(store, Levels((ref,)), ("k",))
    assert table.scan().height == n
    assert cache.used == footer, "a scan of every block keeps none of them"
    assert table.scan(0, 10).height == 10
    assert cache.used > footer, "a small range read keeps its block"
    cache.clear()
    assert table.lookup(np.array([n // 2])).height == 1
    assert cache.used > 0, "a lookup keeps its block"

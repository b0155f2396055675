"""SSTs: immutable sorted runs of state rows with a block index, a bloom filter and checksums.

Every row carries ``_kh`` (the 64-bit key hash: Spark's ``xxhash64`` of the distribution key, or
the key itself for the plain key-value API), ``_ep`` (the epoch that wrote the row) and ``_del``
(tombstone). A file is sorted by ``_kh``. Layout::

    [block 0] [bloom 0] ... [block n-1] [bloom n-1] [index] [meta json] [u64 index, u32 meta length] [u32 crc] [magic]

- a *block* is one Arrow IPC record batch message of ~``BLOCK_BYTES`` of rows, compressed whole
  as one LZ4 frame after its uncompressed length (u64); the schema is in *meta*, once. Format 3's
  blocks were IPC streams, each with its schema, compressing buffer by buffer (still read: a
  block of a 1M-row keyed table decodes in 265–460 µs that way, ~53 µs this way — LZ4 ~36 µs);
- each block has its own *bloom filter* over its distinct ``_kh`` (10 bits per key, 7 probes:
  ~1% false positives; "partitioned" filters, so a read loads the filters of the blocks it may
  need, never one filter of the whole file);
- the *index* is ``n × 8`` little-endian int64 per block: offset, length, first ``_kh``, last
  ``_kh``, crc32 of the block, and offset, length, crc32 of its bloom filter;
- *meta* holds the format version, row count, key and epoch ranges, the vnode bitmap, the
  identity columns and the least and greatest value of each integer column (``bounds``: what a
  query's key enumeration needs, :meth:`StateTable.bounds`); the crc covers index + meta.

A read fetches the footer once (cached; its size grows with the number of blocks, not keys), then
the filters of the blocks whose key range holds a wanted key, then only the blocks whose filter
may hold one — all with ranged GETs: nothing is downloaded in bulk, which is what makes restore
after a restart lazy. Every fetched byte is checked against its crc; a mismatch, a bad magic or an unknown
format is a :class:`StorageError` naming the file — never wrong data.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from millpond.columns import COUNT, DEL, EP, KH
from millpond.crc import crc32
from millpond.errors import StorageError
from millpond.store.cache import block_cache, disk_cache
from millpond.store.objects import ObjectStore

__all__ = ["VNODES", "SstRef", "SstMeta", "write_sst", "open_sst", "read_blocks",
           "read_all", "read_blooms", "bloom_may_contain", "describe_sst", "lookup_sst", "scan_sst", "vnodes_of", "vnode_bitmap", "bitmap_hex", "take_ranges"]

VNODES = 256

FORMAT = 4  # SST format version (1 and 2 were single Arrow IPC files without blocks)
READS = (3, 4)  # the formats this millpond reads
_LZ4 = pa.Codec("lz4")
_LEN = struct.Struct("<Q")
MAGIC = b"MPOND-S3"
_TAIL = struct.Struct("<QII8s")  # index length, meta length, crc32(index + meta), magic
_INDEX_COLUMNS = 8
BLOCK_BYTES = 64 << 10
SCAN_CACHED_BLOCKS = 16  # a range read of more blocks leaves the memory cache as it found it
BLOOM_BITS_PER_KEY = 10
BLOOM_PROBES = 7
_FOOTER_GUESS = 64 << 10
_SYSTEM = frozenset((KH, EP, DEL, COUNT))


@dataclass(frozen=True)
class SstRef:
    """A committed SST as a manifest lists it: enough to prune it without opening it."""

    key: str
    min_kh: int
    max_kh: int
    min_ep: int
    max_ep: int
    rows: int
    size: int
    vnodes: str  # bitmap hex of the vnodes the file holds

    def mask(self) -> np.ndarray:
        return _mask(self.vnodes)

    def to_json(self) -> list:
        return [self.key, self.min_kh, self.max_kh, self.min_ep, self.max_ep, self.rows, self.size, self.vnodes]

    @classmethod
    def from_json(cls, raw: list) -> "SstRef":
        key, min_kh, max_kh, min_ep, max_ep, rows, size, vnodes = raw
        return cls(key, int(min_kh), int(max_kh), int(min_ep), int(max_ep), int(rows), int(size), vnodes)


@lru_cache(maxsize=65536)
def _mask(vnodes_hex: str) -> np.ndarray:
    mask = np.unpackbits(np.frombuffer(bytes.fromhex(vnodes_hex), dtype=np.uint8)).astype(bool)
    mask.flags.writeable = False  # shared between callers
    return mask


def vnodes_of(kh: np.ndarray) -> np.ndarray:
    """Spark's ``pmod(_kh, VNODES)``."""
    return np.mod(kh, VNODES)


def vnode_bitmap(kh: np.ndarray) -> np.ndarray:
    mask = np.zeros(VNODES, dtype=bool)
    mask[vnodes_of(kh)] = True
    return mask


def bitmap_hex(mask: np.ndarray) -> str:
    return np.packbits(mask).tobytes().hex()


# -- bloom filter -----------------------------------------------------------------------------

def _probes(kh: np.ndarray, bits: int | np.ndarray) -> np.ndarray:
    """``len(kh) × BLOOM_PROBES`` bit positions in filters of ``bits`` bits (one size, or one per key);
    double hashing over a splitmix64 of the key."""
    z = kh.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        h1 = z & np.uint64(0xFFFFFFFF)
        h2 = (z >> np.uint64(32)) | np.uint64(1)
        i = np.arange(BLOOM_PROBES, dtype=np.uint64)
        size = np.asarray(bits, dtype=np.uint64)
        return (h1[:, None] + i[None, :] * h2[:, None]) % (size[:, None] if size.ndim else size)


def _bloom_build(kh: np.ndarray) -> bytes:
    bits = max(64, -(-kh.size * BLOOM_BITS_PER_KEY // 64) * 64)
    filt = np.zeros(bits, dtype=bool)
    filt[_probes(kh, bits).ravel()] = True
    return np.packbits(filt, bitorder="little").tobytes()


def bloom_may_contain(words: np.ndarray, kh: np.ndarray) -> np.ndarray:
    """Per key of ``kh``: False if the filter ``words`` (bytes as uint8) surely lacks it."""
    pos = _probes(kh, words.size * 8)
    hit = (words[(pos >> np.uint64(3)).astype(np.int64)] >> (pos & np.uint64(7)).astype(np.uint8)) & 1
    return hit.all(axis=1)


# -- writing ----------------------------------------------------------------------------------

def write_sst(store: ObjectStore, key: str, rows: pl.DataFrame, *, keys: tuple[str, ...] = (),
              additive: bool = False) -> SstRef:
    """Write ``rows`` (with ``_kh``, ``_ep``, ``_del``) as one SST sorted by ``_kh``. ``keys`` (the
    columns that identify a row besides ``_kh``) and ``additive`` are recorded in the footer, so
    compaction can merge a file without knowing the operator that wrote it.

    Deterministic: the same rows give the same bytes (the rows are put in a total order first),
    so a retried task rewrites an identical file."""
    if rows.height == 0:
        raise ValueError("an SST holds at least one row")
    order = [KH, *[c for c in rows.columns if c != KH]]
    # nulls first (polars' default): measured here, nulls_last makes a multi-column sort ~10x slower
    # (0.25 s vs 0.025 s for 570,000 rows of 6 columns)
    table = rows.sort(order).to_arrow().combine_chunks()
    batch = table.to_batches()[0]  # one batch sliced per block (a slice of the table combined per block took 4x longer)
    kh = table.column(KH).to_numpy()
    eps = table.column(EP).to_numpy()
    per_row = max(1, table.nbytes // table.num_rows)
    step = max(64, BLOCK_BYTES // per_row)
    out = io.BytesIO()
    index = []
    for start in range(0, table.num_rows, step):  # a loop per block, not per row
        stop = min(start + step, table.num_rows)
        plain = batch.slice(start, stop - start).serialize()
        data = _LEN.pack(plain.size) + _LZ4.compress(plain, asbytes=True)
        block_at = out.tell()
        out.write(data)
        block_kh = kh[start:stop]
        bloom = _bloom_build(block_kh[np.concatenate(([True], block_kh[1:] != block_kh[:-1]))])
        index.append((block_at, len(data), int(kh[start]), int(kh[stop - 1]), crc32(data),
                      out.tell(), len(bloom), crc32(bloom)))
        out.write(bloom)
    distinct = kh[np.concatenate(([True], kh[1:] != kh[:-1]))]
    bounds = {}
    for name, column in zip(table.column_names, table.columns):
        if name not in _SYSTEM and pa.types.is_integer(column.type) and column.null_count < len(column):
            low, high = pc.min_max(column).values()
            bounds[name] = [low.as_py(), high.as_py()]
    index_bytes = np.asarray(index, dtype="<i8").tobytes()
    vnodes = bitmap_hex(vnode_bitmap(distinct))
    meta = json.dumps({
        "format": FORMAT, "rows": table.num_rows, "blocks": len(index), "min_kh": int(kh[0]), "max_kh": int(kh[-1]),
        "min_ep": int(eps.min()), "max_ep": int(eps.max()), "vnodes": vnodes, "keys": list(keys),
        "additive": additive, "bounds": bounds, "schema": base64.b64encode(table.schema.serialize()).decode(),
    }, sort_keys=True).encode()
    footer = index_bytes + meta
    out.write(footer)
    out.write(_TAIL.pack(len(index_bytes), len(meta), crc32(footer), MAGIC))
    data = out.getvalue()
    store.put(key, data)
    return SstRef(key=key, min_kh=int(kh[0]), max_kh=int(kh[-1]), min_ep=int(eps.min()), max_ep=int(eps.max()),
                  rows=table.num_rows, size=len(data), vnodes=vnodes)


# -- reading ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SstMeta:
    """A file's decoded footer: the block index (filters are read per block, on demand)."""

    ref: SstRef
    index: np.ndarray  # n × 8: offset, length, first kh, last kh, crc, bloom offset, bloom length, bloom crc
    keys: tuple[str, ...]
    additive: bool
    schema: pa.Schema | None = None  # format 4: the blocks' (format 3 blocks carry their own)
    bounds: dict[str, tuple[int, int]] | None = None  # integer column -> (least, greatest); None: not recorded

    @property
    def offsets(self) -> np.ndarray:
        return self.index[:, 0]

    @property
    def lengths(self) -> np.ndarray:
        return self.index[:, 1]

    @property
    def first_kh(self) -> np.ndarray:
        return self.index[:, 2]

    @property
    def last_kh(self) -> np.ndarray:
        return self.index[:, 3]

    @property
    def crcs(self) -> np.ndarray:
        return self.index[:, 4]

    @property
    def nbytes(self) -> int:
        return int(self.index.nbytes + 256)

    def blocks_for(self, kh: np.ndarray) -> np.ndarray:
        """Indices of the blocks whose key range holds any of the sorted, distinct ``kh``."""
        lo = np.searchsorted(self.last_kh, kh, side="left")
        hi = np.searchsorted(self.first_kh, kh, side="right")
        keep = lo < hi
        if not keep.any():
            return np.empty(0, dtype=np.int64)
        return np.unique(take_ranges_bounds(lo[keep], hi[keep]))


def _corrupt(store: ObjectStore, key: str, what: str) -> StorageError:
    return StorageError(f"SST {key!r} under {store.root!r} is corrupt: {what}")


def describe_sst(store: ObjectStore, key: str) -> SstRef:
    """The manifest entry of a written file, from its footer (the coordinator lists new files)."""
    tail, size = store.get_suffix(key, _FOOTER_GUESS)
    meta = _footer(store, key, size, max(0, size - len(tail)), tail)
    return meta.ref


def open_sst(store: ObjectStore, ref: SstRef) -> SstMeta:
    """The footer of ``ref`` (cached in the memory block cache)."""
    cache_key = (store.root, ref.key, -1)
    hit = block_cache().get(cache_key)
    if hit is not None:
        return hit
    start = max(0, ref.size - _FOOTER_GUESS)
    out = _footer(store, ref.key, ref.size, start, store.get_range(ref.key, start, ref.size) if ref.size else b"")
    block_cache().put(cache_key, out, out.nbytes)
    return out


def _footer(store: ObjectStore, key: str, size: int, start: int, tail: bytes) -> SstMeta:
    if size < _TAIL.size:
        raise _corrupt(store, key, f"{size} bytes is shorter than an SST footer")
    if len(tail) != size - start:
        raise _corrupt(store, key, f"expected {size} bytes, found {start + len(tail)}")
    index_len, meta_len, crc, magic = _TAIL.unpack(tail[-_TAIL.size:])
    if magic != MAGIC:
        raise _corrupt(store, key, "bad magic (not a millpond SST, or an older SST format)")
    footer_len = index_len + meta_len
    if footer_len + _TAIL.size > size:
        raise _corrupt(store, key, "footer longer than the file")
    if footer_len + _TAIL.size > len(tail):
        tail = store.get_range(key, size - footer_len - _TAIL.size, size)
    footer = tail[len(tail) - _TAIL.size - footer_len:len(tail) - _TAIL.size]
    if crc32(footer) != crc:
        raise _corrupt(store, key, "footer checksum mismatch")
    meta = json.loads(footer[index_len:])
    if meta.get("format") not in READS:
        raise _corrupt(store, key, f"SST format {meta.get('format')!r}; this millpond reads formats "
                                   f"{', '.join(map(str, READS))}")
    index = np.frombuffer(footer[:index_len], dtype="<i8").reshape(-1, _INDEX_COLUMNS)
    ref = SstRef(key, meta["min_kh"], meta["max_kh"], meta["min_ep"], meta["max_ep"], meta["rows"], size,
                 meta["vnodes"])
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(meta["schema"]))) if "schema" in meta else None
    bounds = {c: (lo, hi) for c, (lo, hi) in meta["bounds"].items()} if "bounds" in meta else None
    return SstMeta(ref, index, tuple(meta["keys"]), bool(meta["additive"]), schema, bounds)


def read_blocks(store: ObjectStore, meta: SstMeta, blocks: np.ndarray, *, keep: bool = True) -> list[pa.RecordBatch]:
    """Decoded blocks ``blocks`` of a file (a record batch each): memory cache, then disk cache, then ranged GETs.
    ``keep``: put the blocks decoded here in the memory cache (a bulk read does not: it would evict
    every block lookups use, for blocks it reads once)."""
    cache, disk = block_cache(), disk_cache(store)
    out: dict[int, pa.RecordBatch] = {}
    missing = []
    for b in blocks.tolist():  # per block
        hit = cache.get((store.root, meta.ref.key, b))
        if hit is not None:
            out[b] = hit
            continue
        raw = disk.get(meta.ref.key, b) if disk is not None else None
        if raw is not None and crc32(raw) == meta.crcs[b]:
            out[b] = _decode(store, meta, b, raw, keep)
        else:
            missing.append(b)
    if missing:
        starts = [int(meta.offsets[b]) for b in missing]
        ends = [int(meta.offsets[b] + meta.lengths[b]) for b in missing]
        for b, raw in zip(missing, store.get_ranges(meta.ref.key, starts, ends)):
            raw = bytes(raw)
            if len(raw) != meta.lengths[b] or crc32(raw) != meta.crcs[b]:
                raise _corrupt(store, meta.ref.key, f"block {b} checksum mismatch")
            if disk is not None:
                disk.put(meta.ref.key, b, raw)
            out[b] = _decode(store, meta, b, raw, keep)
    return [out[b] for b in blocks.tolist()]


def _decode(store: ObjectStore, meta: SstMeta, b: int, raw: bytes, keep: bool = True) -> pa.RecordBatch:
    # a record batch, not a table: a table per block cost as much again as its LZ4 in a scan (its
    # construction, its concatenation with the file's other blocks, and freeing it)
    try:
        if meta.schema is None:  # format 3
            table = pa.ipc.open_stream(raw).read_all().combine_chunks()
            size = table.get_total_buffer_size()
            batch = table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)
        else:
            size = _LEN.unpack_from(raw)[0]
            plain = _LZ4.decompress(memoryview(raw)[_LEN.size:], decompressed_size=size)
            batch = pa.ipc.read_record_batch(plain, meta.schema)
    except (pa.ArrowInvalid, pa.ArrowIOError, struct.error, IndexError) as exc:
        raise _corrupt(store, meta.ref.key, f"block {b}: {exc}") from None
    if keep:  # the bytes it holds: its one decompressed buffer (``Table.nbytes`` walks every column:
        # 55 µs a block of lineitem, more than its LZ4)
        block_cache().put((store.root, meta.ref.key, b), batch, size)
    return batch


def _table(batches: list[pa.RecordBatch]) -> pa.Table:
    """Blocks of one file as one table (one schema: the file's)."""
    return pa.Table.from_batches(batches, schema=batches[0].schema)


def read_all(store: ObjectStore, ref: SstRef) -> pa.Table:
    """Every row of a file (compaction and full scans)."""
    meta = open_sst(store, ref)
    return _table(read_blocks(store, meta, np.arange(meta.offsets.size), keep=False))


def read_blooms(store: ObjectStore, meta: SstMeta, blocks: np.ndarray) -> list[np.ndarray]:
    """The bloom filters of ``blocks`` (memory cache, then one ranged GET for the missing ones)."""
    cache = block_cache()
    out: dict[int, np.ndarray] = {}
    missing = []
    for b in blocks.tolist():  # per block
        hit = cache.get((store.root, meta.ref.key, ("bloom", b)))
        if hit is None:
            missing.append(b)
        else:
            out[b] = hit
    if missing:
        starts = [int(meta.index[b, 5]) for b in missing]
        ends = [int(meta.index[b, 5] + meta.index[b, 6]) for b in missing]
        for b, raw in zip(missing, store.get_ranges(meta.ref.key, starts, ends)):
            if len(raw) != meta.index[b, 6] or crc32(raw) != meta.index[b, 7]:
                raise _corrupt(store, meta.ref.key, f"bloom filter of block {b} checksum mismatch")
            out[b] = np.frombuffer(raw, dtype=np.uint8)
            cache.put((store.root, meta.ref.key, ("bloom", b)), out[b], len(raw))
    return [out[b] for b in blocks.tolist()]


def lookup_sst(store: ObjectStore, ref: SstRef, wanted: np.ndarray) -> pa.Table | None:
    """The rows of ``ref`` whose ``_kh`` is in the sorted, distinct ``wanted`` (None if none)."""
    inside = wanted[(wanted >= ref.min_kh) & (wanted <= ref.max_kh)]
    if inside.size == 0:
        return None
    meta = open_sst(store, ref)
    blocks = meta.blocks_for(inside)
    if blocks.size == 0:
        return None
    # each candidate block's filter drops the keys it surely lacks; blocks left with none are skipped
    lo = np.searchsorted(inside, meta.first_kh[blocks], side="left")
    hi = np.searchsorted(inside, meta.last_kh[blocks], side="right")
    blooms = read_blooms(store, meta, blocks)
    sizes = np.array([b.size for b in blooms], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    which = take_ranges_bounds(lo, hi)  # keys (indices into inside), grouped by candidate block
    block_of = np.repeat(np.arange(blocks.size), hi - lo)
    pos = _probes(inside[which], sizes[block_of] * 8)
    byte = np.concatenate(blooms)[starts[block_of][:, None] + (pos >> np.uint64(3)).astype(np.int64)]
    hit = ((byte >> (pos & np.uint64(7)).astype(np.uint8)) & 1).all(axis=1)
    maybe = np.zeros(inside.size, dtype=bool)
    maybe[which[hit]] = True
    keep = np.zeros(blocks.size, dtype=bool)
    keep[block_of[hit]] = True
    blocks, inside = blocks[keep], inside[maybe]
    if blocks.size == 0:
        return None
    table = _table(read_blocks(store, meta, blocks))
    idx = take_ranges(table.column(KH).to_numpy(), inside)
    return table.take(pa.array(idx)) if idx.size else None


def scan_sst(store: ObjectStore, ref: SstRef, lo: int | None, hi: int | None) -> pa.Table | None:
    """The rows of ``ref`` with ``lo <= _kh < hi`` (either bound optional)."""
    if (lo is not None and ref.max_kh < lo) or (hi is not None and ref.min_kh >= hi):
        return None
    meta = open_sst(store, ref)
    keep = np.ones(meta.offsets.size, dtype=bool)
    if lo is not None:
        keep &= meta.last_kh >= lo
    if hi is not None:
        keep &= meta.first_kh < hi
    blocks = np.flatnonzero(keep)
    if blocks.size == 0:
        return None
    batches = read_blocks(store, meta, blocks, keep=blocks.size <= SCAN_CACHED_BLOCKS)
    # only the first and last blocks may hold keys outside the range (the index says so of the rest)
    first, last = batches[0].column(KH).to_numpy(), batches[-1].column(KH).to_numpy()
    a = 0 if lo is None else int(np.searchsorted(first, lo, side="left"))
    b = last.size if hi is None else int(np.searchsorted(last, hi, side="left"))
    if len(batches) == 1:
        batches = [batches[0].slice(a, max(0, b - a))]
    else:
        batches = [batches[0].slice(a), *batches[1:-1], batches[-1].slice(0, b)]
    table = _table(batches)
    return table if table.num_rows else None


def take_ranges_bounds(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` for every i (vectorized)."""
    lengths = hi - lo
    if lengths.sum() == 0:
        return np.empty(0, dtype=np.int64)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return starts + np.arange(lengths.sum())


def take_ranges(sorted_kh: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row indices of ``sorted_kh`` equal to any of ``wanted`` (vectorized)."""
    lo = np.searchsorted(sorted_kh, wanted, side="left")
    hi = np.searchsorted(sorted_kh, wanted, side="right")
    keep = hi > lo
    return take_ranges_bounds(lo[keep], hi[keep])

"""Spark's ``xxhash64`` of key columns, computed on Arrow arrays without Spark.

State is addressed by ``_kh``, the 64-bit hash Spark's ``xxhash64(k1, k2, …)`` gives a row's key
(``spark/build.py`` writes it in every epoch). A read or a write by key outside an epoch — a point
query, an upsert, an ``UPDATE … WHERE k = …`` — needs the same hash of the keys it names, in
microseconds rather than a Spark job: this module is Spark's algorithm (``XXH64`` with seed 42,
each column's hash seeding the next, a NULL leaving the hash as it is), vectorized with numpy.

Per type, as Spark hashes it: BOOLEAN, SMALLINT, INT and DATE as a 4-byte int; BIGINT and
TIMESTAMPs as an 8-byte long; REAL and DOUBLE by their bits (-0.0 as 0.0, one NaN); a DECIMAL of
precision ≤ 18 as its unscaled long, a wider one as the big-endian two's complement bytes of its
unscaled value; VARCHAR as its UTF-8 bytes and BYTEA as its bytes (standard XXH64 over them); a
struct field by field. ``tests/test_keyhash.py`` checks every type against Spark itself.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SEED", "xxhash64"]

SEED = 42
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def xxhash64(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """``xxhash64(columns…)`` per row, as Spark computes it: an int64 array."""
    n = len(columns[0]) if columns else 0
    h = np.full(n, SEED, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in columns:
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            _column(arr, h)
    return h.view(np.int64)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    return h ^ (h >> np.uint64(32))


def _int(v: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashInt``: XXH64 of 4 little-endian bytes."""
    h = seed + _P5 + np.uint64(4)
    h = h ^ ((v.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)) * _P1)
    return _fmix(_rotl(h, 23) * _P2 + _P3)


def _long(v: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashLong``: XXH64 of 8 little-endian bytes."""
    h = seed + _P5 + np.uint64(8)
    h = h ^ (_rotl(v.astype(np.int64).view(np.uint64) * _P2, 31) * _P1)
    return _fmix(_rotl(h, 27) * _P1 + _P4)


def _bytes(data: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of each row of ``data`` (a uint8 matrix: rows of one length) with its own seed."""
    n, length = data.shape
    k = length // 8
    words = np.ascontiguousarray(data[:, :k * 8]).view("<u8").reshape(n, k) if k else np.empty((n, 0), np.uint64)
    i = 0
    if length >= 32:
        v1, v2, v3, v4 = seed + _P1 + _P2, seed + _P2, seed.copy(), seed - _P1
        while i + 4 <= k and (i + 4) * 8 <= length:
            v1 = _rotl(v1 + words[:, i] * _P2, 31) * _P1
            v2 = _rotl(v2 + words[:, i + 1] * _P2, 31) * _P1
            v3 = _rotl(v3 + words[:, i + 2] * _P2, 31) * _P1
            v4 = _rotl(v4 + words[:, i + 3] * _P2, 31) * _P1
            i += 4
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h = (h ^ (_rotl(v * _P2, 31) * _P1)) * _P1 + _P4
    else:
        h = seed + _P5
    h = h + np.uint64(length)
    while i < k:
        h = _rotl(h ^ (_rotl(words[:, i] * _P2, 31) * _P1), 27) * _P1 + _P4
        i += 1
    pos = k * 8
    if pos + 4 <= length:
        four = np.ascontiguousarray(data[:, pos:pos + 4]).view("<u4").reshape(n).astype(np.uint64)
        h = _rotl(h ^ (four * _P1), 23) * _P2 + _P3
        pos += 4
    while pos < length:
        h = _rotl(h ^ (data[:, pos].astype(np.uint64) * _P5), 11) * _P1
        pos += 1
    return _fmix(h)


def _binary(arr: pa.Array, h: np.ndarray, valid: np.ndarray) -> None:
    """Each valid value's bytes hashed into ``h``: rows are grouped by length, so the work is
    vectorized per distinct length, not per row."""
    arr = arr.cast(pa.large_binary())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.empty(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    for length in np.unique(lengths[valid]).tolist():
        rows = np.flatnonzero(valid & (lengths == length))
        matrix = data[starts[rows][:, None] + np.arange(length)] if length else np.empty((rows.size, 0), np.uint8)
        h[rows] = _bytes(matrix, h[rows])


def _column(arr: pa.Array, h: np.ndarray) -> None:
    """Hash one column into ``h`` in place (rows where it is NULL keep their hash)."""
    t = arr.type
    valid = np.ones(len(arr), dtype=bool) if arr.null_count == 0 else \
        arr.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            child = pc.struct_field(arr, [i])
            sub = h[valid].copy()
            _column(child.filter(pa.array(valid)), sub)
            h[valid] = sub
        return
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t):
        _binary(arr, h, valid)
        return
    if pa.types.is_decimal(t):
        _decimal(arr, h, valid)
        return
    if pa.types.is_boolean(t):
        values, fn = arr.cast(pa.int32()).fill_null(0).to_numpy(), _int
    elif pa.types.is_float32(t) or pa.types.is_float64(t):
        wide = pa.types.is_float64(t)
        f = arr.fill_null(0).to_numpy(zero_copy_only=False)
        f = np.where(f == 0, 0, f).astype(f.dtype)  # -0.0 hashes as 0.0
        bits = f.view(np.int64 if wide else np.int32)
        bits = np.where(np.isnan(f), np.int64(0x7FF8000000000000) if wide else np.int32(0x7FC00000), bits)
        values, fn = bits, (_long if wide else _int)
    elif pa.types.is_date32(t):
        values, fn = arr.view(pa.int32()).fill_null(0).to_numpy(), _int
    elif pa.types.is_timestamp(t):
        if t.unit != "us":
            arr = arr.cast(pa.timestamp("us", t.tz))
        values, fn = arr.view(pa.int64()).fill_null(0).to_numpy(), _long
    elif pa.types.is_integer(t):
        values = arr.fill_null(0).to_numpy()
        fn = _long if t.bit_width == 64 else _int
    else:
        raise TypeError(f"no key hash for Arrow type {t}")
    out = fn(values, h)
    h[valid] = out[valid]


def _decimal(arr: pa.Array, h: np.ndarray, valid: np.ndarray) -> None:
    """A DECIMAL as Spark hashes it: its unscaled value as a long up to precision 18, else the
    minimal big-endian two's complement bytes of the unscaled value (Java's ``toByteArray``)."""
    t = arr.type
    raw = np.frombuffer(arr.buffers()[1], dtype="<u8")[2 * arr.offset:2 * (arr.offset + len(arr))].reshape(-1, 2)
    lo, hi = raw[:, 0], raw[:, 1].view(np.int64)
    if t.precision <= 18:
        out = _long(lo.view(np.int64), h)
        h[valid] = out[valid]
        return
    # 16 little-endian bytes -> big endian, then drop leading bytes that only repeat the sign
    be = raw.view(np.uint8).reshape(-1, 16)[:, ::-1]
    sign = np.where(hi < 0, 0xFF, 0x00).astype(np.uint8)
    redundant = np.zeros(len(arr), dtype=np.int64)
    for j in range(15):  # leading byte j can go when it and the next byte's top bit both repeat the sign
        can = (be[:, j] == sign) & ((be[:, j + 1] >> 7) == (sign & 1)) & (redundant == j)
        redundant = np.where(can, j + 1, redundant)
    lengths = 16 - redundant
    for length in np.unique(lengths[valid]).tolist():
        rows = np.flatnonzero(valid & (lengths == length))
        h[rows] = _bytes(np.ascontiguousarray(be[rows, 16 - length:]), h[rows])

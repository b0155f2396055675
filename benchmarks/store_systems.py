"""The systems ``benchmarks/store.py`` compares (millpond's state store, RocksDB, SlateDB) behind
one interface, the data they are given and checked against, and the OS page-cache helpers.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import time
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from millpond.store import cache
from millpond.store.objects import ObjectStore
from millpond.store.store import StateStore

STATE = "kv"
VALUE = 32  # bytes per value


class WrongResult(AssertionError):
    """A system returned other data than was written: the benchmark fails."""


# -- data -------------------------------------------------------------------------------------
class Data:
    """Keys ``0..n-1`` and the value every key should have now (updated by checkpoint epochs)."""

    def __init__(self, n: int, rng: np.random.Generator):
        self.n = n
        self.vals = rng.integers(0, 256, (n, VALUE), dtype=np.uint8)

    def table(self, idx: np.ndarray, vals: np.ndarray | None = None) -> pa.Table:
        """millpond's rows for keys ``idx`` (sorted): ``_kh``, ``v`` (binary), ``_del``."""
        n = idx.size
        raw = (self.vals[idx] if vals is None else vals).tobytes()
        offsets = np.arange(0, VALUE * (n + 1), VALUE, dtype=np.int32)
        v = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
        return pa.table({"_kh": pa.array(idx.astype(np.int64)), "v": v, "_del": pa.array(np.zeros(n, bool))})

    @staticmethod
    def key_bytes(idx: np.ndarray) -> list[bytes]:
        raw = idx.astype(">i8").tobytes()
        return [raw[i:i + 8] for i in range(0, len(raw), 8)]

    def value_bytes(self, idx: np.ndarray, vals: np.ndarray | None = None) -> list[bytes]:
        raw = (self.vals[idx] if vals is None else vals).tobytes()
        return [raw[i:i + VALUE] for i in range(0, len(raw), VALUE)]

    def check(self, system: str, what: str, keys: np.ndarray, values: bytes, want: np.ndarray) -> None:
        """``keys`` (sorted) and their concatenated ``values`` must be exactly ``want`` (sorted)."""
        if keys.shape != want.shape or not np.array_equal(keys, want):
            missing = np.setdiff1d(want, keys)[:5]
            extra = np.setdiff1d(keys, want)[:5]
            raise WrongResult(f"{system} {what}: {keys.size} keys returned, {want.size} expected; "
                              f"missing e.g. {missing.tolist()}, unexpected e.g. {extra.tolist()}")
        expected = self.vals[want].tobytes()
        if values != expected:
            if len(values) != len(expected):
                raise WrongResult(f"{system} {what}: {len(values)} bytes of values, {len(expected)} expected")
            got = np.frombuffer(values, np.uint8).reshape(-1, VALUE)
            bad = want[np.flatnonzero((got != self.vals[want]).any(axis=1))[:5]].tolist()
            raise WrongResult(f"{system} {what}: wrong values (keys e.g. {bad})")


# -- OS page cache ----------------------------------------------------------------------------
def _files(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(root) for f in names]


def drop_page_cache(root: str) -> None:
    """Evict ``root``'s files from the OS page cache (written back first; no root needed)."""
    for path in _files(root):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # deleted meanwhile
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(root: str) -> float | None:
    """Share of ``root``'s bytes in the OS page cache (``mincore``); None where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        page = os.sysconf("SC_PAGE_SIZE")
        resident = total = 0
        for path in _files(root):
            size = os.path.getsize(path)
            if not size:
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
                if addr in (None, ctypes.c_void_p(-1).value):
                    return None
                vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
                ok = libc.mincore(addr, size, vec) == 0
                libc.munmap(addr, size)
                if not ok:
                    return None
            finally:
                os.close(fd)
            resident += min(size, int((np.frombuffer(vec, np.uint8) & 1).sum()) * page)
            total += size
        return resident / total if total else 0.0
    except (OSError, AttributeError):
        return None


def disk_read_bytes() -> int | None:
    """Bytes this process has caused to be read from storage devices (Linux ``/proc/self/io``)."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))
    except (OSError, StopIteration, ValueError):
        return None


def dir_sizes(root: str) -> dict[str, int]:
    out = {}
    for path in _files(root):
        try:
            out[path] = os.path.getsize(path)
        except OSError:
            pass
    return out


def growth(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes in files that are new or grew between two listings."""
    return sum(max(0, size - before.get(path, 0)) for path, size in after.items())


# -- millpond ---------------------------------------------------------------------------------
class CountingStore(ObjectStore):
    """A local-folder object store that records every object written: (key, bytes)."""

    def __init__(self, root: str):
        super().__init__(root)
        self.puts: list[tuple[str, int]] = []

    def _put(self, key: str, data: bytes, mode: str | None) -> None:
        super()._put(key, data, mode)
        self.puts.append((key, len(data)))


def _kind(key: str) -> str:
    if key.startswith("manifest/"):
        return "manifest"
    if key.startswith("sst/"):
        return "compaction" if "-c." in key else "epoch"
    return "other"


class Millpond:
    name = "millpond"

    def __init__(self, root: str, cache_mb: int):
        self.root, self.cache_mb = root, cache_mb
        self.epoch = 0
        self.notes: list[str] = []
        self.written: dict[str, int] = {}  # bytes written so far by kind: epoch SSTs, compaction, manifest
        self.staging: list[float] = []  # per checkpoint epoch: ingest() of the delta

    def open(self) -> None:
        cache.configure(memory_bytes=self.cache_mb << 20)  # fresh memory caches, as in a new process
        self.store = CountingStore(self.root)
        self.st = StateStore(self.store, background=True)

    def close(self) -> None:
        self.st.close()  # waits for a running compaction
        self._count()

    def _count(self) -> None:
        for key, size in self.store.puts:
            self.written[_kind(key)] = self.written.get(_kind(key), 0) + size
        self.store.puts.clear()

    def load(self, data: Data, batch: int) -> float:
        rows = data.table(np.arange(data.n))
        t0 = time.perf_counter()
        futures = []
        for lo in range(0, data.n, batch):
            self.epoch += 1
            self.st.ingest(STATE, rows.slice(lo, batch), epoch=self.epoch)
            futures.append(self.st.seal(self.epoch))
        for f in futures:
            f.result()
        return time.perf_counter() - t0

    def settle(self) -> float:
        t0 = time.perf_counter()
        self.st.compact()
        return time.perf_counter() - t0

    def prepare_get(self, data: Data, idx: np.ndarray) -> Any:
        return idx.astype(np.int64)

    def get(self, prepared: Any) -> Any:
        return self.st.table(STATE).lookup(prepared)

    def check_get(self, data: Data, what: str, result: Any, idx: np.ndarray) -> None:
        self._check(data, what, result, np.sort(idx))

    def scan(self, data: Data, lo: int, hi: int) -> Any:
        return self.st.table(STATE).scan(lo, hi)

    def check_scan(self, data: Data, what: str, result: Any, lo: int, hi: int) -> None:
        self._check(data, what, result, np.arange(lo, hi))

    def _check(self, data: Data, what: str, df: pl.DataFrame | None, want: np.ndarray) -> None:
        if df is None:
            raise WrongResult(f"millpond {what}: no rows, {want.size} expected")
        df = df.sort("_kh")
        data.check(self.name, what, df["_kh"].to_numpy(), b"".join(df["v"].to_list()), want)

    def checkpoint(self, data: Data, idx: np.ndarray, vals: np.ndarray) -> tuple[float, int]:
        rows = data.table(idx, vals)
        self.epoch += 1
        self._count()
        t0 = time.perf_counter()
        self.st.ingest(STATE, rows, epoch=self.epoch)
        t1 = time.perf_counter()
        self.st.seal(self.epoch).result()
        t2 = time.perf_counter()
        self.staging.append(t1 - t0)
        puts = list(self.store.puts)
        epoch_ssts = sum(size for key, size in puts if _kind(key) == "epoch")
        commit = next((size for key, size in puts if _kind(key) == "manifest"), 0)  # the commit's version is first
        return t2 - t1, epoch_ssts + commit


# -- RocksDB ----------------------------------------------------------------------------------
class Rocks:
    name = "rocksdict"

    def __init__(self, root: str, cache_mb: int):
        import rocksdict
        self.rd = rocksdict
        self.root, self.cache_mb = root, cache_mb
        self.notes: list[str] = []
        self.sync = rocksdict.WriteOptions()
        self.sync.sync = True

    def open(self) -> None:
        rd = self.rd
        opts = rd.Options(raw_mode=True)
        opts.create_if_missing(True)
        table = rd.BlockBasedOptions()
        table.set_block_cache(rd.Cache(self.cache_mb << 20))  # a new cache per open: cold
        table.set_bloom_filter(10, False)  # as millpond and SlateDB: ~10 bits per key
        opts.set_block_based_table_factory(table)
        self.db = rd.Rdict(self.root, opts)

    def close(self) -> None:
        self.db.close()
        del self.db
        gc.collect()

    def _batch(self, data: Data, idx: np.ndarray, vals: np.ndarray | None = None) -> Any:
        wb = self.rd.WriteBatch(raw_mode=True)
        for k, v in zip(data.key_bytes(idx), data.value_bytes(idx, vals)):
            wb.put(k, v)
        return wb

    def load(self, data: Data, batch: int) -> float:
        spent = build = 0.0
        for lo in range(0, data.n, batch):
            t0 = time.perf_counter()
            wb = self._batch(data, np.arange(lo, min(lo + batch, data.n)))
            t1 = time.perf_counter()
            self.db.write(wb, write_opt=self.sync)
            spent += time.perf_counter() - t1
            build += t1 - t0
        self.notes.append(f"building WriteBatches (not timed): {build:.1f} s")
        return spent

    def _busy(self) -> bool:
        props = ("rocksdb.mem-table-flush-pending", "rocksdb.num-running-flushes",
                 "rocksdb.compaction-pending", "rocksdb.num-running-compactions")
        return any(self.db.property_int_value(p) for p in props)

    def settle(self) -> float:
        t0 = time.perf_counter()
        self.db.flush(wait=True)
        while self._busy():
            time.sleep(0.02)
        return time.perf_counter() - t0

    def prepare_get(self, data: Data, idx: np.ndarray) -> Any:
        return data.key_bytes(idx)

    def get(self, prepared: Any) -> Any:
        return self.db.get(prepared)

    def check_get(self, data: Data, what: str, result: Any, idx: np.ndarray) -> None:
        found = [v is not None for v in result]
        order = np.argsort(idx[found], kind="stable")
        values = [v for v in result if v is not None]
        data.check(self.name, what, idx[found][order], b"".join(values[i] for i in order), np.sort(idx))

    def scan(self, data: Data, lo: int, hi: int) -> Any:
        ro = self.rd.ReadOptions()
        ro.set_iterate_upper_bound(int(hi).to_bytes(8, "big"))
        return list(self.db.items(from_key=int(lo).to_bytes(8, "big"), read_opt=ro))

    def check_scan(self, data: Data, what: str, result: Any, lo: int, hi: int) -> None:
        keys = np.frombuffer(b"".join(k for k, _ in result), ">i8").astype(np.int64)
        data.check(self.name, what, keys, b"".join(v for _, v in result), np.arange(lo, hi))

    def checkpoint(self, data: Data, idx: np.ndarray, vals: np.ndarray) -> tuple[float, int]:
        wb = self._batch(data, idx, vals)
        before = dir_sizes(self.root)
        t0 = time.perf_counter()
        self.db.write(wb, write_opt=self.sync)
        spent = time.perf_counter() - t0
        return spent, growth(before, dir_sizes(self.root))


# -- SlateDB ----------------------------------------------------------------------------------
class Slate:
    name = "slatedb"

    def __init__(self, root: str, cache_mb: int):
        import slatedb.uniffi as sdb
        self.sdb = sdb
        self.root, self.cache_mb = root, cache_mb
        self.notes: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.db = None

    def _run(self, coro):  # noqa: ANN001, ANN202
        return self.loop.run_until_complete(coro)

    def open(self) -> None:
        sdb = self.sdb
        objects = sdb.ObjectStoreBuilder(sdb.ObjectStoreType.LOCAL)
        objects.with_config("local_path", self.root)
        builder = sdb.DbBuilder("db", objects.build())
        builder.with_db_cache(sdb.DbCache.new_moka_cache(sdb.MokaCacheOptions(
            max_capacity=self.cache_mb << 20, time_to_live=None, time_to_idle=None)), 1)  # new cache: cold
        self.db = self._run(builder.build())

    def close(self) -> None:
        self._run(self.db.shutdown())
        self.db = None
        gc.collect()

    def _batch(self, data: Data, idx: np.ndarray, vals: np.ndarray | None = None) -> Any:
        wb = self.sdb.WriteBatch()
        for k, v in zip(data.key_bytes(idx), data.value_bytes(idx, vals)):
            wb.put(k, v)
        return wb

    async def _write(self, wb: Any) -> None:
        handle = await self.db.write(wb)
        await handle.await_durable()
        if self.db.status().durable_seq < handle.seqnum():
            raise WrongResult("slatedb: a write is not durable after await_durable()")

    def load(self, data: Data, batch: int) -> float:
        spent = build = 0.0
        for lo in range(0, data.n, batch):
            t0 = time.perf_counter()
            wb = self._batch(data, np.arange(lo, min(lo + batch, data.n)))
            t1 = time.perf_counter()
            self._run(self._write(wb))
            spent += time.perf_counter() - t1
            build += t1 - t0
        self.notes.append(f"building WriteBatches through the binding (not timed): {build:.1f} s, "
                          f"{build / data.n * 1e6:.0f} us per put")
        return spent

    def settle(self) -> float:
        t0 = time.perf_counter()
        self._run(self.db.flush_with_options(self.sdb.FlushOptions(flush_type=self.sdb.FlushType.MEM_TABLE)))
        return time.perf_counter() - t0

    def prepare_get(self, data: Data, idx: np.ndarray) -> Any:
        return data.key_bytes(idx)

    def get(self, prepared: Any) -> Any:
        async def many():  # noqa: ANN202
            return await asyncio.gather(*[self.db.get(k) for k in prepared])
        return self._run(many())

    check_get = Rocks.check_get

    def scan(self, data: Data, lo: int, hi: int) -> Any:
        async def drain():  # noqa: ANN202
            it = await self.db.scan(self.sdb.KeyRange(start=int(lo).to_bytes(8, "big"), start_inclusive=True,
                                                      end=int(hi).to_bytes(8, "big"), end_inclusive=False))
            out = []
            while True:
                rows = await it.next_batch(8192)
                out.extend(rows)
                if len(rows) < 8192:
                    return out
        return [(kv.key, kv.value) for kv in self._run(drain())]

    check_scan = Rocks.check_scan

    def checkpoint(self, data: Data, idx: np.ndarray, vals: np.ndarray) -> tuple[float, int]:
        wb = self._batch(data, idx, vals)
        before = dir_sizes(self.root)
        t0 = time.perf_counter()
        self._run(self._write(wb))
        spent = time.perf_counter() - t0
        return spent, growth(before, dir_sizes(self.root))

    def shutdown_loop(self) -> None:
        self.loop.close()

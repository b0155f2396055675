"""State store: millpond vs RocksDB (``rocksdict``) and SlateDB (``slatedb``) on the same keys and values.

All three run in this process, one after the other within each phase, on the same data: N keys
``0..N-1`` (int64 ``_kh`` in millpond; the same numbers as 8-byte big-endian keys in RocksDB and
SlateDB, so byte order = numeric order) with a random 32-byte value each (a binary column in
millpond). Every system gets the same memory block cache budget (``--cache-mb``: millpond
``cache.configure``, RocksDB ``BlockBasedOptions.set_block_cache``, SlateDB a moka ``DbCache``)
and its own temporary directory on the local disk: millpond's object storage is a local folder,
SlateDB uses its local-filesystem object store, RocksDB its files. Measured at each state size
(``--keys``; the sizes are run after a 100,000-key state that the scaling ratios compare with):

1. **ingest**: N keys in batches of ``--batch`` keys, each batch durable before it counts —
   millpond: ``ingest`` + ``seal`` of one epoch per batch (pipelined, as designed: the next epoch
   is staged while earlier ones upload), done when every seal's future has completed; RocksDB:
   ``write(WriteBatch, sync=True)``; SlateDB: ``write(WriteBatch)`` + ``await_durable()``.
   Building the references' WriteBatches through their Python bindings is not timed (reported
   on its own: SlateDB's binding costs ~0.1 ms per put). Then **settle** to a steady state:
   millpond ``compact()`` (until within its compaction policy); RocksDB a memtable flush and
   waiting until no flush or compaction is pending or running; SlateDB a memtable flush (its
   compactor runs on its own schedule; nothing to wait for in its API).
2. **multi-get** of ``--gets`` random existing keys: warm (the same keys again; median of
   ``--repeats`` after one warm-up call), cold after reopening with fresh process caches while
   the OS page cache still holds the files, and cold after also dropping the store's files from
   the OS page cache (``posix_fadvise(DONTNEED)`` per file, checked with ``mincore``). millpond:
   ``StateTable.lookup`` (one batched call); RocksDB: ``Rdict.get(list)`` (multi_get); SlateDB's
   binding has no multi-get: ``--gets`` concurrent ``get`` calls (``asyncio.gather``).
3. **range scan** of ``--scan`` consecutive keys, warm and cold (page cache dropped).
4. **restart**: close, drop caches (process and OS page cache), open a new store on the same
   directory and serve a multi-get of ``--restart-keys`` keys: open time and open-to-first-answer.
5. **checkpoint** per epoch with a fixed delta (``--delta`` random existing keys updated), median
   of ``--epochs`` epochs: millpond ``seal(e).result()`` (the ``ingest`` of the delta before it
   is staging, reported apart) and the bytes it writes (the epoch's new SST + the commit's
   manifest, counted by a wrapper of the object store; background compaction is reported
   apart); references: the durable write of the delta batch, bytes = growth of their files.

Every read is checked against the expected values (and so across systems): a wrong, missing or
extra row raises. At the end the scaling table gives, per system, checkpoint time and bytes and
restart-to-first-answer at N vs at 100,000 keys (target for millpond: flat, ratio near 1).

    .venv/bin/python benchmarks/store.py [--keys 1000000[,10000000]] [--batch 100000] [--gets 10000]
        [--scan 100000] [--delta 10000] [--epochs 5] [--cache-mb 64] [--systems millpond,rocksdict,slatedb]

``make bench`` installs the ``bench`` extra (rocksdict, slatedb) first. The default run (100k and
1M keys) takes ~3 minutes on 2 cores, most of it building SlateDB's write batches through its
Python binding; ``--keys 10000000`` takes ~1-2 minutes with ``--systems millpond,rocksdict`` and
over 15 minutes with SlateDB (~70 us per put in its binding).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np

from millpond.store import cache
from store_systems import (VALUE, Data, Millpond, Rocks, Slate, dir_sizes, disk_read_bytes, drop_page_cache, growth,
                           resident_fraction)

BASE = 100_000  # the small state the scaling ratios compare with
SYSTEMS = ("millpond", "rocksdict", "slatedb")


# -- one state size ---------------------------------------------------------------------------
def _median_time(fn, repeats: int) -> tuple[float, Any]:  # noqa: ANN001
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _timed(fn) -> tuple[float, Any]:  # noqa: ANN001
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run_size(n: int, args: argparse.Namespace, names: list[str], workdir: str) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(args.seed + n)
    data = Data(n, rng)
    kinds = {"millpond": Millpond, "rocksdict": Rocks, "slatedb": Slate}
    systems = []
    for name in names:
        root = os.path.join(workdir, f"{name}-{n}")
        os.makedirs(root)
        systems.append(kinds[name](root, args.cache_mb))
    res: dict[str, dict[str, float]] = {s.name: {} for s in systems}

    def log(msg: str) -> None:
        print(f"  [{n:,} keys] {msg} (load average {os.getloadavg()[0]:.1f})", flush=True)

    def reopen(s, drop: bool) -> float:  # noqa: ANN001
        s.close()
        if drop:
            drop_page_cache(s.root)
            res[s.name]["resident_after_drop"] = resident_fraction(s.root)
        t, _ = _timed(s.open)
        return t

    gets = min(args.gets, n)
    lo = int(rng.integers(0, max(1, n - args.scan)))
    hi = min(n, lo + args.scan)

    # 1. ingest, then settle (each system's settle right after its ingest: no background overlap)
    for s in systems:
        s.open()
        ingest = s.load(data, args.batch)
        settle = s.settle()
        r = res[s.name]
        r.update(ingest_kps=n / ingest, settle_s=settle, total_kps=n / (ingest + settle),
                 disk_mb=sum(dir_sizes(s.root).values()) / 1e6)
        if isinstance(s, Millpond):
            r["stalls"] = s.st.stats["stalls"]
            s._count()
            r.update({f"written_{k}_mb": v / 1e6 for k, v in s.written.items()})
        log(f"{s.name}: ingest {ingest:.1f} s, settle {settle:.1f} s")

    # 2. multi-get, warm: the same keys again
    idx = rng.choice(n, gets, replace=False)
    for s in systems:
        prepared = s.prepare_get(data, idx)
        s.check_get(data, "multi-get (first)", s.get(prepared), idx)
        t, out = _median_time(lambda: s.get(prepared), args.repeats)
        s.check_get(data, "multi-get (warm)", out, idx)
        res[s.name]["get_warm_ms"] = t * 1e3
        if isinstance(s, Slate):
            s.notes.append(f"multi-get = {gets:,} concurrent get() calls (asyncio.gather; the binding has no "
                           f"multi-get): {t / gets * 1e6:.0f} us per call when warm")
    # 3. range scan, warm (one call to warm up)
    for s in systems:
        s.check_scan(data, "scan (first)", s.scan(data, lo, hi), lo, hi)
        t, out = _median_time(lambda: s.scan(data, lo, hi), args.repeats)
        s.check_scan(data, "scan (warm)", out, lo, hi)
        res[s.name]["scan_warm_ms"] = t * 1e3
    log("warm reads done")

    # 2'. multi-get, cold: reopened with fresh process caches; OS page cache warm, then dropped
    for what, drop in (("get_cold_ms", False), ("get_cold_disk_ms", True)):
        idx = rng.choice(n, gets, replace=False)
        for s in systems:
            reopen(s, drop)
            prepared = s.prepare_get(data, idx)
            before = disk_read_bytes()
            t, out = _timed(lambda: s.get(prepared))
            read = disk_read_bytes()
            s.check_get(data, f"multi-get ({what})", out, idx)
            res[s.name][what] = t * 1e3
            if drop and before is not None and read is not None:
                res[s.name]["get_cold_read_kb"] = (read - before) / 1e3
    # 3'. range scan, cold (page cache dropped)
    lo2 = int(rng.integers(0, max(1, n - args.scan)))
    hi2 = min(n, lo2 + args.scan)
    for s in systems:
        reopen(s, True)
        t, out = _timed(lambda: s.scan(data, lo2, hi2))
        s.check_scan(data, "scan (cold)", out, lo2, hi2)
        res[s.name]["scan_cold_ms"] = t * 1e3
    # 4. restart: open on the same directory with every cache cold, then the first multi-get
    #    (median of --repeats restarts, each with other keys)
    restarts: dict[str, list[tuple[float, float, float | None]]] = {s.name: [] for s in systems}
    for _ in range(args.repeats):
        idx = rng.choice(n, min(args.restart_keys, n), replace=False)
        for s in systems:
            prepared = s.prepare_get(data, idx)
            s.close()
            drop_page_cache(s.root)
            before = disk_read_bytes()
            opened, _ = _timed(s.open)
            t, out = _timed(lambda: s.get(prepared))
            read = disk_read_bytes()
            s.check_get(data, "multi-get (after restart)", out, idx)
            restarts[s.name].append((opened, t, None if before is None or read is None else read - before))
    for name, runs in restarts.items():
        opened, got, read = zip(*runs)
        res[name].update(open_ms=statistics.median(opened) * 1e3, restart_get_ms=statistics.median(got) * 1e3,
                         restart_ms=statistics.median(o + g for o, g in zip(opened, got)) * 1e3)
        if None not in read:
            res[name]["restart_read_kb"] = statistics.median(read) / 1e3
    log("cold reads and restarts done")

    # 5. checkpoints with a fixed delta; the references first, so that millpond's background
    #    compaction (started by its commits) does not run during their measurements
    deltas = [np.sort(rng.choice(n, min(args.delta, n), replace=False)) for _ in range(args.epochs)]
    updates = [(d, rng.integers(0, 256, (d.size, VALUE), dtype=np.uint8)) for d in deltas]
    compacted = next((s.written.get("compaction", 0) for s in systems if isinstance(s, Millpond)), 0)
    for s in sorted(systems, key=lambda s: s.name == "millpond"):
        times, sizes = [], []
        for d, vals in updates:
            t, b = s.checkpoint(data, d, vals)
            times.append(t)
            sizes.append(b)
        res[s.name].update(ckpt_ms=statistics.median(times) * 1e3, ckpt_kb=statistics.median(sizes) / 1e3)
        if isinstance(s, Millpond):
            res[s.name]["staging_ms"] = statistics.median(s.staging) * 1e3
    for d, vals in updates:  # what every system should hold now
        data.vals[d] = vals
    log("checkpoints done")

    # final check: updated and other keys, and a scan, on every system
    touched = np.unique(np.concatenate(deltas))
    idx = np.unique(np.concatenate([rng.choice(touched, min(gets // 2, touched.size), replace=False),
                                    rng.choice(n, gets // 2, replace=False)]))
    for s in systems:
        s.check_get(data, "multi-get (after checkpoints)", s.get(s.prepare_get(data, idx)), idx)
        s.check_scan(data, "scan (after checkpoints)", s.scan(data, lo, hi), lo, hi)
        res[s.name]["notes"] = s.notes  # type: ignore[assignment]
        s.close()  # millpond: waits for a running compaction
        if isinstance(s, Millpond):  # compaction started by the checkpoint epochs, amortized per epoch
            res[s.name]["background_kb"] = (s.written.get("compaction", 0) - compacted) / len(deltas) / 1e3
        if isinstance(s, Slate):
            s.shutdown_loop()
        shutil.rmtree(s.root, ignore_errors=True)
    return res


# -- report -----------------------------------------------------------------------------------
ROWS = [  # (label, metric, format); every ratio is millpond's figure / the reference's figure
    ("ingest, durable (keys/s, higher is better)", "ingest_kps", "{:,.0f}"),
    ("settle: compaction/flush to steady state (s)", "settle_s", "{:.2f}"),
    ("ingest + settle (keys/s, higher is better)", "total_kps", "{:,.0f}"),
    ("multi-get {gets} keys, warm (ms)", "get_warm_ms", "{:.1f}"),
    ("multi-get {gets} keys, cold, page cache warm (ms)", "get_cold_ms", "{:.1f}"),
    ("multi-get {gets} keys, cold, page cache dropped (ms)", "get_cold_disk_ms", "{:.1f}"),
    ("  ... bytes read from disk (kB)", "get_cold_read_kb", "{:,.0f}"),
    ("range scan {scan} keys, warm (ms)", "scan_warm_ms", "{:.1f}"),
    ("range scan {scan} keys, cold, page cache dropped (ms)", "scan_cold_ms", "{:.1f}"),
    ("restart: open (ms)", "open_ms", "{:.1f}"),
    ("restart: first multi-get {restart} keys (ms)", "restart_get_ms", "{:.1f}"),
    ("restart: open + first multi-get (ms)", "restart_ms", "{:.1f}"),
    ("  ... bytes read from disk (kB)", "restart_read_kb", "{:,.0f}"),
    ("checkpoint, {delta} keys updated: time (ms)", "ckpt_ms", "{:.1f}"),
    ("checkpoint, {delta} keys updated: bytes (kB)", "ckpt_kb", "{:,.0f}"),
    ("files on disk after settle (MB)", "disk_mb", "{:.1f}"),
]
LEGEND = """
notes:
- ratio millpond/reference of the figure in that row: for keys/s above 1 means millpond is faster; for
  ms and bytes below 1 means millpond is faster or smaller.
- durable = millpond: epoch committed (SST + manifest fsynced); RocksDB: WAL fsynced (sync=True);
  SlateDB: WAL object written (await_durable). RocksDB and SlateDB checkpoints are WAL appends, millpond's
  are sorted, indexed SSTs; their bytes are the growth of their files during the write.
- settle: millpond compact() until within policy (L0 < 4 files); RocksDB flush + wait for background
  work; SlateDB memtable flush only (its compactor runs on its own schedule, not awaited).
- block sizes: millpond 64 KiB blocks (a bloom filter per block, the block index in the footer); RocksDB 4 KiB
  (its default) with a 10 bits/key bloom filter; SlateDB defaults. A cold random multi-get touches a
  block per key, so block size sets the bytes read.
- RocksDB scans and every SlateDB call cross the Python binding per row or per key; SlateDB's binding
  (uniffi over ctypes) costs ~0.1 ms per call, which dominates its multi-get, scan and batch building.
"""
SCALING = [("checkpoint time (ms)", "ckpt_ms"), ("checkpoint bytes (kB)", "ckpt_kb"),
           ("restart: open (ms)", "open_ms"), ("restart: open + first multi-get (ms)", "restart_ms"),
           ("restart: bytes read from disk (kB)", "restart_read_kb")]


def _fmt(fmt: str, value: float | None) -> str:
    return "-" if value is None else fmt.format(value)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    r = a / b
    return f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"


def report(n: int, res: dict[str, dict], args: argparse.Namespace) -> None:
    names = list(res)
    refs = [x for x in names if x != "millpond"]
    labels = {"gets": f"{min(args.gets, n):,}", "scan": f"{min(args.scan, n):,}", "delta": f"{min(args.delta, n):,}",
              "restart": f"{min(args.restart_keys, n):,}"}
    print(f"\nstate of {n:,} keys (8-byte keys, {VALUE}-byte values), loaded in batches of {args.batch:,}; "
          f"memory block cache {args.cache_mb} MiB per system")
    head = f"{'operation':<54}" + "".join(f"{x:>14}" for x in names)
    if "millpond" in names:
        head += "".join(f"{'millpond/' + r:>20}" for r in refs)
    print(head)
    for label, key, fmt in ROWS:
        line = f"{label.format(**labels):<54}" + "".join(f"{_fmt(fmt, res[x].get(key)):>14}" for x in names)
        if "millpond" in names:
            line += "".join(f"{_ratio(res['millpond'].get(key), res[r].get(key)):>20}" for r in refs)
        print(line)
    drop = ", ".join(f"{x} {res[x]['resident_after_drop']:.0%}" if res[x].get("resident_after_drop") is not None
                     else f"{x} unknown" for x in names)
    print(f"  OS page cache: after each drop, share of the store's bytes still resident: {drop}; "
          "otherwise the OS page cache was warm (all three read local files); bytes read from disk "
          "(/proc/self/io) include OS readahead")
    if "millpond" in res:
        m = res["millpond"]
        written = ", ".join(f"{k[8:-3]} {v:.1f} MB" for k, v in sorted(m.items()) if k.startswith("written_"))
        print(f"  millpond: bytes written by ingest + settle: {written} (raw data {n * (8 + VALUE) / 1e6:.1f} MB); "
              f"commit stalls {m.get('stalls', 0):.0f}")
        print(f"  millpond: per checkpoint epoch, staging the delta (ingest) {m['staging_ms']:.1f} ms before "
              f"seal; compaction started by these epochs wrote {m['background_kb']:,.0f} kB per epoch in the background "
              "(not in the checkpoint)")
    for x in names:
        for note in res[x].get("notes", []):
            print(f"  {x}: {note}")


def report_scaling(results: dict[int, dict[str, dict]], sizes: list[int]) -> None:
    base = results[BASE]
    for n in sizes:
        if n == BASE:
            continue
        print(f"\nscaling: state of {n:,} keys vs {BASE:,} keys (ratio = at {n:,} / at {BASE:,}; target: flat, near 1)")
        names = list(base)
        print(f"{'figure':<40}" + "".join(f"{x + ' ' + w:>18}" for x in names for w in ("100k", "N", "ratio")))
        for label, key in SCALING:
            cells = []
            for x in names:
                a, b = base[x].get(key), results[n][x].get(key)
                cells += [_fmt("{:,.1f}", a), _fmt("{:,.1f}", b), _ratio(b, a)]
            print(f"{label:<40}" + "".join(f"{c:>18}" for c in cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", default="1000000", help="state sizes, comma-separated (100,000 is always run too)")
    ap.add_argument("--batch", type=int, default=100_000, help="keys per ingest batch (one millpond epoch each)")
    ap.add_argument("--gets", type=int, default=10_000, help="keys per multi-get")
    ap.add_argument("--scan", type=int, default=100_000, help="consecutive keys per range scan")
    ap.add_argument("--delta", type=int, default=10_000, help="keys updated per checkpoint epoch")
    ap.add_argument("--epochs", type=int, default=5, help="checkpoint epochs per state size")
    ap.add_argument("--restart-keys", type=int, default=100, help="keys in the first multi-get after a restart")
    ap.add_argument("--repeats", type=int, default=3, help="warm reads: median of this many (after a warm-up)")
    ap.add_argument("--cache-mb", type=int, default=64, help="memory block cache per system, MiB")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    names = args.systems.split(",")
    if unknown := set(names) - set(SYSTEMS):
        ap.error(f"--systems: unknown {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    sizes = sorted({BASE, *(int(k.replace("_", "")) for k in args.keys.split(","))})
    versions = []
    for name, module in (("rocksdict", "rocksdict"), ("slatedb", "slatedb")):
        if name in names:
            from importlib.metadata import PackageNotFoundError, version
            try:
                versions.append(f"{name} {version(module)}")
            except PackageNotFoundError:
                ap.error(f"--systems: {name} is not installed (pip install -e '.[bench]', as make bench does), "
                         "or leave it out: --systems millpond")
    print(f"millpond state store vs {', '.join(versions) or 'nothing'}; sizes {', '.join(f'{s:,}' for s in sizes)}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="store-bench-") as workdir:
        for n in sizes:
            results[n] = run_size(n, args, names, workdir)
    for n in sizes:
        report(n, results[n], args)
    report_scaling(results, sizes)
    print(LEGEND)
    print("every multi-get and scan above was checked against the written values (all systems agree)")


if __name__ == "__main__":
    main()

"""Log service: append and read throughput against the disk's own fsync'd write speed.

Everything runs in this process on one local folder (the embedded default), on the same bytes:
each batch is ``--records`` records of an int64, a float64 and a 20-character string.

Physical references (the same encoded frame bytes a run appends, written to a plain file):

* **sequential**: all bytes in 1 MiB writes, one ``fdatasync`` at the end: the disk's bandwidth;
* **fsync per batch**: one ``write`` + ``fdatasync`` per batch, one writer: the floor any
  durable-per-append log pays without group commit.

millpond:

1. **group commit**: ``--threads`` appender threads, each appending its share of the batches
   (``Channel.append`` returns only when durable); concurrent appends share one write + sync.
2. **no group commit**: one thread, one append at a time (every append its own sync).
3. **large batches**: one thread appending ``--large`` records per batch (bandwidth-bound).
4. **read**: replay the whole channel with ``Channel.read`` from the WAL frames, then again
   after ``Log.flush()`` from the Parquet files.

Ratios: group commit vs fsync-per-batch reference (records/s), no group commit vs the same
reference, large batches vs sequential bandwidth (MB/s).

    .venv/bin/python benchmarks/log.py [--batches 4000] [--records 100] [--threads 8] [--large 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from millpond.log import Log
from millpond.log.wal import encode_frame
from millpond.store.objects import ObjectStore

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("s", pa.string())])


def batch(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": np.arange(n, dtype=np.int64) + seed * n, "v": rng.random(n),
                     "s": pa.array([f"{i:020d}" for i in range(n)])}, schema=SCHEMA)


def reference(frames: list[bytes], folder: Path) -> tuple[float, float]:
    """Seconds to write ``frames`` sequentially (one sync) and with one sync per frame."""
    data = b"".join(frames)
    path = folder / "seq.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    for i in range(0, len(data), 1 << 20):
        os.write(fd, data[i:i + (1 << 20)])
    os.fdatasync(fd)
    seq = time.perf_counter() - t
    os.close(fd)
    path = folder / "per.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    t = time.perf_counter()
    for f in frames:
        os.write(fd, f)
        os.fdatasync(fd)
    per = time.perf_counter() - t
    os.close(fd)
    return seq, per


def append_all(root: Path, batches: list[pa.Table], threads: int) -> tuple[float, Log]:
    log = Log(ObjectStore(str(root)))
    ch = log.create_channel("bench", SCHEMA)
    ch.append(batches[0].slice(0, 1))  # claim the physical channel before timing
    shares = [batches[i::threads] for i in range(threads)]

    def run(share: list[pa.Table]) -> None:
        for b in share:
            ch.append(b)

    workers = [threading.Thread(target=run, args=(s,)) for s in shares]
    t = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - t, log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=4000)
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--large-batches", type=int, default=40)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="millpond-log-bench-"))
    try:
        small = [batch(args.records, i) for i in range(args.batches)]
        frames = [encode_frame(0, [("c", 0, b)]) for b in small]
        nbytes = sum(len(f) for f in frames)
        records = args.batches * args.records
        seq, per = reference(frames, folder)
        print(f"{args.batches} batches x {args.records} records, {nbytes / 1e6:.1f} MB of frames")
        print(f"reference  sequential write + 1 fdatasync: {nbytes / seq / 1e6:8.1f} MB/s")
        print(f"reference  write + fdatasync per batch:    {records / per:10,.0f} records/s "
              f"{nbytes / per / 1e6:6.1f} MB/s ({per / args.batches * 1e3:.2f} ms per sync)")

        g, log = append_all(folder / "group", small, args.threads)
        log.close()
        print(f"millpond   group commit, {args.threads} threads:     {records / g:10,.0f} records/s "
              f"{nbytes / g / 1e6:6.1f} MB/s   ratio vs fsync per batch {per / g:5.2f}")
        one, log = append_all(folder / "single", small, 1)
        print(f"millpond   no group commit (1 thread):     {records / one:10,.0f} records/s "
              f"{nbytes / one / 1e6:6.1f} MB/s   ratio vs fsync per batch {per / one:5.2f}")

        ch = log.channel("bench")
        t = time.perf_counter()
        table = ch.read()
        wal_read = time.perf_counter() - t
        assert table.num_rows == records + 1
        t = time.perf_counter()
        log.flush()
        flush = time.perf_counter() - t
        t = time.perf_counter()
        again = ch.read()
        pq_read = time.perf_counter() - t
        assert again.equals(table)
        log.close()
        print(f"millpond   read from WAL frames:            {table.num_rows / wal_read:10,.0f} records/s "
              f"{nbytes / wal_read / 1e6:6.1f} MB/s")
        print(f"millpond   flush to Parquet:                {table.num_rows / flush:10,.0f} records/s")
        print(f"millpond   read from Parquet:               {table.num_rows / pq_read:10,.0f} records/s "
              f"{nbytes / pq_read / 1e6:6.1f} MB/s")

        large = [batch(args.large, i) for i in range(args.large_batches)]
        lframes = [encode_frame(0, [("c", 0, b)]) for b in large]
        lbytes = sum(len(f) for f in lframes)
        lseq, _ = reference(lframes, folder)
        lt, log = append_all(folder / "large", large, 1)
        log.close()
        print(f"large batches of {args.large:,} records, {lbytes / 1e6:.0f} MB")
        print(f"reference  sequential write + 1 fdatasync: {lbytes / lseq / 1e6:8.1f} MB/s")
        print(f"millpond   append, 1 thread:               {args.large * args.large_batches / lt:10,.0f} records/s "
              f"{lbytes / lt / 1e6:6.1f} MB/s   ratio vs sequential {lseq / lt:5.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

"""What a Delta upsert sink's MERGE costs as its table ages: delta-rs alone, no millpond.

A Delta table of ``--rows`` rows (one file); the median time of a ``MERGE`` of ``--batch`` random
keys (the upsert sink's write, :class:`millpond.connectors.lake_sinks.DeltaTarget`) while the table
is young (the baseline), after ``--versions`` more commits that each add one small file (a
changelog's appends), and after compacting those files: which of the table's age — its log's
versions — and its small files a sink's write follows. Ratios are to the baseline, in one process.

    .venv/bin/python benchmarks/delta_merge.py [--rows 100000] [--batch 1000] [--versions 900]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--versions", type=int, default=900)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    folder, rng = tempfile.mkdtemp(), np.random.default_rng(1)
    write_deltalake(folder, pa.table({"k": np.arange(args.rows), "v": rng.integers(0, 1000, args.rows)}))

    def merge() -> float:  # the median of reps upserts of batch random keys
        times = []
        for _ in range(args.reps):
            source = pa.table({"k": rng.choice(args.rows, args.batch, replace=False),
                               "v": rng.integers(0, 1000, args.batch)})
            start = time.perf_counter()
            DeltaTable(folder).merge(source, "t.k = s.k", source_alias="s", target_alias="t") \
                .when_matched_update_all().when_not_matched_insert_all().execute()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    young = merge()
    for i in range(args.versions):
        write_deltalake(folder, pa.table({"k": np.array([args.rows + i]), "v": np.array([0])}), mode="append")
    aged = merge()
    DeltaTable(folder).optimize.compact()
    compacted = merge()
    version = DeltaTable(folder).version()
    print(f"MERGE of {args.batch:,} keys into {args.rows:,} rows (median of {args.reps}):")
    print(f"  young table:                            {young:.3f} s")
    print(f"  after {args.versions} one-file commits:            {aged:.3f} s (x{aged / young:.2f})")
    print(f"  the same, compacted (version {version}):      {compacted:.3f} s (x{compacted / young:.2f})")


if __name__ == "__main__":
    main()

"""The data of ``per_row.py``, ``native.py`` and ``sdp.py``: deltas of ``ev(k, p, v)`` and the
``dim(p, name)`` table they join."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

KEYS, PRODUCTS, NAMES = 10_000, 10_000, 500


def delta(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"k": rng.integers(0, KEYS, rows), "p": rng.integers(0, PRODUCTS, rows),
                     "v": rng.integers(0, 1_000_000, rows)})


def dimension() -> pa.Table:
    return pa.table({"p": np.arange(PRODUCTS, dtype=np.int64),
                     "name": [f"name{i % NAMES}" for i in range(PRODUCTS)]})


def delta_files(folder: str, rows: int, count: int) -> tuple[list[pa.Table], list[str]]:
    """``count`` deltas of ``rows`` rows, and each written as a Parquet file in ``folder``."""
    batches = [delta(rows, seed) for seed in range(count)]
    files = [os.path.join(folder, f"ev-{rows}-{i}.parquet") for i in range(count)]
    for b, f in zip(batches, files):
        pq.write_table(b, f)
    return batches, files

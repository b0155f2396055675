"""The data of ``per_row.py``, ``native.py`` and ``sdp.py``: deltas of ``ev(k, p, v)`` (with
``typed``, also the columns real tables have: ``price`` and ``disc`` DECIMAL(12,2), ``x`` DOUBLE,
``ts`` TIMESTAMP, ``s`` VARCHAR) and the ``dim(p, name)`` table they join."""

from __future__ import annotations

import os
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.parquet as pq

KEYS, PRODUCTS, NAMES = 10_000, 10_000, 500


WORDS = np.array(["alpha", "beta", "gamma", "delta", "apex", "Ärger", "omega", "straße"])
TYPED = ("price DECIMAL(12,2), disc DECIMAL(12,2), x DOUBLE, ts TIMESTAMP, s VARCHAR")  # their SQL types


def delta(rows: int, seed: int, typed: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    columns = {"k": rng.integers(0, KEYS, rows), "p": rng.integers(0, PRODUCTS, rows),
               "v": rng.integers(0, 1_000_000, rows)}
    if typed:
        columns |= {
            "price": _cents(rng.integers(100, 10_000_000, rows)), "disc": _cents(rng.integers(0, 11, rows)),
            "x": rng.normal(100.0, 30.0, rows),
            "ts": pa.array(1_700_000_000_000_000 + seed * 86_400_000_000 + rng.integers(0, 86_400_000_000, rows),
                           pa.timestamp("us")),
            "s": WORDS[rng.integers(0, len(WORDS), rows)] + rng.integers(0, 100, rows).astype(str)}
    return pa.table(columns)


def dimension() -> pa.Table:
    return pa.table({"p": np.arange(PRODUCTS, dtype=np.int64),
                     "name": [f"name{i % NAMES}" for i in range(PRODUCTS)]})


def _cents(cents: np.ndarray) -> pa.Array:
    """DECIMAL(12,2) values of ``cents`` hundredths."""
    hundredth = pa.scalar(Decimal("0.01"), pa.decimal128(3, 2))
    return pa.compute.multiply(pa.array(cents).cast(pa.decimal128(19, 0)), hundredth).cast(pa.decimal128(12, 2))


def delta_files(folder: str, rows: int, count: int, typed: bool = False) -> tuple[list[pa.Table], list[str]]:
    """``count`` deltas of ``rows`` rows, and each written as a Parquet file in ``folder``."""
    batches = [delta(rows, seed, typed) for seed in range(count)]
    files = [os.path.join(folder, f"ev-{rows}-{'typed-' if typed else ''}{i}.parquet") for i in range(count)]
    for b, f in zip(batches, files):
        pq.write_table(b, f)
    return batches, files

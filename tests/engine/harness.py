"""Drive a pure operator over scripted epochs with a real (local-folder) state store."""

from __future__ import annotations

import numpy as np
import polars as pl

from millpond import paths
from millpond.engine.changelog import KH, W
from millpond.store.objects import ObjectStore
from millpond.store.sst import SstRef
from millpond.store.state_table import StateTable, write_state


def changelog(columns: list[str], text: str, *, key: list[str] | None = None,
              types: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
    """Rows written as ``+ Apple Fruit`` / ``- Apple Fruit``; ints parse as ints, ``NULL`` as None.

    ``_kh`` is a stand-in hash of ``key`` columns (tests only need equal keys to hash equal).
    """
    recs = []
    for line in text.strip().splitlines():
        sign, *vals = line.split()
        vals = [None if v == "NULL" else int(v) if v.lstrip("-").isdigit() else v for v in vals]
        recs.append({**dict(zip(columns, vals)), W: 1 if sign == "+" else -1})
    df = pl.DataFrame(recs, schema_overrides={W: pl.Int64, **(types or {})}, infer_schema_length=None)
    if key is not None:
        df = df.with_columns(pl.concat_str([pl.col(k).cast(pl.String).fill_null("∅") for k in key])
                             .hash(seed=1).reinterpret(signed=True).alias(KH))
    return df


def as_rows(df: pl.DataFrame) -> list[tuple]:
    cols = [c for c in df.columns if c not in (KH,)]
    return sorted(df.select(cols).rows(), key=lambda r: tuple((v is not None, str(v)) for v in r))


class Harness:
    def __init__(self, root: str, keys: dict[str, tuple[str, ...]], *, additive: frozenset[str] = frozenset()):
        self.store = ObjectStore(root)
        self.keys = keys
        self.additive = additive
        self.refs: dict[str, list[SstRef]] = {part: [] for part in keys}
        self.epoch = 0

    def states(self) -> dict[str, StateTable]:
        return {p: StateTable(self.store, tuple(reversed(self.refs[p])), self.keys[p], additive=p in self.additive)
                for p in self.keys}

    def commit(self, writes: dict[str, pl.DataFrame]) -> None:
        self.epoch += 1
        for part, rows in writes.items():
            key = write_state(self.store, lambda h, part=part: paths.sst_key(self.epoch, "aa", part, 0, h), rows)
            if key is not None:
                _, _, vnodes = paths.parse_sst_key(key)
                self.refs[part].append(SstRef(key, self.epoch, vnodes))


assert np

"""Drive a pure operator over scripted epochs with a real (local-folder) state store."""

from __future__ import annotations

import polars as pl

from millpond import paths
from millpond.columns import KH, W
from millpond.engine.operators import Part
from millpond.store.compaction import Policy
from millpond.store.objects import ObjectStore
from millpond.store.state_table import StateTable, write_state
from millpond.store.store import StateStore


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
    """Operator state on a real store that compacts eagerly (every second L0 file, small levels),
    so operator tests also check that compaction preserves what operators read."""

    def __init__(self, root: str, parts: dict[str, Part]):
        policy = Policy(l0_trigger=2, l0_stall=8, base_level_bytes=4096, level_ratio=2, target_file_bytes=2048)
        self.state = StateStore(ObjectStore(root), policy=policy, background=False)
        self.parts = parts
        self.epoch = 0

    def states(self) -> dict[str, StateTable]:
        return {name: self.state.table(name, p.keys, additive=p.additive) for name, p in self.parts.items()}

    def commit(self, writes: dict[str, pl.DataFrame]) -> None:
        self.epoch += 1
        new = {}
        for part, rows in writes.items():
            key = paths.sst_key(self.state.manifest.version, self.epoch, "aa", part, 0)
            ref = write_state(self.state.store, key, rows, self.epoch, keys=self.parts[part].keys,
                              additive=self.parts[part].additive)
            if ref is not None:
                new[part] = [ref]
        self.state.commit(self.epoch, new, {})

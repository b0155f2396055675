"""Compaction: merge overlapping runs into levels of disjoint files.

**Policy** (leveled, as in RocksDB and Hummock): when a state table has ``l0_trigger`` L0 files,
all of them and every L1 file they overlap merge into new L1 files — or, when they are small next
to those L1 files, into one L0 run (RocksDB's intra-L0 compaction); when level ``i`` holds more
than ``base_level_bytes × level_ratio^(i-1)``, its largest file and the files of level ``i+1`` it
overlaps merge into level ``i+1``. Data only moves down through merges that take every
overlapping file of the target level, so for any key a shallower level always holds newer
versions than a deeper one.

**Merge** (one pure function over Arrow rows): rows written after the *safe epoch* (the oldest
epoch a reader may still ask for) are all kept; rows at or below it collapse to what a read at
the safe epoch sees — the newest version of a key (newest-wins tables) or the sum of its counts
(additive tables; a zero sum disappears). A tombstone at or below the safe epoch is dropped when
no deeper level overlaps the output (nothing older is left for it to hide).

**Expiry** (a compaction filter, as RocksDB's TTL and Flink's state TTL use): a state whose
manifest entry names a time key column and a floor (a flow's aggregation state: its expired
windows, :mod:`millpond.engine.flows`) loses every version of the keys older than the floor
whenever its files are merged. Nothing reads those keys again, so files not merged yet may keep
them; the state shrinks as compaction reaches them. A state in time order (its floor names a *key
floor*: every key below it is of an older time) first merges, each within its level, its files
with at least half their key range below the floor: wholly expired ones leave no output, so old
windows' files go without waiting for a merge to reach them.

**Executors**: :func:`run_task` reads the inputs, merges and writes the outputs under a fresh
prefix; it runs in-process or inside a Spark task (``spark/compact.py``) — same code, same root.
Outputs become visible only when the coordinator applies the result in a new manifest version
(:func:`apply`); a crash before that leaves unreferenced files for garbage collection.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace

import numpy as np
import polars as pl
import pyarrow as pa

from millpond.columns import COUNT, DEL, EP, KH
from millpond.errors import InvariantError
from millpond.defaults import filled
from millpond.store.manifest import Levels
from millpond.store.objects import ObjectStore, open_store
from millpond.store.sst import SstMeta, SstRef, open_sst, scan_sst, write_sst

__all__ = ["Policy", "Task", "l0_runs", "pick", "merge_rows", "run_task", "apply"]


@dataclass(frozen=True)
class Policy:
    l0_trigger: int = 4          # L0 files that start a compaction
    l0_stall: int = 24           # L0 files at which commits wait for compaction (backpressure)
    # L0's files merge into L1 when they hold at least 1/l0_share of the L1 bytes they overlap, else
    # among themselves into one L0 run: keys are hashed, so an epoch's small file overlaps every L1
    # file, and merging it there rewrote all of L1 (TPC-H SF 0.1, 22 views, 0.1% refreshes: a
    # compaction every few rounds, each round it ran beside 1.7x as long)
    l0_share: int = 10
    base_level_bytes: int = 64 << 20
    level_ratio: int = 10
    target_file_bytes: int = 32 << 20
    max_levels: int = 6


@dataclass(frozen=True)
class Task:
    """One merge: ``inputs`` (from ``source`` level and the overlapped files of ``target``)."""

    state: str
    source: int
    target: int
    inputs: tuple[SstRef, ...]
    safe_epoch: int
    bottom: bool  # no deeper level overlaps the inputs' key range
    prefix: str   # where the outputs go (unique per task)
    target_file_bytes: int
    expiry: tuple | None = None  # (time key column, floor[, key floor]): older keys are dropped
    move: bool = False  # one file that overlaps nothing in the target level: moved there, not rewritten
    defaults: str | None = None  # columns older inputs lack, with their defaults (Manifest.defaults)


def l0_runs(l0: tuple[SstRef, ...]) -> int:
    """The sorted runs among L0's files: the files one epoch wrote (its tasks' by vnode, a task's
    steps by key-hash range: ``engine/step.py``) hold disjoint keys, so they count as one — what a
    read of a key meets, and what the store's backpressure bounds. (Counting files, a backfill cut
    in 21 steps left TPC-H Q21's join states three epochs from the bound: the fourth refresh at
    SF 1 waited 190 s for the backfill's whole compaction.)"""
    return len({(ref.min_ep, ref.max_ep) for ref in l0})


def _size(files) -> int:  # noqa: ANN001
    return sum(ref.size for ref in files)


def _overlapping(level: tuple[SstRef, ...], lo: int, hi: int) -> tuple[SstRef, ...]:
    return tuple(ref for ref in level if ref.max_kh >= lo and ref.min_kh <= hi)


def _mostly_below(ref: SstRef, floor: int) -> bool:
    """Whether at least half of ``ref``'s key range is below ``floor`` (so rewriting it at least
    halves it: a file across a rising floor is rewritten a few times, not at every step)."""
    return ref.min_kh < floor and floor - ref.min_kh >= ref.max_kh - floor


def pick(state: str, levels: Levels, policy: Policy, safe_epoch: int, prefix: str,
         expiry: list | tuple | None = None, defaults: str | None = None) -> Task | None:
    """The next merge for one state table, or None when its shape is within the policy."""
    task = _pick(state, levels, policy, safe_epoch, prefix, expiry)
    return task if task is None or defaults is None else replace(task, defaults=defaults)


def _pick(state: str, levels: Levels, policy: Policy, safe_epoch: int, prefix: str,
          expiry: list | tuple | None) -> Task | None:
    deeper = list(levels.levels)
    for i, level in enumerate(deeper, start=1) if expiry is not None and len(expiry) > 2 else ():
        if stale := tuple(r for r in level if _mostly_below(r, expiry[2])):  # merged in place
            lo, hi = stale[0].min_kh, max(r.max_kh for r in stale)
            return Task(state, i, i, stale, safe_epoch, not any(_overlapping(lv, lo, hi) for lv in deeper[i:]),
                        prefix, policy.target_file_bytes, tuple(expiry))
    if len(levels.l0) >= policy.l0_trigger:
        source, top = 0, levels.l0
        oldest = levels.l0[-1]  # a backfill's big run under an epoch's small ones: it alone moves down
        if _size(levels.l0[:-1]) * policy.l0_share < oldest.size and \
                not _overlapping(deeper[0] if deeper else (), oldest.min_kh, oldest.max_kh):
            top = (oldest,)
    else:
        for i, level in enumerate(deeper, start=1):
            if i < policy.max_levels and _size(level) > policy.base_level_bytes * policy.level_ratio ** (i - 1):
                source, top = i, (max(level, key=lambda r: (r.size, r.key)),)
                break
        else:
            return None
    lo, hi = min(r.min_kh for r in top), max(r.max_kh for r in top)
    target = source + 1
    below = deeper[target - 1] if target - 1 < len(deeper) else ()
    overlapped = _overlapping(below, lo, hi)
    if len(top) == 1 and not overlapped:  # RocksDB's trivial move: the file is already a sorted run
        return Task(state, source, target, top, safe_epoch, False, prefix, policy.target_file_bytes,
                    tuple(expiry) if expiry else None, move=True)
    if source == 0 and _size(top) * policy.l0_share < _size(overlapped):
        target, overlapped = 0, ()  # small runs over a large L1: merged among themselves (Policy.l0_share)
    inputs = (*top, *overlapped)
    bottom = not any(_overlapping(lv, lo, hi) for lv in deeper[target:])
    return Task(state, source, target, inputs, safe_epoch, bottom, prefix, policy.target_file_bytes,
                tuple(expiry) if expiry else None)


def merge_rows(rows: pl.DataFrame, keys: tuple[str, ...], additive: bool, safe_epoch: int,
               bottom: bool, expiry: tuple[str, int] | None = None) -> pl.DataFrame:
    """The merged rows of a compaction (see the module docstring); sorted by key, newest first.
    With ``expiry`` (a time key column, a floor in microseconds since 1970), every version of a key
    whose time is below the floor is dropped (a flow's expired windows: never read again)."""
    ident = [KH, *keys]
    if expiry is not None:
        column, floor = expiry[:2]
        t = pl.col(column).cast(pl.Datetime("us")) if rows.schema[column] == pl.Date else pl.col(column)
        rows = rows.filter(t.is_null() | (t.dt.epoch("us") >= floor))
        if len(expiry) > 2:  # a state in time order: its keys below the key floor are of older times too
            rows = rows.filter(pl.col(KH) >= expiry[2])
    old, new = rows.filter(pl.col(EP) <= safe_epoch), rows.filter(pl.col(EP) > safe_epoch)
    if additive:
        old = (old.group_by(ident).agg(pl.col(COUNT).sum(), pl.col(EP).max(), pl.col(DEL).first())
               .filter(pl.col(COUNT) != 0))
    else:
        old = old.sort(EP, descending=True, maintain_order=True).unique(ident, keep="first", maintain_order=True)
        if bottom:
            old = old.filter(~pl.col(DEL))
    out = pl.concat([old.select(rows.columns), new], how="vertical_relaxed")
    return out.sort([*ident, EP], descending=[False] * len(ident) + [True])


def _split_points(kh: np.ndarray, rows_per_file: int) -> list[int]:
    """Cut positions every ~``rows_per_file`` rows, never inside one key (levels stay disjoint)."""
    cuts = [0]
    while cuts[-1] + rows_per_file < kh.size:  # a loop per output file
        at = int(np.searchsorted(kh, kh[cuts[-1] + rows_per_file], side="left"))
        if at <= cuts[-1]:
            at = int(np.searchsorted(kh, kh[cuts[-1] + rows_per_file], side="right"))
        if at >= kh.size:
            break
        cuts.append(at)
    return [*cuts, kh.size]


# a merge reads its inputs one range of keys of about this many (compressed) bytes at a time; the rows
# short of a file are carried into the next range's. Measured (TPC-H SF 1's lineitem, 40 files merged,
# /tmp script): 64 MiB held 1.28 GiB at its peak, 16 MiB 0.52 GiB (the refresh's compactor peaked at 2.18)
MERGE_BYTES = 16 << 20


def run_task(store: ObjectStore, task: Task) -> tuple[SstRef, ...]:
    """Merge ``task.inputs`` and write the outputs; returns their manifest entries. The inputs are
    read and merged one range of key hashes at a time (:func:`_ranges`), so what a merge holds is
    bounded whatever the state's size (merging a 6M-row join state at once held 7 GB)."""
    if task.move:
        return task.inputs
    metas = [open_sst(store, ref) for ref in task.inputs]
    keys, additive = max((m.keys for m in metas), key=len), metas[0].additive  # the newest: columns added since
    defaults = () if task.defaults is None else tuple(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(task.defaults))))
    for m in metas:  # a column an older file lacks, with no default known: merged, its rows would say NULL
        if lost := set(keys) - set(m.keys) - {f.name for f in defaults}:
            raise InvariantError(f"state {task.state}: file {m.ref.key} lacks columns {sorted(lost)} and no default "
                                 "is recorded for them")
    outputs: list[SstRef] = []

    def write(rows: pl.DataFrame) -> None:
        outputs.append(write_sst(store, f"{task.prefix}{task.state}/{len(outputs):05d}.sst", rows, keys=keys,
                                 additive=additive))
    carry: pl.DataFrame | None = None  # the last range's rows short of a file: the next range's keys follow theirs
    for lo, hi in _ranges(metas, MERGE_BYTES):  # a loop per range of keys
        tables = [filled(t, defaults) for ref in task.inputs if (t := scan_sst(store, ref, lo, hi)) is not None]
        if not tables:
            continue
        rows = pl.from_arrow(pa.concat_tables(tables, promote_options="permissive"))
        del tables
        merged = merge_rows(rows, keys, additive, task.safe_epoch, task.bottom, task.expiry)
        del rows
        if carry is not None:
            merged, carry = pl.concat([carry, merged], how="vertical_relaxed"), None
        if merged.height == 0:
            continue
        per_row = max(1, merged.estimated_size() // merged.height)
        rows_per_file = max(16, task.target_file_bytes // per_row)
        cuts = _split_points(merged[KH].to_numpy(), rows_per_file)
        for a, b in zip(cuts[:-1], cuts[1:]):  # a loop per output file
            if b == merged.height and b - a < rows_per_file:
                carry = merged.slice(a, b - a)
            else:
                write(merged.slice(a, b - a))
    if carry is not None:
        write(carry)
    return tuple(outputs)


def _ranges(metas: list[SstMeta], budget: int) -> list[tuple[int | None, int | None]]:
    """Ranges ``[lo, hi)`` of key hashes (None: open) holding about ``budget`` bytes of the files'
    blocks each, cut at blocks' first keys: a key's versions all fall in one range, in key order."""
    firsts = np.concatenate([m.first_kh for m in metas])
    sizes = np.concatenate([m.lengths for m in metas])
    order = np.argsort(firsts, kind="stable")
    firsts, total = firsts[order], np.cumsum(sizes[order])
    n = int(-(-total[-1] // budget)) if total.size else 1
    if n <= 1:
        return [(None, None)]
    cuts = np.unique(firsts[np.searchsorted(total, np.arange(1, n) * (total[-1] / n))])
    cuts = cuts[cuts > firsts[0]].tolist()
    return list(zip([None, *cuts], [*cuts, None]))


def run_remote_task(root: str, options: dict[str, str], task: Task) -> tuple[SstRef, ...]:
    """``run_task`` on a worker: opens the root itself (picklable arguments only)."""
    return run_task(open_store(root, options), task)


def apply(levels: Levels, task: Task, outputs: tuple[SstRef, ...]) -> Levels | None:
    """``levels`` with the task's inputs replaced by its outputs; None if the inputs are no longer
    all there (the result is stale and is dropped)."""
    gone = {ref.key for ref in task.inputs}
    present = {ref.key for ref in levels.files()}
    if not gone <= present:
        return None
    l0 = tuple(r for r in levels.l0 if r.key not in gone)
    if task.target == 0:  # runs of L0 merged among themselves: older than any committed since
        return Levels((*l0, *sorted(outputs, key=lambda r: r.min_kh)), levels.levels)
    deeper = [tuple(r for r in lv if r.key not in gone) for lv in levels.levels]
    while len(deeper) < task.target:
        deeper.append(())
    deeper[task.target - 1] = tuple(sorted((*deeper[task.target - 1], *outputs), key=lambda r: r.min_kh))
    while deeper and not deeper[-1]:
        deeper.pop()
    return Levels(l0, tuple(deeper))

"""Backfills in bounded epochs: a new view over large tables fills over several epochs, each reading
about :attr:`Coordinator.backfill_rows` of its input, so the views already in force go on committing
epochs (fresh) while it fills, instead of waiting for one epoch that reads everything.

A view's first epoch reads its tables from their start (coordinator, step 1): a keyed table as its
rows state plus its log after them (batch mode), a key-less or APPEND ONLY table as its log. When
that is more than the budget, the view **fills**:

- a keyed table's rows are read one *part* an epoch: part ``i`` of ``n`` is the ``i``-th slice of
  the 64-bit key hashes the rows state is ordered by (:func:`bounds`), read from the table's rows in
  that epoch's pinned version — the table as of the offset the view's log range starts at (checked,
  as batch mode does). The table's log records of the epoch go through only for keys in the parts
  read so far (key hash below the part's end): a key's row arrives with its part, and every change
  after it follows. After the last part the table is read as any view reads it.
- a key-less (or APPEND ONLY) table's log — its rows — is read from the view's offset at most the
  budget's records an epoch, less the part's rows, shared among such tables — or twice the records
  appended since the last epoch, if more: the backfill gains on a table however fast it is written.

Every operator is incremental over any split of its input into inserts, so the view's rows once
filled are those a single epoch would have made. Until then the view is not current: the manifest
says so (``Manifest.filling``: parts done and parts, kept while a capped log range lags), readers
are told it is still filling (55000, with its progress), and ``SHOW JOBS`` shows the backfill across
its epochs. Only a view nothing else reads yet fills in bounded epochs (no view over it, no sink, no
replacement reading it), and none that reads a view, an index (a delta join), or a partial view's
keys; a view, sink or subscription over a filling view is refused until it is filled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Mapping

from millpond.catalog import Catalog
from millpond.engine import plan as P
from millpond.engine.consumers import Consumer, View
from millpond.errors import InvariantError
from millpond.store.manifest import Manifest

__all__ = ["BACKFILL_ROWS", "Fill", "bound", "bounds", "check_start", "widened"]

# input records a filling view reads an epoch (the coordinator's default; SET backfill_rows; 0: one epoch)
BACKFILL_ROWS = int(os.environ.get("MILLPOND_BACKFILL_ROWS", 2_000_000))


@dataclass(frozen=True)
class Fill:
    """A filling view's epoch: the part of its keyed tables' rows it reads (of ``parts``), and
    whether a key-less log range was cut short (it is still behind then)."""

    part: int
    parts: int
    capped: bool
    # its input records (a keyed table's stored rows, a key-less table's log up to the snapshot),
    # and those read before this epoch and after it: the backfill's progress (SHOW JOBS)
    total: int = 0
    before: int = 0
    after_epoch: int = 0
    last: int | None = None  # the last part this epoch reads (None: ``part`` alone)
    whole: Mapping[str, tuple[int, int]] | None = None  # its ranges before :func:`bound` cut them

    def after(self) -> list[int] | None:
        """Its ``Manifest.filling`` entry once the epoch commits (None: filled)."""
        done = min((self.part if self.last is None else self.last) + 1, self.parts)
        return [done, self.parts] if done < self.parts or self.capped else None

    def slice(self) -> tuple[int, int, int]:
        """What the epoch's tasks read of the keyed tables' rows (``EpochJob.slices``): the first
        and last part, of ``parts``."""
        return self.part, self.part if self.last is None else self.last, self.parts


def bounds(first: int, last: int, parts: int) -> tuple[int | None, int | None]:
    """Parts ``first`` to ``last`` of ``parts`` slices of the signed 64-bit key hashes: [lo, hi)
    (None: open)."""
    width = (1 << 64) // parts
    lo = -(1 << 63) + first * width
    return (None if first == 0 else lo), (None if last == parts - 1 else -(1 << 63) + (last + 1) * width)


def widened(fills: Mapping[str, Fill], work: list) -> dict[str, Fill]:
    """When nothing but backfills has work in an epoch (no new record for any other consumer), no
    view waits for it: each filling view reads all it has left (its remaining parts, its log ranges
    whole: ``work``'s ranges are put back as they were before :func:`bound` cut them); else ``fills``."""
    if any(c.key not in fills and any(a < b for a, b in ranges.values()) for c, ranges in work):
        return dict(fills)
    out = {}
    for c, ranges in work:
        if (f := fills.get(c.key)) is not None:
            ranges.update(f.whole or {})
            out[c.key] = replace(f, capped=False, last=f.parts - 1, after_epoch=f.total)
    return out


def fills(c: Consumer, consumers: list[Consumer], catalog: Catalog) -> bool:
    """Whether ``c`` may fill in bounded epochs (module docstring): a full view nothing reads yet."""
    if type(c) is not View or c.views or any(c.name in o.views for o in consumers):
        return False
    if any(s.source == c.name for s in catalog.sinks.values()):
        return False
    return not P.indexes_read(c.plan) and not _delta_joins(c.plan)


def _delta_joins(node: P.Node) -> bool:
    return (isinstance(node, P.Join) and any(node.lookup)) or any(_delta_joins(i) for i in P.inputs(node))


def bound(c: Consumer, consumers: list[Consumer], catalog: Catalog, manifest: Manifest,
         ranges: dict[str, tuple[int, int]], rows: Mapping[str, int], budget: int) -> Fill | None:
    """Step 1 for a view filling in bounded epochs (None: not one, this epoch reads all it has).
    ``rows``: the keyed tables read as rows this epoch (by channel: their stored rows; the ranges
    start at those rows' offset). Cuts ``ranges`` of the other channels to ``budget`` records."""
    if budget <= 0:
        return None
    first = c.key not in manifest.offsets
    if first:
        if not fills(c, consumers, catalog):
            return None
        stored = sum(rows.values())
        part, parts = 0, max(1, -(-stored // budget))
    elif c.key in manifest.filling:
        part, parts = manifest.filling[c.key]
    else:
        return None
    capped, stored, whole = False, sum(rows.values()), dict(ranges)
    total, before, after = stored, stored * part // parts, stored * min(part + 1, parts) // parts
    logs = [ch for ch in ranges if ch not in rows]  # the epoch's budget less its part of the rows, shared
    room = max(1, max(budget - (stored // parts if part < parts else 0), budget // 4) // max(1, len(logs)))
    read = {t.channel: manifest.offsets.get(f"o{t.id}", {}).get(t.channel, 0) for t in catalog.tables.values()}
    for ch in logs:
        a, b = ranges[ch]
        total, before = total + b, before + a
        # at least twice what came since the last epoch: the backfill gains on its table, however fast
        # it is written (it would never catch up with a cap below the rate)
        cap = max(room, 2 * max(0, b - read.get(ch, b)))
        if b - a > cap:
            ranges[ch], capped = (a, a + cap), True
        after += ranges[ch][1]
    if first and parts == 1 and not capped:
        return None  # small enough for one epoch, as before
    return Fill(part, parts, capped, total, before, after, whole=whole)


def check_start(c: Consumer, channel: str, start: int, done: int) -> None:
    """A filling view reads a keyed table's next part from the table's rows as of the offset its own
    log range starts at: they move in lockstep (the table's consumer reads the same ranges)."""
    if start != done:
        raise InvariantError(f"{c.name}: fills from its table's rows at offset {done}, but reads the table's "
                             f"log from offset {start}")


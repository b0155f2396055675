"""An epoch as values passed along one loop (:meth:`millpond.engine.coordinator.Coordinator.run_epoch`;
the protocol's steps are numbered in :mod:`millpond.engine.coordinator`).

- :class:`EpochPlan` — steps 1-2: every consumer's input fixed at one log snapshot, the version
  its tasks read pinned, the job handed to the executor;
- :class:`EpochResult` — step 3: the executor's changelogs, the attempt whose files are committed,
  the views isolated by a data error;
- :class:`EpochReport` — steps 4-5: what the commit made visible;

then maintenance (step 6). What an epoch does around its consumers — files tables taking in
files, flows' targets, sinks, the log's upkeep, the epochs' history — are :class:`EpochStep` s
(steps 0 and 7): each works through the ports it was built with (a store, a table's channel, a
reader of committed rows), never the runtime.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from millpond.catalog import Catalog
    from millpond.engine.changefeed import Change, Changelogs
    from millpond.engine.consumers import Consumer
    from millpond.engine.executor import EpochJob, Work
    from millpond.engine.filling import Fill
    from millpond.store.manifest import Manifest

__all__ = ["EpochPlan", "EpochResult", "EpochReport", "EpochStep"]


@dataclass(frozen=True)
class EpochPlan:
    """Steps 1-2: what one epoch reads, and the version it reads it at."""

    catalog: Catalog
    consumers: list[Consumer]  # every consumer of the catalog (the commit keeps the offsets of these)
    work: list[Work]  # the consumers that run, each with its channels' [start, stop)
    job: EpochJob  # epoch, attempt, pinned manifest; batch mode's and partial views' inputs
    # partial view's consumer key -> its filled keys' state writes (engine/partial.py)
    filled: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    # view read by views -> (its rows' schema, its rows state id)
    inputs: Mapping[str, tuple[pa.Schema, str]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)  # when its input was fixed (seconds since 1970)
    fills: Mapping[str, Fill] = field(default_factory=dict)  # views filling in bounded epochs (engine/filling.py)

    @property
    def epoch(self) -> int:
        return self.job.epoch


@dataclass(frozen=True)
class EpochResult:
    """Step 3: what the executor made of a plan's work."""

    job: EpochJob  # the attempt whose files the commit references (a fresh one after isolating views)
    changes: dict[str, Change]  # consumer key -> its changelog (files, or a flow's table)
    marks: dict[str, dict[str, int]]  # flow's consumer key -> its window-expiry offsets
    failures: dict[str, dict]  # consumer key -> its failure (a data error isolated to it)


@dataclass(frozen=True)
class EpochReport:
    """What one committed epoch changed: each view's changelog (``_w`` = +1/-1 weights, read from
    its changes files when asked for).

    Tables are not included: their changes are the records appended to their log, which a
    reader gets with ``spark.read.format("millpond")``; shipping them back to the driver every
    epoch would cost as much as the ingest."""

    epoch: int
    changes: Changelogs  # view name -> changelog (views that changed), read when asked for
    failed: dict[str, dict] = field(default_factory=dict)  # view name -> its failure (views that failed in it)
    rows_in: dict[str, int] = field(default_factory=dict)  # consumer name -> records it read (consumers that ran)
    # files table -> its source's problems in force after its files were taken in for this epoch
    # (millpond.connectors.source_errors: refused files, a path that cannot be listed)
    source_errors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    manifest: Manifest | None = field(default=None, compare=False)  # the version the commit wrote

    def __repr__(self) -> str:
        parts = [f"epoch={self.epoch}", f"changes={self.changes!r}"]
        if self.failed:
            parts.append(f"failed={sorted(self.failed)!r}")
        if self.rows_in:
            parts.append(f"rows_in={self.rows_in!r}")
        if self.source_errors:
            parts.append(f"source_errors={self.source_errors!r}")
        return f"EpochReport({', '.join(parts)})"


class EpochStep:
    """Work an epoch does around its consumers. Steps wrap the epoch as nested blocks do: their
    :meth:`before` s run in order before its input is fixed (step 0), their :meth:`after` s in the
    reverse order once it is committed (step 7). An exception of either fails the epoch's call
    (after the commit: the epoch stays committed), so a step that must not stop others catches its
    own."""

    def before(self, catalog: Catalog, consumers: list[Consumer], manifest: Manifest) -> None:
        """Step 0: before the input is fixed, with the last committed version (what is appended to
        a table's log here is read by this epoch)."""

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        """Step 7: after the commit of ``plan`` (the report passed on, perhaps with more in it)."""
        return report

    def floor(self, catalog: Catalog) -> int | None:
        """Step 6: the oldest epoch whose later changes this step still reads (retention keeps
        them); None: it needs none."""
        return None

"""Running totals of a runtime for monitoring: epochs committed and failed, their durations, rows
into and out of every table, view and flow, and statements' durations. The system views say how
things are now; these say how much happened since the process started, which is what Prometheus
scrapes (:mod:`millpond.metrics` formats them, with gauges read from the runtime at each scrape).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import Counter, deque
from typing import TYPE_CHECKING

from millpond.engine.epoch import EpochStep

if TYPE_CHECKING:
    from millpond.catalog import Catalog
    from millpond.engine.consumers import Consumer
    from millpond.engine.epoch import EpochPlan, EpochReport
    from millpond.store.manifest import Manifest

__all__ = ["Histogram", "Tally"]

# seconds: an epoch of a few rows (~0.05 s) up to a backfill of minutes
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
COMMITS = 1000  # epochs whose commit times are kept (a view's freshness)


class Histogram:
    """Observations counted per bucket (``le``: at most the bucket's bound), with their sum."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last: above every bound
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self.counts[bisect_left(self.buckets, value)] += 1
            self.sum += value

    def cumulative(self) -> tuple[list[tuple[str, int]], float]:
        """``[(le, observations at most le)...]`` ending with ``+Inf``, and the sum."""
        with self._lock:
            out, total = [], 0
            for bound, n in zip((*map(str, self.buckets), "+Inf"), self.counts):
                total += n
                out.append((bound, total))
            return out, self.sum


class Tally(EpochStep):
    """The totals, kept as a step of every epoch (its ``after`` runs once the epoch committed)."""

    def __init__(self) -> None:
        self.committed = 0
        self.failed = 0  # epochs that raised (retried by the next one)
        self.epoch_seconds = Histogram()
        self.statement_seconds = Histogram()
        self.statement_errors = 0
        self.rows_in: Counter[str] = Counter()  # table, view or flow -> records it read, summed over epochs
        self.rows_out: Counter[str] = Counter()  # -> changes it wrote
        self.commits: deque[tuple[int, float]] = deque(maxlen=COMMITS)  # (epoch, unix time of its commit)
        self._started = time.perf_counter()

    def before(self, catalog: Catalog, consumers: list[Consumer], manifest: Manifest) -> None:
        self._started = time.perf_counter()

    def after(self, plan: EpochPlan, report: EpochReport) -> EpochReport:
        self.committed += 1
        self.epoch_seconds.observe(time.perf_counter() - self._started)
        self.commits.append((report.epoch, time.time()))
        for name, rows in report.rows_in.items():
            self.rows_in[name] += rows
            if name in report.changes:
                self.rows_out[name] += report.changes.rows(name)
        return report

    def committed_at(self, epoch: int) -> float | None:
        """When this process committed ``epoch`` (unix time), if it did and still remembers."""
        for e, at in reversed(self.commits):
            if e == epoch:
                return at
            if e < epoch:
                return None
        return None

    def statement(self, seconds: float, *, failed: bool) -> None:
        self.statement_seconds.observe(seconds)
        self.statement_errors += failed

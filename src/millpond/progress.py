"""A progress display for long work (a FLUSH that backfills a view over a big table, a long run
of epochs), in a terminal or a notebook.

    >>> db.flush(progress=True)                      # doctest: +SKIP
    ⠙ FLUSH: 3 epochs committed, epoch 5 running  ━━━━━━━━╺━━━━━━━  24/40 tasks  0:00:12

What it shows comes from three places, polled a few times a second by a thread (so the epoch
loop is not slowed): the committed epoch of the coordinator's manifest, the running Spark stages'
task counts (the session's status tracker), and the jobs under way as ``SHOW JOBS`` lists them
(a backfill's relation and records). An epoch is one Spark job; a backfill is usually one
big epoch, so the task bar is what moves. The display starts only once the work has taken half a
second, and goes away when it ends (it is written to stderr: results on stdout stay clean).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable

__all__ = ["FlushProgress", "running_tasks", "shown", "describe_jobs"]

DELAY_SECONDS = 0.5
POLL_SECONDS = 0.25


def shown(show: bool, committed: Callable[[], int], spark: Callable[[], Any],
          jobs: Callable[[], list[dict]] = list) -> AbstractContextManager:
    """A :class:`FlushProgress` when ``show`` (``spark()`` gives the session; ``jobs()``: the jobs
    under way, as ``SHOW JOBS`` has them), else nothing."""
    return FlushProgress(committed, spark(), jobs=jobs) if show else nullcontext()


class FlushProgress:
    """A context manager around epochs run on ``spark``; ``committed()`` is the last committed epoch."""

    def __init__(self, committed: Callable[[], int], spark: Any, *, label: str = "FLUSH",
                 jobs: Callable[[], list[dict]] = list):
        self.committed, self.spark, self.label, self.jobs = committed, spark, label, jobs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress: Any = None

    def __enter__(self) -> "FlushProgress":
        self._first = self.committed()
        self._thread = threading.Thread(target=self._run, name="millpond-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        if self._stop.wait(DELAY_SECONDS):
            return  # quick work shows nothing
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        task = progress.add_task(self.label, total=None)
        with progress:
            while True:
                done, total = self._tasks()
                committed = self.committed() - self._first
                text = (f"{self.label}: {committed} epoch{'s' * (committed != 1)} committed, "
                        f"epoch {self.committed() + 1} running{describe_jobs(self.jobs())}")
                progress.update(task, description=text, completed=done, total=total or None)
                if self._stop.wait(POLL_SECONDS):
                    break

    def _tasks(self) -> tuple[int, int]:
        return running_tasks(self.spark)


def describe_jobs(jobs: list[dict]) -> str:
    """The jobs under way as the display says them (``SHOW JOBS``' numbers): ``; backfill v (600
    records, 40%)``."""
    def numbers(j: dict) -> str:
        said = [*([f"{j['records']:,} records"] if j.get("records") else []),
                *([f"{j['progress']:.0%}"] if j.get("progress") is not None else [])]
        return f" ({', '.join(said)})" if said else ""
    return "".join(f"; {j['kind']} {j['relation']}{numbers(j)}" for j in jobs)


def running_tasks(spark: Any) -> tuple[int, int]:
    """Completed and total tasks of ``spark``'s stages running now (0, 0 between jobs)."""
    try:
        tracker = spark.sparkContext.statusTracker()
        infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    except Exception:  # noqa: BLE001 - the session is stopping, or busy elsewhere: no tasks known
        return 0, 0
    infos = [i for i in infos if i is not None]
    return sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos)

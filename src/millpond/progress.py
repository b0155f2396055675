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
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Callable, Iterator

__all__ = ["FlushProgress", "Work", "current", "group_tasks", "grouped", "running_tasks", "shown", "describe_jobs",
           "working"]

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
    """The jobs under way as the display says them (``SHOW JOBS``' numbers): ``; backfill v (600 records)``."""
    return "".join(f"; {j['kind']} {j['relation']}" + (f" ({j['records']:,} records)" if j.get("records") else "")
                   for j in jobs)


def running_tasks(spark: Any) -> tuple[int, int]:
    """Completed and total tasks of ``spark``'s stages running now (0, 0 between jobs)."""
    try:
        tracker = spark.sparkContext.statusTracker()
        infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    except Exception:  # noqa: BLE001 - the session is stopping, or busy elsewhere: no tasks known
        return 0, 0
    infos = [i for i in infos if i is not None]
    return sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos)


@contextmanager
def grouped(spark: Any, group: str, description: str) -> Iterator[None]:
    """The Spark jobs this thread starts in the block belong to job group ``group`` (whose tasks
    :func:`group_tasks` counts), described as ``description``; none after it."""
    sc = spark.sparkContext
    sc.setJobGroup(group, description)
    try:
        yield
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setJobDescription(None)


def group_tasks(spark: Any, group: str) -> tuple[int, int]:
    """Completed and total tasks of the stages of job group ``group``'s jobs (those ended too)."""
    try:
        tracker = spark.sparkContext.statusTracker()
        stages = [s for j in tracker.getJobIdsForGroup(group) if (info := tracker.getJobInfo(j)) is not None
                  for s in info.stageIds]
        infos = [i for s in stages if (i := tracker.getStageInfo(s)) is not None]
    except Exception:  # noqa: BLE001 - the session is stopping: no tasks known
        return 0, 0
    return sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos)


class Work:
    """How far the work a thread is doing (a job: :meth:`millpond.engine.jobs.Jobs.track`) has got,
    as the work itself says: :func:`current` gives it to the code doing the work (a source's reader,
    a sink's target, a compaction runner), which needs no reference to the jobs. Outside any tracked work every call
    does nothing. A handle stays bound to its work: one taken before handing batches to another
    thread (delta-rs pulls a writer's batches from a thread of its own) still counts for it."""

    def __init__(self, lock: threading.Lock | None = None, row: dict | None = None):
        self._lock, self._row = lock, row

    def took(self, records: int) -> None:
        """``records`` more taken in (a source's read: its rows appended so far, and their rate)."""
        if self._row is not None and records:
            with self._lock:
                self._row["records"] = (self._row["records"] or 0) + records

    def to_do(self, units: int) -> None:
        """``units`` more to do, in units of the work's own (a folder's new files' bytes, a Delta
        snapshot's files, a first write's rows)."""
        self._add("to_do", units)

    def did(self, units: int) -> None:
        """``units`` of what :meth:`to_do` announced done."""
        self._add("done", units)

    def at(self, done: int, to_do: int) -> None:
        """``done`` of ``to_do`` (where the work learns its total as it goes: a Kafka catch-up's
        messages, against the partitions' ends the broker last told)."""
        if self._row is not None:
            with self._lock:
                self._row.update(done=max(0, done), to_do=max(0, to_do))

    def follow(self, tasks: Callable[[], tuple[int, int]]) -> None:
        """The work's progress is ``tasks()``' (done, total): the Spark tasks doing it (a compaction
        round or a source's read on a cluster), asked each time the jobs are shown."""
        if self._row is not None:
            with self._lock:
                self._row["follow"] = tasks

    def _add(self, key: str, units: int) -> None:
        if self._row is not None and units > 0:
            with self._lock:
                self._row[key] = self._row.get(key, 0) + units


_here = threading.local()  # .work: the Work of what this thread is doing


def current() -> Work:
    """The work this thread is doing (:func:`working`), or one that counts nothing."""
    return getattr(_here, "work", None) or Work()


@contextmanager
def working(work: Work) -> Iterator[None]:
    """In the block, this thread's :func:`current` work is ``work``."""
    outer, _here.work = getattr(_here, "work", None), work
    try:
        yield
    finally:
        _here.work = outer

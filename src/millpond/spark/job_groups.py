"""Spark job groups: work that runs as Spark jobs of its own (a compaction round, a source's read
on a cluster) counts its tasks by its group (its progress in ``SHOW JOBS``), apart from the epochs'
jobs running beside it."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["group_tasks", "grouped"]


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

"""How far a piece of long work has got, as the work itself says (``SHOW JOBS``' progress).

The runtime shows work as a job while it runs (:meth:`millpond.engine.jobs.Jobs.track`) and makes
its :class:`Work` this thread's; the code doing it — a source's reader, a sink's target, a
compaction runner, layers below the engine — takes it with :func:`current_work` and reports to it,
without a reference to the jobs. Outside tracked work, :func:`current_work` gives a Work that counts
nothing.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["Work", "current_work", "working"]


class Work:
    """How far the work a thread is doing (a job: :meth:`millpond.engine.jobs.Jobs.track`) has got,
    as the work itself says: :func:`current_work` gives it to the code doing the work (a source's reader,
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


def current_work() -> Work:
    """The work this thread is doing (:func:`working`), or one that counts nothing."""
    return getattr(_here, "work", None) or Work()


@contextmanager
def working(work: Work) -> Iterator[None]:
    """In the block, this thread's :func:`current_work` work is ``work``."""
    outer, _here.work = getattr(_here, "work", None), work
    try:
        yield
    finally:
        _here.work = outer

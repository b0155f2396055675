"""Long work under way, visible from every connection and every process on the root:
``millpond_jobs`` (``SHOW JOBS``).

A **job** is a view's (index's, flow's) backfill: the first epoch of a new relation, which reads its
tables from their start (a keyed table as its rows, counted as stored, plus its log after them) — kind ``backfill``, or ``alter`` for a view's new definition filling
beside the one in force (``ALTER MATERIALIZED VIEW v AS ...``). A view filling in bounded epochs
(:mod:`millpond.engine.filling`) shows in each of them, as one backfill: all of its input, its
start, and its progress over the parts read before the epoch and the epoch's tasks. While such an epoch runs, the writer keeps one row per relation it fills —
the records it reads, the Spark tasks of the epoch done and to do, the progress, the rate and the
time left at that rate — and publishes them under the root every :data:`PUBLISH_SECONDS`
(``jobs/running.json``), so a read-only process (``millpond sql --read-only``, another ``serve``)
shows the same rows. The file goes when the epoch commits or fails; a file not rewritten for
:data:`STALE_SECONDS` (its writer died) shows nothing. An epoch is one Spark job, so every
relation an epoch fills shows the epoch's tasks; on one machine a small backfill runs as one task
in the driver and shows no tasks until it is done.

``CANCEL JOB n`` stops the Spark jobs of epoch ``n`` and makes it commit nothing; the runtime then
drops what it was filling — a new view, index or flow, or an altered view's new definition (the
old one stays) — and runs the epoch again without them.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa

from millpond.catalog import replacement
from millpond.errors import CancelledError, MillpondError, MissingError
from millpond.store.objects import ObjectStore
from millpond.work import Work, working

if TYPE_CHECKING:
    from millpond.engine.epoch import EpochPlan

__all__ = ["JOBS_KEY", "Jobs", "SCHEMA", "published"]

JOBS_KEY = "jobs/running.json"
PUBLISH_SECONDS = 1.0
STALE_SECONDS = 15.0

SCHEMA = pa.schema([
    ("job", pa.int64()), ("kind", pa.string()), ("relation", pa.string()), ("records", pa.int64()),
    ("tasks_done", pa.int64()), ("tasks_total", pa.int64()), ("progress", pa.float64()),
    ("records_per_second", pa.float64()), ("eta_seconds", pa.float64()),
    ("started", pa.timestamp("us", tz="UTC")), ("seconds", pa.float64())])


class Jobs:
    """The writer's jobs: :meth:`watch` wraps an epoch's execution; ``tasks()`` gives the running
    Spark tasks (done, total), without starting Spark."""

    def __init__(self, store: ObjectStore, tasks: Callable[[], tuple[int, int]] = lambda: (0, 0)):
        self.store, self.tasks = store, tasks
        self.stop: Callable[[int], None] = lambda epoch: None  # stops the Spark jobs of an epoch (wiring's port)
        self._running: list[dict] = []  # the epoch's jobs: job, kind, relation, records, started
        self._cancelled: int | None = None  # the epoch whose jobs CANCEL JOB cancelled
        self._work: list[dict] = []  # other work shown as jobs while it runs (track)
        self._filling: dict[str, float] = {}  # a view filling in bounded epochs -> when its first epoch started
        self._active, self._stop, self._publisher = 0, threading.Event(), None  # the publisher while jobs run
        self._lock = threading.Lock()

    def cancel(self, job: int) -> list[dict]:
        """Cancel job ``job`` (an epoch's backfills, ``CANCEL JOB``): its Spark jobs are stopped and
        the epoch commits nothing (:meth:`check`); its rows."""
        with self._lock:
            running = [j for j in self._running if j["job"] == job]
            if not running:
                known = sorted({j["job"] for j in self._running})
                raise MillpondError(f"job {job} is not running ({'running: ' + ', '.join(map(str, known)) if known else 'no job is running'}; SHOW JOBS lists them)",
                                    sqlstate="42704")
            self._cancelled = job
        self.stop(job)
        return running

    def check(self, plan: EpochPlan) -> None:
        """Raise :class:`CancelledError` if the jobs of ``plan``'s epoch were cancelled (before its commit)."""
        with self._lock:
            if self._cancelled != plan.epoch:
                return
            self._cancelled, jobs = None, list(self._running)
        raise CancelledError(f"job {plan.epoch} was cancelled (CANCEL JOB): the backfills of "
                             f"{', '.join(j['relation'] for j in jobs)} stop, and epoch {plan.epoch} commits nothing",
                             jobs)

    def clear(self) -> None:
        """Forget what a writer that died published (the writer's, when it opens the root)."""
        try:
            self.store.delete(JOBS_KEY)
        except Exception:  # noqa: BLE001 - none there, or storage out of reach: the epochs will say
            pass

    @contextmanager
    def watch(self, plan: EpochPlan) -> Iterator[None]:
        manifest = plan.job.manifest
        offsets, by_key = manifest.offsets, {c.key: c for c in plan.consumers}
        renamed = {replacement(name): name for name in plan.catalog.replacing}  # ALTER's new definitions

        def stored(key: str) -> int:  # a keyed table a backfill reads as its rows (batch mode)
            return sum(ref.rows for ref in manifest.state(by_key[key].rows_state).files()) if key in by_key else 0
        running = []
        for c, ranges in plan.work:
            if (c.key in offsets and c.key not in plan.fills) or c.name in plan.catalog.tables:
                continue
            job = {"job": plan.epoch, "kind": "alter" if c.name in renamed else "backfill",
                   "relation": renamed.get(c.name, c.name), "consumer": c.name,
                   "records": sum(max(0, b - a) for a, b in ranges.values())
                   + sum(stored(k) for k in plan.job.batch.get(c.key, {}).values()), "started": time.time()}
            if (f := plan.fills.get(c.key)) is not None and f.total:  # in bounded epochs: all of its input,
                if not f.before:  # since its first epoch
                    self._filling[c.name] = job["started"]
                job.update(records=f.total, started=self._filling.setdefault(c.name, job["started"]),
                           share=(f.before / f.total, f.after_epoch / f.total))
            running.append(job)
        if not running:
            yield
            return
        with self._lock:
            self._running = running
        self._begin()
        try:
            yield
        finally:
            with self._lock:
                self._running = []
            self._end()

    @contextmanager
    def track(self, kind: str, relation: str, job: int, records: int | None = None) -> Iterator[None]:
        """Work outside an epoch's job shown as a job while it runs: a source's read before epoch
        ``job`` (kind ``source``), a sink's first write of its view's rows (``sink``), a round of
        state compaction after it (``compaction``: the rows its merges read)."""
        row = {"job": job, "kind": kind, "relation": relation, "records": records, "started": time.time()}
        with self._lock:
            self._work.append(row)
        with working(Work(self._lock, row)):
            self._begin()
            try:
                yield
            finally:
                with self._lock:
                    self._work.remove(row)
                self._end()

    def _begin(self) -> None:
        """A job started: the publisher runs while any does."""
        with self._lock:
            self._active += 1
            if self._active > 1:
                return
            self._stop = stop = threading.Event()
            self._publisher = threading.Thread(target=self._publish, args=(stop,), name="millpond-jobs", daemon=True)
        self._publisher.start()

    def _end(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active:
                return
            stop, publisher = self._stop, self._publisher
        stop.set()
        publisher.join()

    def rows(self) -> list[dict]:
        """The jobs now, with their progress (an epoch's by its Spark tasks; other work's unknown)."""
        with self._lock:  # copies: the work goes on updating its rows
            running, work = [dict(j) for j in self._running], [dict(j) for j in self._work]
        if not running and not work:
            return []
        done, total = self.tasks() if running else (0, 0)
        now = time.time()
        return [*(_progress(j, done, total, now) for j in running), *(_progress(j, 0, 0, now) for j in work)]

    def table(self) -> pa.Table:
        return _table(self.rows())

    def _publish(self, stop: threading.Event) -> None:
        """Publish the jobs every :data:`PUBLISH_SECONDS` from the first on (shorter work never is),
        and delete them once none runs."""
        published = False
        while not stop.wait(PUBLISH_SECONDS):
            try:
                self.store.put(JOBS_KEY, json.dumps({"updated": time.time(), "jobs": self.rows()}).encode())
                published = True
            except Exception:  # noqa: BLE001 - publishing is best effort: the work goes on
                pass
        if published:
            try:
                self.store.delete(JOBS_KEY)
            except Exception:  # noqa: BLE001 - the next writer deletes it; a reader ignores it when stale
                pass


def published(store: ObjectStore) -> pa.Table:
    """``millpond_jobs`` as the writer last published it (a read-only process's view)."""
    try:
        body = json.loads(store.get(JOBS_KEY))
    except (MissingError, ValueError):
        return _table([])
    if time.time() - body.get("updated", 0) > STALE_SECONDS:
        return _table([])
    return _table(body["jobs"])


def _progress(job: dict, done: int, total: int, now: float) -> dict:
    seconds = now - job["started"]
    fraction = done / total if total else None
    if (follow := job.pop("follow", None)) is not None:  # (rows() gives it copies)
        try:
            done, total = follow()
        except Exception:  # noqa: BLE001 - the session is stopping: nothing known
            done, total = 0, 0
        fraction = done / total if total else None
    if job.get("to_do"):  # work that said how much it has to do and did (Work.to_do, Work.did, Work.at)
        fraction = min(1.0, job.get("done", 0) / job["to_do"])
        job = {k: v for k, v in job.items() if k not in ("to_do", "done")}
    if "share" in job:  # a backfill in bounded epochs: its input read before this epoch, and after it
        (a, b), job = job["share"], {k: v for k, v in job.items() if k != "share"}
        fraction = a + (b - a) * (fraction or 0)
    if job["kind"] == "source":  # its records: the rows taken in so far
        rate = job["records"] / seconds if job["records"] and seconds > 0 else None
    else:  # its records: its input, done by the fraction
        rate = fraction * job["records"] / seconds if fraction and job["records"] and seconds > 0 else None
    eta = seconds * (1 - fraction) / fraction if fraction else None
    return {**job, "tasks_done": done, "tasks_total": total, "progress": fraction, "records_per_second": rate,
            "eta_seconds": eta, "seconds": seconds}


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{**r, "started": datetime.fromtimestamp(r["started"], timezone.utc)} for r in rows],
                                schema=SCHEMA)

"""How an open root is put together for :class:`millpond.api.Database`: the store, the catalog's
checked plans, the log and its writer, the coordinator with Spark as its epoch executor and
compaction runner, and the Spark session leased for it. Entry points wire :mod:`millpond.spark`
in here; the engine below knows only its executor interface.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, TypeVar

import pyarrow as pa

from millpond.catalog import Catalog, CatalogStore
from millpond.connectors import Sources
from millpond.engine import ingest
from millpond.engine.coordinator import Coordinator
from millpond.engine.readonly import ReadOnlyRuntime
from millpond.engine.runtime import Runtime
from millpond.errors import FencedError, HeldError, MillpondError, ReadOnlyError, unexpected
from millpond.log import Log
from millpond.progress import running_tasks
from millpond.spark.session import LOG_LEVELS, Lease, local_parallelism
from millpond.sql.plans import bind_plans
from millpond.store.compactor import CompactionProcess
from millpond.store.objects import ObjectStore

__all__ = ["SparkLease", "Guard", "open_runtime", "read_only", "follow", "check_root", "seconds", "configure_logging"]

T = TypeVar("T")


def check_root(root: Any) -> str:
    if isinstance(root, os.PathLike):
        root = os.fspath(root)
    if not isinstance(root, str) or not root.strip():
        raise MillpondError(f"root {root!r}: name the database's folder, file://... or s3://bucket/prefix "
                            "(an empty root would be the current folder)")
    return root


def seconds(interval: str | float | None) -> float | None:
    """An epoch interval ("1s", "250ms", "2m", "1h" or a number of seconds) in seconds."""
    if interval is None or isinstance(interval, (int, float)):
        return None if interval is None else float(interval)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", interval)
    if not m:
        raise MillpondError(f"interval {interval!r}: use e.g. '1s', '250ms', '2m', '1h' or a number of seconds")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m.group(2)]


class SparkLease:
    """The Spark session a database runs on, leased at first use (:func:`millpond.spark.session.lease`):
    the one given, else the one running, else an embedded one that only its release stops."""

    def __init__(self, given: Any, *, ship: bool, log_level: str | None):
        self.given, self.ship, self.log_level = given, ship, log_level
        self.lease: Lease | None = None
        self._lock = threading.Lock()

    @property
    def spark(self):  # noqa: ANN201
        with self._lock:
            if self.lease is None:
                from millpond.spark import register
                from millpond.spark.session import lease

                taken = lease(self.given, log_level=self.log_level)
                try:
                    if not taken.owned:  # the user's session: can its workers run millpond?
                        from millpond.spark.workers import ensure_importable

                        ensure_importable(taken.spark, ship=self.ship)
                    register(taken.spark)
                except BaseException:
                    taken.release()
                    raise
                self.lease = taken
        return self.lease.spark

    def release(self) -> None:
        """Give the session back (stopped only if it was started for this lease and nothing else uses it)."""
        with self._lock:
            lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()


def open_runtime(root: str, storage_options: dict[str, str] | None, spark: SparkLease, *, read_only: bool,
                 plans: str, parallelism: int | None, compaction: str, lazy: bool) -> Runtime:
    """The runtime of ``root``: a read-only follower (no Spark, nothing written), or the writer's
    (:func:`_writer`). A root that cannot be opened leaves nothing of ours running."""
    if compaction not in ("local", "spark"):
        raise MillpondError(f"compaction={compaction!r}: use 'local' (a process of its own) or 'spark' "
                            "(a Spark job over the same root)")
    try:
        store = ObjectStore(root, storage_options, create=not read_only)  # a bad root fails before Spark starts
        if not read_only:
            store.check_writable()
        catalogs = CatalogStore(store)
        catalog = bind_plans(catalogs.load(), mode=plans)
        if read_only:  # no Spark: SELECTs are answered from the snapshots by DuckDB
            return ReadOnlyRuntime.open(store, catalog, sources=Sources.of)
        return _writer(root, store, catalogs, catalog, spark, parallelism=parallelism, compaction=compaction,
                       lazy=lazy)
    except BaseException as exc:
        spark.release()
        if isinstance(exc, Exception) and not isinstance(exc, MillpondError):
            raise unexpected(exc) from exc
        raise


def _writer(root: str, store: ObjectStore, catalogs: CatalogStore, catalog: Catalog, spark: SparkLease, *,
            parallelism: int | None, compaction: str, lazy: bool) -> Runtime:
    """The writer's runtime: 1. the engine, its executor made at first use; 2. the root's log
    writer (:func:`millpond.engine.ingest.serve`): another Database holding the root refuses
    this one here, before Spark starts; 3. Spark, unless ``lazy`` (then at first use)."""
    from millpond.spark import SparkExecutor, spark_runner

    log = Log(store)
    executor = _OnFirstUse(lambda: SparkExecutor(spark.spark))  # 1.
    runner = (lambda store, tasks: spark_runner(spark.spark)(store, tasks)) if compaction == "spark" \
        else CompactionProcess()
    coordinator = Coordinator(executor, store, log, parallelism=parallelism or local_parallelism(),
                              compaction=runner)
    def tasks():  # on a cluster, Spark tasks read sources' parts (connectors import no Spark)
        from millpond.spark.source_tasks import task_reads

        return task_reads(spark.spark, store)

    runtime = Runtime(catalogs, catalog, log, coordinator, lambda rt: Sources.of(rt, tasks))
    runtime.jobs.tasks = lambda: running_tasks(spark.lease.spark) if spark.lease is not None else (0, 0)

    def stop(epoch: int) -> None:  # CANCEL JOB: the epoch's Spark jobs (engine/jobs.py)
        from millpond.spark.executor import job_tag

        if spark.lease is not None:
            spark.lease.spark.sparkContext.cancelJobsWithTag(job_tag(store.root, epoch))
    runtime.jobs.stop = stop
    runtime.jobs.clear()
    try:
        try:
            ingest.serve(runtime)  # 2. the root's log writer while open: other writers go through it
        except HeldError as exc:
            raise HeldError(_held(root, exc.holder), holder=exc.holder) from None
        if not lazy:  # 3.
            session = spark.spark
            if parallelism is None:
                coordinator.parallelism = coordinator.default_parallelism = session.sparkContext.defaultParallelism
    except BaseException:
        runtime.close()
        raise
    return runtime


def read_only(runtime: Runtime, plans: str, run: Callable[[], T]) -> T:
    """A read on a read-only database: follow the writer (its newest catalog, its plans checked as
    ``plans`` says), then ``run`` over one committed state."""
    assert isinstance(runtime, ReadOnlyRuntime)

    def newest() -> Catalog | None:
        latest = runtime.catalogs.load()
        return None if latest.version == runtime.catalog.version else bind_plans(latest, mode=plans)

    runtime.follow(newest())
    return runtime.read(run, newest)


def follow(read: Callable[[Callable[[], Any]], Any], runtime: Runtime, name: str, last: int,
           timeout: float | None, poll: float) -> Iterator[pa.Table]:
    """The changelogs of ``name`` after epoch ``last``, one per committed epoch it changed in,
    waiting ``poll`` seconds between looks; it ends after ``timeout`` seconds with no new epoch
    (None: never). ``read`` runs each look (under the database's guard)."""
    waited = 0.0
    while True:
        upto = read(lambda: runtime.epoch)
        if upto > last:
            yield from read(lambda: list(runtime.changes(name, last, upto)))
            last, waited = upto, 0.0
        elif timeout is not None and waited >= timeout:
            return
        else:
            time.sleep(poll)
            waited += poll


class Guard:
    """A database's calls one at a time: ``with guard():`` serializes them (``lock=False``: a query
    that reads a pinned version takes none), refuses them once closed or fenced (also by a
    background epoch, ``loop``), and turns an unexpected exception into a MillpondError (chaining it)."""

    def __init__(self, root: str, runtime: Runtime, loop: Any, *, plans: str, read_only: bool):
        self.root, self.runtime, self.lock, self.loop = root, runtime, runtime.lock, loop
        self.plans, self.read_only = plans, read_only
        self.closed = False
        self.fenced: FencedError | None = None

    def read(self, run: Callable[[], T]) -> T:
        """``run`` under the guard; on a read-only database, after following the writer."""
        with self():
            return read_only(self.runtime, self.plans, run) if self.read_only else run()

    def writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"the database is open read-only: {what} is refused (open it with "
                                "millpond.connect(root) to write)")

    @contextmanager
    def __call__(self, *, lock: bool = True) -> Iterator[None]:
        if self.loop is not None and self.loop.fenced is not None:  # other background errors are retried
            self.fenced = self.loop.fenced
        if self.closed:
            raise MillpondError("the database is closed")
        if self.fenced is not None:
            raise FencedError(f"another writer took over {self.root!r} ({self.fenced}); reopen the root")
        with self.lock if lock else nullcontext():
            try:
                yield
            except FencedError as exc:
                self.fenced = exc
                raise
            except MillpondError:
                raise
            except Exception as exc:
                raise unexpected(exc) from exc


class _OnFirstUse:
    """An epoch executor made when it is first used (Spark starts then): every attribute is the
    made one's."""

    def __init__(self, make: Callable[[], Any]):
        self._make, self._made, self._lock = make, None, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        with self._lock:
            if self._made is None:
                self._made = self._make()
        return getattr(self._made, name)


def _held(root: str, holder: dict) -> str:
    """Why a second writer of ``root`` is refused, and what to do instead."""
    from millpond.log.writer import describe

    return (f"{root!r} is open for writing by another Database ({describe(holder)}): a root has one writer. "
            "Read it beside that one with millpond.connect(root, read_only=True) (millpond sql ROOT --read-only), "
            "or close that one first")


def configure_logging(level: str | None) -> None:
    """millpond's loggers print nothing unless asked (a NullHandler keeps Python's last-resort
    handler from printing warnings and tracebacks); with ``level`` they print to stderr from it."""
    logger = logging.getLogger("millpond")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    if level is None:
        return
    handler = next((h for h in logger.handlers if h.get_name() == "millpond-stderr"), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler.set_name("millpond-stderr")
        handler.setFormatter(logging.Formatter("millpond %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    handler.setLevel(LOG_LEVELS[level][1])

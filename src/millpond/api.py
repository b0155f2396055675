"""The Python API: ``millpond.connect(root)`` returns a :class:`Database`.

    >>> db = millpond.connect("./data")                           # doctest: +SKIP
    >>> db.sql("CREATE TABLE t (k VARCHAR PRIMARY KEY, v INT)")   # doctest: +SKIP
    >>> db.insert("t", pyarrow.table({"k": ["a"], "v": [1]}))     # doctest: +SKIP
    >>> db.flush(); db.sql("SELECT * FROM t")                      # doctest: +SKIP

An entry point: it wires the parts together (Spark as the epoch executor and compaction runner,
the store, the log, the catalog's checked plans) and serializes calls; the work is done by
:mod:`millpond.sql.session` (statements), :mod:`millpond.engine.ingest` (inserts) and
:class:`millpond.engine.runtime.Runtime` (epochs and snapshots).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterator

import pyarrow as pa

from millpond.catalog import Catalog, CatalogStore
from millpond.engine import ingest
from millpond.engine.background import EpochLoop
from millpond.engine.coordinator import Coordinator, EpochReport
from millpond.engine.runtime import Runtime
from millpond.errors import FencedError, MillpondError
from millpond.log import Log
from millpond.sql import session
from millpond.sql.plans import bind_plans
from millpond.store.objects import ObjectStore
from millpond.store.store import run_in_process

__all__ = ["connect", "Database"]


def connect(root: str, *, spark: Any = None, parallelism: int | None = None,
            interval: str | float | None = "1s", storage_options: dict[str, str] | None = None,
            compaction: str = "local", plans: str = "verify") -> "Database":
    """Open (or create) the database at ``root``: a folder, ``file://...`` or ``s3://bucket/prefix``.

    ``spark``: a SparkSession to run on (default: an embedded ``local[*]`` session).
    ``parallelism``: Spark partitions of stateful stages (default: the session's parallelism).
    ``interval``: run epochs in the background this often ("1s", "500ms", 2.0); None turns it off.
    ``storage_options``: object-store settings for remote roots (``endpoint``, ``access_key_id``,
    ``secret_access_key``, ``region``, ``allow_http``...); they are shipped to every Spark task.
    ``compaction``: where state compaction runs, in the background between epochs: ``"local"`` (a
    thread of this process) or ``"spark"`` (a Spark job over the same root: remote compaction).
    ``plans``: ``"verify"`` checks every view's stored plan against its SQL and refuses a view this
    version would plan differently; ``"stored"`` runs the stored plans as they are.
    """
    return Database(root, spark=spark, parallelism=parallelism, interval=interval,
                    storage_options=storage_options, compaction=compaction, plans=plans)


def _seconds(interval: str | float | None) -> float | None:
    if interval is None or isinstance(interval, (int, float)):
        return None if interval is None else float(interval)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", interval)
    if not m:
        raise ValueError(f"interval {interval!r}: use e.g. '1s', '250ms', '2m' or a number of seconds")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


class Database:
    def __init__(self, root: str, *, spark: Any = None, parallelism: int | None = None,
                 interval: str | float | None = "1s", storage_options: dict[str, str] | None = None,
                 compaction: str = "local", plans: str = "verify"):
        from millpond.spark import SparkExecutor, local_session, register, spark_runner

        if compaction not in ("local", "spark"):
            raise MillpondError(f"compaction={compaction!r}: use 'local' (a background thread) or 'spark' "
                                "(a Spark job over the same root)")
        period = _seconds(interval)
        self.root = root
        self._own_spark = spark is None
        self.spark = spark or local_session()
        register(self.spark)
        try:
            store = ObjectStore(root, storage_options)
            catalogs = CatalogStore(store)
            catalog = bind_plans(catalogs.load(), mode=plans)
            log = Log(store)
            coordinator = Coordinator(SparkExecutor(self.spark), store, log,
                                      parallelism=parallelism or self.spark.sparkContext.defaultParallelism,
                                      compaction=spark_runner(self.spark) if compaction == "spark" else run_in_process)
            self.runtime = Runtime(catalogs, catalog, log, coordinator)
        except BaseException:
            if self._own_spark:  # a root that cannot be opened leaves nothing of ours running
                self.spark.stop()
            raise
        self._closed = False
        self._fenced: FencedError | None = None
        self._loop = EpochLoop(self.runtime.run_epoch, period, self.runtime.lock) if period else None

    # -- public API ---------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The last committed epoch."""
        return self.runtime.coordinator.manifest.epoch

    @property
    def parallelism(self) -> int:
        return self.runtime.coordinator.parallelism

    @property
    def catalog(self) -> Catalog:
        """The tables and views in force."""
        return self.runtime.catalog

    def sql(self, text: str) -> pa.Table | None:
        """Run one or more statements; return the result of the last query (None for DDL/DML)."""
        with self._guard():
            return session.run(self.runtime, text)

    def insert(self, table: str, data: Any) -> None:
        """Append rows (pyarrow Table/RecordBatch, pandas or Spark DataFrame, dict of columns)."""
        with self._guard():
            t = self.runtime.catalog.table(table)
            ingest.insert(self.runtime, t, ingest.conform_rows(t, ingest.to_arrow(data)))

    def flush(self) -> list[EpochReport]:
        """Run epochs until every view reflects all input appended so far; return their reports."""
        with self._guard():
            return self.runtime.flush()

    def read(self, name: str) -> pa.Table:
        """The committed snapshot of a table or view as Arrow."""
        with self._guard():
            return self.runtime.snapshot(name)

    def table(self, name: str):  # noqa: ANN201
        """A Spark DataFrame over the committed snapshot of a table or view."""
        return self.spark.createDataFrame(self.read(name))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loop is not None:
            self._loop.close()
        self.runtime.close()
        if self._own_spark:
            self.spark.stop()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialize API calls; refuse them once closed, fenced, or after a background failure."""
        error = self._loop.error if self._loop is not None else None
        if error is not None:
            raise MillpondError(f"a background epoch failed: {error}") from error
        if self._closed:
            raise MillpondError("the database is closed")
        if self._fenced is not None:
            raise FencedError(f"another writer took over {self.root!r} ({self._fenced}); reopen the root")
        with self.runtime.lock:
            try:
                yield
            except FencedError as exc:
                self._fenced = exc
                raise

"""The Python API: ``millpond.connect(root)`` returns a :class:`Database`.

    >>> db = millpond.connect("./data")                           # doctest: +SKIP
    >>> db.sql("CREATE TABLE t (k VARCHAR PRIMARY KEY, v INT)")   # doctest: +SKIP
    >>> db.insert("t", pyarrow.table({"k": ["a"], "v": [1]}))     # doctest: +SKIP
    >>> db.flush(); db.sql("SELECT * FROM t")                      # doctest: +SKIP
    >>> reader = millpond.connect("./data", read_only=True)      # doctest: +SKIP

An entry point: :mod:`millpond.wiring` puts an open root together and serializes calls; the work is
done by :mod:`millpond.sql.session` (statements), :mod:`millpond.engine.ingest` (inserts) and
:class:`millpond.engine.runtime.Runtime` (epochs and snapshots).

A guest in the user's process: it stops only a Spark session it started
(:func:`millpond.spark.session.lease`), is quiet unless asked (``log_level``), and raises only
:class:`~millpond.errors.MillpondError` s (an unexpected Python or Spark exception is chained as
the cause of one).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, TypeVar

import pyarrow as pa

from millpond import pyfunctions, wiring
from millpond.catalog import Catalog
from millpond.engine import ingest
from millpond.engine.background import EpochLoop
from millpond.engine.epoch import EpochReport
from millpond.engine.runtime import Runtime
from millpond.progress import shown
from millpond.spark.session import active_session, log_level_from
from millpond.sql import session

__all__ = ["connect", "Database"]

T = TypeVar("T")

def connect(root: str, *, spark: Any = None, parallelism: int | None = None,
            interval: str | float | None = "1s", storage_options: dict[str, str] | None = None,
            compaction: str = "local", plans: str = "verify", read_only: bool = False,
            log_level: str | None = None, ship: bool = False) -> "Database":
    """Open (or create) the database at ``root``: a folder, ``file://...`` or ``s3://bucket/prefix``.

    ``spark``: a SparkSession to run on (default: the session already running in this process, else
    an embedded ``local[*]`` session). ``close()`` stops only a session millpond started.
    ``parallelism``: Spark partitions of stateful stages (default: the session's parallelism).
    ``interval``: run epochs in the background this often ("1s", "500ms", 2.0); None turns it off.
    ``storage_options``: object-store settings for remote roots (``endpoint``, ``access_key_id``,
    ``secret_access_key``, ``region``, ``allow_http``...); they are shipped to every Spark task.
    ``compaction``: where state compaction runs, in the background between epochs: ``"local"`` (a
    child process of this one) or ``"spark"`` (a Spark job over the same root: remote compaction).
    ``plans``: ``"verify"`` checks every view's stored plan against its SQL and refuses a view this
    version would plan differently; ``"stored"`` runs the stored plans as they are.
    ``read_only``: follow a root another process (or Database) writes: queries answer from its
    last committed epoch; no epochs, no writer lock, nothing written; writes raise
    :class:`~millpond.errors.ReadOnlyError`. Spark starts only if :attr:`Database.spark` is used.
    ``log_level``: ``"ERROR"`` (the default: Spark's banner, WARN lines and Java stack traces are
    not shown), ``"OFF"``, ``"WARN"``, ``"INFO"`` or ``"DEBUG"``; default ``$MILLPOND_LOG_LEVEL``.
    Applies to a session millpond starts and to millpond's loggers; a session the user passed in
    (or that was running already) keeps its level unless this is set.
    ``ship``: add millpond itself to the session's Python workers (``addPyFile``: a cluster needs no
    install of millpond, only of its dependencies). With a session the user brings, millpond first
    checks that its workers can run millpond's tasks (:mod:`millpond.spark.workers`): a local
    session whose workers' Python nobody chose runs them with this process's Python; otherwise what
    they lack is refused, with the fixes. Another Database holding ``root`` for writing (another
    process's, ``millpond serve``) is refused with a :class:`~millpond.errors.HeldError` naming it.
    """
    return Database(root, spark=spark, parallelism=parallelism, interval=interval,
                    storage_options=storage_options, compaction=compaction, plans=plans, read_only=read_only,
                    log_level=log_level, ship=ship)


class Database:
    def __init__(self, root: str, *, spark: Any = None, parallelism: int | None = None,
                 interval: str | float | None = "1s", storage_options: dict[str, str] | None = None,
                 compaction: str = "local", plans: str = "verify", read_only: bool = False,
                 log_level: str | None = None, ship: bool = False, lazy_spark: bool = False):
        """See :func:`connect`; ``lazy_spark`` (``millpond sql``'s): when no session is given or
        running, start the embedded one at the first statement that needs it (an epoch, the
        analysis of a new view), not now: queries, ``SHOW``, ``DESCRIBE``, ``CREATE TABLE`` and
        ``INSERT`` run without it."""
        root = wiring.check_root(root)
        period = None if read_only else wiring.seconds(interval)
        self.log_level = log_level_from(log_level)
        wiring.configure_logging(self.log_level)
        self.root, self.read_only, self.plans, self.storage_options = root, read_only, plans, storage_options
        self._spark = wiring.SparkLease(spark, ship=ship, log_level=self.log_level)
        self.runtime: Runtime = wiring.open_runtime(
            root, storage_options, self._spark, read_only=read_only, plans=plans, parallelism=parallelism,
            compaction=compaction, lazy=lazy_spark and spark is None and active_session() is None)
        self._loop = EpochLoop(self.runtime.run_epoch, period, self.runtime.lock, due=self.runtime.due) if period \
            else None
        self._guard = wiring.Guard(root, self.runtime, self._loop, plans=plans, read_only=read_only)
        self._pgwire = None  # the PostgreSQL-protocol server, once serve() started it (its connections: metrics)

    # -- public API ---------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The last committed epoch (read-only: the newest the writer committed)."""
        if self.read_only and not self._guard.closed:
            with self._guard():
                self.runtime.coordinator.state.follow()
        return self.runtime.epoch

    @property
    def parallelism(self) -> int:
        return self.runtime.parallelism

    @property
    def catalog(self) -> Catalog:
        """The tables and views in force."""
        return self.runtime.catalog

    @property
    def spark(self):  # noqa: ANN201
        """The SparkSession this database runs on (a read-only database starts one only now)."""
        return self._spark.spark

    def sql(self, text: str, *, progress: bool = False) -> pa.Table | None:
        """Run one or more statements; return the result of the last query (None for DDL/DML).

        A script runs statement by statement: if one fails, the ones before it stay applied and the
        error says so (``statement 3 of 4 failed (statements 1-2 were applied): ...``; its
        ``statement`` attribute is the number). A syntax error anywhere runs nothing. ``progress``
        shows a progress display while a ``FLUSH`` runs (:mod:`millpond.progress`)."""
        started, failed = time.perf_counter(), True
        try:
            if not self.read_only and (query := session.lock_free(self.runtime, text)) is not None:
                with self._guard(lock=False), self.runtime.reading():  # a pinned version: epochs go on
                    out = session.execute(self.runtime, query)
            elif not self.read_only and (cancel := session.cancel_statement(text)) is not None:
                with self._guard(lock=False):  # the epoch it cancels holds the lock
                    out = session.execute(self.runtime, cancel)
            elif self.read_only:
                out = self._guard.read(lambda: session.run(self.runtime, text))
            else:
                with self._guard(), shown(progress, lambda: self.runtime.epoch, lambda: self.spark,
                                          self.runtime.jobs.rows):
                    out = session.run(self.runtime, text)
            failed = False
            return out
        finally:
            if (tally := getattr(self.runtime, "tally", None)) is not None:
                tally.statement(time.perf_counter() - started, failed=failed)

    def create_function(self, fn: Callable, *, params: list[str] | None = None, returns: str | None = None,
                        name: str | None = None, strict: bool = True, replace: bool = False) -> str:
        """Make Python function ``fn`` a SQL function (``CREATE FUNCTION ... LANGUAGE python``), usable
        in views, flows and queries; returns the statement run. Its SQL types are ``params`` and
        ``returns``, or read from its annotations (``int`` BIGINT, ``float`` DOUBLE, ``str``
        VARCHAR, ``bool``, ``date``, ``datetime`` TIMESTAMP, ``Decimal``). Its source is stored and
        runs alone (import what it uses inside it); a view keeps the source it was created with.
        ``strict``: NULL in, NULL out (False: it is called with None)."""
        text = pyfunctions.statement(fn, params, returns, name, strict, replace)
        self.sql(text)
        return text

    def insert(self, table: str, data: Any) -> None:
        """Append rows (pyarrow Table/RecordBatch, pandas or Spark DataFrame, dict of columns)."""
        with self._guard():
            self._guard.writable("insert()")
            t = self.runtime.catalog.writable(table)
            ingest.insert(self.runtime, t, ingest.conform_rows(t, ingest.to_arrow(data)))

    def flush(self, *, progress: bool = False) -> list[EpochReport]:
        """Run epochs until every view reflects all input appended so far; return their reports.
        ``progress`` shows the epochs committed and the running Spark tasks meanwhile (a terminal
        line, or a notebook widget). When a files table's source has errors (files refused, a
        folder that cannot be listed), each report's ``source_errors`` names them and flush() says
        so with a :class:`~millpond.errors.MillpondNotice` warning (and the log), even when no
        epoch ran; ``SELECT * FROM millpond_source_errors`` lists them."""
        with self._guard():
            self._guard.writable("flush()")
            with shown(progress, lambda: self.runtime.epoch, lambda: self.spark, self.runtime.jobs.rows):
                return self.runtime.flush(notice=True)

    def read(self, name: str, *, epoch: int | None = None) -> pa.Table:
        """The committed snapshot of a table or view as Arrow; ``epoch``: as of that committed
        epoch (time travel, within the root's retention)."""
        if epoch is None:
            return self._guard.read(lambda: self.runtime.snapshot(name))
        return self._guard.read(lambda: self.runtime.rows_at(name, epoch))

    def subscribe(self, name: str, from_epoch: int | None = None, *, snapshot: bool | None = None,
                  timeout: float | None = None, poll: float = 0.05) -> Iterator[pa.Table]:
        """Follow a table's, view's or flow's changes: one changelog (its columns, ``_w`` = +1/-1
        and ``_epoch``) per committed epoch it changed in, in epoch order, blocking for new ones.

        ``from_epoch=None`` starts with the rows now (a first changelog of inserts, ``snapshot``)
        and then follows; ``from_epoch=e`` yields the changes of the epochs after ``e`` (add
        ``snapshot=True`` to get the rows as of ``e`` first) — a consumer that stores the last
        ``_epoch`` it processed resumes exactly where it stopped. Changes are kept for the root's
        retention (``SET retention``); older ones raise :class:`~millpond.errors.RetentionError`
        naming the oldest epoch kept. The iteration ends when ``timeout`` seconds pass with no new
        epoch for it (None: it never ends). Works on a read-only database too, in another process.
        A flow is followed from an epoch only: its rows are its sink table's."""
        snapshot = from_epoch is None if snapshot is None else snapshot
        last, first = self._guard.read(lambda: self.runtime.subscription(name, from_epoch, snapshot))
        if first is not None:
            yield first
        yield from wiring.follow(self._guard.read, self.runtime, name, last, timeout, poll)

    def serve(self, *, host: str = "127.0.0.1", port: int = 5433, password: str | None = None,
              password_file: str | None = None, auth: str = "scram-sha-256", tls_cert: str | None = None,
              tls_key: str | None = None, max_connections: int = 100, idle_timeout: float | None = None,
              readers: int = 0, python_functions: bool = False):  # noqa: ANN201
        """Serve this database over the PostgreSQL wire protocol (``psql -h host -p port``) from
        background threads; returns the server (``.port``, ``.close()``).

        Who may connect: anyone on localhost without a password, unless ``password`` (one password,
        any user name) or ``password_file`` (``user:password[:read-only]`` per line) is given;
        another host needs one of them. ``auth``: ``scram-sha-256`` (the password never crosses
        the wire) or ``cleartext``. ``tls_cert``/``tls_key``: TLS, then required of every
        connection (psql ``sslmode=require``). ``max_connections``: more are refused (53300);
        ``idle_timeout``: seconds a connection may wait between statements.
        ``readers``: processes that open the root read-only and answer queries in parallel with
        this one (:mod:`millpond.readers`; 0: every statement runs in this process).
        ``python_functions``: clients may ``CREATE FUNCTION ... LANGUAGE python`` (their code runs in
        this process and its Spark workers; off by default)."""
        from millpond.pgwire import serve

        self._pgwire = serve(self, host=host, port=port, password=password, password_file=password_file, auth=auth,
                             tls_cert=tls_cert, tls_key=tls_key, max_connections=max_connections,
                             idle_timeout=idle_timeout, readers=readers, python_functions=python_functions)
        return self._pgwire

    def metrics(self) -> str:
        """This database's series in Prometheus' text format (:mod:`millpond.metrics`)."""
        from millpond.metrics import text

        with self._guard(lock=False):
            return text(self)

    def serve_metrics(self, *, host: str = "127.0.0.1", port: int = 9464):  # noqa: ANN201
        """Serve :meth:`metrics` over HTTP at ``http://host:port/metrics`` for Prometheus, from a
        background thread; returns the server (``.port``, ``.close()``); ``port=0`` picks a free one."""
        from millpond.metrics import serve_metrics

        return serve_metrics(self, host, port)

    def serve_dashboard(self, *, host: str = "127.0.0.1", port: int = 8080, password: str | None = None,
                        password_file: str | None = None):  # noqa: ANN201
        """Serve the dashboard (:mod:`millpond.dashboard`) at ``http://host:port/`` from a background
        thread; returns the server (``.url``, ``.port``, ``.close()``); ``port=0`` picks a free one.
        ``password``/``password_file``: HTTP Basic authentication as for :meth:`serve` (default: the
        users of the wire server this database serves, if any; else none, as on localhost)."""
        from millpond.dashboard import serve_dashboard
        from millpond.serve.auth import Access

        access = Access.of(password=password, password_file=password_file) if password or password_file else \
            getattr(getattr(self, "_pgwire", None), "access", None)
        return serve_dashboard(self, host, port, access)

    def observe(self, look: Callable[[Any], T]) -> T:
        """``look(runtime)`` for monitoring, without waiting for an epoch under way (a read-only
        database follows its writer first)."""
        if self.read_only:
            return self._guard.read(lambda: look(self.runtime))
        with self._guard(lock=False):
            return look(self.runtime)

    def table(self, name: str):  # noqa: ANN201
        """A Spark DataFrame over the committed snapshot of a table or view."""
        rows = self.read(name)
        with self._guard():
            return self.spark.createDataFrame(rows)

    def close(self) -> None:
        """Stop the background epochs and release the root; stop the Spark session only if millpond
        started it and no other database of this process uses it."""
        if self._guard.closed:
            return
        self._guard.closed = True
        try:
            if self._loop is not None:
                self._loop.close()
            self.runtime.close()
        finally:
            self._spark.release()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._guard.closed else f"epoch {self.runtime.epoch}"
        return f"<millpond.Database {self.root!r} {state}{' read-only' if self.read_only else ''}>"

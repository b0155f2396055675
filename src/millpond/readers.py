"""Reader processes: a wire server's queries answered in parallel, past one process's GIL.

``millpond serve --readers N`` / ``db.serve(readers=N)`` start N processes (``python -m
millpond.readers``), each of which opens the root read-only (:mod:`millpond.engine.readonly`: no
Spark, no lock, nothing written) and answers plain queries over tables and views — what the
server's own process would answer without the database's lock (:func:`millpond.sql.session.lock_free`)
— from the newest committed epoch, so a client sees its own writes once they are committed
(``FLUSH``) wherever its query runs. The writer's process runs everything else: writes, DDL,
``SHOW``, ``AS OF``, system and partial views, clients' catalog queries; and any query while every
reader is busy, starting, or gone (a reader that dies is replaced). An error a reader raises reaches
the client as the writer's would (its SQLSTATE).

The protocol between the two is :class:`multiprocessing.connection.Connection` over a socket pair:
the server sends ``(root, storage options, plans, log level)``, the reader answers ``("ready",)``
(or ``("failed", reason)``), then each query's text is answered ``("rows", table)``,
``("error", exception)`` or ``("declined", None)``; None ends the reader.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from millpond.api import Database

__all__ = ["Readers"]

log = logging.getLogger("millpond")

STOP_SECONDS = 5.0  # a reader asked to stop is killed after this


@dataclass
class _Reader:
    process: subprocess.Popen
    conn: Connection

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.conn.close()


class Readers:
    """``n`` reader processes of ``db``'s root; :meth:`answer` hands a query to an idle one."""

    def __init__(self, db: "Database", n: int):
        if n < 0:
            raise ValueError(f"readers={n}: a number of processes, 0 or more")
        self._config = (db.root, db.storage_options, db.plans, db.log_level)
        self._idle: queue.SimpleQueue[_Reader] = queue.SimpleQueue()
        self._all: list[_Reader] = []
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(n):
            self._start()

    def answer(self, sql: str) -> pa.Table | None:
        """The result of the query ``sql`` from an idle reader, or None: no reader is idle, or
        the reader declined it (it is not a plain query over tables and views) — the caller runs
        it. Raises the error the query raised."""
        try:
            reader = self._idle.get_nowait()
        except queue.Empty:
            return None
        try:
            reader.conn.send(sql)
            kind, payload = reader.conn.recv()
        except (EOFError, OSError) as exc:  # the reader died (killed, out of memory): replace it
            log.warning("millpond: a reader process ended (%s, exit code %s); starting another",
                        exc or type(exc).__name__, reader.process.poll())
            self._forget(reader)
            self._start()
            return None
        self._idle.put(reader)
        if kind == "error":
            raise payload
        return payload if kind == "rows" else None

    @property
    def ready(self) -> int:
        """How many readers are idle now."""
        return self._idle.qsize()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            readers, self._all = self._all, []
        for reader in readers:
            reader.stop()

    # -- processes --------------------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._closed:
                return
            ours, theirs = socket.socketpair()
            package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)}
            process = subprocess.Popen([sys.executable, "-m", "millpond.readers", str(theirs.fileno())],
                                       pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
            theirs.close()
            reader = _Reader(process, Connection(ours.detach()))
            self._all.append(reader)
        reader.conn.send(self._config)
        threading.Thread(target=self._await, args=(reader,), name="millpond-reader-start", daemon=True).start()

    def _await(self, reader: _Reader) -> None:
        """Make ``reader`` idle once it has opened the root."""
        try:
            message = reader.conn.recv()
        except (EOFError, OSError):
            message = ("failed", f"the process ended (exit code {reader.process.wait()})")
        if message[0] == "ready":
            self._idle.put(reader)
            return
        if self._closed:  # stopped while it started: nothing to report
            return
        log.warning("millpond: a reader process could not open the root: %s", message[1])
        self._forget(reader)

    def _forget(self, reader: _Reader) -> None:
        with self._lock:
            if reader in self._all:
                self._all.remove(reader)
        reader.process.kill()
        reader.process.wait()
        reader.conn.close()


# -- the reader's side ------------------------------------------------------------------------------
def _query(db: "Database", sql: str) -> pa.Table | None:
    """What the writer's process would answer without its lock, from the newest committed epoch;
    None: a statement of another kind (:func:`~millpond.sql.session.lock_free`)."""
    from millpond import wiring
    from millpond.pgcatalog import catalog_query
    from millpond.sql import session

    rt = db.runtime

    def answer() -> pa.Table | None:
        query = session.lock_free(rt, sql)
        return None if query is None or catalog_query(query) else session.execute(rt, query)
    with db._guard():  # noqa: SLF001
        return wiring.read_only(rt, db.plans, answer)


def _picklable(exc: BaseException) -> BaseException:
    from millpond.errors import MillpondError, unexpected

    error = exc if isinstance(exc, MillpondError) else unexpected(exc)
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001  an error with arguments of its own: its text, as the same class
        return MillpondError(str(error))


def main(fd: int) -> None:
    conn = Connection(fd)
    root, storage_options, plans, log_level = conn.recv()
    import millpond

    try:
        db = millpond.connect(root, read_only=True, storage_options=storage_options, plans=plans,
                              log_level=log_level)
    except Exception as exc:  # noqa: BLE001
        conn.send(("failed", str(exc)))
        return
    conn.send(("ready",))
    try:
        while (sql := conn.recv()) is not None:
            try:
                table = _query(db, sql)
                reply: tuple[str, Any] = ("rows", table) if table is not None else ("declined", None)
            except Exception as exc:  # noqa: BLE001
                reply = ("error", _picklable(exc))
            conn.send(reply)
    except (EOFError, OSError, KeyboardInterrupt):  # the server went away
        pass
    finally:
        db.close()


if __name__ == "__main__":
    main(int(sys.argv[1]))

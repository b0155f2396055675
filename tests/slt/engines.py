"""The engines a sqllogictest file runs on: millpond (the system under test) and PostgreSQL (the
oracle). Each answers a statement, a query (rows of PostgreSQL's text output) and a Nexmark load;
a failure is an :class:`EngineError` carrying the engine's message.

    >>> engine = Millpond(db)                                       # doctest: +SKIP
    >>> engine.query("SELECT 1 AS a, NULL AS b")                    # doctest: +SKIP
    Answer(rows=[['1', None]], columns=2)
"""

from __future__ import annotations

import itertools
import queue
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from millpond.nexmark import generate
from tests.slt.mirror import Mirror
from tests.slt.records import Load
from tests.slt.values import Row, arrow_rows, copy_decode, copy_encode

__all__ = ["Answer", "Engine", "EngineError", "Millpond", "Postgres", "PsqlSession", "NEXMARK_TABLES"]

NEXMARK_TABLES = ("person", "auction", "bid")


class EngineError(Exception):
    """A statement or query failed on an engine; ``str()`` is the engine's message."""


@dataclass(frozen=True)
class Answer:
    rows: list[Row]
    columns: int | None  # None when unknown (PostgreSQL's COPY of no rows)


class Engine(Protocol):
    name: str
    checks_messages: bool  # a ``statement error`` regex is matched against this engine's messages

    def statement(self, sql: str) -> bool:
        """Run ``sql``; False when the engine has no counterpart of it (nothing was run)."""

    def query(self, sql: str) -> Answer | None:
        """The rows of ``sql``; None when the engine has no counterpart of it."""

    def load(self, record: Load) -> None:
        """Insert the Nexmark events of ``record``."""

    def close(self) -> None: ...


def _events(record: Load) -> dict[str, Any]:
    return generate(record.first, record.count, seed=record.seed, events_per_second=record.rate)


class Millpond:
    """A fresh millpond ``Database`` (no background epochs: a view changes at ``FLUSH``)."""

    name = "millpond"
    checks_messages = True  # the files' error regexes are millpond's messages

    def __init__(self, db: Any) -> None:
        self.db = db

    def _sql(self, sql: str) -> Any:
        try:
            return self.db.sql(sql)
        except Exception as exc:  # every engine error is the record's answer, whatever its class
            raise EngineError(f"{type(exc).__name__}: {exc}") from exc

    def statement(self, sql: str) -> bool:
        self._sql(sql)
        return True

    def query(self, sql: str) -> Answer | None:
        table = self._sql(sql)
        if table is None:
            raise EngineError("the statement returned no rows (not a query)")
        return Answer(arrow_rows(table), table.num_columns)

    def load(self, record: Load) -> None:
        for name, table in _events(record).items():
            try:
                self.db.insert(name, table)
            except Exception as exc:
                raise EngineError(f"insert into {name}: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        self.db.close()


class PsqlSession:
    """One ``psql`` process fed a script at a time; each script's output and errors are read up to
    a marker it echoes on both streams (``\\echo``, ``\\warn``), so a session serves a whole file."""

    TIMEOUT = 300.0

    def __init__(self, argv: list[str]) -> None:
        self._marker = "--slt-done--"
        self._proc = subprocess.Popen([*argv, "-v", "ON_ERROR_STOP=0"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8")
        self._out: queue.Queue[str | None] = queue.Queue()
        self._err: queue.Queue[str | None] = queue.Queue()
        for stream, lines in ((self._proc.stdout, self._out), (self._proc.stderr, self._err)):
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True).start()
        self.run("\\set VERBOSITY terse\nSET client_min_messages = warning;")

    @staticmethod
    def _pump(stream: Any, lines: queue.Queue[str | None]) -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)  # the process ended

    def _until_marker(self, lines: queue.Queue[str | None]) -> list[str]:
        out = []
        while True:
            try:
                line = lines.get(timeout=self.TIMEOUT)
            except queue.Empty:
                raise EngineError(f"PostgreSQL did not answer within {self.TIMEOUT:.0f} s") from None
            if line is None:
                raise EngineError(f"psql exited ({self._proc.wait()})")
            if line == self._marker:
                return out
            out.append(line)

    def run(self, script: str) -> tuple[list[str], list[str]]:
        """Run ``script``; its output lines and its error messages (``ERROR:`` lines, prefix cut)."""
        self._proc.stdin.write(f"{script}\n\\echo {self._marker}\n\\warn {self._marker}\n")
        self._proc.stdin.flush()
        out, err = self._until_marker(self._out), self._until_marker(self._err)
        errors = [line.split("ERROR:", 1)[1].strip() for line in err if "ERROR:" in line]
        return out, errors

    def close(self) -> None:
        try:
            self._proc.stdin.close()
            self._proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()


_databases = itertools.count()


class Postgres:
    """A fresh database of a running server (``tests.pg``), fed the file's statements through
    :class:`~tests.slt.mirror.Mirror`; queries run as ``COPY (…) TO STDOUT`` (PostgreSQL's text
    of every value, NULL distinct from the empty string)."""

    name = "postgresql"
    checks_messages = False  # PostgreSQL need only fail where millpond does

    def __init__(self, server: Any) -> None:
        self._admin = PsqlSession(server.psql())
        self._database = f"slt_{next(_databases)}"
        self._exec(self._admin, f"CREATE DATABASE {self._database};")
        self._session = PsqlSession(server.psql(self._database))
        self._mirror = Mirror()

    @staticmethod
    def _exec(session: PsqlSession, script: str) -> list[str]:
        out, errors = session.run(script)
        if errors:
            raise EngineError("; ".join(errors))
        return out

    def statement(self, sql: str) -> bool:
        translated = self._mirror.translate(sql)
        if translated is None:
            return False
        self._exec(self._session, translated + "\n;")
        return True

    def query(self, sql: str) -> Answer | None:
        translated = self._mirror.translate(sql)
        if translated is None:
            return None
        lines = self._exec(self._session, f"COPY ({translated}\n) TO STDOUT;")
        rows = [copy_decode(line) for line in lines]
        return Answer(rows, len(rows[0]) if rows else None)

    def load(self, record: Load) -> None:
        for name, table in _events(record).items():
            if not table.num_rows:
                continue
            data = "\n".join(copy_encode(row) for row in arrow_rows(table))
            self._exec(self._session, f"COPY {name} FROM STDIN;\n{data}\n\\.")

    def close(self) -> None:
        self._session.close()
        try:
            self._exec(self._admin, f"DROP DATABASE {self._database};")
        finally:
            self._admin.close()

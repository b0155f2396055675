"""The PostgreSQL wire protocol: ``millpond serve ROOT`` / ``db.serve()`` let ``psql``, psycopg,
JDBC and BI tools run the same SQL as ``db.sql``.

An entry point (it drives a :class:`~millpond.api.Database`). The protocol's messages are
encoded and decoded by pygwire (a sans-I/O codec); this module is the server around it: one
thread per connection, startup and password authentication, the simple query protocol (a script
answers statement by statement) and the extended one (Parse/Bind/Describe/Execute/Sync, with
text parameters substituted as constants), errors with a SQLSTATE after which the connection
stays usable, and result columns typed and rendered as PostgreSQL does.

Every statement runs through ``db.sql``: a query reads one pinned committed version without the
database's lock (never a half-committed epoch, never waiting for one); writes take the lock. Catalog queries of clients (``information_schema``,
``pg_catalog``, ``version()``) are answered by DuckDB, whose PostgreSQL catalogs list the tables
and views (with their columns, no rows). ``BEGIN``/``COMMIT``/``ROLLBACK`` are accepted and do
nothing (each statement is atomic on its own); ``SUBSCRIBE`` returns what is kept so far.
"""

from __future__ import annotations

import logging
import re
import secrets
import socket
import socketserver
import ssl
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from pygwire.connection import BackendConnection
from pygwire.constants import TransactionStatus
from pygwire.messages import (AuthenticationCleartextPassword, AuthenticationOk, AuthenticationSASL,
                              AuthenticationSASLContinue, AuthenticationSASLFinal, BackendKeyData, Bind, BindComplete,
                              CancelRequest, Close, CloseComplete, CommandComplete, CopyData, CopyOutResponse, DataRow, Describe,
                              EmptyQueryResponse, ErrorResponse, Execute, Flush, GSSEncRequest,
                              GSSResponse, NoData, ParameterDescription, ParameterStatus, Parse, ParseComplete,
                              PasswordMessage, Query, ReadyForQuery, RowDescription, SASLInitialResponse,
                              SASLResponse, SSLRequest, SSLResponse, StartupMessage, Sync, Terminate)
from sqlglot import exp

from millpond.errors import MillpondError, MillpondNotice, ReadOnlyError
from millpond.readers import Readers
from millpond.pgcatalog import SERVER_VERSION, catalog_query, catalog_rows
from millpond.serve.auth import Access, Scram
from millpond.pgparams import bind as _bind, text_param as _text_param
from millpond.serve.pgbinary import rows
from millpond.serve.pgtext import copy_lines, fields
from millpond.sql.session import statements, verb
from millpond.sql.subscribe import clauses as subscribe_clauses

if TYPE_CHECKING:
    from millpond.api import Database

__all__ = ["Server", "serve"]

log = logging.getLogger("millpond")

_TRANSACTION = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"}
_QUERIES = {"SELECT", "WITH", "TABLE", "VALUES", "("}  # what a reader process may answer
_CATALOG_WORDS = re.compile(r"pg_|information_schema|version|current_|session_user|_description", re.I)


def serve(db: "Database", *, host: str = "127.0.0.1", port: int = 5433, password: str | None = None,
          password_file: str | None = None, auth: str = "scram-sha-256", tls_cert: str | None = None,
          tls_key: str | None = None, max_connections: int = 100, idle_timeout: float | None = None,
          readers: int = 0, python_functions: bool = False) -> "Server":
    """Start serving ``db`` in background threads (:meth:`millpond.api.Database.serve` says what
    each option means); ``port=0`` picks a free port (``server.port``). A host other than localhost
    is refused without a password."""
    access = Access.of(password=password, password_file=password_file, method=auth, tls_cert=tls_cert,
                       tls_key=tls_key, max_connections=max_connections, idle_timeout=idle_timeout)
    if host not in ("127.0.0.1", "localhost", "::1") and access.users is None:
        raise MillpondError(f"serving on {host!r} needs a password (password=... or password_file=...): only "
                            "localhost may go without")
    server = Server(db, host, port, access, readers)
    server.python_functions = python_functions
    server.start()
    return server


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, db: "Database", host: str, port: int, access: Access, readers: int = 0):
        self.db, self.access = db, access
        self.lock = threading.Lock()
        self.python_functions = False
        self.cancels: dict[tuple[int, bytes], threading.Event] = {}  # a connection's key -> cancel its statement
        super().__init__((host, port), _Handler)
        self._thread: threading.Thread | None = None
        self.readers = Readers(db, readers) if readers else None

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="millpond-pgwire", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        if self.readers is not None:
            self.readers.close()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Portal:
    sql: str
    result: "_Result | None" = None  # run by Describe, sent by Execute
    formats: list[int] = field(default_factory=list)  # the result columns' format codes, as Bind gave them

    def formats_of(self, result: "_Result | None") -> list[int] | None:
        """Each result column's format code (0 text, 1 binary): none given is all text, one is every column's."""
        n = 0 if result is None or result.table is None else result.table.num_columns
        if not self.formats or not any(self.formats):
            return None
        return list(self.formats) * n if len(self.formats) == 1 else list(self.formats)


@dataclass
class _Result:
    table: pa.Table | None  # None: a statement without rows
    tag: str


class _Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        self.conn = BackendConnection(strict=False)
        self.status = TransactionStatus.IDLE
        self.statements: dict[str, tuple[str, list[int]]] = {}
        self.portals: dict[str, _Portal] = {}
        self.failed = False  # an error in an extended-protocol run: skip until Sync
        self.authenticated = False
        self.key = (threading.get_ident() & 0x7FFFFFFF, secrets.token_bytes(4))
        self.cancel = self.server.cancels[self.key] = threading.Event()
        self.access, self.user, self.scram, self.read_only = self.server.access, "", None, False
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # replies are small: no Nagle delay
        with self.server.lock:
            self.access.active += 1
        try:
            while True:
                try:
                    data = self.request.recv(65536)
                except TimeoutError:  # idle longer than the idle timeout (set once authenticated)
                    self._fatal("57P05", "terminating connection due to idle-session timeout")
                    return
                if not data:
                    return
                for msg in self.conn.receive(data):
                    if not self._on(msg):
                        return
        except (ConnectionError, OSError):
            return
        except Exception:  # a protocol error: this connection ends, the server goes on
            log.exception("pgwire: connection from %s ended by an error", self.client_address)
        finally:
            self.server.cancels.pop(self.key, None)
            with self.server.lock:
                self.access.active -= 1

    def _fatal(self, code: str, message: str) -> bool:
        self._send(ErrorResponse(fields={"S": "FATAL", "V": "FATAL", "C": code, "M": message}))
        return False

    def _send(self, *msgs: object) -> None:
        self.request.sendall(b"".join(self.conn.send(m) for m in msgs))

    # -- one message ------------------------------------------------------------------------
    def _on(self, msg: object) -> bool:
        """Handle ``msg``; False ends the connection."""
        if isinstance(msg, SSLRequest):
            self._send(SSLResponse(accepted=self.access.tls is not None))
            if self.access.tls is not None:
                self.request = self.access.tls.wrap_socket(self.request, server_side=True)
        elif isinstance(msg, GSSEncRequest):
            self._send(GSSResponse(accepted=False))
        elif isinstance(msg, CancelRequest):  # on a connection of its own: cancel another's statement
            if (event := self.server.cancels.get((msg.process_id, bytes(msg.secret_key)))) is not None:
                event.set()
            return False
        elif isinstance(msg, Terminate):
            return False
        elif isinstance(msg, StartupMessage):
            return self._startup(msg)
        elif isinstance(msg, (PasswordMessage, SASLInitialResponse, SASLResponse)) and not self.authenticated:
            return self._authenticate(msg)
        elif not self.authenticated:
            return False
        elif isinstance(msg, Query):
            self._simple(msg.query_string)
        elif isinstance(msg, Sync):
            self.failed = False
            self._send(ReadyForQuery(status=self.status))
        elif isinstance(msg, Flush):
            pass
        elif self.failed:
            pass  # the rest of a failed extended-protocol run, until Sync
        else:
            try:
                self._extended(msg)
            except Exception as exc:  # noqa: BLE001
                self.failed = True
                self._error(exc)
        return True

    # -- admission: TLS, the connection limit, authentication ---------------------------------
    def _startup(self, msg: StartupMessage) -> bool:
        self.params = dict(msg.params)
        self.user = self.params.get("user", "")
        if self.access.tls is not None and not isinstance(self.request, ssl.SSLSocket):
            return self._fatal("28000", "this server accepts TLS connections only: connect with sslmode=require")
        if self.access.active > self.access.max_connections:
            return self._fatal("53300", f"sorry, too many clients already (max_connections = "
                                        f"{self.access.max_connections})")
        if self.access.users is None:
            self._ready_after_auth()
        elif self.access.method == "cleartext":
            self._send(AuthenticationCleartextPassword())
        else:
            self._send(AuthenticationSASL(mechanisms=["SCRAM-SHA-256"]))
        return True

    def _authenticate(self, msg: object) -> bool:
        """A password (cleartext) or a SCRAM-SHA-256 step; a wrong one ends the connection (28P01)."""
        user = self.access.user(self.user)
        failed = f"password authentication failed for user \"{self.user}\""
        if isinstance(msg, PasswordMessage):
            given = msg.password if isinstance(msg.password, str) else msg.password.decode("utf-8", "replace")
            if self.access.method != "cleartext" or user is None or not user.check(given.rstrip("\x00")):
                return self._fatal("28P01", failed)
        elif isinstance(msg, SASLInitialResponse):
            if user is None or msg.mechanism != "SCRAM-SHA-256":
                return self._fatal("28P01", failed)
            self.scram = Scram(user)
            try:
                self._send(AuthenticationSASLContinue(data=self.scram.first(bytes(msg.data))))
            except (ValueError, KeyError, MillpondError) as exc:
                return self._fatal("08P01", f"SCRAM: malformed client message ({exc})")
            return True
        else:
            final = self.scram.final(bytes(msg.data)) if self.scram is not None else None
            if final is None:
                return self._fatal("28P01", failed)
            self._send(AuthenticationSASLFinal(data=final))
        self.read_only = user.read_only
        self._ready_after_auth()
        return True

    def _ready_after_auth(self) -> None:
        self.authenticated = True
        self.request.settimeout(self.access.idle_timeout)
        params = {"server_version": SERVER_VERSION, "server_encoding": "UTF8", "client_encoding": "UTF8",
                  "DateStyle": "ISO, MDY", "TimeZone": "UTC", "integer_datetimes": "on",
                  "standard_conforming_strings": "on", "application_name": self.params.get("application_name", "")}
        self._send(AuthenticationOk(), *(ParameterStatus(name=k, value=v) for k, v in params.items()),
                   BackendKeyData(process_id=self.key[0], secret_key=self.key[1]),
                   ReadyForQuery(status=self.status))

    # -- the simple query protocol ------------------------------------------------------------
    def _simple(self, text: str) -> None:
        if (inner := _COPY_SUBSCRIBE.fullmatch(text.strip().rstrip(";").strip())) is not None:
            try:
                self._stream(inner.group(1))
            except Exception as exc:  # noqa: BLE001  (a cancel ends it so too)
                self._error(exc)
            self._send(ReadyForQuery(status=self.status))
            return
        try:
            parts = [s.meta["sql"] for s in statements(text)] if text.strip().strip(";").strip() else []
        except Exception as exc:  # noqa: BLE001
            parts = None
            self._error(exc, text)
        if parts == []:
            self._send(EmptyQueryResponse())
        at = 0
        for sql in parts or []:
            at = text.find(sql, at)
            try:
                self._send(*self._result(self._run(sql)))
            except Exception as exc:  # noqa: BLE001
                self._error(exc, text, max(at, 0))
                break
        self._send(ReadyForQuery(status=self.status))

    # -- the extended query protocol ----------------------------------------------------------
    def _extended(self, msg: object) -> None:
        if isinstance(msg, Parse):
            self.statements[msg.statement] = (msg.query, list(msg.param_types))
            self._send(ParseComplete())
        elif isinstance(msg, Bind):
            sql, types = self.statements[msg.statement]
            formats = msg.param_formats if len(msg.param_formats) > 1 else \
                list(msg.param_formats) * len(msg.param_values) or [0] * len(msg.param_values)
            values = [_text_param(v, types[i] if i < len(types) else 0) if f == 1 and v is not None else v
                      for i, (v, f) in enumerate(zip(msg.param_values, formats))]
            self.portals[msg.portal] = _Portal(_bind(sql, types, values), formats=list(msg.result_formats))
            self._send(BindComplete())
        elif isinstance(msg, Describe):
            if msg.kind == "S":
                sql, types = self.statements[msg.name]
                n = len(re.findall(r"\$(\d+)", sql)) and max(int(d) for d in re.findall(r"\$(\d+)", sql))
                oids = [*(t or 25 for t in types), *([25] * max(0, n - len(types)))]
                self._send(ParameterDescription(type_oids=oids))
                result = self._run(_bind(sql, types, [None] * n)) if _returns_rows(sql) else None
            else:
                portal = self.portals[msg.name]
                portal.result = result = self._run(portal.sql)
            formats = None if msg.kind == "S" else portal.formats_of(result)
            self._send(RowDescription(fields=fields(result.table, formats)) if result is not None and
                       result.table is not None else NoData())
        elif isinstance(msg, Execute):
            portal = self.portals[msg.portal]
            result = portal.result or self._run(portal.sql)
            portal.result = None
            self._send(*self._result(result, describe=False, formats=portal.formats_of(result)))
        elif isinstance(msg, Close):
            (self.statements if msg.kind == "S" else self.portals).pop(msg.name, None)
            self._send(CloseComplete())

    # -- running a statement --------------------------------------------------------------------
    def _run(self, sql: str) -> _Result:
        word = sql.strip().split(None, 1)[0].upper().rstrip(";") if sql.strip() else ""
        if word in _TRANSACTION:  # each statement is atomic on its own: accepted, nothing to do
            if word in ("BEGIN", "START"):
                self.status = TransactionStatus.IN_TRANSACTION
                return _Result(None, "BEGIN")
            self.status = TransactionStatus.IDLE
            return _Result(None, "ROLLBACK" if word in ("ROLLBACK", "ABORT") else "COMMIT")
        if self.server.readers is not None and word in _QUERIES and not _CATALOG_WORDS.search(sql):
            table = self.server.readers.answer(sql)  # None: run here
            if table is not None:
                return _Result(table, "SELECT")
        db = self.server.db
        script = statements(sql)
        parsed = script[0]
        if self.read_only and not all(_reads(s) for s in script):
            raise ReadOnlyError(f"cannot execute {verb(next(s for s in script if not _reads(s)))} in a read-only "
                                f"transaction: user {self.user!r} may only read")
        if not self.server.python_functions and any(_python_function(s) for s in script):
            raise _Refused("CREATE FUNCTION ... LANGUAGE python runs its code in the server's process: refused "
                           "over the wire unless the server runs with --python-functions (serve(python_functions="
                           "True)); or create it with db.sql in Python")
        if catalog_query(parsed):
            return _Result(catalog_rows(db, sql), "SELECT")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MillpondNotice)  # a client's SET of a setting with no meaning here
            table = db.sql(sql)
        if table is not None and (isinstance(parsed, exp.Query) or verb(parsed) in ("SHOW", "SUBSCRIBE", "EXPLAIN")
                                  or isinstance(parsed, exp.Describe)):
            return _Result(table, "SELECT")
        return _Result(None, _tag(parsed))

    def _stream(self, subscribe: str) -> None:
        """``COPY (SUBSCRIBE ...) TO STDOUT``: the subscription's rows as they come, in COPY's
        text format (the relation's columns, ``_w``, ``_epoch``), until the client cancels the
        statement (or goes away). What ``db.subscribe`` yields, from this connection's thread."""
        db = self.server.db
        with db._guard():  # noqa: SLF001  the start and its schema at one epoch
            name, as_of, snapshot = subscribe_clauses(db.runtime, subscribe)
            columns = len(db.runtime.changelog_schema(name))
            start = db.runtime.epoch if as_of is None else as_of
        self.cancel.clear()
        self._send(CopyOutResponse(overall_format=0, col_formats=[0] * columns))
        first = True
        while not self.cancel.is_set():
            last = start
            for change in db.subscribe(name, start, snapshot=snapshot and first, timeout=0.25):
                self._send(*(CopyData(data=line) for line in copy_lines(change)))
                last = max(last, change["_epoch"][-1].as_py())
                if self.cancel.is_set():
                    break
            start, first = last, False
        raise _Canceled("canceling statement due to user request")

    @staticmethod
    def _result(result: _Result, *, describe: bool = True, formats: list[int] | None = None) -> list[object]:
        """The messages that answer ``result`` (built whole before any is sent: a value that
        cannot be rendered is an error, not half a result)."""
        if result.table is None:
            return [CommandComplete(tag=result.tag)]
        table = result.table
        msgs: list[object] = [RowDescription(fields=fields(table))] if describe else []
        msgs += [DataRow(columns=row) for row in rows(table, formats)]
        msgs.append(CommandComplete(tag=f"SELECT {table.num_rows}"))
        return msgs

    def _error(self, exc: BaseException, query: str | None = None, offset: int = 0) -> None:
        """PostgreSQL's ErrorResponse: the SQLSTATE, the message, its hint apart, and the position
        (``P``: the 1-based character of ``query`` the error points at, which psql marks)."""
        if self.status == TransactionStatus.IN_TRANSACTION:
            self.status = TransactionStatus.ERROR_TRANSACTION
        fields = {"S": "ERROR", "V": "ERROR", "C": _sqlstate(exc), "M": str(exc)}
        if isinstance(exc, MillpondError):
            fields["M"] = exc.message
            if exc.hint:
                fields["H"] = exc.hint
        line, col = getattr(exc, "line", None), getattr(exc, "col", None)
        if query is not None and line is not None and col is not None:
            fields["M"] = re.sub(r" \(line \d+, column \d+\)", "", fields["M"], count=1)
            lines = query[offset:].split("\n")
            if line <= len(lines):
                fields["P"] = str(offset + sum(len(x) + 1 for x in lines[:line - 1]) + col)
        self._send(ErrorResponse(fields=fields))


# -- statements ---------------------------------------------------------------------------------
def _tag(s: exp.Expression) -> str:
    """The command tag a statement without rows completes with (``INSERT ... VALUES`` counts its
    rows; other row counts are not known here: 0)."""
    word = verb(s)
    if word == "INSERT":
        values = s.expression if isinstance(s.expression, exp.Values) else None
        return f"INSERT 0 {len(values.expressions) if values is not None else 0}"
    if word in ("UPDATE", "DELETE"):
        return f"{word} 0"
    return word


def _reads(s: exp.Expression) -> bool:
    """``s`` changes nothing (what a read-only user may run)."""
    return isinstance(s, (exp.Query, exp.Describe)) or verb(s) in ("SHOW", "SUBSCRIBE", "EXPLAIN", "SET")


def _returns_rows(sql: str) -> bool:
    word = sql.strip().split(None, 1)[0].upper() if sql.strip() else ""
    return word in ("SELECT", "WITH", "VALUES", "SHOW", "TABLE", "SUBSCRIBE", "EXPLAIN", "DESCRIBE")



class _Canceled(Exception):
    sqlstate = "57014"


class _Refused(Exception):
    sqlstate = "42501"  # insufficient_privilege


def _python_function(s: exp.Expression) -> bool:
    if not (isinstance(s, exp.Create) and (s.args.get("kind") or "").upper() == "FUNCTION"):
        return False
    props = s.args.get("properties").expressions if s.args.get("properties") else []
    return any(isinstance(p, exp.LanguageProperty) and p.name.lower() != "sql" for p in props)


_COPY_SUBSCRIBE = re.compile(r"COPY\s*\(\s*(SUBSCRIBE\b.*)\)\s*TO\s+STDOUT(?:\s+WITH\s*\(.*\))?", re.I | re.S)


def _sqlstate(exc: BaseException) -> str:
    if isinstance(exc, (_Canceled, _Refused, MillpondError)):
        return exc.sqlstate
    text = str(exc)
    if m := re.search(r"SQLSTATE:? (\w{5})", text):
        return m.group(1)
    return "XX000"
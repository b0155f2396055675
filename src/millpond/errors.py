"""Errors millpond raises. Every message names the problem and where it is, in PostgreSQL's words
where PostgreSQL has the error; every error has PostgreSQL's SQLSTATE (``exc.sqlstate``: what the
wire protocol sends, what psycopg shows as ``e.sqlstate``) and may carry a ``hint`` (PostgreSQL's
HINT: shown after the message, sent apart on the wire).

    >>> e = SqlError('column "nocol" does not exist', line=1, col=8, sqlstate="42703")
    >>> str(e), e.sqlstate
    ('column "nocol" does not exist (line 1, column 8)', '42703')
"""

from __future__ import annotations

import re

from millpond.pgerrors import own_sqlstate

__all__ = [
    "MillpondError",
    "SqlError",
    "CatalogError",
    "SchemaError",
    "StorageError",
    "MissingError",
    "FencedError",
    "HeldError",
    "TruncatedError",
    "RetentionError",
    "InvariantError",
    "IndexMismatch",
    "ReadOnlyError",
    "MillpondNotice",
    "unexpected",
]


class MillpondError(Exception):
    """Base class of every error millpond raises on purpose. ``sqlstate``: the one given, else one
    the message carries (``SQLSTATE: 22012``, or a data error in PostgreSQL's words), else the
    class's ``code``. ``hint``: what to do about it, shown after the message."""

    code = "XX000"  # internal_error: the class's SQLSTATE when nothing more precise is known

    def __init__(self, *args: object, sqlstate: str | None = None, hint: str | None = None):
        super().__init__(*args)
        self._sqlstate, self.hint = sqlstate, hint

    def at(self, line: int | None, col: int | None) -> "MillpondError":
        """This error at ``line``/``col`` of the statement (where the offending token starts), said
        after the message as every positioned error says it; itself, to raise."""
        if line is not None and getattr(self, "line", None) is None:
            self.line, self.col = line, col
            self.args = (f"{self.message} (line {line}, column {col})", *self.args[1:])
        return self

    @property
    def sqlstate(self) -> str:
        explicit = self.__dict__.get("_sqlstate")
        if explicit:
            return explicit
        text = str(self.args[0]) if self.args else ""
        if m := re.search(r"SQLSTATE:? (\w{5})", text):
            return m.group(1)
        return own_sqlstate(text.split(": ")[-1]) or own_sqlstate(text) or self.code

    @property
    def message(self) -> str:
        """The message without the hint (PostgreSQL's primary message, with its position)."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        hint = self.__dict__.get("hint")
        return f"{self.message}\nHINT:  {hint}" if hint else self.message


class SqlError(MillpondError):
    """A statement that cannot be parsed or planned; carries line and column when known."""

    code = "42000"  # syntax_error_or_access_rule_violation

    def __init__(self, message: str, *, sql: str | None = None, line: int | None = None, col: int | None = None,
                 sqlstate: str | None = None, hint: str | None = None):
        where = f" (line {line}, column {col})" if line is not None else ""
        if sqlstate is None and message.startswith("syntax error"):
            sqlstate = "42601"
        elif sqlstate is None and re.search(r"\bnot supported\b|\bunsupported\b", message):
            sqlstate = "0A000"  # feature_not_supported: a construct millpond refuses by name
        super().__init__(f"{message}{where}", sqlstate=sqlstate, hint=hint)
        self.sql, self.line, self.col = sql, line, col


class CatalogError(MillpondError):
    """Unknown or duplicate table/view names, dependent objects on DROP."""

    code = "42000"


class SchemaError(MillpondError):
    """Input whose columns or types do not match the target table."""

    code = "22000"  # data_exception


class StorageError(MillpondError):
    """Object storage unreachable, or an object missing or corrupt."""

    code = "58030"  # io_error


class MissingError(StorageError):
    """An object that is not there (a reader may have listed it before it was deleted)."""


class FencedError(MillpondError):
    """Another writer committed to the same root first; this writer must stop."""

    code = "55006"  # object_in_use


class HeldError(FencedError):
    """The root is open for writing elsewhere: by a live process (``millpond serve``, another
    process's ``connect(root)``, a loader appending to the log) or another Database of this one. One
    writer per root: a local root's lock files (``log/p<k>/LOCK``) say who holds it. ``holder`` is
    what the lock file knows of it (``pid``, ``host``, ``role``, ``program``; empty if nothing). The log's
    own writers get it too, and forward their appends to the holder (:mod:`millpond.log.forward`)."""

    def __init__(self, message: str, *, holder: dict | None = None):
        super().__init__(message)
        self.holder = dict(holder or {})


class TruncatedError(MillpondError):
    """A read of log records below the channel's retention start (they were truncated)."""

    code = "22000"

    def __init__(self, message: str, *, channel: str, start: int):
        super().__init__(message)
        self.channel, self.start = channel, start


class RetentionError(MillpondError):
    """Changes (or a past state) asked for that retention no longer keeps; ``oldest`` is the
    oldest epoch still kept (None: none)."""

    code = "22000"
    oldest: int | None = None


class InvariantError(MillpondError):
    """An internal invariant broke (e.g. a retraction of a row that is not there)."""


class IndexMismatch(SqlError):
    """An index a view's join was to read cannot serve it (its keys' types differ from the join's):
    the view keeps that side's state of its own instead. ``index`` is the index's id."""

    index: int = 0


class ReadOnlyError(MillpondError):
    """A write (INSERT, CREATE, DROP, FLUSH...) on a database opened with ``read_only=True``."""

    code = "25006"  # read_only_sql_transaction


class MillpondNotice(UserWarning):
    """What PostgreSQL would send as a NOTICE: the statement ran, with something the user should
    know (e.g. a session setting accepted and ignored). Issued with :func:`warnings.warn`."""


def unexpected(exc: BaseException) -> MillpondError:
    """An exception millpond did not raise on purpose (a Python or Spark error) as a MillpondError
    with a one-line message; raise it ``from exc`` so the original stays chained as the cause."""
    if isinstance(exc, MillpondError):
        return exc
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error:" in ln or "Exception:" in ln]  # a Spark error's innermost cause
    line = (errors[-1] if errors else lines[0] if lines else type(exc).__name__)[:500]
    if isinstance(exc, OSError):
        return StorageError(f"{exc.strerror or line}" + (f": {exc.filename!r}" if exc.filename else ""))
    if type(exc).__module__.startswith(("pyspark", "py4j")):
        return MillpondError(f"Spark failed: {line}")
    return MillpondError(f"unexpected {type(exc).__name__}: {line}")


class CancelledError(MillpondError):
    """An epoch's backfills were cancelled (``CANCEL JOB``): ``jobs`` are their rows of ``millpond_jobs``."""

    def __init__(self, message: str, jobs: list[dict] | None = None):
        super().__init__(message, sqlstate="57014")
        self.jobs = jobs or []

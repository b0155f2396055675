"""Errors millpond raises. Every message names the problem and where it is."""

from __future__ import annotations

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
    """Base class of every error millpond raises on purpose."""


class SqlError(MillpondError):
    """A statement that cannot be parsed or planned; carries line and column when known."""

    def __init__(self, message: str, *, sql: str | None = None, line: int | None = None, col: int | None = None):
        where = f" (line {line}, column {col})" if line is not None else ""
        super().__init__(f"{message}{where}")
        self.sql, self.line, self.col = sql, line, col


class CatalogError(MillpondError):
    """Unknown or duplicate table/view names, dependent objects on DROP."""


class SchemaError(MillpondError):
    """Input whose columns or types do not match the target table."""


class StorageError(MillpondError):
    """Object storage unreachable, or an object missing or corrupt."""


class MissingError(StorageError):
    """An object that is not there (a reader may have listed it before it was deleted)."""


class FencedError(MillpondError):
    """Another writer committed to the same root first; this writer must stop."""


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

    def __init__(self, message: str, *, channel: str, start: int):
        super().__init__(message)
        self.channel, self.start = channel, start


class RetentionError(MillpondError):
    """Changes (or a past state) asked for that retention no longer keeps; ``oldest`` is the
    oldest epoch still kept (None: none)."""

    oldest: int | None = None


class InvariantError(MillpondError):
    """An internal invariant broke (e.g. a retraction of a row that is not there)."""


class IndexMismatch(SqlError):
    """An index a view's join was to read cannot serve it (its keys' types differ from the join's):
    the view keeps that side's state of its own instead. ``index`` is the index's id."""

    index: int = 0


class ReadOnlyError(MillpondError):
    """A write (INSERT, CREATE, DROP, FLUSH...) on a database opened with ``read_only=True``."""


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

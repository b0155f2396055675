"""Errors millpond raises. Every message names the problem and where it is."""

from __future__ import annotations

__all__ = [
    "MillpondError",
    "SqlError",
    "CatalogError",
    "SchemaError",
    "StorageError",
    "FencedError",
    "TruncatedError",
    "InvariantError",
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


class FencedError(MillpondError):
    """Another writer committed to the same root first; this writer must stop."""


class TruncatedError(MillpondError):
    """A read of log records below the channel's retention start (they were truncated)."""

    def __init__(self, message: str, *, channel: str, start: int):
        super().__init__(message)
        self.channel, self.start = channel, start


class InvariantError(MillpondError):
    """An internal invariant broke (e.g. a retraction of a row that is not there)."""

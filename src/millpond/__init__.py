"""millpond: incrementally maintained materialized views on Spark, state on object storage.

    import millpond
    db = millpond.connect("./data")
    db.sql("CREATE TABLE visit (product VARCHAR, \\"user\\" VARCHAR, length INT)")
"""

from typing import TYPE_CHECKING, Any

from millpond.errors import (
    CatalogError,
    FencedError,
    HeldError,
    InvariantError,
    MillpondError,
    ReadOnlyError,
    RetentionError,
    SchemaError,
    SqlError,
    StorageError,
    TruncatedError,
)

__all__ = [
    "connect",
    "register",
    "Database",
    "EpochReport",
    "MillpondError",
    "SqlError",
    "CatalogError",
    "SchemaError",
    "StorageError",
    "FencedError",
    "HeldError",
    "TruncatedError",
    "InvariantError",
    "ReadOnlyError",
    "RetentionError",
]


if TYPE_CHECKING:
    from millpond.api import Database, connect
    from millpond.engine.epoch import EpochReport

_LAZY = {"connect": "millpond.api", "Database": "millpond.api", "EpochReport": "millpond.engine.epoch"}


def __getattr__(name: str) -> Any:
    """The engine loads on first use: a Spark worker that only reads the log (the ``millpond``
    data source, unpickled in a fresh Python process for every query plan) imports just that."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'millpond' has no attribute {name!r}")


def register(spark) -> None:  # noqa: ANN001
    """Register the ``millpond`` Spark data source on a plain Spark session."""
    from millpond.spark.log_source import register as _register

    _register(spark)

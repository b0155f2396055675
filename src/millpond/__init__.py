"""millpond: incrementally maintained materialized views on Spark, state on object storage.

    import millpond
    db = millpond.connect("./data")
    db.sql("CREATE TABLE visit (product VARCHAR, \\"user\\" VARCHAR, length INT)")
"""

from millpond.api import Database, connect
from millpond.engine.coordinator import EpochReport
from millpond.errors import (
    CatalogError,
    FencedError,
    InvariantError,
    MillpondError,
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
    "TruncatedError",
    "InvariantError",
]


def register(spark) -> None:  # noqa: ANN001
    """Register the ``millpond`` Spark data source on a plain Spark session."""
    from millpond.spark.log_source import register as _register

    _register(spark)

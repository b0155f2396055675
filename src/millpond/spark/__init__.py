"""Everything that imports pyspark lives in this package.

It implements the engine's :class:`~millpond.engine.executor.EpochExecutor` (:class:`SparkExecutor`)
and the store's compaction runner (:func:`spark_runner`), and provides the ``millpond`` Spark data
source and the embedded session. Only the entry points (``millpond.connect``, the CLI) import it.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from millpond.spark.compact import spark_runner
    from millpond.spark.executor import SparkExecutor
    from millpond.spark.log_source import register
    from millpond.spark.session import local_session

__all__ = ["SparkExecutor", "spark_runner", "register", "local_session"]

_MODULES = {"SparkExecutor": "executor", "spark_runner": "compact", "register": "log_source",
            "local_session": "session"}


def __getattr__(name: str) -> Any:
    """Loaded on first use: Spark's Python workers import ``millpond.spark.log_source`` (the data
    source) or ``millpond.spark.task`` alone, without the driver's side of the package."""
    if name in _MODULES:
        import importlib

        return getattr(importlib.import_module(f"millpond.spark.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'millpond.spark' has no attribute {name!r}")

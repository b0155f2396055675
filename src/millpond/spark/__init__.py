"""Everything that imports pyspark lives in this package.

It implements the engine's :class:`~millpond.engine.executor.EpochExecutor` (:class:`SparkExecutor`)
and the store's compaction runner (:func:`spark_runner`), and provides the ``millpond`` Spark data
source and the embedded session. Only the entry points (``millpond.connect``, the CLI) import it.
"""

from millpond.spark.compact import spark_runner
from millpond.spark.executor import SparkExecutor
from millpond.spark.log_source import register
from millpond.spark.session import local_session

__all__ = ["SparkExecutor", "spark_runner", "register", "local_session"]

"""Fewer round trips to the JVM while building DataFrames.

py4j passes a Python list by creating a Java list and adding each element in a message of its own:
``df.selectExpr`` of 40 columns is 42 round trips of ~0.2 ms each, and building the 22 TPC-H views'
DataFrames for one epoch made ~19,000 of them (measured 2026-11-29, SF 0.01). Here a list of strings
crosses as one string, split in the JVM, and a UDF's arguments as the input plan's output.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

__all__ = ["select_expr", "map_in_arrow"]

_SEP = "\x00"  # in no expression: a PostgreSQL text holds no NUL character


def select_expr(df: DataFrame, *exprs: str) -> DataFrame:
    """``df.selectExpr(*exprs)`` in three round trips, whatever the number of expressions."""
    if not exprs or any(_SEP in e for e in exprs):
        return df.selectExpr(*exprs)
    split, wrap = _classes(df.sparkSession._jvm)  # type: ignore[attr-defined]
    seq = wrap(split(_SEP.join(exprs), _SEP))
    return DataFrame(df._jdf.selectExpr(seq), df.sparkSession)


_CLASSES: dict[int, tuple] = {}  # id of a JVM view -> (it, the methods): each name in a path is a round trip


def _classes(jvm) -> tuple:  # noqa: ANN001 - a py4j JVMView
    found = _CLASSES.get(id(jvm))
    if found is None or found[0] is not jvm:
        found = _CLASSES[id(jvm)] = (jvm, jvm.org.apache.commons.lang3.StringUtils.splitPreserveAllTokens,
                                     jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray)
    return found[1:]


def map_in_arrow(df: DataFrame, udf) -> DataFrame:  # noqa: ANN001 - a pandas_udf of SQL_MAP_ARROW_ITER_UDF
    """``df.mapInArrow`` with a UDF made once (see :meth:`~millpond.spark.build.Builder._map`),
    called on ``df``'s columns in five round trips to the JVM (PySpark's call takes two per column:
    ~4,500 in an epoch of the 22 TPC-H views' builds; pyspark is pinned, its internals are known)."""
    judf = udf._unwrapped._judf
    column = judf.fromUDFExpr(judf.builder(df._jdf.queryExecution().analyzed().output()))
    return DataFrame(df._jdf.mapInArrow(column, False, None), df.sparkSession)

"""Spark types of a plan's columns where Catalyst does not say them itself: a window call's output,
expressions over a DataFrame, the type two join keys are compared in."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from millpond.engine import plan as P
from millpond.spark.jvm import select_expr

__all__ = ["common_type", "expression_types", "over_type"]

def over_type(call: P.OverCall, arg: T.DataType | None) -> T.DataType:
    """A window call's output type, as :func:`millpond.engine.operators.over.output_type` makes it."""
    if call.func in ("row_number", "rank", "dense_rank", "count_star", "count"):
        return T.LongType()
    assert arg is not None
    if call.func == "sum":
        if isinstance(arg, T.IntegralType):
            return T.LongType()
        if isinstance(arg, T.DecimalType):
            return T.DecimalType(38, arg.scale)
        return T.DoubleType() if isinstance(arg, T.FractionalType) else arg
    return arg


def expression_types(df: DataFrame, exprs: list[str]) -> list[T.DataType]:
    """Types of expressions over ``df``; plain column references need no Spark analysis."""
    fields = {f"`{f.name}`": f.dataType for f in df.schema}
    if all(e in fields for e in exprs):
        return [fields[e] for e in exprs]
    return [f.dataType for f in select_expr(df, *exprs).schema]

def common_type(a: T.DataType, b: T.DataType) -> T.DataType:
    """The type join keys of types ``a`` and ``b`` are compared in."""
    if a == b:
        return a
    numeric = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    if isinstance(a, numeric) and isinstance(b, numeric):
        return T.LongType()
    if isinstance(a, T.NumericType) and isinstance(b, T.NumericType):
        return T.DoubleType()
    return T.StringType()

"""Python functions in SQL (:mod:`millpond.pyfunctions`) as Spark sees them: each one an Arrow UDF
registered on the session under its name in Spark SQL, before a view's expression that calls it
is handed to Catalyst. The UDF pickles the function's :class:`~millpond.pyfunctions.Spec` (its
source), so a worker needs nothing but millpond to run it."""

from __future__ import annotations

import weakref

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.functions import arrow_udf
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import _parse_datatype_string
from sqlglot import exp

from millpond.catalog.types import spark_ddl_type
from millpond import casemap, jsonb
from millpond.engine.expressions import is_mp, python_calls
from millpond.pyfunctions import Spec, evaluate, udf_name

__all__ = ["register_calls"]

_registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a session: the names registered


def register_calls(spark: SparkSession, e: exp.Expression) -> None:
    """Every Python function and JSONB operation ``e`` calls, registered on ``spark`` (once per session)."""
    for spec, mode in python_calls(e):
        _register(spark, spec, mode)
    for operation in {n.expressions[0].name for n in e.walk() if is_mp(n, "JSONB")}:
        _register_jsonb(spark, operation)
    for func in {f for n in e.walk() for f in casemap.FUNCTIONS if is_mp(n, f)}:
        _register_case(spark, func)


def _register_case(spark: SparkSession, func: str) -> None:
    _register_arrow(spark, casemap.udf_name(func), lambda values: casemap.evaluate(func, values), "string")


def _register_arrow(spark: SparkSession, name: str, fn, returns) -> None:  # noqa: ANN001
    """``fn`` (Arrow arrays in, one out) as ``name`` in ``spark``'s SQL, once per session."""
    if name in _registered.setdefault(spark, set()):
        return
    spark.udf.register(name, arrow_udf(fn, returns))
    _registered[spark].add(name)


_SPARK_KINDS = {"jsonb": "STRUCT<pg_jsonb: STRING>", "text": "STRING", "int": "INT", "bool": "BOOLEAN",
                "text[]": "ARRAY<STRING>", "jsonb[]": "ARRAY<STRUCT<pg_jsonb: STRING>>"}


def _register_jsonb(spark: SparkSession, operation: str) -> None:
    fn, _, result = jsonb.OPERATIONS[operation]
    _register_arrow(spark, jsonb.udf_name(operation), lambda *columns: fn(*columns),
                    _parse_datatype_string(_SPARK_KINDS[result]))


def _register(spark: SparkSession, spec: Spec, mode: str) -> None:
    name = udf_name(spec, mode)
    if name in _registered.setdefault(spark, set()):
        return
    returns = _parse_datatype_string(spark_ddl_type(spec.returns))
    out = to_arrow_type(returns)

    def run(*columns: pa.Array) -> pa.Array:
        return evaluate(spec, mode, list(columns), out)

    spark.udf.register(name, arrow_udf(run, returns))
    _registered[spark].add(name)

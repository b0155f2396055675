"""Fixtures of the cluster tests (``make cluster``): a Spark standalone master and two workers on
loopback, a SparkSession on them, and (from ``tests/conftest.py``) an S3 server for the root."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.cluster.standalone import Standalone

EXECUTORS = 2  # one per worker, one core each


@pytest.fixture(scope="package")
def cluster():
    """A master and two workers (one core, 1 GiB each); stopped at the end, leaving no process."""
    c = Standalone.start(workers=EXECUTORS, cores=1, memory="1g")
    try:
        yield c
    finally:
        c.stop()
    assert not c.leftovers(), f"processes of the cluster survived its stop: {c.leftovers()}"


@pytest.fixture(scope="package")
def cluster_spark(cluster):
    """A SparkSession of this process (the driver) on the standalone cluster, its executors up."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from millpond.spark.session import ensure_java

    if SparkContext._active_spark_context is not None:  # getOrCreate would hand back a local session
        pytest.fail("a Spark session is already running in this process: run the cluster tests on their own "
                    "(make cluster)")
    ensure_java()
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    # Executors run this path: fine on one machine; a real cluster needs the same environment on every worker.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver binds to loopback too
    spark = (
        SparkSession.builder.master(cluster.url)
        .appName("millpond-cluster-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", str(EXECUTORS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()  # otherwise Spark's defaults (adaptive execution on, 200 shuffle partitions), as a user's
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        wait_for_executors(spark, EXECUTORS, cluster)
        yield spark
    finally:
        spark.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def executor_count(spark) -> int:  # noqa: ANN001
    """Executors registered with the driver (the driver's own block manager not counted)."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def wait_for_executors(spark, n: int, cluster: Standalone, timeout: float = 120.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while executor_count(spark) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} executors did not register within {timeout:.0f} s:\n{cluster.logs()}")
        time.sleep(0.25)

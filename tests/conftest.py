from __future__ import annotations

import math
import os
import socket

import pyarrow as pa
import pytest

import millpond
from millpond.spark.class_archive import ARCHIVE_ENV
from millpond.spark.session import JAVA_OPTIONS_ENV, local_session


def lengths(fast: int, long: int) -> pytest.MarkDecorator:
    """Parametrize a random oracle's ``epochs``: ``fast`` in ``make test``, ``long`` in ``make chaos``
    (a long oracle would keep ``make test`` over its 10 minutes)."""
    return pytest.mark.parametrize("epochs", [pytest.param(fast, id=f"{fast}-epochs"),
                                              pytest.param(long, id=f"{long}-epochs", marks=pytest.mark.chaos)])


@pytest.fixture(scope="session", autouse=True)
def _spark_log(tmp_path_factory):
    """The JVMs of this run (the session's, and subprocesses' that name none) log into the run's
    temporary folder, not one file per process in the system's: tests write nothing outside it."""
    run = tmp_path_factory.getbasetemp()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MILLPOND_SPARK_LOG", str(tmp_path_factory.mktemp("spark") / "spark.log"))
        # the processes tests start map one class-data archive of this run's (millpond.spark.class_archive),
        # shared by the run's workers (xdist's basetemp is one folder per worker, inside the run's)
        mp.setenv(ARCHIVE_ENV, str((run.parent if os.environ.get("PYTEST_XDIST_WORKER") else run) / "jvm-archive"))
        # the tests' JVMs compile with C1 alone: their epochs are small, C2's compiles were half the JVM's
        # CPU and two test processes fill both cores (docs/development.md)
        mp.setenv(JAVA_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
        yield


@pytest.fixture(scope="session")
def spark(_spark_log):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ARCHIVE_ENV, "0")  # this JVM lives as long as the run: it would write the archive only at its end
        session = local_session(cores="2", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "root")


@pytest.fixture
def open_db(spark, root):
    """Open databases on this test's root (closed at teardown)."""
    opened = []

    def _open(*, parallelism: int = 2, path: str | None = None) -> millpond.Database:
        db = millpond.connect(path or root, spark=spark, parallelism=parallelism, interval=None)
        opened.append(db)
        return db

    yield _open
    for db in opened:
        db.close()


def rows(table: pa.Table) -> list[tuple]:
    """A table's rows as a sorted multiset (NULLs sort first); a quotient as DuckDB computes it
    from millpond's SQL (its PostgreSQL text, :mod:`millpond.engine.numerics`) as a Decimal."""
    from tests.pg_numeric import quotients_as_decimals

    cols = quotients_as_decimals(table).to_pydict()
    out = list(zip(*cols.values())) if cols else []
    return sorted(out, key=lambda r: tuple((v is not None, v) for v in r))


def canonical(table: pa.Table) -> list[tuple]:
    """Rows as a sorted multiset; floats sort by 6 significant digits and compare with
    :func:`same_rows` (an AVG sums in another order in millpond and in DuckDB)."""
    return sorted(rows(table), key=lambda r: tuple(
        (v is not None, float(f"{v:.6g}") if isinstance(v, float) else v) for v in r))


def same_rows(got: list[tuple], want: list[tuple]) -> bool:
    """Two :func:`canonical` row lists are equal, floats up to a relative 1e-9."""
    return len(got) == len(want) and all(
        len(g) == len(w) and all(math.isclose(a, b, rel_tol=1e-9) if isinstance(a, float) and isinstance(b, float)
                                 else a == b for a, b in zip(g, w))
        for g, w in zip(got, want))


S3_PORT = [0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_url():
    """An S3-protocol server (moto) on loopback with bucket ``pond``; env points obstore at it. It
    runs in a process of its own, as a real server does: in this one, a client that waits for it
    holding the GIL (deltalake's ``history()``) would wait for ever."""
    import subprocess
    import sys
    import time

    import boto3

    port = _free_port()
    S3_PORT[0] = port
    server = subprocess.Popen([sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1",
                               "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start on port {port}") from None
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k",
                     aws_secret_access_key="s").create_bucket(Bucket="pond")
        yield "s3://pond/prefix"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="session")
def s3_options(s3_url):
    """Explicit options for the loopback server: no credential lookups anywhere else."""
    port = S3_PORT[0]
    return {"endpoint": f"http://127.0.0.1:{port}", "access_key_id": "k", "secret_access_key": "s",
            "region": "us-east-1", "allow_http": "true"}


@pytest.fixture(scope="session")
def postgres_cdc():
    """A real PostgreSQL server with ``wal_level = logical`` on loopback for the whole run (Debian's,
    which make setup installs): its port and superuser."""
    from tests import pg

    reason = pg.unavailable()
    if reason:
        pytest.fail(f"{reason}: the postgres-cdc connector's tests need one (make setup installs Debian's)")
    with pg.server(logical=True) as server:
        yield server


@pytest.fixture(scope="session")
def kafka():
    """A real Kafka-API broker (Tansu, tests/tansu.py) on loopback for the whole run."""
    from tests.tansu import Broker

    broker = Broker()
    yield broker
    broker.stop()

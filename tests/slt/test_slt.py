"""Every ``tests/slt/*.slt`` file, one test each: run on a fresh millpond Database and, where a
PostgreSQL server is installed, mirrored on a fresh PostgreSQL database; both must give every
query's expected block (the format: ``tests/slt/__init__.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import millpond
from tests.slt.engines import Millpond, Postgres
from tests.slt.records import parse
from tests.slt.runner import run

FILES = sorted(Path(__file__).parent.glob("*.slt"))
SHOWN = 25  # failures printed in full


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_file(path, spark, postgres_server, tmp_path):
    records = parse(path)
    started = time.monotonic()
    engines = [Millpond(millpond.connect(str(tmp_path / "root"), spark=spark, parallelism=2, interval=None))]
    try:
        if postgres_server is not None:
            engines.append(Postgres(postgres_server))
        outcome = run(records, engines)
    finally:
        for engine in engines:
            engine.close()
    print(f"{path.name} ({time.monotonic() - started:.1f} s): {outcome.summary(slowest=12)}")
    failures = outcome.failures
    assert not failures, (f"{len(failures)} records of {path.name} failed:\n\n" + "\n".join(map(str, failures[:SHOWN]))
                          + (f"\n… and {len(failures) - SHOWN} more" if len(failures) > SHOWN else ""))

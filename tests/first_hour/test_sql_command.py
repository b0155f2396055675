"""``millpond sql ROOT -c "SELECT ..."`` answers without starting Spark (DuckDB answers queries; a
table's rows go to the log): Spark starts at the first statement that needs it, and a command that
reads, then creates a view and writes, is still right. Whether Spark started is seen from outside:
a quiet session's JVM writes its output to ``$MILLPOND_SPARK_LOG``, which exists only if it ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MILLPOND = str(Path(sys.executable).parent / "millpond")


def _sql(root: str, log: Path, script: str, *, stdin: bool = False) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MILLPOND_LOG_LEVEL", "MILLPOND_CRASH_AT")}
    args = [MILLPOND, "sql", root, "--format", "csv"] + ([] if stdin else ["-c", script])
    done = subprocess.run(args, input=script if stdin else None, capture_output=True, text=True, timeout=600,
                          env=env | {"MILLPOND_SPARK_LOG": str(log)})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_sql_starts_spark_only_for_a_statement_that_needs_it(tmp_path):
    root = str(tmp_path / "root")
    out = _sql(root, tmp_path / "create.log", "CREATE TABLE t (k INT, v TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b');"
                                              "FLUSH")
    assert out.splitlines() == []  # --format csv prints results only
    out = _sql(root, tmp_path / "read.log", "SELECT count(*) AS n FROM t; SHOW TABLES; DESCRIBE t")
    assert out.splitlines()[:3] == ['"n"', "2", '"name","columns","primary_key","append_only","source","error"']
    out = _sql(root, tmp_path / "stdin.log", "SELECT k FROM t ORDER BY k;\n", stdin=True)
    assert out.splitlines() == ['"k"', "1", "2"]
    assert not any(tmp_path.glob("*.log"))  # no JVM ran for any of them

    script = ("SELECT count(*) AS n FROM t; CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n FROM t;"
              "INSERT INTO t VALUES (3, 'c'); FLUSH; SELECT n FROM c")
    out = _sql(root, tmp_path / "view.log", script)
    assert out.splitlines() == ['"n"', "2", '"n"', "3"]
    assert (tmp_path / "view.log").exists()  # the view's analysis and epochs ran on Spark, started then

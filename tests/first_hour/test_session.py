"""A notebook's own SparkSession: ``SparkSession.builder.master("local[2]").getOrCreate()`` in a
process whose PATH's ``python3`` lacks millpond (the venv's Python run without activating it), then
``millpond.connect(root, spark=spark)``. It just works; when the user chose a worker Python that
cannot run millpond, connect refuses before any epoch, naming what it lacks, and each fix it names
works; ``ship=True`` leaves no zip behind. One process, three sessions (each needs a new SparkContext:
a session's worker Python is fixed when it starts)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from millpond.spark.workers import RUNTIME_MODULES

NOTEBOOK = textwrap.dedent("""
    import os, sys
    import millpond
    from pyspark.sql import SparkSession
    from millpond.spark.workers import package_zip

    root = sys.argv[1]

    def session():
        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark

    def run(name, spark, **kwargs):
        db = millpond.connect(f"{root}/{name}", spark=spark, interval=None, **kwargs)
        db.sql("CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW s AS SELECT v, count(*) AS n FROM t GROUP BY v;"
               "INSERT INTO t VALUES (1, 7), (2, 7), (3, 8); FLUSH")
        print(name, sorted(tuple(r.values()) for r in db.sql("SELECT v, n FROM s").to_pylist()), flush=True)
        db.close()

    # 1. The user chose a worker Python that lacks millpond and its dependencies.
    os.environ["PYSPARK_PYTHON"] = "python3"
    spark = session()
    for ship in (False, True):
        try:
            millpond.connect(f"{root}/chosen", spark=spark, interval=None, ship=ship)
            print("OPENED", flush=True)
        except millpond.MillpondError as exc:
            print("REFUSED", " ".join(str(exc).split()), flush=True)
    spark.stop()  # the test's own session

    # 2. The first fix named: PYSPARK_PYTHON set to this process's Python before the session starts.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = session()
    run("fixed", spark)
    spark.stop()

    # 3. A notebook's session, nobody chose (the other fix: PYSPARK_PYTHON unset), shipping millpond.
    del os.environ["PYSPARK_PYTHON"]
    spark = session()
    print("BEFORE", spark.sparkContext.pythonExec, flush=True)
    run("notebook", spark, ship=True)
    print("AFTER", spark.sparkContext.pythonExec, flush=True)
    print("ZIP", package_zip(), os.path.exists(package_zip()), flush=True)
""")


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_a_notebooks_own_session_just_works_and_a_chosen_python_is_refused_with_fixes_that_work(tmp_path):
    bare = tmp_path / "bin"  # PATH's python3: the venv's base interpreter without any site-packages
    bare.mkdir()
    (bare / "python3").write_text(f"#!/bin/sh\nexec {sys._base_executable} -S \"$@\"\n")
    (bare / "python3").chmod(0o755)
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join([str(bare), *(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV",
                                                            "MILLPOND_LOG_LEVEL", "MILLPOND_CRASH_AT")}
    # every epoch a Spark job (small ones would run in this process): the workers run millpond's tasks
    env |= {"PATH": path, "MILLPOND_SPARK_LOG": str(tmp_path / "spark.log"), "MILLPOND_DRIVER_RECORDS": "0"}
    check = subprocess.run(["python3", "-c", "import millpond"], env=env, capture_output=True, text=True)
    assert check.returncode != 0 and "No module named 'millpond'" in check.stderr  # the premise

    done = subprocess.run([sys.executable, "-c", NOTEBOOK, str(tmp_path / "roots")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    refused = [line for line in lines if line.startswith("REFUSED")]
    assert len(refused) == 2 and "OPENED" not in lines, lines
    plain, shipped = refused
    everything = ", ".join(RUNTIME_MODULES)
    assert f"Spark's Python workers (python3 -> {sys._base_executable}" in plain
    assert f"cannot import {everything}, which millpond's tasks import at every epoch" in plain
    assert "unset PYSPARK_PYTHON (now 'python3')" in plain and f"set PYSPARK_PYTHON={sys.executable}" in plain
    assert "spark.pyspark.python" not in plain  # no effect on a session built in the process: not offered
    deps = ", ".join(m for m in RUNTIME_MODULES if m != "millpond")
    assert f"ship=True adds millpond only, not {deps}: they must be installed in the workers' Python" in plain
    assert f"cannot import {deps}, which" in shipped and f"ship=True added millpond only, not {deps}" in shipped
    assert "fixed [(7, 2), (8, 1)]" in lines  # fix 1: PYSPARK_PYTHON=this Python
    assert "BEFORE python3" in lines and f"AFTER {sys.executable}" in lines  # fix 2: unset, as a notebook is
    assert "notebook [(7, 2), (8, 1)]" in lines
    zip_line = next(line for line in lines if line.startswith("ZIP "))
    _, zip_path, existed = zip_line.split(" ")
    assert existed == "True" and not Path(zip_path).exists()  # shipped while the process ran, removed at its exit
    assert not Path(zip_path).parent.exists()

"""TPC-H's 22 queries as materialized views over tpchgen-cli's data (SF 0.05), each equal to DuckDB
running the same SQL over the same rows after the backfill and after TPC-H's refresh functions
(new orders with their lineitems; the oldest orders with theirs deleted by key range, 1% each) —
in a user's own Spark session with a notebook's 1 GB of driver memory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from millpond import tpch
from millpond.tpch import oracle

SCALE = 0.05


def views_through_a_refresh(db, folder, scale: float) -> None:
    """TPC-H's tables loaded into ``db``, its 22 queries as views, each view equal to DuckDB after the
    backfill and after one refresh (RF1 + RF2 at 1%); every view still running."""
    db.sql(";".join(tpch.DDL))
    tables = {name: tpch.read(folder, name) for name in tpch.TABLES}
    for name, rows in tables.items():
        db.insert(name, rows)
    queries = tpch.queries(scale)
    for name, sql in queries.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    db.flush()

    refresh = tpch.Refresh(tables["orders"], tables["lineitem"], 0.01, seed=7)
    for step in ("the backfill", "a refresh"):
        mismatched = [name for name, sql in queries.items()
                      if not oracle.same(oracle.rows(db.sql(f"SELECT * FROM {name}")), oracle.answer(tables, sql))]
        assert not mismatched, f"after {step}: {mismatched}"
        if step == "a refresh":
            break
        orders, lines = refresh.rf1()
        db.insert("orders", orders)
        db.insert("lineitem", lines)
        deletes = refresh.rf2()
        for statement in deletes:
            db.sql(statement)
        db.flush()
        lo, hi = (int(x) for x in re.findall(r"\d+", deletes[0]))  # the oracle's own copy of the change
        tables["orders"] = _without(pa.concat_tables([tables["orders"], orders]), "o_orderkey", lo, hi)
        tables["lineitem"] = _without(pa.concat_tables([tables["lineitem"], lines]), "l_orderkey", lo, hi)
        assert db.sql("SELECT count(*) AS n FROM orders").to_pylist() == [{"n": tables["orders"].num_rows}]
    assert all(v["status"] == "running" for v in db.sql("SELECT status FROM millpond_views").to_pylist())


SMALL_SESSION = """
import sys
import millpond
from pyspark.sql import SparkSession
from millpond import tpch
from tests.test_tpch import views_through_a_refresh

scale, where = float(sys.argv[1]), sys.argv[2]
spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "1g")
         .config("spark.ui.enabled", "false").getOrCreate())
print("heap", spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())
db = millpond.connect(where + "/root", spark=spark, interval=None)
views_through_a_refresh(db, tpch.generate(scale, where + "/data"), scale)
db.close()
print("after close", spark.range(7).count())
"""


@pytest.mark.slow
def test_a_notebook_session_with_1_gb_of_driver_memory_runs_every_view_and_lives_on(tmp_path):
    """A user's own session with a notebook's 1 GB of driver memory, in a process of its own: TPC-H's
    22 views over SF 0.05 (300,000 lineitems) with tasks applying 4 MiB of delta at a time (so epochs
    are cut in steps and spill, as SF 1 is with the default budget), equal to DuckDB through a
    refresh; the session, which millpond did not start, still answers after ``close()``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLPOND_")} | {
        "MILLPOND_STEP_BYTES": str(4 << 20), "MILLPOND_SPARK_LOG": str(tmp_path / "spark.log")}
    done = subprocess.run([sys.executable, "-c", SMALL_SESSION, str(SCALE), str(tmp_path)], capture_output=True,
                          text=True, timeout=1200, env=env, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr[-4000:]
    heap, after = done.stdout.splitlines()[-2:]
    assert int(heap.split()[1]) <= 1 << 30, heap  # the JVM really had 1 GB at most
    assert after == "after close 7"


def _without(table: pa.Table, key: str, lo: int, hi: int) -> pa.Table:
    return table.filter(pc.invert(pc.and_(pc.greater_equal(table[key], lo), pc.less(table[key], hi))))


def test_a_whole_input_aggregate_of_a_big_epoch_is_one_row(open_db):
    """Found by Q15: over 50,000 new rows an aggregate is combined before its exchange, and Spark,
    folding the constant vnode of a whole-input group, shuffled the combined rows again by value —
    a MAX of one epoch had a row per task."""
    db = open_db()
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
    db.insert("t", pa.table({"k": list(range(60_000)), "v": [i % 13 for i in range(60_000)]}))
    db.sql("CREATE MATERIALIZED VIEW top AS SELECT max(v) AS m, count(DISTINCT v) AS d FROM t")
    db.flush()
    assert db.sql("SELECT * FROM top").to_pylist() == [{"m": 12, "d": 13}]


def test_the_refresh_functions_over_the_files_hold_keys_and_copy_the_same_rows(tmp_path):
    """:class:`tpch.Refresh` given the Parquet files (what ``benchmarks/tpch.py`` passes, so its
    process holds no table) makes the rows and statements it makes given the tables."""
    folder = tpch.generate(0.01, tmp_path / "data")
    tables = tpch.Refresh(tpch.read(folder, "orders"), tpch.read(folder, "lineitem"), 0.01, seed=3)
    files = tpch.Refresh(folder / "orders.parquet", folder / "lineitem.parquet", 0.01, seed=3)
    for _ in range(2):
        (orders, lines), (orders2, lines2) = tables.rf1(), files.rf1()
        assert orders.num_rows == 150 and lines.num_rows > orders.num_rows
        assert orders.equals(orders2) and lines.equals(lines2)
        assert tables.rf2() == files.rf2()

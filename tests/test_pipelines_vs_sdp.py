"""An SDP project, unchanged, on ``spark-pipelines run`` (open-source SDP, in its own process with
its own Spark Connect server) and on ``millpond pipeline run``: the same rows in every dataset."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

SAME_SOURCE = """
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

spark = SparkSession.active()


@dp.table
def raw_events():
    return spark.readStream.format("parquet").schema("k BIGINT, p BIGINT, v BIGINT").load(spark.conf.get("mp.events"))


@dp.materialized_view
def dim_py():
    return spark.read.parquet(spark.conf.get("mp.dim")).where("p < 2")
"""
SAME_SQL = """
CREATE TEMPORARY VIEW dim AS SELECT * FROM parquet.`{dim}`;
CREATE STREAMING TABLE clean AS SELECT k, p, v FROM STREAM(raw_events) WHERE v >= ${{mp.min_v}};
CREATE STREAMING TABLE big (who BIGINT COMMENT 'the key', v BIGINT) COMMENT 'the big ones';
CREATE FLOW into_big AS INSERT INTO big BY NAME SELECT k AS who, v FROM STREAM(clean) WHERE v > 50;
CREATE MATERIALIZED VIEW agg AS SELECT k, count(*) AS n, sum(v) AS s, max(v) AS m FROM clean GROUP BY k;
CREATE MATERIALIZED VIEW joined AS SELECT d.name, count(*) AS n, sum(e.v) AS s FROM raw_events e JOIN dim d
  ON e.p = d.p GROUP BY d.name;
CREATE MATERIALIZED VIEW per_who (who BIGINT, n BIGINT, least BIGINT) TBLPROPERTIES ('a' = 'b') AS
  SELECT who, count(*) AS n, min(v) AS least FROM big GROUP BY who;
-- Spark's SQL, as SDP reads it: `/` of integers is a double, "…" a string, Spark's function names
CREATE MATERIALIZED VIEW `Spark_SQL` AS SELECT k, sum(v) / count(*) AS mean_v, nvl(max(p), -1) AS top_p,
  if(k > 2, "hi", "lo") AS band, concat("k", cast(k AS string)) AS label FROM clean GROUP BY k;
CREATE MATERIALIZED VIEW per_name AS SELECT d.name, count(*) AS n FROM raw_events e JOIN dim_py d ON e.p = d.p
  GROUP BY d.name;
"""
SAME_DATASETS = ("raw_events", "clean", "big", "agg", "joined", "per_who", "spark_sql", "dim_py", "per_name")


@pytest.mark.slow
def test_the_same_project_on_spark_pipelines_and_on_millpond_gives_the_same_rows(tmp_path):
    """One SDP project, unchanged -- a Python ``@dp.table`` over ``spark.readStream`` and a Python
    ``@dp.materialized_view``, streaming tables
    over ``STREAM(...)``, a flow, a temporary view over a Parquet folder, materialized views over all
    of them, the spec's ``configuration`` read in SQL (``${key}``) and in Python (``spark.conf``): ``spark-pipelines run`` (open-source SDP, recomputing everything) and ``millpond
    pipeline run`` (incremental) give the same rows in every dataset, run after run as files arrive."""
    import json
    import os
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from millpond.spark.session import ensure_java

    ensure_java()
    tool = shutil.which("spark-pipelines", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    assert tool is not None, "pyspark's spark-pipelines command is installed with pyspark"
    for folder in ("landing/ev", "landing/dim", "transformations"):
        (tmp_path / folder).mkdir(parents=True)
    rng = random.Random(4)

    def ev(i: int, n: int) -> None:
        pq.write_table(pa.table({"k": pa.array([rng.randrange(6) for _ in range(n)], pa.int64()),
                                 "p": pa.array([rng.randrange(3) for _ in range(n)], pa.int64()),
                                 "v": pa.array([rng.randrange(100) for _ in range(n)], pa.int64())}),
                       tmp_path / "landing" / "ev" / f"{i}.parquet")

    ev(0, 40)
    pq.write_table(pa.table({"p": pa.array([0, 1, 2], pa.int64()), "name": ["x", "y", "x"]}),
                   tmp_path / "landing" / "dim" / "0.parquet")
    (tmp_path / "transformations" / "source.py").write_text(SAME_SOURCE)
    (tmp_path / "transformations" / "views.sql").write_text(SAME_SQL.format(dim=f"{tmp_path}/landing/dim"))
    (tmp_path / "spark-pipeline.yml").write_text(
        f"name: same\nstorage: file://{tmp_path}/sdp-storage\nconfiguration:\n  mp.min_v: '10'\n"
        f"  mp.events: {tmp_path}/landing/ev\n  mp.dim: {tmp_path}/landing/dim\nlibraries:\n  - glob:\n      include: transformations/**\n")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    millpond_cmd = [sys.executable, "-m", "millpond.cli", "pipeline", "run", "--root", str(tmp_path / "root")]
    script = ("import millpond, json; db = millpond.connect({root!r}, read_only=True); "
              "print(json.dumps({{v: db.sql(f'SELECT * FROM \"{{v}}\"').to_pylist() for v in {names!r}}}, default=str))")
    for round_ in range(2):
        # each spark-pipelines run starts a fresh in-memory catalog (no metastore here), which refuses the
        # tables its last run left: SDP recomputes from scratch, millpond goes on from its last run
        for left in ("spark-warehouse", "sdp-storage"):
            shutil.rmtree(tmp_path / left, ignore_errors=True)
        sdp = subprocess.run([tool, "run", "--spec", "spark-pipeline.yml"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=900)
        assert sdp.returncode == 0 and "Run is COMPLETED" in sdp.stdout + sdp.stderr, (sdp.stdout + sdp.stderr)[-3000:]
        mine = subprocess.run(millpond_cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert mine.returncode == 0, mine.stderr[-3000:]
        assert "streamed into raw_events" in mine.stdout, mine.stdout
        got = subprocess.run([sys.executable, "-c", script.format(root=str(tmp_path / "root"), names=SAME_DATASETS)],
                             env=env, capture_output=True, text=True, timeout=600)
        views = json.loads(got.stdout.splitlines()[-1])
        for view in SAME_DATASETS:
            theirs = pq.read_table(tmp_path / "spark-warehouse" / view).to_pylist()
            assert theirs, (round_, view, "the project is meant to give every dataset rows")
            assert _canon(views[view]) == _canon(theirs), (round_, view)
        ev(round_ + 1, 15)


def _canon(rows_: list[dict]) -> list[tuple]:
    """Rows compared by value (SDP's sum of a bigint is a bigint, PostgreSQL's a numeric, which
    JSON carries as a string)."""
    def value(v):  # noqa: ANN001, ANN202
        if isinstance(v, str):
            try:
                return round(float(v), 9)
            except ValueError:
                return v
        return round(float(v), 9) if isinstance(v, (int, float)) else v
    return sorted(tuple(value(v) for v in r.values()) for r in rows_)


@pytest.mark.slow
def test_the_project_spark_pipelines_init_writes_runs_unchanged(tmp_path):
    """``spark-pipelines init``'s project (a Python materialized view over ``spark.range``, a SQL one
    reading it) runs on millpond as it is, a second run with nothing new commits no epoch."""
    import os
    import shutil

    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "PYSPARK_PYTHON": sys.executable}
    tool = shutil.which("spark-pipelines", path=env["PATH"])
    done = subprocess.run([tool, "init", "--name", "hello"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for round_ in range(2):
        done = subprocess.run([sys.executable, "-m", "millpond.cli", "pipeline", "run", "--root", "mp"],
                              cwd=tmp_path / "hello", env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
        assert ("committed 0 epochs" in done.stdout) == (round_ == 1), done.stdout
    got = subprocess.run([sys.executable, "-c", "import millpond; print(millpond.connect('mp', read_only=True).sql("
                          "'SELECT id FROM example_sql_materialized_view ORDER BY id').column('id').to_pylist())"],
                         cwd=tmp_path / "hello", env=env, capture_output=True, text=True, timeout=300)
    assert got.stdout.split()[-5:] == ["[0,", "2,", "4,", "6,", "8]"], got.stdout + got.stderr[-2000:]

"""Spark Declarative Pipelines projects run incrementally: ``millpond pipeline run`` turns an SDP
project's SQL datasets into views, a second run processes only what is new (none when nothing is),
and what SDP refuses is refused before anything is created."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from millpond import pipelines
from millpond.pipelines import PipelineError
from tests.conftest import rows

SPEC = """name: shop
storage: storage-root
libraries:
  - glob:
      include: transformations/**
"""
SQL = {
    "transformations/views.sql": """
-- materialized views over the root's tables and over each other
CREATE OR REFRESH MATERIALIZED VIEW per_category AS
  SELECT c.category, count(*) AS visits, max(v.length) AS longest
  FROM visits_clean AS v JOIN products AS c ON v.product = c.product
  GROUP BY c.category;

CREATE TEMPORARY VIEW long_visits AS SELECT * FROM visits_clean WHERE length > 5;
CREATE MATERIALIZED VIEW long_per_user AS SELECT `user`, count(*) AS n FROM long_visits GROUP BY `user`;
CREATE VIEW per_product AS SELECT product, count(*) AS n FROM visits_clean GROUP BY product;
""",
    "transformations/streams.sql": """
CREATE STREAMING TABLE visits_clean AS
  SELECT product, `user`, length FROM STREAM(visits) WHERE length >= 0;

CREATE STREAMING TABLE all_events;
CREATE FLOW from_visits AS INSERT INTO all_events BY NAME SELECT `user` AS who, "visit" AS what FROM STREAM(visits);
CREATE FLOW from_orders AS INSERT INTO all_events BY NAME SELECT buyer AS who, 'order' AS what FROM STREAM(orders);
""",
    "transformations/py_source.py": "from pyspark import pipelines as dp\n",
}
ORACLE = {
    "per_category": "SELECT c.category, count(*) AS visits, max(v.length) AS longest FROM visits AS v "
                    "JOIN products AS c ON v.product = c.product WHERE v.length >= 0 GROUP BY c.category",
    "long_per_user": 'SELECT "user", count(*) AS n FROM visits WHERE length >= 0 AND length > 5 GROUP BY "user"',
    "per_product": "SELECT product, count(*) AS n FROM visits WHERE length >= 0 GROUP BY product",
    "all_events": "SELECT \"user\" AS who, 'visit' AS what FROM visits UNION ALL SELECT buyer, 'order' FROM orders",
}


def _project(folder: Path, extra: dict[str, str] | None = None) -> Path:
    for name, text in {**SQL, **(extra or {})}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (folder / "spark-pipeline.yml").write_text(SPEC)
    return folder / "spark-pipeline.yml"


def _insert(db, rng: random.Random, n: int) -> None:  # noqa: ANN001
    db.sql("INSERT INTO visits VALUES " + ", ".join(
        f"('{rng.choice('abcd')}', 'u{rng.randrange(4)}', {rng.randrange(-2, 10)})" for _ in range(n)))
    db.sql("INSERT INTO orders VALUES " + ", ".join(f"('u{rng.randrange(4)}', {rng.randrange(100)})" for _ in range(n)))


def test_a_project_runs_incrementally_and_equals_duckdb(open_db, tmp_path):
    spec = _project(tmp_path)
    db = open_db()
    db.sql("""CREATE TABLE products (product VARCHAR PRIMARY KEY, category VARCHAR);
              CREATE TABLE visits (product VARCHAR, "user" VARCHAR, length INT) APPEND ONLY;
              CREATE TABLE orders (buyer VARCHAR, total INT) APPEND ONLY;
              INSERT INTO products VALUES ('a', 'fruit'), ('b', 'fruit'), ('c', 'veg'), ('d', 'veg')""")
    rng = random.Random(1)
    _insert(db, rng, 20)
    project = pipelines.load(spec)
    report = pipelines.run(db, project)
    assert "  created per_category (materialized view)" in report and report[-1].startswith("committed")
    oracle = duckdb.connect()
    for round_ in range(3):
        for name in ("products", "visits", "orders"):
            oracle.register(name, db.read(name))
        for view, sql in ORACLE.items():
            assert rows(db.sql(f"SELECT * FROM {view}")) == rows(oracle.sql(sql).to_arrow_table()), (round_, view)
        _insert(db, rng, 5)
        epoch = db.epoch
        report = pipelines.run(db, project)  # only what is new: nothing created again
        assert not any("created" in line or "dropped" in line for line in report), report
        assert db.epoch > epoch
    epoch = db.epoch
    report = pipelines.run(db, project)
    assert db.epoch == epoch and report[-1].startswith("committed 0 epochs"), report  # nothing new: no epoch


def test_a_changed_dataset_is_recreated_with_its_readers_and_a_removed_one_dropped(open_db, tmp_path):
    spec = _project(tmp_path)
    db = open_db()
    db.sql("""CREATE TABLE products (product VARCHAR PRIMARY KEY, category VARCHAR);
              CREATE TABLE visits (product VARCHAR, "user" VARCHAR, length INT) APPEND ONLY;
              CREATE TABLE orders (buyer VARCHAR, total INT) APPEND ONLY""")
    _insert(db, random.Random(2), 10)
    pipelines.run(db, pipelines.load(spec))
    changed = SQL["transformations/streams.sql"].replace("WHERE length >= 0", "WHERE length >= 1")
    (tmp_path / "transformations/streams.sql").write_text(changed.split("CREATE STREAMING TABLE all_events")[0])
    report = pipelines.run(db, pipelines.load(spec))
    assert {"  dropped visits_clean (its SQL changed)", "  dropped all_events (no longer in the pipeline)",
            "  dropped per_category (it reads a dataset dropped)", "  created visits_clean (streaming table)",
            "  created per_category (materialized view)"} <= set(report), report
    assert "all_events" not in db.catalog.views
    assert db.sql("SELECT count(*) AS n FROM visits_clean WHERE length < 1").to_pylist() == [{"n": 0}]
    before = rows(db.sql("SELECT * FROM per_category"))
    report = pipelines.run(db, pipelines.load(spec), full_refresh={"per_category"})  # SDP's --full-refresh
    assert "  dropped per_category (full refresh)" in report and "  created per_category (materialized view)" in report
    assert "  dropped visits_clean (full refresh)" not in report, report
    assert rows(db.sql("SELECT * FROM per_category")) == before  # recomputed from the log: the same rows
    report = pipelines.run(db, pipelines.load(spec), full_refresh=True)
    assert {"  dropped per_category (full refresh)", "  dropped visits_clean (full refresh)"} <= set(report), report
    with pytest.raises(PipelineError, match=r"--full-refresh nowhere: not a SQL dataset of the pipeline"):
        pipelines.run(db, pipelines.load(spec), full_refresh={"nowhere"})


@pytest.mark.parametrize("files, error", [
    ({"transformations/x.sql": "CREATE MATERIALIZED VIEW per_category AS SELECT 1 AS one"}, "defined twice"),
    ({"transformations/x.sql": "CREATE MATERIALIZED VIEW a AS SELECT * FROM b; CREATE MATERIALIZED VIEW b AS "
                               "SELECT * FROM a"}, "cycle: a -> b -> a"),
    ({"transformations/x.sql": "CREATE FLOW f AS INSERT INTO per_category BY NAME SELECT 1 AS visits"},
     "a flow writes a streaming table"),
    ({"transformations/x.sql": "CREATE MATERIALIZED VIEW a AS SELECT * FROM nowhere"}, "'nowhere', which is neither"),
    ({"transformations/x.sql": "DROP TABLE visits"}, r"x.sql:1: not a pipeline definition"),
    ({"transformations/x.sql": "CREATE VIEW p AS SELECT * FROM long_visits"},
     r"x.sql:1: view 'p' reads the temporary view 'long_visits': a persisted view cannot read a temporary one"),
])
def test_what_sdp_refuses_is_refused_before_anything_is_created(tmp_path, files, error):
    spec = _project(tmp_path, files)
    with pytest.raises(PipelineError, match=error):
        pipelines.check(pipelines.load(spec), {"visits", "orders", "products"})


def test_the_spec_is_found_as_sdp_finds_it(tmp_path):
    """``spark-pipeline.yaml`` or ``.yml`` here or in the nearest folder above; both is refused."""
    spec = _project(tmp_path)
    (tmp_path / "transformations" / "deeper").mkdir()
    assert pipelines.find_spec(tmp_path / "transformations" / "deeper") == spec
    (tmp_path / "spark-pipeline.yaml").write_text(SPEC)
    with pytest.raises(PipelineError, match="both spark-pipeline.yaml and spark-pipeline.yml"):
        pipelines.find_spec(tmp_path / "transformations")
    with pytest.raises(PipelineError, match="no spark-pipeline.yaml or spark-pipeline.yml in"):
        pipelines.find_spec("/")


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_the_command_line_inits_dry_runs_and_runs(tmp_path):
    """``init`` writes the project ``spark-pipelines init`` writes (a Python materialized view, a SQL
    one reading it; storage in ``pipeline-storage/``, the root by default); ``dry-run`` checks it
    without Spark (the Python file's datasets read from its text); ``run`` runs it, found from a
    folder below as SDP finds it; ``--full-refresh-all`` recomputes."""
    def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "millpond.cli", "pipeline", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=600)

    done = cli("init", "--name", "hello", cwd=tmp_path)
    assert done.returncode == 0 and (tmp_path / "hello" / "spark-pipeline.yml").exists(), done.stderr
    assert cli("init", "--name", "hello", cwd=tmp_path).returncode == 1  # exists already
    done = cli("dry-run", cwd=tmp_path / "hello")
    assert done.returncode == 0 and "dry run: the graph is valid" in done.stdout, done.stdout + done.stderr[-2000:]
    assert not (tmp_path / "hello" / "pipeline-storage" / "catalog").exists()  # nothing written
    done = cli("run", cwd=tmp_path / "hello")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "created example_sql_materialized_view (materialized view)" in done.stdout, done.stdout
    assert "recomputed example_python_materialized_view (transformations/example_python_materialized_view.py, " \
           "10 rows)" in done.stdout, done.stdout
    done = cli("run", "--full-refresh-all", cwd=tmp_path / "hello" / "transformations")
    assert done.returncode == 0 and "dropped example_sql_materialized_view (full refresh)" in done.stdout, \
        done.stdout + done.stderr[-2000:]


def test_dry_run_reads_the_python_datasets_from_their_text(tmp_path):
    """Without Spark: decorated functions (their ``name=`` or their own name) and
    ``create_streaming_table`` are datasets SQL may read; a name no file defines is still refused."""
    spec = _project(tmp_path, {"transformations/py_source.py": (
        "from pyspark import pipelines as dp\n"
        "dp.create_streaming_table('landed')\n"
        "@dp.append_flow(target='landed')\ndef f():\n    return spark.readStream.table('x')\n"
        "@dp.table(name='Named_Here')\ndef ignored():\n    return spark.readStream.table('x')\n"
        "@dp.materialized_view\ndef mv():\n    return spark.range(3)\n"),
        "transformations/reads.sql": "CREATE MATERIALIZED VIEW r AS SELECT * FROM landed, named_here, mv;"})
    assert pipelines.check(pipelines.load(spec), {"visits", "orders", "products"})[-1] == "dry run: the graph is valid"
    (tmp_path / "transformations" / "reads.sql").write_text("CREATE MATERIALIZED VIEW r AS SELECT * FROM ignored;")
    with pytest.raises(PipelineError, match="'ignored', which is neither"):
        pipelines.check(pipelines.load(spec), {"visits", "orders", "products"})


def test_a_project_reading_parquet_folders_as_sdp_does(open_db, tmp_path):
    """The shape of benchmarks/sdp.py's project, unchanged: temporary views over Parquet folders
    (``parquet.`path```, and ``read_files``), materialized views over them. The folders become files
    tables (columns from the first file); a new file is taken in by the next run, once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "landing" / "ev").mkdir(parents=True)
    (tmp_path / "landing" / "dim").mkdir(parents=True)
    rng = random.Random(3)

    def ev(i: int, n: int) -> None:
        pq.write_table(pa.table({"k": [rng.randrange(5) for _ in range(n)], "p": [rng.randrange(3) for _ in range(n)],
                                 "v": [rng.randrange(100) for _ in range(n)]}), tmp_path / "landing" / "ev" / f"{i}.parquet")

    ev(0, 50)
    pq.write_table(pa.table({"p": [0, 1, 2], "name": ["x", "y", "x"]}), tmp_path / "landing" / "dim" / "0.parquet")
    (tmp_path / "transformations").mkdir()
    (tmp_path / "transformations" / "views.sql").write_text(
        "CREATE TEMPORARY VIEW ev AS SELECT * FROM parquet.`landing/ev`;\n"
        "CREATE TEMPORARY VIEW dim AS SELECT * FROM read_files('landing/dim', format => 'parquet');\n"
        "CREATE MATERIALIZED VIEW agg AS SELECT k, count(*) AS n, sum(v) AS s, max(v) AS m FROM ev GROUP BY k;\n"
        "CREATE MATERIALIZED VIEW joined AS SELECT d.name, count(*) AS n, sum(e.v) AS s FROM ev e JOIN dim d "
        "ON e.p = d.p GROUP BY d.name;\n")
    (tmp_path / "spark-pipeline.yml").write_text(SPEC)
    db = open_db()
    project = pipelines.load(tmp_path / "spark-pipeline.yml")
    assert len(project.files) == 2
    oracle = duckdb.connect()
    for round_ in range(3):
        report = pipelines.run(db, project)
        assert sum("files table" in line for line in report) == (2 if round_ == 0 else 0), report
        oracle.sql(f"CREATE OR REPLACE VIEW ev AS SELECT * FROM read_parquet('{tmp_path}/landing/ev/*.parquet')")
        oracle.sql(f"CREATE OR REPLACE VIEW dim AS SELECT * FROM read_parquet('{tmp_path}/landing/dim/*.parquet')")
        for view in ("agg", "joined"):
            sql = _view_sql(project, view)
            assert rows(db.sql(f"SELECT * FROM {view}")) == rows(oracle.sql(sql).to_arrow_table()), (round_, view)
        ev(round_ + 1, 20)


def test_a_project_over_a_delta_table_keeps_its_view_incrementally(open_db, tmp_path):
    """``delta.`path``` and ``STREAM(delta.`path`)`` in a project become a Delta source table: each
    run reads only the versions written since (the epoch's input is the new rows), and the views
    equal DuckDB over the Delta table."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    location = tmp_path / "lake" / "ev"
    write_deltalake(str(location), pa.table({"k": pa.array([1, 2, 1], pa.int64()), "v": pa.array([5, 6, 7], pa.int64())}))
    (tmp_path / "transformations").mkdir()
    (tmp_path / "transformations" / "views.sql").write_text(
        "CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n, sum(v) AS s FROM delta.`lake/ev` GROUP BY k;\n"
        "CREATE STREAMING TABLE big AS SELECT * FROM STREAM(delta.`lake/ev`) WHERE v > 5;\n")
    (tmp_path / "spark-pipeline.yml").write_text(SPEC)
    db = open_db()
    project = pipelines.load(tmp_path / "spark-pipeline.yml")
    for round_ in range(3):
        report = pipelines.run(db, project)
        assert sum("Delta source table" in line for line in report) == (1 if round_ == 0 else 0), report
        oracle = duckdb.connect()
        oracle.register("d", DeltaTable(str(location)).to_pyarrow_table())
        assert rows(db.sql("SELECT * FROM per_k")) == rows(oracle.sql(
            "SELECT k, count(*), sum(v) FROM d GROUP BY k").to_arrow_table())
        assert rows(db.sql("SELECT * FROM big")) == rows(oracle.sql("SELECT * FROM d WHERE v > 5").to_arrow_table())
        if round_:
            assert db.sql("SELECT rows_in FROM millpond_epochs WHERE name = 'per_k' ORDER BY epoch DESC LIMIT 1"
                          ).to_pylist() == [{"rows_in": 2}]  # the version's two rows, not the table
        write_deltalake(str(location), pa.table({"k": pa.array([round_, 3], pa.int64()),
                                                 "v": pa.array([10 * round_, 1], pa.int64())}), mode="append")


def test_spark_sql_means_what_spark_means_and_a_failing_dataset_stops_only_its_readers(open_db, tmp_path):
    """SDP's SQL files are Spark's SQL: ``/`` of integers is a double, ``"…"`` a string, ``nvl``,
    ``if`` and ``LATERAL VIEW explode`` Spark's; a dataset millpond cannot create is named with its
    file and line (and the query as read), the datasets that read it are not created, and the rest
    of the project runs and commits."""
    db = open_db()
    db.sql("CREATE TABLE nums (k INT, v INT, arr INT[]) APPEND ONLY; "
           "INSERT INTO nums VALUES (1, 1, ARRAY[1, 2]), (1, 2, ARRAY[3]), (2, NULL, NULL)")
    (tmp_path / "transformations").mkdir()
    (tmp_path / "transformations" / "a.sql").write_text(
        'CREATE MATERIALIZED VIEW means AS SELECT k, sum(v) / count(v) AS m, nvl(max(v), -1) AS top, '
        'if(k > 1, "big", "small") AS band FROM nums GROUP BY k;\n'
        "CREATE MATERIALIZED VIEW bad AS SELECT k, percentile_approx(v, 0.5) AS p FROM nums GROUP BY k;\n"
        "CREATE MATERIALIZED VIEW reads_bad AS SELECT count(*) AS n FROM bad;\n"
        "CREATE MATERIALIZED VIEW exploded AS SELECT k, x FROM nums LATERAL VIEW explode(arr) e AS x;\n")
    (tmp_path / "spark-pipeline.yml").write_text(SPEC)
    with pytest.raises(PipelineError) as caught:
        pipelines.run(db, pipelines.load(tmp_path / "spark-pipeline.yml"))
    text = str(caught.value)
    assert "failed: bad (transformations/a.sql:2: function approx_quantile() is not supported" in text, text
    assert "read as PostgreSQL's SQL: SELECT k, APPROX_QUANTILE(v, 0.5)" in text, text
    assert "failed: reads_bad (transformations/a.sql:3: reads 'bad', which failed)" in text, text
    assert "created means" in text and "created exploded" in text and "committed 1 epoch" in text, text
    assert sorted(tuple(r.values()) for r in db.sql("SELECT * FROM means").to_pylist()) == [
        (1, 1.5, 2, "small"), (2, None, -1, "big")]
    assert sorted(tuple(r.values()) for r in db.sql("SELECT * FROM exploded").to_pylist()) == [(1, 1), (1, 2), (1, 3)]
    assert "bad" not in db.catalog.views and "reads_bad" not in db.catalog.views
    (tmp_path / "transformations" / "a.sql").write_text(
        "CREATE MATERIALIZED VIEW o AS SELECT k, x FROM nums LATERAL VIEW OUTER explode(arr) e AS x;")
    with pytest.raises(PipelineError, match=r"a.sql:1: LATERAL VIEW OUTER is not supported yet"):
        pipelines.load(tmp_path / "spark-pipeline.yml")


def test_the_spec_configuration_is_substituted_as_spark_substitutes_it(tmp_path, monkeypatch):
    """``${key}`` / ``${spark:key}`` from the spec's ``configuration``, ``${env:NAME}`` from the
    environment; a name nothing defines stays as written (Spark leaves it); a value that is not a
    string is refused by name, as SDP refuses it."""
    monkeypatch.setenv("MP_TEST_FLOOR", "3")
    spec = _project(tmp_path, {"transformations/streams.sql": (
        "CREATE STREAMING TABLE visits_clean AS SELECT product, `user`, length FROM STREAM(visits) "
        "WHERE length >= ${min_length} AND length < ${spark:max_length} AND length <> ${env:MP_TEST_FLOOR};\n"
        "CREATE MATERIALIZED VIEW odd AS SELECT '${not.defined}' AS kept FROM visits_clean;\n")})
    spec.write_text(SPEC + "configuration:\n  min_length: '1'\n  max_length: '9'\n")
    project = pipelines.load(spec)
    assert project.datasets["visits_clean"].sql().endswith("WHERE length >= 1 AND length < 9 AND length <> 3")
    assert "'${not.defined}'" in project.datasets["odd"].sql()
    (tmp_path / "transformations" / "typed.sql").write_text(
        "CREATE MATERIALIZED VIEW typed (product STRING COMMENT 'p', n BIGINT) COMMENT 'c' AS "
        "SELECT product, count(*) AS n FROM visits GROUP BY product;")
    assert pipelines.load(spec).datasets["typed"].sql() == (
        'SELECT CAST(q."product" AS TEXT) AS "product", CAST(q."n" AS BIGINT) AS "n" FROM '
        "(SELECT product, COUNT(*) AS n FROM visits GROUP BY product) AS q")
    (tmp_path / "transformations" / "typed.sql").write_text(
        "CREATE MATERIALIZED VIEW typed (n BIGINT, CONSTRAINT pos EXPECT (n > 0) ON VIOLATION DROP ROW) AS "
        "SELECT count(*) AS n FROM visits;")
    with pytest.raises(PipelineError, match=r"typed.sql:1: the declared columns.*expectations are not supported yet"):
        pipelines.load(spec)
    (tmp_path / "transformations" / "typed.sql").unlink()
    spec.write_text(SPEC + "configuration:\n  min_length: 1\n")
    with pytest.raises(PipelineError, match=r"configuration is a mapping of strings to strings.*min_length"):
        pipelines.load(spec)


def test_a_parquet_folder_on_object_storage_takes_its_columns_from_its_first_file(spark, s3_url, s3_options, tmp_path):
    """``parquet.`s3://…``` in a project: the folder's columns are read from its first object (with
    the root's storage options) and the view is kept as files arrive."""
    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq

    import millpond

    s3 = boto3.client("s3", endpoint_url=s3_options["endpoint"], region_name="us-east-1", aws_access_key_id="k",
                      aws_secret_access_key="s")
    folder = f"sdp-{tmp_path.name}"

    def put(name: str, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        s3.put_object(Bucket="pond", Key=f"{folder}/{name}", Body=sink.getvalue().to_pybytes())

    put("0.parquet", pa.table({"g": ["x", "y", "x"], "v": pa.array([1, 2, 3], pa.int64())}))
    (tmp_path / "transformations").mkdir()
    (tmp_path / "transformations" / "v.sql").write_text(
        f"CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM parquet.`s3://pond/{folder}/` "
        "GROUP BY g;")
    (tmp_path / "spark-pipeline.yml").write_text(SPEC)
    db = millpond.connect(f"{s3_url}/{tmp_path.name}", spark=spark, parallelism=2, interval=None,
                          storage_options=s3_options)
    try:
        project = pipelines.load(tmp_path / "spark-pipeline.yml")
        pipelines.run(db, project)
        assert sorted(tuple(r.values()) for r in db.sql("SELECT * FROM per_g").to_pylist()) == [("x", 2, 4), ("y", 1, 2)]
        put("1.parquet", pa.table({"g": ["y"], "v": pa.array([10], pa.int64())}))
        pipelines.run(db, project)
        assert sorted(tuple(r.values()) for r in db.sql("SELECT * FROM per_g").to_pylist()) == [("x", 2, 4), ("y", 2, 12)]
    finally:
        db.close()


def _view_sql(project, name: str) -> str:  # noqa: ANN001
    sql = project.datasets[name].sql()
    for src in project.files.values():
        sql = sql.replace(src.name, "ev" if src.path.endswith("ev") else "dim")
    return sql


PY_SOURCE = """
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

spark = SparkSession.active()


@dp.table
def raw_events():
    return spark.readStream.format("parquet").schema("k BIGINT, v BIGINT").load({folder!r})


@dp.materialized_view
def counts():  # a batch DataFrame, recomputed on every run (as SDP does)
    return spark.read.parquet({folder!r}).groupBy("k").count()


@dp.table
def broken():
    return spark.readStream.format("parquet").load("/nowhere/without/a/schema")
"""


def test_python_streaming_tables_run_as_streams_into_tables(open_db, tmp_path):
    """``@dp.table`` over ``spark.readStream``: a stream into a table of the root, up to what is
    available, exactly once across runs (its checkpoint); SQL datasets read it. A Python
    materialized view is recomputed on Spark every run, its rows replacing its table's (no epoch
    when they are the same), and the SQL view over it kept. A stream that fails fails alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = tmp_path / "landing"
    landing.mkdir()
    rng = random.Random(5)

    def ev(i: int) -> None:
        pq.write_table(pa.table({"k": pa.array([rng.randrange(4) for _ in range(10)], pa.int64()),
                                 "v": pa.array([rng.randrange(50) for _ in range(10)], pa.int64())}),
                       landing / f"{i}.parquet")

    ev(0)
    (tmp_path / "transformations").mkdir()
    (tmp_path / "transformations" / "source.py").write_text(PY_SOURCE.format(folder=str(landing)))
    (tmp_path / "transformations" / "views.sql").write_text(
        "CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n, sum(v) AS s FROM raw_events GROUP BY k;\n"
        "CREATE MATERIALIZED VIEW reads_broken AS SELECT count(*) AS n FROM broken;\n"
        "CREATE MATERIALIZED VIEW common AS SELECT k FROM counts WHERE count >= 3;")
    (tmp_path / "spark-pipeline.yml").write_text(SPEC)
    db = open_db()
    oracle = duckdb.connect()
    for round_ in range(3):
        with pytest.raises(PipelineError) as caught:  # one stream fails: it alone, and what reads it
            pipelines.run(db, pipelines.load(tmp_path / "spark-pipeline.yml"))
        report = str(caught.value).splitlines()
        assert "  streamed into raw_events (transformations/source.py, 1 flow)" in report, report
        recomputed = "unchanged" if round_ == 2 else f"{len(set(_keys_in(landing)))} rows"
        assert f"  recomputed counts (transformations/source.py, {recomputed})" in report, report
        assert any(line.startswith("  failed: broken (transformations/source.py: ") for line in report), report
        assert "  failed: reads_broken (transformations/views.sql:2: reads 'broken', which failed)" in report, report
        oracle.sql(f"CREATE OR REPLACE VIEW raw_events AS SELECT * FROM read_parquet('{landing}/*.parquet')")
        assert rows(db.sql("SELECT * FROM raw_events")) == rows(oracle.sql("SELECT * FROM raw_events").to_arrow_table())
        assert rows(db.sql("SELECT * FROM per_k")) == rows(oracle.sql(
            "SELECT k, count(*) AS n, sum(v) AS s FROM raw_events GROUP BY k").to_arrow_table()), round_
        assert rows(db.sql("SELECT * FROM common")) == rows(oracle.sql(
            "SELECT k FROM raw_events GROUP BY k HAVING count(*) >= 3").to_arrow_table()), round_
        if round_ == 0:
            ev(1)


def _keys_in(landing: Path) -> list[int]:
    import pyarrow.parquet as pq

    return pq.read_table(landing).column("k").to_pylist()

"""Being a good citizen in the user's process: millpond never stops a Spark session it did not
start, opens a root read-only beside a writer, is quiet unless asked, and raises only millpond
errors (the CLI prints them as one line)."""

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import millpond
from millpond import CatalogError, MillpondError, ReadOnlyError, SqlError, StorageError
from millpond.cli import main
from millpond.engine.readonly import ReadOnlyRuntime
from millpond.shell import Printer, interactive
from millpond.store.cache import block_cache


def quiet_env() -> dict[str, str]:
    """This process's environment (as the run's fixtures set it: the JVM archive, the Spark log),
    without a log level or a crash point."""
    return {k: v for k, v in os.environ.items() if k not in ("MILLPOND_LOG_LEVEL", "MILLPOND_CRASH_AT")}


def _files(root: str) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in Path(root).rglob("*")}


# -- Spark sessions -------------------------------------------------------------------------------
def test_close_leaves_a_session_it_did_not_start(spark, tmp_path):
    """The test session plays a notebook's own session: connect() without spark= uses it, and
    neither that database's close() nor one given spark= stops it."""
    first = millpond.connect(str(tmp_path / "a"), spark=spark, interval=None)
    second = millpond.connect(str(tmp_path / "b"), interval=None)  # finds the running session
    assert second.spark.sparkContext is spark.sparkContext
    second.sql("CREATE TABLE t (k INT)")
    second.close()
    first.sql("CREATE TABLE t (k INT); INSERT INTO t VALUES (1), (2); FLUSH")
    assert first.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 2}]
    first.close()
    assert spark.range(3).count() == 3


def test_log_level_of_a_given_session_changes_only_when_asked(spark, root, monkeypatch):
    monkeypatch.delenv("MILLPOND_LOG_LEVEL", raising=False)
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
    spark.sparkContext.setLogLevel("FATAL")
    try:
        millpond.connect(root, spark=spark, interval=None).close()
        assert str(log4j.getRootLogger().getLevel()) == "FATAL"
        millpond.connect(root, spark=spark, interval=None, log_level="error").close()
        assert str(log4j.getRootLogger().getLevel()) == "ERROR"
    finally:
        spark.sparkContext.setLogLevel("ERROR")
    with pytest.raises(MillpondError, match="log_level='LOUD': use one of OFF, ERROR, WARN"):
        millpond.connect(root, spark=spark, log_level="LOUD")


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_sessions_millpond_starts_are_shared_quiet_and_stopped_by_the_last_user(tmp_path):
    """In a fresh process: two connect()s and the CLI's ``sql -c`` share the session the first
    started; closing the others leaves the first working; closing the last stops it. Nothing of
    Spark reaches stderr (no banner, WARN lines or JVM warnings): it goes to the log file."""
    script = textwrap.dedent(f"""
        import millpond
        from millpond.cli import main
        from pyspark import SparkContext
        a = millpond.connect({str(tmp_path / 'a')!r}, interval=None)
        b = millpond.connect({str(tmp_path / 'b')!r}, interval=None)
        assert b.spark is a.spark
        b.close()
        code = main(["sql", {str(tmp_path / 'c')!r}, "-c", {CLI_SCRIPT!r}])
        assert code == 0, code
        a.sql("CREATE TABLE t (k INT); INSERT INTO t VALUES (1), (2); FLUSH")
        print(a.sql("SELECT count(*) AS n FROM t").to_pylist())
        a.close()
        print(SparkContext._active_spark_context is None)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=quiet_env() | {"MILLPOND_SPARK_LOG": str(tmp_path / "spark.log")})
    assert (done.returncode, done.stderr) == (0, ""), done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[:4] == ["CREATE TABLE", "INSERT", "CREATE MATERIALIZED VIEW", "FLUSH"]  # the CLI's -c
    assert "│ a       │   7 │" in done.stdout and "│ b       │   5 │" in done.stdout and "(2 rows)" in done.stdout
    assert lines[-2:] == ["[{'n': 2}]", "True"]
    assert "log4j" in (tmp_path / "spark.log").read_text()


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_a_failing_view_prints_nothing_of_pyspark_s_query_errors(tmp_path):
    """A view that fails on a bad row is reported by millpond (its status and error); PySpark's
    SQLQueryContextLogger would print the JVM's stack trace as a JSON line to the terminal: it is off, in
    a session millpond starts and in one the user brings."""
    script = textwrap.dedent(f"""
        import millpond
        from pyspark.sql import SparkSession
        for own in (False, True):
            spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate() \\
                if own else None
            db = millpond.connect({str(tmp_path)!r} + str(own), spark=spark, interval=None)
            db.sql("CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW bad AS SELECT k / v AS q FROM t;"
                   "INSERT INTO t VALUES (1, 0); FLUSH")
            print(db.sql("SELECT status FROM millpond_views").to_pylist())
            db.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=quiet_env() | {"MILLPOND_SPARK_LOG": str(tmp_path / "spark.log")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["[{'status': 'failed'}]"] * 2
    assert "QueryContextLogger" not in done.stderr and "DIVIDE_BY_ZERO" not in done.stderr, done.stderr[-3000:]


CLI_SCRIPT = ("CREATE TABLE visit (product VARCHAR, length INT); INSERT INTO visit VALUES ('a', 3), ('b', 5), ('a', 7);"
              "CREATE MATERIALIZED VIEW m AS SELECT product, MAX(length) AS top FROM visit GROUP BY product; FLUSH;"
              "SELECT * FROM m ORDER BY product")


# -- read-only opens ------------------------------------------------------------------------------
def _writer(open_db):
    db = open_db()
    db.sql("""CREATE TABLE t (k BIGINT, v BIGINT);
              CREATE MATERIALIZED VIEW s AS SELECT count(*) AS n, sum(v) AS total FROM t;""")
    return db


def _batch(i: int, size: int = 10) -> pa.Table:
    return pa.table({"k": pa.array(range(i * size, (i + 1) * size), pa.int64()), "v": pa.array([1] * size, pa.int64())})


def test_read_only_answers_from_committed_epochs_while_a_writer_commits(open_db, root):
    writer = _writer(open_db)
    writer.insert("t", _batch(0))
    writer.flush()
    reader = millpond.connect(root, read_only=True)
    assert isinstance(reader.runtime, ReadOnlyRuntime) and reader._spark.lease is None  # no Spark was started
    epochs, errors = 8, []

    def write() -> None:
        try:
            for i in range(1, epochs + 1):
                writer.insert("t", _batch(i))
                writer.flush()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    thread = threading.Thread(target=write)
    thread.start()
    seen = set()
    while thread.is_alive() or not seen or max(seen) < 10 * (epochs + 1):
        # a view and a table read in one answer: both from one committed epoch
        got = reader.sql("SELECT s.n, s.total, (SELECT count(*) FROM t) AS rows FROM s").to_pylist()
        assert len(got) == 1 and got[0]["n"] == got[0]["total"] == got[0]["rows"], got
        assert got[0]["n"] % 10 == 0  # whole epochs only
        seen.add(got[0]["n"])
        if not thread.is_alive() and errors:
            break
    thread.join()
    assert errors == []
    assert max(seen) == 10 * (epochs + 1) and len(seen) > 1
    assert reader.epoch == writer.epoch
    assert reader.runtime.log._writers == {}  # never claimed a physical channel: no writer lock
    reader.close()


def test_read_only_rereads_when_the_writer_collected_its_files(open_db, root):
    """A reader holding a manifest whose files compaction replaced and GC deleted follows the
    newest manifest instead of failing with 'object ... is missing'."""
    writer = _writer(open_db)
    writer.insert("t", _batch(0))
    writer.flush()
    reader = millpond.connect(root, read_only=True)
    assert reader.read("s").to_pylist() == [{"n": 10, "total": 10}]
    for i in range(1, 7):  # enough L0 files for a compaction, which replaces the ones the reader knows
        writer.insert("t", _batch(i))
        writer.flush()
    state = writer.runtime.coordinator.state
    state.compact()
    state.collect_garbage()
    block_cache().clear()  # as in another process: the writer's compaction read the old files through it
    rt = reader.runtime
    with pytest.raises(StorageError, match="is missing"):  # what a read of the old version finds
        rt.snapshot("s")
    assert rt.read(lambda: rt.snapshot("s"), lambda: None).to_pylist() == [{"n": 70, "total": 70}]
    assert reader.sql("SELECT n FROM s").to_pylist() == [{"n": 70}]
    reader.close()


def test_read_only_refuses_writes_and_writes_nothing(open_db, root):
    writer = _writer(open_db)
    writer.insert("t", _batch(0))
    writer.flush()
    writer.close()
    before = _files(root)
    with millpond.connect(root, read_only=True) as reader:
        for statement in ("INSERT INTO t VALUES (1, 1)", "CREATE TABLE u (k INT)", "DROP MATERIALIZED VIEW s",
                          "FLUSH", "DELETE FROM t", "UPDATE t SET v = 2"):
            with pytest.raises(ReadOnlyError, match="open read-only"):
                reader.sql(statement)
        with pytest.raises(ReadOnlyError, match=r"INSERT is refused \(statement 2 of 2; nothing was run\)"):
            reader.sql("SELECT 1; INSERT INTO t VALUES (1, 1)")
        with pytest.raises(ReadOnlyError):
            reader.insert("t", _batch(1))
        with pytest.raises(ReadOnlyError):
            reader.flush()
        assert reader.sql("SELECT n FROM s").to_pylist() == [{"n": 10}]
        assert reader.sql("SHOW TABLES").column("name").to_pylist() == ["t"]
        assert reader.read("t").num_rows == 10
    assert _files(root) == before  # not a lock, not a pin, not a channel: nothing


def test_read_only_needs_an_existing_root(tmp_path):
    with pytest.raises(StorageError, match="no database at"):
        millpond.connect(str(tmp_path / "nothing"), read_only=True)
    assert not (tmp_path / "nothing").exists()


# -- errors ---------------------------------------------------------------------------------------
def test_bad_roots_are_refused_with_millpond_errors(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(MillpondError, match="root '': name the database's folder"):
        millpond.connect("")
    with pytest.raises(MillpondError, match="root '  '"):
        millpond.connect("  ")
    with pytest.raises(StorageError, match="is a file, not a folder"):
        millpond.connect(str(afile))
    with pytest.raises(StorageError, match="cannot create the root folder .*Not a directory"):
        millpond.connect(str(afile / "sub"))
    if Path("/sys/kernel").is_dir():  # a read-only filesystem, even for root
        with pytest.raises(StorageError, match="cannot (create the root folder|write under)"):
            millpond.connect("/sys/millpond-test-root")
    if os.geteuid() != 0:  # a read-only folder (root ignores permissions)
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        with pytest.raises(StorageError, match="cannot create the root folder"):
            millpond.connect(str(locked / "db"))
        with pytest.raises(StorageError, match="cannot write under"):
            millpond.connect(str(locked))


def test_a_script_says_which_statements_ran(open_db):
    db = open_db()
    with pytest.raises(CatalogError) as err:
        db.sql("CREATE TABLE a (k INT); INSERT INTO a VALUES (1); INSERT INTO nope VALUES (2); CREATE TABLE b (k INT)")
    assert str(err.value).startswith(
        "statement 3 of 4 failed (statements 1-2 were applied, the rest were not run): ")
    assert err.value.statement == 3
    db.flush()
    assert db.sql("SELECT k FROM a").to_pylist() == [{"k": 1}] and "b" not in db.catalog.tables
    with pytest.raises(SqlError, match="syntax error"):  # a syntax error anywhere: nothing runs
        db.sql("CREATE TABLE c (k INT); SELEC 1")
    assert "c" not in db.catalog.tables
    with pytest.raises(SqlError, match=r"^statement 1 of 2 failed \(nothing was applied, the rest were not run\)"):
        db.sql("SELECT nope FROM a; CREATE TABLE d (k INT)")


def test_unexpected_exceptions_become_millpond_errors(open_db, monkeypatch):
    db = open_db()
    db.sql("CREATE TABLE t (k INT)")
    monkeypatch.setattr(db.runtime, "snapshot", lambda *a, **k: 1 / 0)
    with pytest.raises(MillpondError, match="unexpected ZeroDivisionError: division by zero") as err:
        db.read("t")
    assert isinstance(err.value.__cause__, ZeroDivisionError)


# -- the command line -----------------------------------------------------------------------------
def _cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_errors_are_one_line(tmp_path, capsys):
    code, out, err = _cli(capsys, "sql", "", "-c", "SELECT 1")
    assert code == 1 and err.startswith("millpond: ROOT is empty") and err.count("\n") == 1
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, _, err = _cli(capsys, "sql", str(afile), "--read-only", "-c", "SELECT 1")
    assert code == 1 and err == f"millpond: root {str(afile)!r} is a file, not a folder\n"
    code, _, err = _cli(capsys, "log", "info", str(afile))
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err


def test_cli_sql_read_only(open_db, root, capsys):
    writer = _writer(open_db)
    writer.insert("t", _batch(0))
    writer.flush()
    code, out, err = _cli(capsys, "sql", root, "--read-only", "-c", "SHOW TABLES; SELECT n, total FROM s")
    assert (code, err) == (0, "")
    assert "│ t    │" in out and "(1 row)" in out and "│ 10 │    10 │" in out
    code, out, err = _cli(capsys, "sql", root, "--read-only", "--format", "json", "-c", "SELECT n FROM s")
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == [{"n": 10}]
    code, out, err = _cli(capsys, "sql", root, "--read-only", "-c", "SELECT 1 AS one; SELECT *\nFROM nope")
    assert code == 1 and "│   1 │" in out
    assert err == ('millpond: statement 2 of 2 failed (statement 1 was applied): relation "nope" does not '
                   'exist (line 2, column 6) HINT:  known tables and views: s, t\n')


def test_interactive_shell(open_db, root):
    writer = _writer(open_db)
    writer.insert("t", _batch(0))
    writer.flush()
    with millpond.connect(root, read_only=True) as db:
        typed = "SELECT n,\n  total\nFROM s;\nSELECT 'a;b' AS x;\nSELECT nope;\n\\d s\n\\d\n\\q\nSELECT 1;\n"
        out, err = io.StringIO(), io.StringIO()
        assert interactive(db, Printer(out, err), stdin=io.StringIO(typed)) == 0
    text = out.getvalue()
    assert "│ 10 │    10 │" in text  # a statement over three lines
    assert "│ a;b │" in text  # a ';' inside quotes does not end it
    assert "│ materialized view" in text and "│ depends on │" in text  # \d s
    assert "│ s    │" in text and "│ t    │" in text  # \d lists tables and views
    assert "│   1 │" not in text  # \q quit before it
    assert err.getvalue().startswith("error: ") and "nope" in err.getvalue() and err.getvalue().count("\n") == 1


def test_flush_progress_display(open_db, monkeypatch, capsys):
    from millpond import progress

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)
    monkeypatch.setattr(progress, "POLL_SECONDS", 0.05)
    db = _writer(open_db)
    db.insert("t", _batch(0, size=50_000))
    reports = db.flush(progress=True)
    assert [r.epoch for r in reports] == [db.epoch] and db.read("s").to_pylist() == [{"n": 50_000, "total": 50_000}]
    assert db.sql("FLUSH", progress=True) is None
    capsys.readouterr()  # the display went to stderr and is gone (transient)


BLOCKER = """
import sys
# a worker without millpond installed: the path an installed millpond is found on is gone (a shipped
# zip added later is found)
sys.path[:] = [p for p in sys.path if not p.rstrip("/").endswith("/src")]
"""


@pytest.mark.slow  # a process of its own, with its own Spark (make slow, which CI runs)
def test_a_session_whose_workers_lack_millpond_is_refused_with_the_fix_or_shipped_to(tmp_path):
    """A user's session whose Python workers cannot import millpond: connect says so, with the fix,
    before any epoch; connect(ship=True) adds millpond to the session, and views then run."""
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCKER)
    wrapper = tmp_path / "worker-python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'block'}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    script = textwrap.dedent(f"""
        import millpond
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        try:
            millpond.connect({str(tmp_path / 'a')!r}, spark=spark, interval=None)
        except millpond.MillpondError as exc:
            print("REFUSED", exc)
        db = millpond.connect({str(tmp_path / 'b')!r}, spark=spark, interval=None, ship=True)
        db.sql("CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW s AS SELECT v, count(*) AS n FROM t GROUP BY v;"
               "INSERT INTO t VALUES (1, 7), (2, 7); FLUSH")
        print(db.sql("SELECT * FROM s").to_pylist())
        db.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=quiet_env() | {"PYSPARK_PYTHON": str(wrapper)})  # the workers' Python
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("REFUSED Spark's Python workers") and "cannot import millpond" in lines[0], lines
    assert "ship=True" in lines[0] and "PYSPARK_PYTHON" in lines[0]
    assert lines[-1] == "[{'v': 7, 'n': 2}]", done.stdout

"""Fault isolation: a runtime error in one view stops that view only.

The failing view keeps its state and offsets at its last good epoch and is marked failed (name,
error class, expression, offending row); tables and every other view keep committing; the user
sees the failure and drops or recreates the view. In ``strict = false`` views, errors are NULLs.
"""

from __future__ import annotations

import time

import pytest

import millpond
from millpond.errors import MillpondError, SqlError
from tests.conftest import rows


def _setup(db: millpond.Database) -> None:
    db.sql("CREATE TABLE t (k INT, v INT)")
    db.sql("CREATE MATERIALIZED VIEW good AS SELECT count(*) AS n, sum(v) AS s FROM t")
    db.sql("CREATE MATERIALIZED VIEW d AS SELECT k, 10 / v AS r FROM t")
    db.sql("INSERT INTO t VALUES (1, 2), (2, 5)")
    db.flush()


def test_a_failing_view_is_isolated_and_the_rest_commit(open_db, caplog):
    db = open_db()
    _setup(db)
    assert rows(db.sql("SELECT * FROM d")) == [(1, 5), (2, 2)]
    good_epoch = db.epoch
    db.sql("INSERT INTO t VALUES (3, 0), (4, 1)")
    with caplog.at_level("WARNING", logger="millpond"):
        db.flush()  # does not raise: the other views and the table commit
    # the log line names the view and its column as written, not the SQL millpond generated
    assert [r.getMessage() for r in caplog.records if "view 'd' failed" in r.getMessage()][0].count("'r = 10 / v'") == 1
    assert db.epoch > good_epoch
    assert rows(db.sql("SELECT * FROM good")) == [(4, 8)]
    assert rows(db.sql("SELECT k, v FROM t")) == [(1, 2), (2, 5), (3, 0), (4, 1)]
    # the failure is visible and says what, where and on which row
    status = {r["name"]: r for r in db.sql("SELECT * FROM millpond_views").to_pylist()}
    assert status["good"]["status"] == "running" and status["good"]["error"] is None
    failed = status["d"]
    assert failed["status"] == "failed" and failed["epoch"] == good_epoch
    assert "division by zero in 'r = 10 / v' (SQLSTATE 22012)" in failed["error"], failed["error"]
    assert "k=3" in failed["error"] and "v=0" in failed["error"]
    with pytest.raises(MillpondError, match=r"view 'd' failed.*division by zero"):
        db.sql("SELECT * FROM d")
    # later epochs go on without it, and it stays failed
    db.sql("INSERT INTO t VALUES (5, 1)")
    db.flush()
    assert rows(db.sql("SELECT * FROM good")) == [(5, 9)]
    assert db.sql("SELECT status FROM millpond_views WHERE name = 'd'").column(0).to_pylist() == ["failed"]
    # the user fixes it: drop and recreate
    db.sql("DROP MATERIALIZED VIEW d")
    db.sql("CREATE MATERIALIZED VIEW d AS SELECT k, 10 / nullif(v, 0) AS r FROM t")
    db.flush()
    assert rows(db.sql("SELECT * FROM d")) == [(1, 5), (2, 2), (3, None), (4, 10), (5, 10)]


def test_the_failure_survives_a_restart(open_db, root):
    db = open_db()
    _setup(db)
    db.sql("INSERT INTO t VALUES (3, 0)")
    db.flush()
    db.close()
    again = open_db()
    assert again.sql("SELECT status FROM millpond_views WHERE name = 'd'").column(0).to_pylist() == ["failed"]
    again.sql("INSERT INTO t VALUES (4, 1)")
    again.flush()
    assert rows(again.sql("SELECT * FROM good")) == [(4, 8)]


def test_on_error_null_views_turn_data_errors_into_nulls(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT, s VARCHAR)")
    db.sql("CREATE MATERIALIZED VIEW lax WITH (on_error = 'null') AS "
           "SELECT k, 10 / v AS r, CAST(s AS INT) + 1 AS i FROM t")
    db.sql("SET on_error = 'null'")  # the default of views created from now on
    db.sql("CREATE MATERIALIZED VIEW lax2 AS SELECT k, v * 2147483647 AS big FROM t")
    db.sql("SET on_error = 'fail'")
    db.sql("CREATE MATERIALIZED VIEW strict AS SELECT k, CAST(s AS INT) AS i FROM t")
    db.sql("INSERT INTO t VALUES (1, 0, 'x'), (2, 5, '7')")
    db.flush()
    assert rows(db.sql("SELECT * FROM lax")) == [(1, None, None), (2, 2, 8)]
    assert rows(db.sql("SELECT * FROM lax2")) == [(1, 0), (2, None)]  # INT overflow: NULL
    status = {r["name"]: r for r in db.sql("SELECT * FROM millpond_views").to_pylist()}
    assert [status[n]["status"] for n in ("lax", "lax2", "strict")] == ["running", "running", "failed"]
    assert [status[n]["on_error"] for n in ("lax", "lax2", "strict")] == ["null", "null", "fail"]
    assert 'invalid input syntax for type integer: "x"' in status["strict"]["error"] and "s='x'" in status["strict"]["error"]
    with pytest.raises(SqlError, match="on_error"):
        db.sql("CREATE MATERIALIZED VIEW bad WITH (on_error = 'skip') AS SELECT k FROM t")


def test_background_epochs_keep_going_past_a_failing_view(spark, root):
    db = millpond.connect(root, spark=spark, parallelism=2, interval="100ms")
    try:
        _setup(db)
        db.sql("INSERT INTO t VALUES (3, 0)")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = db.sql("SELECT status FROM millpond_views WHERE name = 'd'").column(0).to_pylist()
            if status == ["failed"]:
                break
            time.sleep(0.2)
        assert status == ["failed"]
        db.sql("INSERT INTO t VALUES (4, 1)")
        deadline = time.monotonic() + 60
        while rows(db.sql("SELECT * FROM good")) != [(4, 8)] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rows(db.sql("SELECT * FROM good")) == [(4, 8)]
        db.sql("DROP MATERIALIZED VIEW d")  # every call works: the loop did not stop
        assert "d" not in db.catalog.views
    finally:
        db.close()


def test_an_error_outside_the_views_data_fails_the_epoch_and_marks_nothing(open_db, monkeypatch):
    """Only a view's data errors (SQLSTATE class 22: division by zero, bad casts, overflow) isolate
    a view; anything else (storage, a lost executor) fails the epoch as a whole, to be retried."""
    from millpond.spark import SparkExecutor

    db = open_db()
    _setup(db)
    before = db.epoch
    db.sql("INSERT INTO t VALUES (3, 1)")

    def down(*_a, **_k):
        raise OSError("connection refused: the object store is unreachable")

    with monkeypatch.context() as m:
        m.setattr(SparkExecutor, "run", down)
        with pytest.raises(MillpondError, match=rf"epoch {before + 1} failed and was not committed.*unreachable"):
            db.flush()
    assert db.epoch == before
    assert {r["status"] for r in db.sql("SELECT status FROM millpond_views").to_pylist()} == {"running"}
    db.flush()  # the cause is gone: the same epoch commits
    assert rows(db.sql("SELECT * FROM d")) == [(1, 5), (2, 2), (3, 10)]


def test_background_epochs_retry_an_outage_and_calls_keep_working(spark, root, monkeypatch):
    """A failure that is not a view's data (here: two failed jobs) is retried with backoff; the
    API is not blocked meanwhile, and the epoch commits once the cause is gone."""
    from millpond.engine import background
    from millpond.spark import SparkExecutor

    monkeypatch.setattr(background, "MAX_BACKOFF", 0.5)
    db = millpond.connect(root, spark=spark, parallelism=2, interval="100ms")
    try:
        db.sql("CREATE TABLE t (k INT, v INT)")
        db.sql("CREATE MATERIALIZED VIEW good AS SELECT count(*) AS n FROM t")
        real, failures = SparkExecutor.run, []

        def flaky(self, *a, **k):
            if len(failures) < 2:
                failures.append(1)
                raise OSError("connection reset by the object store")
            return real(self, *a, **k)

        monkeypatch.setattr(SparkExecutor, "run", flaky)
        db.sql("INSERT INTO t VALUES (1, 1)")
        def good() -> list | None:  # every call answers while the loop retries: not filled yet, or its rows
            try:
                return rows(db.sql("SELECT * FROM good"))
            except MillpondError as exc:
                assert "has not been populated" in str(exc)
                return None
        deadline = time.monotonic() + 60
        while good() != [(1,)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert good() == [(1,)]
        assert len(failures) == 2
    finally:
        db.close()


def test_millpond_epochs_counts_each_epochs_rows_in_and_out(open_db):
    db = open_db()
    _setup(db)
    db.sql("INSERT INTO t VALUES (3, 1)")
    db.flush()
    got = db.sql("SELECT epoch, name, rows_in, rows_out, state_bytes > 0 AS has_state FROM millpond_epochs "
                 "ORDER BY epoch, name").to_pylist()
    first, second = db.epoch - 1, db.epoch
    assert got == [
        {"epoch": first, "name": "d", "rows_in": 2, "rows_out": 2, "has_state": True},
        {"epoch": first, "name": "good", "rows_in": 2, "rows_out": 1, "has_state": True},
        {"epoch": first, "name": "t", "rows_in": 2, "rows_out": None, "has_state": False},  # its log is its rows
        {"epoch": second, "name": "d", "rows_in": 1, "rows_out": 1, "has_state": True},
        {"epoch": second, "name": "good", "rows_in": 1, "rows_out": 2, "has_state": True},  # -old +new
        {"epoch": second, "name": "t", "rows_in": 1, "rows_out": None, "has_state": False},
    ]
    lag = db.sql("SELECT name, lag FROM millpond_views ORDER BY name").to_pylist()
    assert lag == [{"name": "d", "lag": 0}, {"name": "good", "lag": 0}]
    db.sql("INSERT INTO t VALUES (4, 1), (5, 1)")
    assert db.sql("SELECT lag FROM millpond_views WHERE name = 'good'").column(0).to_pylist() == [2]


def test_a_bug_in_one_views_operator_fails_that_view_alone(open_db, monkeypatch):
    """An InvariantError a view's task raises (millpond's bug: TPC-H's Q3 hit one, a count going
    negative) failed every epoch of every view; it fails that view alone, as an internal error."""
    from millpond.engine.operators import HashAggregate
    from millpond.errors import InvariantError

    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    db.sql("CREATE MATERIALIZED VIEW buggy AS SELECT v, count(*) AS n FROM t GROUP BY v")
    db.sql("CREATE MATERIALIZED VIEW fine AS SELECT k, v FROM t WHERE v > 0")
    db.sql("INSERT INTO t VALUES (1, 1)")
    db.flush()
    apply = HashAggregate.apply

    def broken(self, delta, states):  # noqa: ANN001, ANN202
        if self.name.startswith("buggy"):
            raise InvariantError(f"aggregate {self.name}: a group's row count went negative")
        return apply(self, delta, states)

    monkeypatch.setattr(HashAggregate, "apply", broken)
    db.sql("INSERT INTO t VALUES (2, 2)")
    db.flush()
    status = {r["name"]: r for r in db.sql("SELECT name, status, error FROM millpond_views").to_pylist()}
    assert status["fine"]["status"] == "running" and rows(db.sql("SELECT * FROM fine")) == [(1, 1), (2, 2)]
    assert status["buggy"]["status"] == "failed"
    assert "internal error (please report it): aggregate buggy" in status["buggy"]["error"]
    assert "SQLSTATE XX000" in status["buggy"]["error"] and "NULLIF" not in status["buggy"]["error"]
    db.sql("INSERT INTO t VALUES (3, 3)")
    db.flush()  # the others go on
    assert rows(db.sql("SELECT * FROM fine")) == [(1, 1), (2, 2), (3, 3)]


def test_a_view_over_a_view_that_fails_is_isolated_with_the_view_it_reads_running(open_db):
    """Probing which view failed runs each part with the views it reads (a view over a view sees
    nothing without them): the failing one is found, the view it reads and the others commit."""
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT)")
    db.sql("CREATE MATERIALIZED VIEW totals AS SELECT g, sum(v) AS s, count(*) AS n FROM t GROUP BY g")
    db.sql("CREATE MATERIALIZED VIEW ratio AS SELECT g, s / (n - 1) AS r FROM totals")
    db.sql("CREATE MATERIALIZED VIEW top AS SELECT max(s) AS m FROM totals")
    db.sql("INSERT INTO t VALUES (1, 1, 10), (2, 1, 20), (3, 2, 5), (4, 2, 7)")
    db.flush()
    assert rows(db.sql("SELECT * FROM ratio")) == [(1, 30), (2, 12)]
    db.sql("INSERT INTO t VALUES (5, 3, 4)")  # a group of one: n - 1 = 0
    db.flush()
    assert rows(db.sql("SELECT * FROM totals")) == [(1, 30, 2), (2, 12, 2), (3, 4, 1)]
    assert rows(db.sql("SELECT * FROM top")) == [(30,)]
    failed = {r["name"]: r for r in db.sql("SELECT * FROM millpond_views").to_pylist() if r["status"] == "failed"}
    assert list(failed) == ["ratio"]
    assert "division by zero" in failed["ratio"]["error"] and "totals: one of its changes" in failed["ratio"]["error"]
    with pytest.raises(MillpondError, match="view 'ratio' failed"):
        db.sql("SELECT * FROM ratio")

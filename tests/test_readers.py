"""Reader processes (``db.serve(readers=N)``, :mod:`millpond.readers`): queries answered by
processes that open the root read-only, checked against DuckDB over the rows the test inserted; a
client's writes are seen by its next query once committed; a reader that dies is replaced."""

from __future__ import annotations

import time

import duckdb
import numpy as np
import psycopg
import pyarrow as pa
import pytest

from tests.test_pgwire import _count_answers, _wait_ready


@pytest.fixture
def served(open_db):
    db = open_db()
    db.sql("""CREATE TABLE t (k BIGINT PRIMARY KEY, g INT, v DOUBLE);
              CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g""")
    server = db.serve(port=0, readers=2)
    answered = _count_answers(server)
    yield db, server, answered
    server.close()


def _connect(server) -> psycopg.Connection:  # noqa: ANN001
    return psycopg.connect(host="127.0.0.1", port=server.port, user="u", dbname="millpond", autocommit=True)


def test_readers_answer_as_the_writer_would_and_see_committed_writes(served):
    db, server, answered = served
    rng = np.random.default_rng(3)
    rows = pa.table({"k": np.arange(2000), "g": rng.integers(0, 20, 2000).astype(np.int32), "v": rng.random(2000)})
    db.insert("t", rows)
    db.flush()
    _wait_ready(server, 2)
    oracle = duckdb.connect()
    oracle.register("t", rows)
    with _connect(server) as conn:
        for g in (0, 7, 19, 99):
            got = conn.execute("SELECT n, total FROM per_g WHERE g = %s", (g,)).fetchall()
            want = oracle.sql(f"SELECT count(*), sum(v) FROM t WHERE g = {g} HAVING count(*) > 0").fetchall()
            assert [(n, pytest.approx(s)) for n, s in got] == want
        got = conn.execute("SELECT g, count(*) FROM t WHERE v > 0.5 GROUP BY g ORDER BY g").fetchall()
        assert got == oracle.sql("SELECT g, count(*) FROM t WHERE v > 0.5 GROUP BY g ORDER BY g").fetchall()
        assert answered["rows"] == 5
        # a write through the wire runs in the writer; the next query (a reader's) sees it committed
        conn.execute("INSERT INTO t VALUES (5000, 99, 2.5)")
        conn.execute("FLUSH")
        assert conn.execute("SELECT n, total FROM per_g WHERE g = 99").fetchall() == [(1, 2.5)]
        # a view created just now: a reader adopts the new catalog
        conn.execute("CREATE MATERIALIZED VIEW big AS SELECT k FROM t WHERE v > 2")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match='"big" has not been populated'):
            conn.execute("SELECT k FROM big")  # as in the writer: filled by the next epoch
        conn.execute("FLUSH")
        assert conn.execute("SELECT k FROM big").fetchall() == [(5000,)]
        assert answered["rows"] == 7  # (the query of big before its first epoch raised: not an answer)
        # what a reader declines runs in the writer's process: system views, AS OF, SHOW
        assert conn.execute("SELECT count(*) FROM millpond_views WHERE name = 'big'").fetchone() == (1,)
        assert conn.execute(f"SELECT n FROM per_g AS OF EPOCH {db.epoch - 2} WHERE g = 99").fetchall() == []
        assert answered["rows"] == 7 and answered["back"] >= 2


def test_a_reader_that_dies_is_replaced_and_close_stops_them(served):
    db, server, answered = served
    db.sql("INSERT INTO t VALUES (1, 1, 1.0)")
    db.flush()
    _wait_ready(server, 2)
    processes = [r.process for r in server.readers._all]  # noqa: SLF001
    for p in processes:
        p.kill()
        p.wait()
    with _connect(server) as conn:
        for _ in range(3):  # the dead readers pass their queries back; the writer's process answers
            assert conn.execute("SELECT n FROM per_g WHERE g = 1").fetchall() == [(1,)]
        _wait_ready(server, 2)  # replaced
        before = answered["rows"]
        assert conn.execute("SELECT n FROM per_g WHERE g = 1").fetchall() == [(1,)]
        assert answered["rows"] == before + 1
    replacements = [r.process for r in server.readers._all]  # noqa: SLF001
    assert len(replacements) == 2 and not set(replacements) & set(processes)
    server.close()
    assert all(p.poll() is not None for p in replacements)
    with pytest.raises(ValueError, match="readers=-1"):
        db.serve(port=0, readers=-1)


def test_a_reader_that_cannot_open_the_root_is_reported(open_db, caplog, monkeypatch, tmp_path):
    db = open_db()
    server = db.serve(port=0, readers=1)
    try:
        assert server.readers.ready == 0
    finally:
        server.close()
    monkeypatch.setattr(db, "root", str(tmp_path / "nothing here"))  # the readers' open fails: logged
    with caplog.at_level("WARNING", logger="millpond"):
        server = db.serve(port=0, readers=1)
        try:
            deadline = time.monotonic() + 120
            while server.readers._all and time.monotonic() < deadline:  # noqa: SLF001
                time.sleep(0.05)
            assert "could not open the root" in caplog.text
            with _connect(server) as conn:  # queries still answered, by the writer's process
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            server.close()

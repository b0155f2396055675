"""``ALTER TABLE t RENAME TO u``: the table keeps its rows, its log (a renamed table's channel keeps
its name: nothing is rewritten), its indexes and the sinks that write it out; a table created later
with the old name is a table of its own. Checked against DuckDB over a model of both tables after
every epoch of random inserts, updates and deletes, through a view made after the rename, a reopen,
a drop of the renamed table, and the log's Spark sink."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

import millpond
from millpond.errors import MillpondError

JOINED = "SELECT f.g, count(*) AS n, sum(u.v) AS s FROM u JOIN f ON u.k = f.k GROUP BY f.g"


def _sorted(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=lambda r: tuple((v is not None, v) for v in r))


def _got(db: millpond.Database, sql: str) -> list[tuple]:
    return _sorted([tuple(r.values()) for r in db.sql(sql).to_pylist()])


class Model:
    """Keyed table ``u`` (k, v) and key-less ``f`` (k, g) as Python rows: the oracle's input."""

    def __init__(self) -> None:
        self.keyed: dict[int, int] = {}
        self.keyless: list[tuple[int, str]] = []

    def query(self, sql: str) -> list[tuple]:
        con = duckdb.connect()
        con.register("u", pa.table({"k": pa.array(list(self.keyed), pa.int32()),
                                    "v": pa.array(list(self.keyed.values()), pa.int64())}))
        con.register("f", pa.table({"k": pa.array([r[0] for r in self.keyless], pa.int32()),
                                    "g": pa.array([r[1] for r in self.keyless], pa.string())}))
        return _sorted(con.sql(sql).fetchall())


def _change(db: millpond.Database, model: Model, rng: random.Random, keyed: str, keyless: str) -> None:
    """Random inserts, updates and deletes through SQL, into the tables as they are named now."""
    for _ in range(rng.randint(3, 8)):
        k = rng.randrange(40)
        if k in model.keyed and rng.random() < 0.3:
            db.sql(f"DELETE FROM {keyed} WHERE k = {k}")
            del model.keyed[k]
        elif k in model.keyed:
            v = rng.randrange(1000)
            db.sql(f"UPDATE {keyed} SET v = {v} WHERE k = {k}")
            model.keyed[k] = v
        else:
            v = rng.randrange(1000)
            db.sql(f"INSERT INTO {keyed} VALUES ({k}, {v})")
            model.keyed[k] = v
    for _ in range(rng.randint(1, 4)):
        row = (rng.randrange(40), rng.choice("xyz"))
        db.sql(f"INSERT INTO {keyless} VALUES ({row[0]}, '{row[1]}')")
        model.keyless.append(row)
    if model.keyless and rng.random() < 0.4:
        gone = rng.choice(model.keyless)
        db.sql(f"DELETE FROM {keyless} WHERE k = {gone[0]} AND g = '{gone[1]}'")
        model.keyless = [r for r in model.keyless if r != gone]


def _check(db: millpond.Database, model: Model, where: str) -> None:
    assert _got(db, "SELECT k, v FROM u") == model.query("SELECT k, v FROM u"), where
    assert _got(db, "SELECT k, g FROM f") == model.query("SELECT k, g FROM f"), where
    assert _got(db, "SELECT * FROM joined") == model.query(JOINED), where
    assert _got(db, "SELECT v, count(*) FROM u WHERE v < 500 GROUP BY v") == model.query(
        "SELECT v, count(*) FROM u WHERE v < 500 GROUP BY v"), where  # through the index on v


def test_a_renamed_table_keeps_its_rows_log_index_and_sink(spark, root, tmp_path):
    from deltalake import DeltaTable

    rng, model = random.Random(11), Model()
    db = millpond.connect(root, spark=spark)
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
    db.sql("CREATE TABLE e (k INT, g TEXT)")
    db.sql("CREATE INDEX t_v ON t (v)")
    db.sql(f"CREATE SINK out FROM t WITH (connector = 'deltalake', location = '{tmp_path / 'out'}', type = 'upsert')")
    for _ in range(2):
        _change(db, model, rng, "t", "e")
        db.flush()
    db.sql("CREATE MATERIALIZED VIEW over_t AS SELECT count(*) AS n FROM t")
    with pytest.raises(MillpondError, match="over_t"):  # a view's SQL names it: refused, naming the view
        db.sql("ALTER TABLE t RENAME TO u")
    db.sql("DROP MATERIALIZED VIEW over_t")
    db.sql("ALTER TABLE t RENAME TO u")
    db.sql("ALTER TABLE IF EXISTS e RENAME TO f")
    db.sql("ALTER TABLE IF EXISTS nothing RENAME TO other")  # nothing to rename: nothing done
    with pytest.raises(MillpondError, match='"t" does not exist'):
        db.sql("SELECT * FROM t")
    with pytest.raises(MillpondError, match="already exists"):
        db.sql("ALTER TABLE u RENAME TO f")
    db.sql(f"CREATE MATERIALIZED VIEW joined AS {JOINED}")  # over the new names: backfilled from rows and log
    db.flush()
    _check(db, model, "after the rename")
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, w TEXT)")  # the old name again: a table of its own
    db.sql("INSERT INTO t VALUES (1, 'new')")
    for epoch in range(3):
        _change(db, model, rng, "u", "f")
        db.flush()
        _check(db, model, f"epoch {epoch} after the rename")
    assert db.sql("SELECT * FROM t").to_pylist() == [{"k": 1, "w": "new"}]
    target = DeltaTable(str(tmp_path / "out")).to_pyarrow_table().select(["k", "v"])
    assert _sorted([tuple(r.values()) for r in target.to_pylist()]) == model.query("SELECT k, v FROM u")
    db.close()

    db = millpond.connect(root, spark=spark)  # reopened: the names, rows and channels as they were
    _check(db, model, "reopened")
    _change(db, model, rng, "u", "f")
    db.flush()
    _check(db, model, "an epoch after the reopen")
    assert db.sql("SELECT * FROM t").to_pylist() == [{"k": 1, "w": "new"}]
    db.sql("DROP MATERIALIZED VIEW joined")
    db.sql("DROP SINK out")
    db.sql("DROP TABLE u")  # its channel goes, the new t's stays
    db.sql("INSERT INTO t VALUES (2, 'more')")
    db.flush()
    assert _got(db, "SELECT * FROM t") == [(1, "new"), (2, "more")]
    assert _got(db, "SELECT k, g FROM f") == model.query("SELECT k, g FROM f")
    db.close()


def test_writers_outside_sql_write_the_table_of_their_name(spark, root, capsys, monkeypatch):
    """The log's Spark sink and ``millpond log append`` writing into table ``t`` after ``t`` was
    renamed to ``u``: the channel named ``t`` is ``u``'s, so they are refused until a table ``t``
    exists again, then write that table (never ``u``); writing ``u`` goes into its channel."""
    import io
    import sys

    from millpond.cli import main

    def append(name: str, line: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": io.BytesIO(line.encode())})())
        code = main(["log", "append", root, name])
        return code, capsys.readouterr().err

    from millpond.log import Log
    from millpond.spark.log_source import _sink_channel
    from millpond.store.objects import open_store

    db = millpond.connect(root, spark=spark)
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
    db.sql("INSERT INTO t VALUES (1, 10)")
    db.flush()
    db.sql("ALTER TABLE t RENAME TO u")
    log = Log(open_store(root))
    try:
        with pytest.raises(MillpondError, match="no table named 't'"):
            _sink_channel(log, "t", db.runtime.catalog.tables["u"].schema)
        assert _sink_channel(log, "u", db.runtime.catalog.tables["u"].schema).name == "t"  # its channel's name
        code, err = append("t", '{"k": 2, "v": 20}\n')
        assert code != 0 and "no table named 't'" in err, err
        assert append("u", '{"k": 3, "v": 30}\n')[0] == 0
        db.sql("CREATE TABLE t (k INT PRIMARY KEY, w TEXT)")
        assert _sink_channel(log, "t", db.runtime.catalog.tables["t"].schema).name == db.runtime.catalog.tables["t"].channel
    finally:
        log.close()
    assert db.runtime.catalog.tables["t"].channel != "t"
    assert append("t", '{"k": 4, "w": "new"}\n')[0] == 0
    db.flush()
    assert _got(db, "SELECT * FROM u") == [(1, 10), (3, 30)]
    assert db.sql("SELECT * FROM t").to_pylist() == [{"k": 4, "w": "new"}]
    db.close()


def test_what_rename_refuses_names_the_problem(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
    db.sql("CREATE FLOW fl SINK TO s AS SELECT k, count(*) AS n FROM t GROUP BY k")
    with pytest.raises(MillpondError, match="fl"):  # a flow reads t
        db.sql("ALTER TABLE t RENAME TO t2")
    with pytest.raises(MillpondError, match="sink of flow 'fl'"):
        db.sql("ALTER TABLE s RENAME TO s2")
    with pytest.raises(MillpondError, match='relation "missing" does not exist|"missing" does not exist'):
        db.sql("ALTER TABLE missing RENAME TO other")


def test_a_renamed_source_table_goes_on_reading_its_source(open_db, tmp_path):
    """A files table renamed: the files that land after it are read into it (a source is followed
    by the table's id, not its name)."""
    import pyarrow.parquet as pq

    folder = tmp_path / "landing"
    folder.mkdir()
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int32())}), folder / "a.parquet")
    db = open_db()
    db.sql(f"CREATE TABLE landing (k INT) WITH (connector = 'files', path = '{folder}', format = 'parquet')")
    db.flush()
    db.sql("ALTER TABLE landing RENAME TO landed")
    pq.write_table(pa.table({"k": pa.array([3], pa.int32())}), folder / "b.parquet")
    db.sql("CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(k) AS s FROM landed")
    db.flush()
    assert db.sql("SELECT * FROM total").to_pylist() == [{"n": 3, "s": 6}]
    assert db.sql("SELECT table_name FROM millpond_sources").column(0).to_pylist() == ["landed"]

"""A keyed table's log is truncated once nothing will read it again: every consumer committed past
it and the kept changes (``SET retention``) no longer include it; a key-less table's log (its rows)
is compacted to the rows it leaves below the same point. Views, a view created after the
truncation, kept changes, a reopened root and a process killed in the middle of a truncation all
still answer as DuckDB does over the rows the test wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from millpond import paths
from millpond.errors import RetentionError
from tests.conftest import rows

REPO = Path(__file__).resolve().parent.parent
SCHEMA = """CREATE TABLE kv (k INT PRIMARY KEY, g INT, v BIGINT);
            CREATE TABLE names (g INT PRIMARY KEY, name VARCHAR);
            CREATE TABLE ev (g INT, v BIGINT);
            CREATE INDEX kv_g ON kv (g);
            CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM kv GROUP BY g;
            CREATE MATERIALIZED VIEW named AS SELECT n.name, count(*) AS c, sum(kv.v) AS s
                FROM kv JOIN names AS n ON kv.g = n.g GROUP BY n.name;
            CREATE MATERIALIZED VIEW ev_g AS SELECT g, sum(v) AS s FROM ev GROUP BY g;
            SET retention = '3 epochs'"""
VIEWS = {"per_g": "SELECT g, count(*) AS n, sum(v) AS s FROM kv GROUP BY g",
         "named": "SELECT n.name, count(*) AS c, sum(kv.v) AS s FROM kv JOIN names AS n ON kv.g = n.g GROUP BY n.name",
         "ev_g": "SELECT g, sum(v) AS s FROM ev GROUP BY g"}


def _step(db, model: dict, rng: np.random.Generator) -> None:  # noqa: ANN001
    k = rng.integers(0, 60, 30).astype(np.int32)
    g = rng.integers(0, 5, 30).astype(np.int32)
    v = rng.integers(-9, 9, 30)
    db.insert("kv", pa.table({"k": k, "g": g, "v": v}))
    for a, b, c in zip(k.tolist(), g.tolist(), v.tolist()):
        model["kv"][a] = (b, c)
    gone = int(rng.integers(0, 60))
    db.sql(f"DELETE FROM kv WHERE k = {gone}")
    model["kv"].pop(gone, None)
    db.insert("ev", pa.table({"g": g[:5], "v": v[:5]}))
    model["ev"] += list(zip(g[:5].tolist(), v[:5].tolist()))
    hit = int(rng.integers(0, 5))
    db.sql(f"UPDATE ev SET v = v + 1 WHERE g = {hit}")  # a key-less table's updates and deletes
    model["ev"] = [(a, b + 1 if a == hit else b) for a, b in model["ev"]]
    db.sql("DELETE FROM ev WHERE v > 6")
    model["ev"] = [(a, b) for a, b in model["ev"] if b <= 6]
    db.flush()


def _oracle(model: dict) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("kv", pa.table({"k": pa.array(list(model["kv"]), pa.int32()),
                                 "g": pa.array([g for g, _ in model["kv"].values()], pa.int32()),
                                 "v": pa.array([v for _, v in model["kv"].values()], pa.int64())}))
    con.register("names", pa.table({"g": pa.array(range(5), pa.int32()), "name": [f"n{i % 3}" for i in range(5)]}))
    con.register("ev", pa.table({"g": pa.array([g for g, _ in model["ev"]], pa.int32()),
                                 "v": pa.array([v for _, v in model["ev"]], pa.int64())}))
    return con


def _check(db, model: dict) -> None:  # noqa: ANN001
    con = _oracle(model)
    for name, sql in VIEWS.items():
        assert rows(db.sql(f"SELECT * FROM {name}")) == rows(con.sql(sql).to_arrow_table()), name
    assert rows(db.sql("SELECT * FROM kv")) == rows(con.sql("SELECT * FROM kv").to_arrow_table())


def _opened(open_db, monkeypatch, *, seed: int):  # noqa: ANN001, ANN202
    """A database with the schema, the model of its rows and the workload's random source; a pass
    compacts a key-less log however short it is."""
    from millpond.engine import upkeep

    monkeypatch.setattr(upkeep, "TRUNCATE_FLUSH_RECORDS", 0)
    db = open_db()
    db.sql(SCHEMA)
    db.sql("INSERT INTO names VALUES " + ", ".join(f"({i}, 'n{i % 3}')" for i in range(5)))
    return db, {"kv": {}, "ev": []}, np.random.default_rng(seed)


def _start(db, name: str) -> int:  # noqa: ANN001
    return db.runtime.channel(db.runtime.catalog.tables[name]).start


def _stored(db, name: str) -> int:  # noqa: ANN001
    """Records a table's log keeps in storage (a compacted range keeps only its live rows)."""
    channel = db.runtime.channel(db.runtime.catalog.tables[name])
    return channel.read(channel.start, channel.end).num_rows


def test_keyed_tables_logs_are_truncated_and_everything_still_reads(open_db, root, monkeypatch):
    db, model, rng = _opened(open_db, monkeypatch, seed=2)
    for i in range(10):
        _step(db, model, rng)
        if i % 3 == 2:
            db.runtime.log.flush()  # a full segment would be flushed by itself (64 MiB)
            db.runtime.truncate_logs()
            _check(db, model)
    kv_start = _start(db, "kv")
    assert kv_start > 0 and _start(db, "ev") == 0  # a key-less table's log is its rows: compacted, not cut
    ev = db.runtime.channel(db.runtime.catalog.tables["ev"])
    assert _stored(db, "ev") < ev.end  # updates and deletes cancelled with the rows they changed
    # what was truncated is gone from storage too
    store = db.runtime.log.store
    tid = db.runtime.catalog.tables["kv"].channel_id
    ends = [paths.parse_log_data_key(k)[1] for k in store.list(paths.log_data_prefix(tid)) if k.endswith(".parquet")]
    assert ends and min(ends) > kv_start
    # kept changes: the last epochs read, the older ones are refused by retention, not by the log
    epoch = db.runtime.coordinator.manifest.epoch
    assert sum(c.num_rows for c in db.runtime.changes("kv", epoch - 2)) > 0
    with pytest.raises(RetentionError):
        list(db.runtime.changes("kv", 0))
    # a view created after the truncation reads the table's rows and the log after them
    db.sql("CREATE MATERIALIZED VIEW late AS SELECT g, max(v) AS top, count(*) AS n FROM kv GROUP BY g")
    db.sql("CREATE MATERIALIZED VIEW late_ev AS SELECT g, min(v) AS low, count(*) AS n FROM ev GROUP BY g")
    _step(db, model, rng)
    late = "SELECT g, max(v) AS top, count(*) AS n FROM kv GROUP BY g"
    late_ev = "SELECT g, min(v) AS low, count(*) AS n FROM ev GROUP BY g"
    assert rows(db.sql("SELECT * FROM late")) == rows(_oracle(model).sql(late).to_arrow_table())
    assert rows(db.sql("SELECT * FROM late_ev")) == rows(_oracle(model).sql(late_ev).to_arrow_table())
    db.close()
    db = open_db()  # recovery reads the truncated log from its start
    _step(db, model, rng)
    _check(db, model)
    assert rows(db.sql("SELECT * FROM late")) == rows(_oracle(model).sql(late).to_arrow_table())
    assert rows(db.sql("SELECT * FROM late_ev")) == rows(_oracle(model).sql(late_ev).to_arrow_table())
    for _ in range(3):  # compacting again rewrites the compacted range with what came after it
        _step(db, model, rng)
    db.runtime.log.flush()
    assert "ev" in db.runtime.truncate_logs()
    _check(db, model)
    assert rows(db.sql("SELECT * FROM ev")) == rows(_oracle(model).sql("SELECT * FROM ev").to_arrow_table())


def test_a_read_only_follower_reads_on_while_the_writer_truncates_and_compacts(open_db, root, monkeypatch):
    """A read-only process keeps the log files it knew; once the writer replaced them (a flush, a
    compaction: no new manifest version), its read finds one gone, follows again and answers."""
    import millpond
    from millpond.engine.readonly import ReadOnlyRuntime

    db, model, rng = _opened(open_db, monkeypatch, seed=5)
    reader = millpond.connect(root, read_only=True)
    retries: list[float] = []
    monkeypatch.setattr(ReadOnlyRuntime, "sleep", staticmethod(retries.append))
    compacted = 0
    try:
        for i in range(9):
            _step(db, model, rng)
            want = rows(_oracle(model).sql("SELECT * FROM ev").to_arrow_table())
            assert rows(reader.sql("SELECT * FROM ev")) == want, i
            db.runtime.log.flush()
            compacted += "ev" in db.runtime.truncate_logs()  # the files the reader knew are gone
            assert rows(reader.sql("SELECT * FROM ev")) == want, i
            assert rows(reader.sql("SELECT * FROM kv")) == rows(_oracle(model).sql("SELECT * FROM kv").to_arrow_table())
        assert compacted >= 2 and retries  # it did find files gone, and read again
    finally:
        reader.close()


SCRIPT = """
import sys, numpy as np, pyarrow as pa, millpond
from millpond.engine import upkeep
from millpond.spark.session import local_session
upkeep.TRUNCATE_FLUSH_RECORDS = 0
db = millpond.connect(sys.argv[1], spark=local_session(cores="2", shuffle_partitions=2), interval=None)
db.insert("kv", pa.table({"k": np.arange(100, 140, dtype=np.int32), "g": np.ones(40, np.int32), "v": np.arange(40)}))
db.flush()
db.runtime.log.flush()
db.runtime.truncate_logs()
print("NOT KILLED")
"""


def _leftovers(db, name: str, lo: int, hi: int, *, but: str | None = None) -> list[str]:  # noqa: ANN001
    """Flushed files of ``name``'s log wholly inside ``[lo, hi)`` (other than ``but``)."""
    store, tid = db.runtime.log.store, db.runtime.catalog.tables[name].channel_id
    out = []
    for k in store.list(paths.log_data_prefix(tid)):
        if k.endswith(".parquet") and k != but:
            first, end, _ = paths.parse_log_data_key(k)
            if lo <= first and end <= hi:
                out.append(k)
    return out


@pytest.mark.chaos
@pytest.mark.parametrize("point", ["log.truncate.after_start", "log.compact.after_put"])
def test_a_process_killed_while_it_truncates_or_compacts_a_log_loses_nothing(open_db, root, point, monkeypatch):
    db, model, rng = _opened(open_db, monkeypatch, seed=4)
    for _ in range(5):
        _step(db, model, rng)
        db.runtime.log.flush()  # a file per step: the oldest are wholly below the next truncation
    db.close()
    env = {**os.environ, "MILLPOND_CRASH_AT": point, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env.pop("MILLPOND_CRASH_PID", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, root], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9 and "NOT KILLED" not in proc.stdout, proc.stderr[-2000:]
    model["kv"].update({k: (1, k - 100) for k in range(100, 140)})
    db = open_db()
    ev = db.runtime.channel(db.runtime.catalog.tables["ev"])
    if point == "log.truncate.after_start":
        start = _start(db, "kv")
        assert start > 0 and _leftovers(db, "kv", 0, start)  # the new start is written, the old files not deleted
    else:  # the compacted file is written; the files it replaces are still there, and read instead of it
        compacted = [k for k in db.runtime.log.store.list(paths.log_data_prefix(ev.info.id))
                     if k.endswith(".parquet") and paths.parse_log_data_key(k)[0] == 0
                     and paths.parse_log_data_key(k)[1] > min(p.end for p in ev.pieces(0, ev.end))]
        assert compacted
    _check(db, model)
    _step(db, model, rng)
    _check(db, model)
    db.runtime.log.flush()
    db.runtime.truncate_logs()  # deletes what the killed pass left behind
    assert _leftovers(db, "kv", 0, _start(db, "kv")) == []
    first = ev.pieces(0, ev.end)[0]
    assert first.first == 0 and _leftovers(db, "ev", 0, first.end, but=first.key) == []
    store, tid = db.runtime.log.store, db.runtime.catalog.tables["kv"].channel_id
    assert len([k for k in store.list(paths.log_data_prefix(tid)) if "start-" in k]) == 1
    _check(db, model)
    assert rows(db.sql("SELECT * FROM ev")) == rows(_oracle(model).sql("SELECT * FROM ev").to_arrow_table())

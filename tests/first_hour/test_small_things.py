"""Small things a new user meets in the first hour: ``SHOW SINKS`` after a restart and in a
read-only open, the types psql's ``\\d`` prints, ``millpond pipeline run``'s counts, the claims of
docs/limits.md. Each test failed on main before its fix (issue: first contact)."""

from __future__ import annotations

import millpond


def _sinks(db: millpond.Database) -> dict[str, tuple]:
    return {r["name"]: (r["epoch"], r["lag"], r["error"]) for r in db.sql("SHOW SINKS").to_pylist()}


def test_show_sinks_reads_the_epoch_back_after_a_restart_and_in_a_read_only_open(open_db, root, tmp_path):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE TABLE other (x INT)")
    db.sql("INSERT INTO t VALUES (1, 10)")
    db.flush()
    db.sql(f"CREATE SINK s FROM t WITH (connector = 'deltalake', location = '{tmp_path / 'out'}', type = 'upsert')")
    db.sql("INSERT INTO t VALUES (2, 20)")
    db.flush()
    written = db.epoch
    assert _sinks(db) == {"s": (written, 0, None)}
    db.close()

    again = open_db()  # a restart: no epoch has run in this process yet
    assert _sinks(again) == {"s": (written, 0, None)}
    reader = millpond.connect(root, read_only=True)
    try:
        assert _sinks(reader) == {"s": (written, 0, None)}
        again.sql("INSERT INTO other VALUES (1)")  # an epoch that does not change t: kept under the root
        again.flush()
        again.sql("INSERT INTO t VALUES (3, 30)")
        again.flush()
        now = again.epoch
        assert now > written + 1
        assert _sinks(again) == {"s": (now, 0, None)}
        assert _sinks(reader) == {"s": (now, 0, None)}  # the reader follows the writer's target
    finally:
        reader.close()

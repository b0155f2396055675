"""A files table's source that fails is never silent (the README's ``CREATE TABLE landing ... WITH
(connector = 'files', ...)``): a folder that cannot be listed and every refused file are rows of
``millpond_source_errors`` with their reason, counted in ``SHOW TABLES``, carried by each epoch's
report and said by ``flush()``; the other tables go on; an error goes away when its cause does."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from millpond.errors import MillpondNotice

LANDING = "CREATE TABLE landing (id BIGINT PRIMARY KEY, total DOUBLE) WITH (connector = 'files', path = '{}', " \
          "format = 'parquet')"
_MTIME = [1_700_000_000 * 10**9]


def _parquet(path: Path, table: pa.Table, *, cut: bool = False) -> None:
    """``table`` as a parquet file at ``path`` (``cut``: its first half only, as a crashed writer
    leaves it), with a modification time after every file written before (arrival order)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()
    path.write_bytes(data[:len(data) // 2] if cut else data)
    _MTIME[0] += 10**9
    os.utime(path, ns=(_MTIME[0], _MTIME[0]))


def _orders(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "total": pa.array([i * 1.5 for i in ids], pa.float64())})


def _errors(db) -> list[dict]:  # noqa: ANN001
    return db.sql("SELECT * FROM millpond_source_errors ORDER BY table_name, path").to_pylist()


def _shown(db, table: str) -> str | None:  # noqa: ANN001
    return next(r["error"] for r in db.sql("SHOW TABLES").to_pylist() if r["name"] == table)


def test_a_folder_that_does_not_exist_is_named_and_the_other_tables_go_on(open_db, tmp_path):
    missing, good = tmp_path / "landing", tmp_path / "good"
    good.mkdir()
    _parquet(good / "a.parquet", _orders([1, 2]))
    db = open_db()
    with pytest.warns(MillpondNotice, match="does not exist"):  # said at CREATE already
        db.sql(LANDING.format(missing))
    db.sql(LANDING.replace("landing", "good", 1).format(good) + ";"
           "CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(total) AS s FROM good")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MillpondNotice)
        db.flush()
    assert db.sql("SELECT n, s FROM total").to_pylist() == [{"n": 2, "s": 4.5}]
    [error] = _errors(db)
    assert (error["table_name"], error["kind"], error["path"]) == ("landing", "listing", str(missing))
    assert "does not exist" in error["error"] and str(missing) in error["error"]
    assert error["first_epoch"] == 1 and error["first_seen"] is not None
    shown = _shown(db, "landing")
    assert shown is not None and "cannot be listed" in shown and str(missing) in shown
    assert _shown(db, "good") is None


def test_a_listing_that_recovers_clears_its_error(open_db, tmp_path):
    folder = tmp_path / "later"
    db = open_db()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MillpondNotice)
        db.sql(LANDING.format(folder))
        db.flush()
        first = _errors(db)
        db.sql("INSERT INTO landing VALUES (100, 1.0)")  # an epoch runs: the problem is seen again in it
        db.flush()
    [again] = _errors(db)
    assert [e["kind"] for e in first] == ["listing"]
    assert again["first_seen"] == first[0]["first_seen"] and again["last_seen"] >= first[0]["last_seen"]
    assert again["last_epoch"] > again["first_epoch"]
    folder.mkdir()
    _parquet(folder / "a.parquet", _orders([1, 2, 3]))
    db.flush()
    assert _errors(db) == [] and _shown(db, "landing") is None
    assert sorted(r["id"] for r in db.sql("SELECT id FROM landing").to_pylist()) == [1, 2, 3, 100]


def test_every_bad_file_is_listed_with_its_reason_while_good_rows_arrive(open_db, tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    _parquet(folder / "a-good.parquet", _orders([1, 2]))
    _parquet(folder / "b-truncated.parquet", _orders([3, 4]), cut=True)
    _parquet(folder / "c-no-total.parquet", pa.table({"id": pa.array([5], pa.int64()), "amount": [1.0]}))
    _parquet(folder / "d-text-total.parquet", pa.table({"id": pa.array([6], pa.int64()), "total": ["lots"]}))
    _parquet(folder / "e-good.parquet", _orders([7]))
    db = open_db()
    db.sql(LANDING.format(folder))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MillpondNotice)
        db.flush()
    assert sorted(r["id"] for r in db.sql("SELECT id FROM landing").to_pylist()) == [1, 2, 7]
    errors = {Path(e["path"]).name: e for e in _errors(db)}
    assert sorted(errors) == ["b-truncated.parquet", "c-no-total.parquet", "d-text-total.parquet"]
    assert {e["kind"] for e in errors.values()} == {"file"} and {e["table_name"] for e in errors.values()} == {"landing"}
    assert "parquet" in errors["b-truncated.parquet"]["error"].lower()  # the reader's reason, not a generic one
    assert "total" in errors["c-no-total.parquet"]["error"]
    assert "total" in errors["d-text-total.parquet"]["error"]
    shown = _shown(db, "landing")
    assert shown.startswith("3 files refused") and "millpond_source_errors" in shown

    db.close()  # a restart: the refused files are still its errors, seen first when they were refused
    db = open_db()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MillpondNotice)
        db.flush()
    after = {Path(e["path"]).name: e for e in _errors(db)}
    assert sorted(after) == sorted(errors)
    assert all(after[name]["first_seen"] == errors[name]["first_seen"] for name in errors)

    # fixed: one removed, one rewritten in place (read again), one left as it is
    (folder / "b-truncated.parquet").unlink()
    _parquet(folder / "c-no-total.parquet", _orders([5]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MillpondNotice)
        db.flush()
    assert sorted(r["id"] for r in db.sql("SELECT id FROM landing").to_pylist()) == [1, 2, 5, 7]
    assert [Path(e["path"]).name for e in _errors(db)] == ["d-text-total.parquet"]
    assert _shown(db, "landing").startswith("file ") and "d-text-total.parquet" in _shown(db, "landing")


def test_flush_reports_the_tables_whose_sources_have_errors(open_db, tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    _parquet(folder / "a.parquet", _orders([1]))
    _parquet(folder / "b.parquet", _orders([2]), cut=True)
    db = open_db()
    db.sql(LANDING.format(folder))
    with pytest.warns(MillpondNotice, match=r"table 'landing': file .*b\.parquet"):
        reports = db.flush()
    assert reports and set(reports[-1].source_errors) == {"landing"}
    [said] = reports[-1].source_errors["landing"]
    assert "b.parquet" in said
    with pytest.warns(MillpondNotice, match="millpond_source_errors"):  # nothing to do: said all the same
        assert db.flush() == []
    with pytest.warns(MillpondNotice, match="landing"):
        db.sql("FLUSH")
    (folder / "b.parquet").unlink()
    _parquet(folder / "c.parquet", _orders([3]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MillpondNotice)  # fixed: nothing more is said
        reports = db.flush()
    assert reports and reports[-1].source_errors == {}


def test_an_epoch_report_shows_what_changed(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE MATERIALIZED VIEW per_v AS "
           "SELECT v, count(*) AS n FROM t GROUP BY v; INSERT INTO t VALUES (1, 10), (2, 10), (3, 20)")
    [report] = db.flush()
    shown = repr(report)
    assert " object at 0x" not in shown
    assert shown.startswith(f"EpochReport(epoch={report.epoch}, ")
    assert f"per_v: {report.changes.rows('per_v')} rows" in shown and report.changes.rows("per_v") >= 2
    assert "rows_in=" in shown and "'t': 3" in shown
    assert repr(report.changes) == f"Changelogs(per_v: {report.changes.rows('per_v')} rows)"

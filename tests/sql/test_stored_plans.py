"""A view runs the plan stored with it at CREATE: its state ids survive a planner that numbers
nodes differently; a planner that plans its SQL differently is refused by name; catalogs
written before plans were stored still open."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

import millpond
from millpond import CatalogError
from millpond.sql import ddl
from millpond.sql.planner import context, query
from millpond.sql.statements import view_query
from tests.conftest import rows

SCHEMA = """CREATE TABLE info (product VARCHAR PRIMARY KEY, category VARCHAR);
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT);"""
VIEW = """CREATE MATERIALIZED VIEW result AS
  SELECT category, MAX(length) AS longest, COUNT(*) AS n, round(avg(length), 1) AS a
  FROM info JOIN visit ON info.product = visit.product
  WHERE visit.length > 5
  GROUP BY category"""


def _seed(db):
    db.sql(SCHEMA)
    db.sql(VIEW)
    db.sql("INSERT INTO info VALUES ('Apple', 'Fruit'), ('Carrot', 'Vegetable')")
    db.insert("visit", pa.table({"product": ["Apple", "Apple", "Carrot"], "user": ["a", "b", "c"],
                                 "length": [10, 21, 50]}))
    db.flush()
    return rows(db.sql("SELECT * FROM result"))


def _catalog_file(root: str) -> Path:
    return sorted(Path(root, "catalog").glob("*.json"))[-1]


def test_a_renumbered_planner_still_reads_the_views_state(open_db, root, monkeypatch):
    db = open_db()
    before = _seed(db)
    assert before == [("Fruit", 21, 2, 15.5), ("Vegetable", 50, 1, 50.0)]
    view = db.catalog.views["result"]
    assert view.sql == VIEW  # what the user wrote, not a re-generation
    db.close()

    monkeypatch.setattr(context, "FIRST_NODE_ID", 101)  # an upgrade that numbers plan nodes anew
    again = open_db()
    assert rows(again.sql("SELECT * FROM result")) == before
    # the next epochs update the old state: a MAX retraction falls back through the stored values
    again.sql("DELETE FROM visit WHERE length = 21")
    again.insert("visit", pa.table({"product": ["Carrot"], "user": ["d"], "length": [7]}))
    again.flush()
    assert rows(again.sql("SELECT * FROM result")) == [("Fruit", 10, 1, 10.0), ("Vegetable", 50, 2, 28.5)]
    # a view created now is numbered by the new planner; both keep working side by side
    again.sql("CREATE MATERIALIZED VIEW per_user AS SELECT \"user\", COUNT(*) AS n FROM visit GROUP BY \"user\"")
    again.flush()
    assert rows(again.sql("SELECT * FROM per_user")) == [("a", 1), ("c", 1), ("d", 1)]
    stored = again.catalog.views["per_user"].plan["plan"]
    assert stored["node_id"] > 100 and again.catalog.views["result"].plan["plan"]["node_id"] < 100


def test_a_view_the_planner_now_plans_differently_is_refused_by_name(open_db, root, spark, monkeypatch):
    db = open_db()
    before = _seed(db)
    db.close()

    monkeypatch.setattr(query, "push_filters", lambda rels, where, padded: where)  # no filter pushdown
    with pytest.raises(CatalogError, match=r"view 'result': its stored plan differs .*plans='stored'"):
        millpond.connect(root, spark=spark, interval=None)
    kept = millpond.connect(root, spark=spark, interval=None, plans="stored")  # run the stored plan as is
    try:
        assert rows(kept.sql("SELECT * FROM result")) == before
        kept.insert("visit", pa.table({"product": ["Apple"], "user": ["e"], "length": [3]}))  # filtered out
        kept.flush()
        assert rows(kept.sql("SELECT * FROM result")) == before
        kept.sql("DROP MATERIALIZED VIEW result")  # recreating adopts the new plan
        kept.sql(VIEW)
        kept.flush()
        assert rows(kept.sql("SELECT * FROM result")) == before
    finally:
        kept.close()
    assert open_db().sql("SELECT count(*) AS n FROM result").column("n").to_pylist() == [2]


def test_a_view_created_before_columns_were_pruned_runs_its_stored_plan(open_db, monkeypatch):
    db = open_db()
    plan_view = ddl.plan_view  # as a millpond of then planned it: every column of visit through the join
    monkeypatch.setattr(ddl, "plan_view", lambda *a, **k: plan_view(*a, **{**k, "legacy": True}))
    before = _seed(db)
    monkeypatch.undo()
    db.close()
    again = open_db()  # its plan verified against the unpruned derivation, and run as stored
    kept = again.catalog.views["result"].plan
    assert '"user"' in json.dumps(kept)
    assert rows(again.sql("SELECT * FROM result")) == before
    again.sql("DELETE FROM visit WHERE length = 21")  # its join state, with every column, still updates
    again.insert("visit", pa.table({"product": ["Apple"], "user": ["e"], "length": [30]}))
    again.flush()
    assert rows(again.sql("SELECT * FROM result")) == [("Fruit", 30, 2, 20.0), ("Vegetable", 50, 1, 50.0)]
    assert again.catalog.views["result"].plan == kept
    again.sql(VIEW.replace("result", "pruned"))  # created now: the join keeps the columns used above it
    again.flush()
    assert rows(again.sql("SELECT * FROM pruned")) == rows(again.sql("SELECT * FROM result"))
    assert '"user"' not in json.dumps(again.catalog.views["pruned"].plan)


def test_an_unreadable_stored_plan_is_a_clear_error(open_db, root, spark):
    db = open_db()
    _seed(db)
    db.close()
    path = _catalog_file(root)
    body = json.loads(path.read_text())
    body["views"][0]["plan"]["format"] = 99
    path.write_text(json.dumps(body))
    with pytest.raises(CatalogError, match=r"view 'result': its stored plan cannot be read \(plan format 99"):
        millpond.connect(root, spark=spark, interval=None)


def test_a_catalog_written_before_plans_were_stored_still_opens(open_db, root, monkeypatch):
    db = open_db()
    plan_view = ddl.plan_view  # as a millpond of then planned it: no eager aggregation (sql/planner/eager.py)
    monkeypatch.setattr(ddl, "plan_view", lambda *a, **k: plan_view(*a, **{**k, "eager": False, "legacy": True}))
    before = _seed(db)
    monkeypatch.undo()
    db.close()
    path = _catalog_file(root)
    body = json.loads(path.read_text())  # as catalog format 1 wrote it: a re-generated query, no plan
    del body["format"]
    for v in body["views"]:
        v["sql"] = view_query(v["sql"]).sql("postgres")
        del v["plan"]
    path.write_text(json.dumps(body))
    again = open_db()
    assert rows(again.sql("SELECT * FROM result")) == before
    again.sql("CREATE TABLE extra (x INT)")  # the next catalog version stores the derived plan
    again.close()
    assert json.loads(_catalog_file(root).read_text())["views"][0]["plan"]["format"] == 1
    assert rows(open_db().sql("SELECT * FROM result")) == before

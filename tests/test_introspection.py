"""Seeing inside: SHOW, DESCRIBE and EXPLAIN return Arrow tables that tell the truth (EXPLAIN's
state ids are the ones the view's epochs write)."""

import logging

import pyarrow as pa
import pytest

from millpond import CatalogError, SqlError

SCHEMA = """CREATE TABLE info (product VARCHAR PRIMARY KEY, category VARCHAR);
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT) APPEND ONLY;"""
VIEW = ("CREATE MATERIALIZED VIEW result AS SELECT category, MAX(length) AS max_length, COUNT(*) AS n "
        "FROM info JOIN visit ON info.product = visit.product GROUP BY category")


@pytest.fixture
def db(open_db):
    db = open_db()
    db.sql(SCHEMA)
    return db


def test_show_tables_and_views(db):
    db.sql(VIEW)
    tables = db.sql("SHOW TABLES")
    assert tables.to_pylist() == [
        {"name": "info", "columns": 2, "primary_key": "product", "append_only": False, "source": None, "error": None},
        {"name": "visit", "columns": 3, "primary_key": None, "append_only": True, "source": None, "error": None}]
    views = db.sql("show materialized views").to_pylist()
    assert [(v["name"], v["columns"], v["depends_on"]) for v in views] == [("result", 3, "info, visit")]
    assert views[0]["sql"] == VIEW  # what the user wrote
    assert db.sql("SHOW VIEWS").num_rows == 1


def test_describe_table_and_view(db):
    db.sql(VIEW)
    info = {r["name"]: (r["type"], r["description"]) for r in db.sql("DESCRIBE info").to_pylist()}
    assert info["product"] == ("VARCHAR", "primary key") and info["category"] == ("VARCHAR", None)
    assert info["kind"] == (None, "table") and info["append only"] == (None, "false")
    assert info["primary key"] == (None, "product")
    visit = {r["name"]: r["description"] for r in db.sql("DESC visit").to_pylist()}
    assert visit["append only"] == "true" and visit["primary key"].startswith("none")
    rows = db.sql("DESCRIBE result").to_pylist()
    assert [(r["name"], r["type"]) for r in rows[:3]] == [("category", "VARCHAR"), ("max_length", "INT"),
                                                         ("n", "BIGINT")]
    props = {r["name"]: r["description"] for r in rows[3:]}
    assert props == {"kind": "materialized view", "depends on": "info, visit", "sql": VIEW}


def test_explain_create_plans_without_creating(db):
    before = db.catalog
    plan = db.sql(f"EXPLAIN {VIEW}")
    assert plan.column_names == ["plan"]
    lines = plan.column("plan").to_pylist()
    text = "\n".join(lines)
    # the join, visit pre-aggregated by product below it (sql/planner/eager.py), the aggregate, the rows
    assert lines[0] == "result plan: 4 stateful operators, 3 exchanges, 6 state tables (vnodes: 256)"
    assert "partial (eager)" in text
    n = before.next_id  # the object id the view would get
    for part in ("left", "right"):  # the join keeps both sides' rows, by join key
        assert f"  state o{n}.n1.{part}  key [_k0 = " in text
    assert 'exchange  hash ["info__product" / "_e0k0"] -> 256 vnodes (both sides)' in text
    assert f"state o{n}.n2.groups  key [_g0]" in text
    assert f"state o{n}.n2.values  key [_g0, _m0 = max(_e0m0)]  multiset" in text  # MAX with retraction
    assert "exchange  hash [_g0] -> 256 vnodes" in text
    # visit's rows pre-aggregated per product: one MAX per product (append-only), not each visit
    assert f"state o{n}.n3.groups  key [_e0k0]" in text and "append-only partial (eager)" in text
    # the view's rows are addressed by its group key: a query WHERE category = … looks them up
    assert f"state o{n}.n4.rows  key [category, max_length, n]  multiset  read by key [category]" in text
    assert "exchange  none: rows stay in the tasks of Aggregate #2" in text
    assert "Source visit" in text and "Source info" in text
    assert db.catalog == before  # nothing created
    top = db.sql("EXPLAIN CREATE MATERIALIZED VIEW t3 AS SELECT length FROM visit ORDER BY length DESC LIMIT 3")
    text = "\n".join(top.column("plan").to_pylist())
    assert "exchange  single partition" in text and f"state o{n}.n1.top  key [length]" in text


def test_explain_names_the_state_tables_epochs_write(db):
    db.sql(VIEW.replace("JOIN visit", "JOIN (SELECT * FROM visit) AS visit") +
           " ORDER BY max_length DESC LIMIT 5")
    db.insert("info", pa.table({"product": ["a", "b"], "category": ["x", "y"]}))
    db.insert("visit", pa.table({"product": ["a", "b", "a"], "user": ["u", "v", "w"], "length": [3, 5, 7]}))
    db.flush()
    view = db.catalog.views["result"]
    lines = db.sql("EXPLAIN MATERIALIZED VIEW result").column("plan").to_pylist()
    printed = {line.split()[1] for line in lines if line.strip().startswith("state ")}
    written = {sid for sid in db.runtime.coordinator.manifest.states if sid.startswith(f"o{view.id}.")}
    assert printed == written and any(sid.endswith(".top") for sid in printed)


def test_bad_introspection_statements(db):
    with pytest.raises(SqlError, match="SHOW GRANTS is not supported"):
        db.sql("SHOW GRANTS")
    with pytest.raises(CatalogError, match='relation "nope" does not exist'):
        db.sql("DESCRIBE nope")
    with pytest.raises(SqlError, match="EXPLAIN CREATE MATERIALIZED VIEW"):
        db.sql("EXPLAIN SELECT 1")
    with pytest.raises(CatalogError, match='materialized view "nope" does not exist'):
        db.sql("EXPLAIN MATERIALIZED VIEW nope")
    with pytest.raises(SqlError, match="colour"):  # the planner's own errors, as at CREATE
        db.sql("EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT colour FROM info")


def test_no_parser_warning_is_logged(db, caplog):
    with caplog.at_level(logging.WARNING):
        db.sql("SHOW TABLES")
        db.sql(f"EXPLAIN {VIEW}")
    assert [r.getMessage() for r in caplog.records] == []

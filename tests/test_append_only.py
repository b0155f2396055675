"""APPEND ONLY tables: the log is the table (no state of its own), rows can only be inserted, and
an aggregation over insert-only input keeps one MIN/MAX value per group instead of a multiset.
Views are checked against DuckDB after every epoch, across a reopen of the root."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from millpond import SqlError
from millpond.engine import plan as P
from millpond.errors import SchemaError
from tests.conftest import rows

TABLES = """
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT) APPEND ONLY;
CREATE TABLE info (product VARCHAR, category VARCHAR) WITH (append_only = true);
CREATE TABLE tags (product VARCHAR, tag VARCHAR)
"""
VIEWS = {
    "per_product": """SELECT product, COUNT(*) AS n, MIN(length) AS lo, MAX(length) AS hi, SUM(length) AS s,
                      AVG(length) AS a, MAX("user") AS last_user FROM visit GROUP BY product""",
    "whole": "SELECT COUNT(*) AS n, MIN(length) AS lo, MAX(length) AS hi FROM visit",
    "mixed": "SELECT product, MAX(length) AS hi, COUNT(DISTINCT \"user\") AS du FROM visit GROUP BY product",
    "joined": """SELECT i.category, MAX(v.length) AS hi, MIN(v."user") AS first_user, COUNT(*) AS n
                 FROM visit v JOIN info i ON v.product = i.product WHERE v.length > 10 GROUP BY i.category""",
    "tagged": """SELECT t.tag, MAX(v.length) AS hi FROM visit v JOIN tags t ON v.product = t.product
                 GROUP BY t.tag""",
    "outer_hi": """SELECT i.category, MAX(v.length) AS hi FROM info i LEFT JOIN visit v ON i.product = v.product
                GROUP BY i.category""",
}
ON_VIEWS = {"top_hi": ("SELECT MAX(hi) AS top, MIN(lo) AS bottom FROM per_product",
                       "SELECT MAX(hi) AS top, MIN(lo) AS bottom FROM ({per_product}) x")}


def _aggregates(node: P.Node) -> list[P.Aggregate]:
    found = [node] if isinstance(node, P.Aggregate) else []
    return found + [a for i in P.inputs(node) for a in _aggregates(i)]


def _batch(rng: random.Random, n: int) -> dict[str, list]:
    return {"product": [rng.choice(["a", "b", "c", "d", None]) for _ in range(n)],
            "user": [rng.choice(["u1", "u2", "u3", None]) for _ in range(n)],
            "length": [rng.choice([None, *range(0, 100)]) for _ in range(n)]}


def test_append_only_views_match_duckdb_after_every_epoch(open_db, root):
    rng = random.Random(7)
    db = open_db()
    db.sql(TABLES)
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    for name, (sql, _) in ON_VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    duck = duckdb.connect()
    duck.execute('CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT); '
                 "CREATE TABLE info (product VARCHAR, category VARCHAR); CREATE TABLE tags (product VARCHAR, tag VARCHAR)")

    # the planner marks exactly the aggregations whose input only inserts
    marked = {name: [a.append_only for a in _aggregates(db.runtime._by_name[name].plan)] for name in VIEWS}
    # (a join's aggregate pre-aggregates visit by product, sql/planner/eager.py: that partial only
    # inserts; the aggregate above it reads its retractions of a product's older extremes)
    assert marked == {"per_product": [True], "whole": [True], "mixed": [True], "joined": [False, True],
                      "tagged": [False, True], "outer_hi": [False]}
    # a view over a view reads its changes, which retract (an aggregation's rows change): not append-only
    top = db.runtime._by_name["top_hi"].plan
    assert [a.append_only for a in _aggregates(top)] == [False] and [s.table for s in P.sources(top)] == ["per_product"]

    for step in range(10):
        if step == 5:  # a restart in the middle: views and tables resume from the committed epoch
            db.close()
            db = open_db()
        visits = pa.table(_batch(rng, rng.randint(0, 30)), schema=db.catalog.tables["visit"].schema)
        db.insert("visit", visits)
        duck.register("batch", visits)
        duck.execute("INSERT INTO visit SELECT * FROM batch")
        if step % 2 == 0:
            product = rng.choice("abcde")
            db.sql(f"INSERT INTO info VALUES ('{product}', 'c{step % 3}')")
            duck.execute(f"INSERT INTO info VALUES ('{product}', 'c{step % 3}')")
        if step % 3 == 0:  # a table with deletes joined with an append-only one: full state there
            for sql in (f"INSERT INTO tags VALUES ('{rng.choice('abcd')}', 't{step % 2}')",
                        "DELETE FROM tags WHERE tag = 't0'"):
                db.sql(sql)
                duck.execute(sql)
        db.flush()
        for name in ("visit", "info"):
            assert rows(db.sql(f"SELECT * FROM {name}")) == sorted(
                duck.execute(f"SELECT * FROM {name}").fetchall(), key=_nulls_first), name
        for name, sql in {**VIEWS, **{k: o.format(**VIEWS) for k, (_, o) in ON_VIEWS.items()}}.items():
            want = sorted(duck.execute(sql).fetchall(), key=_nulls_first)
            got = rows(db.sql(f"SELECT * FROM {name}"))
            assert _approx(got) == _approx(want), f"step {step}, view {name}"

    # an APPEND ONLY table keeps no state: its rows are its log
    tables = {f"o{t.id}." for t in db.catalog.tables.values() if t.append_only}
    states = db.runtime.coordinator.manifest.states
    assert not [s for s in states if any(s.startswith(p) for p in tables)]
    # and the aggregations over it keep no MIN/MAX multiset ('mixed' keeps one for its DISTINCT only)
    per_product = db.catalog.views["per_product"].id
    assert not [s for s in states if s.startswith(f"o{per_product}.") and s.endswith(".values")]


def test_append_only_refuses_what_would_remove_rows(open_db, root):
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT) APPEND ONLY; INSERT INTO t VALUES (1, 2)")
    for statement, message in [
        ("DELETE FROM t WHERE k = 1", "DELETE on table 't': it is APPEND ONLY"),
        ("UPDATE t SET v = 3", "UPDATE on table 't': it is APPEND ONLY"),
        ("CREATE TABLE u (k INT PRIMARY KEY, v INT) APPEND ONLY", "APPEND ONLY table cannot have a primary key"),
        ("CREATE TABLE u (k INT) WITH (fillfactor = 10)", "unsupported table option 'fillfactor=10'"),
    ]:
        with pytest.raises(SqlError, match=message):
            db.sql(statement)
    db.flush()
    with pytest.raises(SchemaError, match="APPEND ONLY"):
        from millpond.engine import ingest
        t = db.catalog.tables["t"]
        ingest.append_changes(db.runtime, t, db.runtime.snapshot("t", hidden=True), None)
    assert rows(db.sql("SELECT * FROM t")) == [(1, 2)]
    # WITH (append_only = false) is an ordinary table; the flag survives a reopen
    db.sql("CREATE TABLE plain (k INT) WITH (append_only = false)")
    db.close()
    db = open_db()
    assert {n: t.append_only for n, t in db.catalog.tables.items()} == {"t": True, "plain": False}
    db.sql("DELETE FROM plain")


def test_catalog_format_says_when_a_table_is_append_only(open_db, root):
    from millpond.catalog import Catalog, Column

    plain = Catalog().with_table("p", (Column("k", "INT"),), ())
    assert json.loads(plain.to_json())["format"] == 2  # readable by versions before APPEND ONLY
    ao = plain.with_table("a", (Column("k", "INT"),), (), append_only=True)
    assert json.loads(ao.to_json())["format"] == 3
    assert Catalog.from_json(ao.to_json()).tables["a"].append_only


def _nulls_first(row: tuple) -> tuple:
    return tuple((v is not None, v) for v in row)


def _approx(rows_: list[tuple]) -> list[tuple]:
    """Rows with numbers to 6 decimals: millpond's AVG of integers is NUMERIC (PostgreSQL's type),
    the DuckDB oracle's a double."""
    return [tuple(round(float(v), 6) if isinstance(v, (float, Decimal)) else v for v in r) for r in rows_]

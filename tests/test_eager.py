"""Eager aggregation (``sql/planner/eager.py``): an aggregate over a join pre-aggregates one side by
its join key. Views that take it are checked against DuckDB after every epoch of random inserts,
updates and deletes on both sides (a dimension row changing moves every fact row of its key), and
the cases it must leave alone are planned as before."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from millpond.engine import plan as P
from millpond.sql import ddl
from millpond.sql.planner.eager import has_eager
from tests import pg_numeric
from tests.workload import Reference, norm

TABLES = """
CREATE TABLE ev (k INT, p INT, v INT);
CREATE TABLE ea (k INT, p INT, v INT) APPEND ONLY;
CREATE TABLE dim (p INT PRIMARY KEY, name VARCHAR);
CREATE TABLE d2 (k INT, z VARCHAR);
"""

EAGER = {  # every one pre-aggregates ev (or ea) by its join key
    "star": """SELECT d.name, COUNT(*) AS n, COUNT(e.v) AS c, SUM(e.v) AS s, MIN(e.v) AS lo, MAX(e.v) AS hi,
                      AVG(e.v) AS a FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name""",
    "star_ao": """SELECT d.name, COUNT(*) AS n, MIN(e.v) AS lo, MAX(e.v) AS hi FROM ea e JOIN dim d ON e.p = d.p
                  GROUP BY d.name""",
    "two_dims": """SELECT d.name, d2.z, COUNT(*) AS n, MAX(e.v) AS hi FROM ev e JOIN dim d ON e.p = d.p
                   JOIN d2 ON e.k = d2.k GROUP BY d.name, d2.z""",
    "whole": """SELECT SUM(e.v) AS s, MAX(e.v) AS hi FROM ev e JOIN dim d ON e.p = d.p WHERE d.name <> 'n0'""",
    "mixed": """SELECT e.k, d.name, SUM(e.v) FILTER (WHERE e.v > 10) AS s, COUNT(*) AS n
                FROM ev e JOIN dim d ON e.p % 5 = d.p GROUP BY e.k, d.name HAVING COUNT(*) > 1""",
}
PLAIN = {  # left as planned
    "by_key": "SELECT e.k, COUNT(*) AS n FROM ev e JOIN dim d ON e.p = d.p GROUP BY e.k",  # counts dim's rows: unique
    "from_both": "SELECT d.name, SUM(e.v + d.p) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name",
    "count_all": "SELECT COUNT(*) AS n FROM ev e JOIN d2 ON e.k = d2.k",  # whole: COUNT 0 over no rows
    "padded": "SELECT d.name, COUNT(e.v) AS n FROM dim d LEFT JOIN ev e ON e.p = d.p GROUP BY d.name",
    "distinct_v": "SELECT d.name, COUNT(DISTINCT e.v) AS n FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name",
}
CHILDREN = """CREATE TABLE ord (o INT PRIMARY KEY, c VARCHAR);
CREATE TABLE line (o INT, n INT, s INT, v INT, PRIMARY KEY (o, n));"""


class Oracle(Reference):
    def __init__(self) -> None:  # noqa: D107 - the tables above, not the workload's
        self.con = duckdb.connect()
        pg_numeric.register(self.con)
        self.con.execute(TABLES.replace(" APPEND ONLY", ""))


def _rows(rng: random.Random, n: int) -> pa.Table:
    return pa.table({"k": pa.array([rng.randrange(6) for _ in range(n)], pa.int32()),
                     "p": pa.array([None if rng.random() < 0.05 else rng.randrange(12) for _ in range(n)], pa.int32()),
                     "v": pa.array([None if rng.random() < 0.1 else rng.randrange(40) for _ in range(n)], pa.int32())})


def _dml(rng: random.Random) -> list[str]:
    p, name = rng.randrange(12), rng.choice(["'n0'", "'n1'", "'n2'", "NULL"])
    return rng.choice([
        [f"INSERT INTO dim VALUES ({p}, {name}), ({(p + 5) % 12}, 'n{rng.randrange(3)}')"],  # upserts by key
        [f"DELETE FROM dim WHERE p = {p}"],
        [f"UPDATE ev SET v = v + {rng.randrange(1, 20)} WHERE k = {rng.randrange(6)}"],
        [f"DELETE FROM ev WHERE v < {rng.randrange(15)} AND k = {rng.randrange(6)}"],
        [f"UPDATE ev SET p = {p} WHERE k = {rng.randrange(6)} AND v > 30"],
        [f"INSERT INTO d2 VALUES ({rng.randrange(6)}, 'z{rng.randrange(2)}')"],
        [f"DELETE FROM d2 WHERE k = {rng.randrange(6)}"],
    ])


def test_eager_views_match_duckdb_after_every_epoch(open_db):
    rng = random.Random(33)
    db, ref = open_db(), Oracle()
    db.sql(TABLES)
    for name, sql in EAGER.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    plans = {name: P.decode(db.catalog.views[name].plan) for name in EAGER}
    assert all(has_eager(p) for p in plans.values())
    assert P.explain(plans["two_dims"]).count("partial (eager)") == 2  # below each join
    first = "INSERT INTO dim VALUES " + ", ".join(f"({p}, 'n{p % 3}')" for p in range(10))
    db.sql(first)
    ref.con.execute(first)
    for epoch in range(6):
        for table in ("ev", "ea"):
            batch = _rows(rng, rng.randrange(20, 80))
            db.insert(table, batch)
            ref.con.register("incoming", batch)
            ref.con.execute(f"INSERT INTO {table} SELECT * FROM incoming")
            ref.con.unregister("incoming")
        if epoch:
            for sql in _dml(rng) + _dml(rng):
                db.sql(sql)
                ref.con.execute(sql.replace("INSERT INTO dim", "INSERT OR REPLACE INTO dim"))
        db.flush()
        for name, sql in EAGER.items():
            assert norm(db.sql(f"SELECT * FROM {name}")) == ref.query(sql), f"{name} at epoch {epoch}"
    assert all(db.sql(f"SELECT * FROM {name}").num_rows for name in EAGER)


def test_what_eager_aggregation_leaves_alone(open_db):
    db = open_db()
    db.sql(TABLES)
    for name, sql in PLAIN.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        assert not has_eager(P.decode(db.catalog.views[name].plan)), name


def test_a_view_keeps_the_plan_it_was_created_with(open_db, root, monkeypatch):
    """A view created before eager aggregation (its stored plan has none) opens and runs as it is;
    one created with it reopens with it."""
    db = open_db()
    db.sql("CREATE TABLE ev (k INT, p INT, v INT); CREATE TABLE dim (p INT PRIMARY KEY, name VARCHAR)")
    sql = "SELECT d.name, SUM(e.v) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name"
    plan_view = ddl.plan_view
    monkeypatch.setattr(ddl, "plan_view", lambda *a, **k: plan_view(*a, **{**k, "eager": False}))
    db.sql(f"CREATE MATERIALIZED VIEW before AS {sql}")
    monkeypatch.undo()
    db.sql(f"CREATE MATERIALIZED VIEW after AS {sql}")
    db.sql("INSERT INTO dim VALUES (1, 'a'), (2, 'b'); INSERT INTO ev VALUES (1, 1, 5), (2, 2, 7), (3, 1, 1)")
    db.flush()
    db.close()
    again = open_db()
    assert [has_eager(P.decode(again.catalog.views[v].plan)) for v in ("before", "after")] == [False, True]
    again.sql("INSERT INTO ev VALUES (4, 2, 10)")
    again.flush()
    expected = [("a", 6), ("b", 17)]
    assert [tuple(r.values()) for r in again.sql("SELECT * FROM before ORDER BY name").to_pylist()] == expected
    assert [tuple(r.values()) for r in again.sql("SELECT * FROM after ORDER BY name").to_pylist()] == expected


def test_children_of_a_key_pre_aggregate_by_that_key_alone(open_db):
    """Lines are a few per order (their join key is part of their primary key): grouped by the
    order and a column of their own, a partial would keep about a group per line (TPC-H's Q5);
    by the order alone it keeps one per order, and the aggregate above reads that."""
    db = open_db()
    db.sql(CHILDREN)
    views = {"by_supplier": "SELECT l.s, o.c, SUM(l.v) AS v FROM line l JOIN ord o ON l.o = o.o GROUP BY l.s, o.c",
             "by_customer": "SELECT o.c, SUM(l.v) AS v, COUNT(*) AS n FROM line l JOIN ord o ON l.o = o.o GROUP BY o.c"}
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    assert [has_eager(P.decode(db.catalog.views[v].plan)) for v in views] == [False, True]
    db.sql("INSERT INTO ord VALUES (1, 'a'), (2, 'b'), (3, 'a'); "
           "INSERT INTO line VALUES (1, 1, 7, 10), (1, 2, 8, 1), (2, 1, 7, 5), (3, 1, 8, 2), (3, 2, 8, 3)")
    db.flush()
    db.sql("DELETE FROM line WHERE o = 3 AND n = 2; UPDATE ord SET c = 'b' WHERE o = 1")
    db.flush()
    ref = duckdb.connect()
    ref.execute(CHILDREN)
    ref.execute("INSERT INTO ord VALUES (1, 'b'), (2, 'b'), (3, 'a'); "
                "INSERT INTO line VALUES (1, 1, 7, 10), (1, 2, 8, 1), (2, 1, 7, 5), (3, 1, 8, 2)")
    for name, sql in views.items():
        assert norm(db.sql(f"SELECT * FROM {name}")) == norm(ref.sql(sql).to_arrow_table()), name


@pytest.mark.parametrize("sql", ["CREATE INDEX ev_p ON ev (p)", "CREATE INDEX dim_p ON dim (p)"])
def test_a_join_over_an_indexed_table_reads_the_index_instead(open_db, sql):
    db = open_db()
    db.sql(f"CREATE TABLE ev (k INT, p INT, v INT); CREATE TABLE dim (p INT PRIMARY KEY, name VARCHAR); {sql}")
    db.sql("CREATE MATERIALIZED VIEW q AS SELECT d.name, SUM(e.v) AS s FROM ev e JOIN dim d ON e.p = d.p GROUP BY d.name")
    plan = P.decode(db.catalog.views["q"].plan)
    assert not has_eager(plan) and P.indexes_read(plan)

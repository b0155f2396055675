"""Subqueries outside FROM (``planner/subqueries.py``): IN, NOT IN, EXISTS, NOT EXISTS and scalar
subqueries in views, kept under random inserts, updates and deletes and checked after every epoch
against DuckDB recomputing the same SQL; fixed data with PostgreSQL's answers (NULLs in a NOT IN,
empty subqueries, COUNT over no rows) for views and ad-hoc queries; refused shapes."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from millpond import SqlError
from millpond.catalog import Catalog, Column
from millpond.engine import plan as P
from millpond.sql.planner import plan_view
from millpond.sql.statements import parse
from tests import workload

# name -> (view SQL, oracle SQL or None for the same): the oracle is bound like a view and run by DuckDB.
# Few views, few epochs (every epoch runs each stateful operator); the fixed-data test below covers
# the plain IN, NOT IN, EXISTS and NOT EXISTS shapes and an aggregate without GROUP BY.
VIEWS = {
    "in_pair": ("""SELECT v.product, v."user", v.length FROM visit v WHERE (v.product, v."user") IN
                   (SELECT w.product, w."user" FROM visit w GROUP BY w.product, w."user" HAVING COUNT(*) > 2)""",
                # millpond's binder refuses a row IN in a query: the same rows, as EXISTS
                """SELECT v.product, v."user", v.length FROM visit v WHERE EXISTS (SELECT 1 FROM visit w
                   WHERE w.product = v.product AND w."user" = v."user"
                   GROUP BY w.product, w."user" HAVING COUNT(*) > 2)"""),
    "not_in_corr": ("""SELECT v.product, v."user", v.length FROM visit v
                       WHERE v.length NOT IN (SELECT w.length FROM visit w
                                              WHERE w."user" = v."user" AND w.product = 'p0')""",
                    None),
    "exists_flat": ("""SELECT v.product, v."user", i.category,
                              EXISTS (SELECT 1 FROM info j WHERE j.product = v.product AND j.category = 'c1') AS c1
                       FROM visit v, info i
                       WHERE v.product = i.product
                         AND (v.length > 90 OR NOT EXISTS (SELECT 1 FROM visit w
                                                           WHERE w."user" = v."user" AND w.product = 'p1'))
                         AND EXISTS (SELECT 1 FROM visit w WHERE w."user" = v."user" AND w.length > 85)
                         AND EXISTS (SELECT * FROM info j WHERE j.product = 'p2' AND j.category IS NULL)
                         AND NOT EXISTS (SELECT 1 FROM visit w WHERE w.product = 'p0' AND w."user" = 'u0')""", None),
    "scalars": ("""SELECT i.product, i.category,
                          (SELECT COUNT(*) FROM visit v WHERE v.product = i.product AND v.length > 70) AS n,
                          (SELECT MAX(length) FROM visit) - 1 AS hi
                   FROM info i
                   WHERE i.category IS NULL OR (SELECT AVG(v.length) FROM visit v WHERE v.product = i.product) > 45""",
                None),
    "scalar_having": ("""SELECT product, COUNT(*) AS n, (SELECT COUNT(*) FROM info) AS infos
                         FROM visit v GROUP BY product
                         HAVING COUNT(*) > (SELECT COUNT(*) FROM visit w
                                            WHERE w.product = v.product AND w.length > 50)""",
                      None),
}

VISIT = pa.schema([("product", pa.string()), ("user", pa.string()), ("length", pa.int32())])


def _visits(rows: list[tuple]) -> workload.Step:
    return workload.Step("insert", pa.table(list(zip(*rows)), schema=VISIT))


def _adds(rng: random.Random, n: int) -> list[workload.Step]:
    """``n`` random inserts and upserts (no UPDATE or DELETE: each of those flushes what is pending)."""
    return [s for s in workload.steps(rng.randrange(1 << 30), 4 * n) if s.kind != "sql"][:n]


def _epochs(rng: random.Random) -> list[list[workload.Step]]:
    """Each epoch: at most one UPDATE or DELETE, first (a later one would flush what is pending,
    an epoch more); then inserts and upserts. The NOT IN subquery comes to hold values, then a
    NULL, then nothing; the uncorrelated EXISTS and NOT EXISTS turn true."""
    return [
        [*_adds(rng, 2), _visits([("p0", "u0", 7), ("p0", "u1", None), ("p0", "u2", 40), ("p5", None, None)])],
        [workload.Step("sql", "UPDATE visit SET length = length + 3 WHERE product = 'p3' OR \"user\" = 'u1'"),
         _visits([("p0", "u0", None), ("p4", "u0", 7), ("p6", "u2", 86)]),
         workload.Step("upsert", "INSERT INTO info VALUES ('p2', NULL), ('p3', 'c1')"), *_adds(rng, 2)],
        [workload.Step("sql", "DELETE FROM info WHERE category = 'c0'"), *_adds(rng, 1)],
        [workload.Step("sql", "DELETE FROM visit WHERE product = 'p0'"), *_adds(rng, 1)],
    ]


def test_views_match_duckdb_after_every_epoch(open_db):
    rng = random.Random(15)
    db = open_db()
    db.sql(workload.TABLES)
    ref = workload.Reference()
    for step in _adds(rng, 4):  # the views are created over tables that already hold data (backfill)
        workload.apply(db, step)
        ref.apply(step)
    for name, (sql, _) in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    seen = dict.fromkeys(VIEWS, 0)
    for epoch, steps in enumerate(_epochs(rng)):
        for step in steps:
            workload.apply(db, step)
            ref.apply(step)
        db.flush()
        for name, (sql, oracle) in VIEWS.items():
            got = workload.norm(db.sql(f"SELECT * FROM {name}"))
            assert got == ref.query(oracle or sql), f"{name} differs from DuckDB at epoch {epoch}"
            seen[name] += len(got)
    assert all(seen.values()), f"some views stayed empty, so nothing was checked there: {seen}"


# -- fixed data, PostgreSQL's answers -----------------------------------------------------------------
FIXED_TABLES = "CREATE TABLE t (k INT, x INT); CREATE TABLE s (k INT, y INT)"
FIXED = {  # name -> (query, answer per state: s as inserted / s without its NULL / s empty)
    "semi": ("SELECT k FROM t WHERE x IN (SELECT y FROM s)", [[1], [1], []]),
    "anti": ("SELECT k FROM t WHERE x NOT IN (SELECT y FROM s)", [[], [2, 4], [1, 2, 3, 4]]),
    "anti_corr": ("SELECT k FROM t WHERE x NOT IN (SELECT y FROM s WHERE s.k = t.k)",
                  [[3, 4], [2, 3, 4], [1, 2, 3, 4]]),
    "exists": ("SELECT k FROM t WHERE EXISTS (SELECT 1 FROM s WHERE s.k = t.k)", [[1, 2], [1], []]),
    "not_exists": ("SELECT k FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = t.k)",
                   [[3, 4], [2, 3, 4], [1, 2, 3, 4]]),
    "counts": ("SELECT k, (SELECT COUNT(*) FROM s WHERE s.k = t.k) AS c, (SELECT COUNT(y) FROM s) AS cy FROM t",
               [[(1, 2, 2), (2, 1, 2), (3, 0, 2), (4, 0, 2)], [(1, 2, 2), (2, 0, 2), (3, 0, 2), (4, 0, 2)],
                [(1, 0, 0), (2, 0, 0), (3, 0, 0), (4, 0, 0)]]),
    "whole": ("""SELECT COUNT(*) AS n, (SELECT MAX(y) FROM s) AS m FROM t WHERE x > 100
                 HAVING COUNT(*) < (SELECT COUNT(*) FROM s)""",
              [[(0, 5)], [(0, 5)], []]),
    "in_where": ("""SELECT k FROM t WHERE x > (SELECT MIN(y) FROM s) AND EXISTS (SELECT 1 FROM s WHERE y IS NULL)""",
                 [[2, 4], [], []]),
}


def _answer(table: pa.Table) -> list:
    rows = sorted(zip(*table.to_pydict().values()), key=lambda r: tuple((v is not None, v) for v in r))
    return [r[0] if len(r) == 1 else r for r in rows]


def test_postgres_answers_in_views_and_queries(open_db):
    db = open_db()
    db.sql(FIXED_TABLES)
    for name, (sql, _) in FIXED.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    db.sql("INSERT INTO t VALUES (1, 1), (2, 2), (3, NULL), (4, 4)")
    db.sql("INSERT INTO s VALUES (1, 1), (1, 5), (2, NULL)")
    for state, change in enumerate(["DELETE FROM s WHERE y IS NULL", "DELETE FROM s", None]):
        db.flush()
        for name, (sql, answers) in FIXED.items():
            assert _answer(db.sql(f"SELECT * FROM {name}")) == answers[state], f"view {name}, state {state}"
            assert _answer(db.sql(sql)) == answers[state], f"query {name}, state {state}"
        if change:
            db.sql(change)


# -- refused shapes -------------------------------------------------------------------------------------
def _catalog() -> Catalog:
    c = Catalog()
    c = c.with_table("info", (Column("product", "VARCHAR"), Column("category", "VARCHAR")), ("product",))
    return c.with_table("visit", (Column("product", "VARCHAR"), Column("user", "VARCHAR"), Column("length", "INT")), ())


@pytest.mark.parametrize("sql", [sql for sql, _ in VIEWS.values()])
def test_views_plan_without_subqueries_and_survive_the_catalog_encoding(sql):
    plan, depends = plan_view(parse(sql)[0], _catalog())
    assert P.decode(json.loads(json.dumps(P.encode(plan)))) == plan
    assert "Subquery" not in json.dumps(P.encode(plan)) and "Exists" not in json.dumps(P.encode(plan))
    assert set(depends) <= {"info", "visit"}


@pytest.mark.parametrize("sql,joins", [
    # a correlation equality is a join key: no cross join (one partition) for a correlated subquery
    ("""SELECT v.product, i.category FROM visit v, info i WHERE v.product = i.product
        AND NOT EXISTS (SELECT 1 FROM visit w WHERE w."user" = v."user" AND w.length > 50)""",
     ['inner on "v__product" = "i__product"', 'left on "v__user" = "_sq1__c0"']),
    ("""SELECT product FROM visit v WHERE length > (SELECT AVG(w.length) FROM visit w WHERE w.product = v.product)""",
     ['left on "v__product" = "_sq1__c0"']),
    ("""SELECT product FROM visit WHERE (product, length) IN (SELECT product, length FROM visit WHERE "user" = 'u1')""",
     ['inner on "visit__product" = "_sq1__v0" AND "visit__length" = "_sq1__v1"']),
    ("""SELECT product FROM visit WHERE length NOT IN (SELECT length FROM visit WHERE "user" = 'u1')""",
     ['left on "visit__length" = "_sq1__v0"', "inner on (cross)"]),
])
def test_subqueries_become_keyed_joins(sql, joins):
    text = P.explain(plan_view(parse(sql)[0], _catalog())[0])
    for j in joins:
        assert j in text, text


SUPPORTED = r"supported as conditions ANDed at the top level of WHERE, \[NOT\] EXISTS"


@pytest.mark.parametrize("sql,needle", [
    ("SELECT product FROM visit WHERE product IN (SELECT product FROM info) OR length > 3",
     rf"IN \(SELECT \.\.\.\) under OR is not supported in a materialized view; .*{SUPPORTED}"),
    ("SELECT product, COUNT(*) AS n, EXISTS (SELECT 1 FROM info i WHERE i.product = v.product) AS known "
     "FROM visit v GROUP BY product",
     rf"EXISTS \(SELECT \.\.\.\) in the SELECT list is not supported.*{SUPPORTED}"),
    ("SELECT product, product IN (SELECT product FROM info) AS known FROM visit",
     rf"IN \(SELECT \.\.\.\) in the SELECT list is not supported.*{SUPPORTED}"),
    ("SELECT product, COUNT(*) AS n FROM visit GROUP BY product HAVING product NOT IN (SELECT product FROM info)",
     rf"NOT IN \(SELECT \.\.\.\) in HAVING is not supported.*{SUPPORTED}"),
    ("SELECT product FROM visit WHERE CASE WHEN product IN (SELECT product FROM info) THEN length > 1 END",
     r"IN \(SELECT \.\.\.\) inside an expression of WHERE is not supported"),
    ("SELECT product FROM visit WHERE (product, \"user\") NOT IN (SELECT product, category FROM info)",
     r"NOT IN over several columns is not supported.*NOT EXISTS"),
    ("SELECT product FROM visit WHERE length > ALL (SELECT length FROM visit WHERE product = 'p1')",
     r"ALL \(SELECT \.\.\.\) is not supported in a materialized view; write x IN \(SELECT \.\.\.\), NOT IN or "
     r"\[NOT\] EXISTS"),
    ("SELECT product, (SELECT category FROM info i WHERE i.product = v.product) AS c FROM visit v",
     r"a scalar subquery that may return more than one row is not supported in a materialized view \(PostgreSQL "
     r"fails at runtime when it does\).*must be an aggregate without GROUP BY"),
    ("SELECT product, (SELECT COUNT(*) FROM info GROUP BY category) AS c FROM visit",
     r"one with GROUP BY may return another number of rows than one"),
    ("SELECT product, (SELECT MAX(length), MIN(length) FROM visit) AS c FROM visit",
     r"subquery must return only one column \(2 here\)"),
    ("SELECT product FROM visit v WHERE EXISTS (SELECT 1 FROM visit w WHERE w.product = v.product "
     "AND w.length > v.length)",
     r"EXISTS \(SELECT \.\.\.\): a correlated subquery may refer to the outer query only in equalities ANDed at the "
     r"top level of its WHERE \(inner expression = outer expression\); here v.length"),
    ("SELECT product FROM visit v WHERE length IN (SELECT MAX(w.length) FROM visit w WHERE w.product = v.product)",
     r"a correlated subquery with LIMIT, OFFSET, a window function or an aggregate without GROUP BY is not supported"),
    ("SELECT v.product FROM visit v JOIN info i ON i.product = (SELECT MAX(product) FROM info)",
     r"a subquery in a JOIN's ON condition is not supported in a materialized view \(scalar subqueries are, in "
     r"SELECT, WHERE and HAVING\)"),
    ("SELECT product, COUNT(*) AS n, (SELECT COUNT(*) FROM info i WHERE i.category = v.\"user\") AS c FROM visit v "
     "GROUP BY product", r"subquery uses ungrouped column v.\"user\" from outer query"),
])
def test_refused_shapes_name_the_construct(sql, needle):
    with pytest.raises(SqlError, match=needle):
        plan_view(parse(sql)[0], _catalog())


def test_refusal_reaches_create_with_its_position(open_db):
    db = open_db()
    db.sql(workload.TABLES)
    with pytest.raises(SqlError, match=r"under OR .*\(line 2, column \d+\)"):
        db.sql("CREATE MATERIALIZED VIEW v AS SELECT product FROM visit\n"
               "WHERE length > 3 OR product IN (SELECT product FROM info)")
    assert "v" not in db.catalog.views


def test_an_update_or_delete_reads_its_own_table_in_a_subquery_as_any_query_does(open_db):
    """Only the rows the statement changes carry their hidden ``_row_id``: a NATURAL JOIN or a
    ``SELECT *`` over the same table in the WHERE sees the table's own columns (it joined on
    ``_row_id`` too, and this DELETE deleted nothing). Answers from PostgreSQL 15."""
    db = open_db()
    db.sql("CREATE TABLE t (a INT, b TEXT); CREATE TABLE u (a INT); CREATE TABLE k (id INT PRIMARY KEY, v INT)")
    db.sql("INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z'); INSERT INTO u VALUES (2), (3)")
    db.sql("INSERT INTO k VALUES (1, 10), (2, 20), (3, 30)")
    db.flush()
    db.sql("UPDATE t AS x SET b = 'w' WHERE x.a IN (SELECT a FROM t NATURAL JOIN u WHERE a > 2)")
    db.sql("DELETE FROM k AS y WHERE y.id IN (SELECT a FROM u) AND y.v > 25")
    db.sql("UPDATE k SET v = v + 1 WHERE id = 1")
    db.sql("DELETE FROM t WHERE a IN (SELECT a FROM t NATURAL JOIN u WHERE b = 'y')")
    db.sql("DELETE FROM u WHERE (a, 'w') IN (SELECT * FROM t)")
    db.flush()
    assert _answer(db.sql("SELECT * FROM t")) == [(1, "x"), (3, "w")]
    assert _answer(db.sql("SELECT * FROM k")) == [(1, 11), (2, 20)]
    assert _answer(db.sql("SELECT * FROM u")) == [2]

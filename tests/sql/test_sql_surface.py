"""The SQL surface: view column lists, DROP kinds, SQL functions, session settings, and the
set-shaped queries (INTERSECT, EXCEPT, DISTINCT ON, GROUPING SETS / ROLLUP / CUBE, a window's
table name) — views checked against DuckDB running the same SQL natively after every epoch of
random inserts, updates and deletes."""

from __future__ import annotations

import decimal
import random
import warnings

import pytest

from millpond.errors import CatalogError, MillpondNotice, SqlError
from tests import workload
from tests.conftest import rows

# each view's SQL runs on DuckDB as written (GROUPING SETS natively: not through millpond's rewrite)
SET_VIEWS = {
    "in_both": "SELECT product FROM visit INTERSECT SELECT product FROM info WHERE category IS NOT NULL",
    "only_visits": """SELECT product, "user" FROM visit EXCEPT SELECT product, category FROM info""",
    "first_visit": """SELECT DISTINCT ON (product) product, "user", length FROM visit
                      ORDER BY product, length DESC NULLS LAST, "user" NULLS FIRST""",
    "longest2": """SELECT DISTINCT ON ("user") "user", length FROM visit ORDER BY "user", length NULLS FIRST LIMIT 2""",
    "rollup": """SELECT product, "user", COUNT(*) AS n, SUM(length) AS total FROM visit
                 GROUP BY ROLLUP (product, "user")""",
    "cube": """SELECT i.category, v."user", MAX(v.length) AS hi FROM visit v JOIN info i ON v.product = i.product
               GROUP BY CUBE (i.category, v."user") HAVING COUNT(*) > 1""",
    "sets": """SELECT product, "user", MIN(length) AS lo FROM visit GROUP BY GROUPING SETS ((product), ("user"), ())""",
}


def test_set_shaped_views_match_duckdb_after_every_epoch(open_db):
    db = open_db()
    db.sql(workload.TABLES)
    ref = workload.Reference()
    plan = workload.steps(1515, 20)
    for step in plan[:5]:  # over tables that already hold rows (backfill)...
        workload.apply(db, step)
        ref.apply(step)
    for name, sql in SET_VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    seen = dict.fromkeys(SET_VIEWS, 0)
    for i in workload.epochs(db, ref, plan, 5, random.Random(15), most=3):  # ... then changed a few steps per epoch
        for name, sql in SET_VIEWS.items():
            got = workload.norm(db.sql(f"SELECT * FROM {name}"))
            assert got == ref.query(sql, postgres=False), f"{name} differs from DuckDB after step {i}"
            assert got == workload.norm(db.sql(sql)), f"{name}: the view and an ad-hoc SELECT differ"
            seen[name] += len(got)
    assert all(seen.values()), f"some views stayed empty, so nothing was checked: {seen}"


def test_refused_set_shapes_name_the_construct(open_db):
    db = open_db()
    db.sql(workload.TABLES)
    with pytest.raises(SqlError, match="INTERSECT ALL is not supported"):
        db.sql("CREATE MATERIALIZED VIEW x AS SELECT product FROM visit INTERSECT ALL SELECT product FROM info")
    with pytest.raises(SqlError, match="DISTINCT ON expressions must match the leftmost ORDER BY"):
        db.sql("CREATE MATERIALIZED VIEW x AS SELECT DISTINCT ON (product) * FROM visit ORDER BY length")
    with pytest.raises(SqlError, match="LIMIT together with GROUPING SETS"):
        db.sql("CREATE MATERIALIZED VIEW x AS SELECT product, COUNT(*) FROM visit GROUP BY ROLLUP (product) LIMIT 3")


def test_view_column_list_renames_and_refuses_too_many(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT, v INT); INSERT INTO t VALUES (1, 10)")
    db.sql("CREATE MATERIALIZED VIEW one(a) AS SELECT * FROM t")  # fewer names: the rest keep theirs
    db.sql("CREATE MATERIALIZED VIEW two(a, b) AS SELECT k, v FROM t")
    db.sql("CREATE MATERIALIZED VIEW over_two AS SELECT a + b AS s FROM two")  # a view over it sees the new names
    with pytest.raises(SqlError, match="too many column names were specified"):
        db.sql("CREATE MATERIALIZED VIEW three(a, b, c) AS SELECT * FROM t")
    with pytest.raises(SqlError, match="must be unique"):
        db.sql("CREATE MATERIALIZED VIEW dup(a, a) AS SELECT * FROM t")
    db.flush()
    assert db.sql("SELECT * FROM one").column_names == ["a", "v"]
    assert rows(db.sql("SELECT * FROM two")) == [(1, 10)] and db.sql("SELECT * FROM two").column_names == ["a", "b"]
    assert rows(db.sql("SELECT * FROM over_two")) == [(11,)]
    assert sorted(db.sql("SHOW MATERIALIZED VIEWS").column("name").to_pylist()) == ["one", "over_two", "two"]


def test_each_drop_kind_drops_only_its_kind(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT); CREATE MATERIALIZED VIEW m AS SELECT k FROM t")
    with pytest.raises(CatalogError, match='"m" is not a function'):
        db.sql("DROP FUNCTION m")
    with pytest.raises(CatalogError, match='"m" is not a table\\nHINT:  use DROP MATERIALIZED VIEW'):
        db.sql("DROP TABLE m")
    with pytest.raises(CatalogError, match='"t" is not a materialized view\\nHINT:  use DROP TABLE'):
        db.sql("DROP MATERIALIZED VIEW t")
    with pytest.raises(CatalogError, match='"m" is not an index\\nHINT:  use DROP MATERIALIZED VIEW'):
        db.sql("DROP INDEX m")
    for kind in ("VIEW", "SEQUENCE"):
        with pytest.raises(SqlError, match=f"DROP {kind} is not supported"):
            db.sql(f"DROP {kind} m")
    db.sql("DROP FUNCTION IF EXISTS m")  # no function m: nothing happens
    assert db.sql("SHOW MATERIALIZED VIEWS").column("name").to_pylist() == ["m"]
    db.sql("DROP MATERIALIZED VIEW m; DROP TABLE t")
    assert db.sql("SHOW TABLES").num_rows == 0


def test_sql_functions_inline_in_views_and_queries_and_survive_a_restart(open_db, root):
    db = open_db()
    db.sql("""CREATE TABLE t (k INT, v NUMERIC);
              CREATE FUNCTION add1(x INT) RETURNS INT LANGUAGE SQL AS 'SELECT x + 1';
              CREATE FUNCTION mix(INT, NUMERIC) RETURNS NUMERIC AS $$ SELECT $1 * $2 $$ LANGUAGE sql IMMUTABLE;
              CREATE FUNCTION half(x NUMERIC) RETURNS NUMERIC RETURN x / 2;
              INSERT INTO t VALUES (1, 2.5), (4, NULL)""")
    query = "SELECT add1(k) AS a, mix(add1(k), v) AS m, half(v) AS h, 7 / 2 AS i FROM t"
    db.sql(f"CREATE MATERIALIZED VIEW f AS {query}")
    db.flush()
    want = [(2, 5.0, 1.25, 3), (5, None, None, 3)]
    assert [tuple(float(x) if x is not None and not isinstance(x, int) else x for x in r)
            for r in rows(db.sql("SELECT * FROM f"))] == want
    assert rows(db.sql(query)) == rows(db.sql("SELECT * FROM f"))
    assert "add1()" in db.sql("SHOW MATERIALIZED VIEWS").column("depends_on")[0].as_py()
    with pytest.raises(CatalogError, match="views f depend on it"):
        db.sql("DROP FUNCTION add1")
    with pytest.raises(CatalogError, match="views f depend on it"):
        db.sql("CREATE OR REPLACE FUNCTION add1(x INT) RETURNS INT AS 'SELECT x + 2'")
    with pytest.raises(SqlError, match=r"add1 takes 1 argument \(add1\(INT\)\), got 2"):
        db.sql("SELECT add1(1, 2)")
    # arguments pass by PostgreSQL's implicit casts only: widening, or an untyped literal
    assert rows(db.sql("SELECT half(3) AS h, add1('7') AS a")) == [(decimal.Decimal("1.5"), 8)]
    for narrowing in ("add1(1.5)", "add1(CAST(1 AS BIGINT))", "add1(v)"):
        with pytest.raises(SqlError, match=r"function add1\((numeric|bigint)\S*\) does not exist: no implicit cast"):
            db.sql(f"SELECT {narrowing} FROM t")
    db.close()
    again = open_db()  # the functions are in the catalog; the view re-plans and verifies with them
    again.sql("INSERT INTO t VALUES (9, 1)")
    again.flush()
    assert (10, 10.0, 0.5, 3) in [tuple(float(x) if x is not None and not isinstance(x, int) else x for x in r)
                                  for r in rows(again.sql("SELECT * FROM f"))]
    assert again.sql("SHOW FUNCTIONS").column("name").to_pylist() == ["add1", "half", "mix"]
    again.sql("DROP MATERIALIZED VIEW f; DROP FUNCTION add1")
    with pytest.raises(SqlError, match=r"function add1\(\) is not supported"):
        again.sql("SELECT add1(1)")


@pytest.mark.parametrize("statement, message", [
    ("CREATE FUNCTION f(x INT) RETURNS INT LANGUAGE plpgsql AS 'begin return 1; end'", "LANGUAGE plpgsql is not supported"),
    ("CREATE FUNCTION f(x INT) RETURNS INT AS 'SELECT k FROM t'", "the body must be one expression"),
    ("CREATE FUNCTION f(x INT) RETURNS INT AS 'SELECT y + 1'", r"may only use its parameters \(x\), not 'y'"),
    ("CREATE FUNCTION f(x INT) RETURNS INT AS 'SELECT nosuch(x)'", r"function 'f': function nosuch\(\) is not supported"),
    ("CREATE FUNCTION upper(x TEXT) RETURNS TEXT AS 'SELECT x'", "the name is a built-in function's"),
    ("CREATE FUNCTION f(x INT) RETURNS INT AS 'SELECT $2'", r"has 1 parameters: \$2 is not one"),
    ("CREATE FUNCTION f(x INT) RETURNS INT AS 'SELECT f(x)'", "nested deeper than"),
])
def test_sql_function_refusals_name_the_problem(open_db, statement, message):
    db = open_db()
    with pytest.raises(SqlError, match=message):
        db.sql(statement)
    assert db.sql("SHOW FUNCTIONS").num_rows == 0  # nothing half-created


def test_session_settings_with_and_without_a_millpond_meaning(open_db):
    db = open_db(parallelism=2)
    db.sql("CREATE TABLE t (k INT); CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS n FROM t")
    db.sql("SET streaming_parallelism = 3")
    assert db.parallelism == 3
    db.sql("SET streaming_parallelism = 0")  # RisingWave's "default"
    assert db.parallelism == 2
    db.sql("SET rw_implicit_flush = true")
    db.sql("INSERT INTO t VALUES (1), (2)")
    assert rows(db.sql("SELECT * FROM n")) == [(2,)]  # flushed by the INSERT itself
    db.sql("SET rw_implicit_flush TO false")
    db.sql("INSERT INTO t VALUES (3)")
    assert rows(db.sql("SELECT * FROM n")) == [(2,)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db.sql("SET rw_streaming_enable_bushy_join = false")
    assert any(issubclass(w.category, MillpondNotice) and "setting ignored" in str(w.message) for w in caught)
    with pytest.raises(SqlError, match="unknown setting"):
        db.sql("SET no_such_thing = 1")
    with pytest.raises(SqlError, match="parallelism must be an integer of at least 1"):
        db.sql("SET parallelism = -1")


def test_window_rows_are_named_after_their_table(open_db):
    db = open_db()
    db.sql("CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP)")
    db.sql("INSERT INTO bid VALUES (1, 10, '2026-01-01 00:00:01'), (1, 20, '2026-01-01 00:00:03'), "
           "(2, 5, '2026-01-01 00:00:04')")
    db.sql("""CREATE MATERIALIZED VIEW h AS SELECT bid.auction, bid.window_start, MAX(bid.price) AS hi
              FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '4' SECOND)
              GROUP BY bid.auction, bid.window_start""")
    db.flush()
    got = [(a, ws.second, hi) for a, ws, hi in rows(db.sql("SELECT * FROM h"))]
    assert got == [(1, 58, 10), (1, 0, 20), (1, 2, 20), (2, 2, 5), (2, 4, 5)]


def test_tumble_and_hop_in_a_query_match_the_view(open_db):
    db = open_db()
    db.sql("CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP)")
    db.sql("INSERT INTO bid VALUES (1, 10, '2026-01-01 00:00:01'), (1, 20, '2026-01-01 00:00:03'), "
           "(2, 5, '2026-01-01 00:00:04'), (2, 7, NULL), (3, 1, '1969-12-31 23:59:59')")
    queries = {
        "hop": """SELECT auction, window_start, window_end, MAX(price) AS hi, COUNT(*) AS n
                  FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '4' SECOND) GROUP BY 1, 2, 3""",
        "tumble": """SELECT b.auction, b.window_start, b.price FROM TUMBLE(bid, date_time, INTERVAL '3' SECOND) AS b
                     WHERE b.price > 1""",
    }
    for name, sql in queries.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    db.flush()
    for name, sql in queries.items():
        assert rows(db.sql(sql)) == rows(db.sql(f"SELECT * FROM {name}")), name
    hop = [(a, ws.strftime("%H:%M:%S"), hi, n) for a, ws, _, hi, n in rows(db.sql(queries["hop"]))]
    assert hop == [(1, "23:59:58", 10, 1), (1, "00:00:00", 20, 2), (1, "00:00:02", 20, 1),
                   (2, "00:00:02", 5, 1), (2, "00:00:04", 5, 1), (3, "23:59:56", 1, 1), (3, "23:59:58", 1, 1)]
    with pytest.raises(SqlError, match="HOP: the window size must be a multiple of the slide"):
        db.sql("SELECT * FROM HOP(bid, date_time, INTERVAL '3' SECOND, INTERVAL '4' SECOND)")


def test_output_names_and_row_in_subquery_as_postgres(open_db):
    db = open_db()
    db.sql("CREATE TABLE a (x INT, y INT)")
    db.sql("CREATE TABLE b (x INT, y INT)")
    db.sql("INSERT INTO a VALUES (1, 2), (3, 4), (5, NULL)")
    db.sql("INSERT INTO b VALUES (1, 2), (NULL, 4)")
    # PostgreSQL names: a scalar subquery after its column, EXISTS "exists", an expression "?column?"
    named = 'SELECT x, (SELECT max(y) FROM b), 1 + 1, y AS "a b" FROM a'
    db.sql(f"CREATE MATERIALIZED VIEW named AS {named}")
    row_in = "SELECT x, y, (x, y) IN (SELECT x, y FROM b) AS i FROM a"  # NULLs as PostgreSQL: unknown
    db.flush()
    assert db.sql(named).column_names == db.sql("SELECT * FROM named").column_names == ["x", "max", "?column?", "a b"]
    assert rows(db.sql('SELECT "?column?", "a b" FROM named')) == [(2, None), (2, 2), (2, 4)]
    assert db.sql("SELECT EXISTS (SELECT 1 FROM b)").column_names == ["exists"]
    assert rows(db.sql(row_in)) == [(1, 2, True), (3, 4, None), (5, None, None)]
    db.sql("CREATE MATERIALIZED VIEW pairs AS SELECT x FROM a WHERE (x, y) IN (SELECT x, y FROM b)")
    db.flush()
    assert rows(db.sql("SELECT * FROM pairs")) == [(1,)]
    with pytest.raises(SqlError, match="subquery has too few columns"):
        db.sql("SELECT * FROM a WHERE (x, y) IN (SELECT x FROM b)")


def test_table_column_aliases_rename_in_order(open_db):
    db = open_db()
    db.sql("CREATE TABLE a (x INT, y INT)")
    db.sql("INSERT INTO a VALUES (1, 2), (3, 4)")
    renamed = "SELECT p.c + 1 AS c1, d, p.c FROM a AS p(c, d) WHERE p.c > 1"
    partly = "SELECT * FROM a AS p(c)"
    db.sql(f"CREATE MATERIALIZED VIEW renamed AS {renamed}")
    db.sql(f"CREATE MATERIALIZED VIEW partly AS {partly}")
    db.flush()
    assert rows(db.sql(renamed)) == rows(db.sql("SELECT * FROM renamed")) == [(4, 4, 3)]
    assert db.sql(partly).column_names == db.sql("SELECT * FROM partly").column_names == ["c", "y"]
    for sql in ("SELECT * FROM a AS p(c, d, e)", "SELECT * FROM (SELECT x FROM a) AS p(c, d)"):
        with pytest.raises(SqlError, match="has [12] columns available but [23] columns specified"):
            db.sql(sql)
        with pytest.raises(SqlError, match="columns available"):
            db.sql(f"CREATE MATERIALIZED VIEW bad AS {sql}")

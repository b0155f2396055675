"""Python functions in SQL (``CREATE FUNCTION ... LANGUAGE python``, ``db.create_function``): views
that call them equal DuckDB recomputing the query over all input after every epoch of random
inserts, updates and deletes (DuckDB calling the same Python per row through its own native UDF, not
millpond's Arrow path); a call that raises fails its view only, names the function and the row, and
is NULL under ``on_error = 'null'``; a view keeps the body it was created with across a restart;
definitions that cannot work are refused with the reason; the wire refuses them unless allowed."""

from __future__ import annotations

import random

import duckdb
import psycopg
import pytest

from millpond import MillpondError, SqlError
from millpond.errors import CatalogError
from tests.conftest import canonical, same_rows

SCORE = '''
def score(v, w):
    import math
    return round(math.log1p(abs(v)) * w, 6)
'''
BUCKET = '''
def bucket(g):
    return g.upper()[:1] + "-" + str(len(g))
'''
NAMED = '''
def named(v):
    return "none" if v is None else "even" if v % 2 == 0 else "odd"
'''
FUNCTIONS = f"""
CREATE FUNCTION score(v BIGINT, w DOUBLE) RETURNS DOUBLE LANGUAGE python AS $${SCORE}$$;
CREATE FUNCTION bucket(g VARCHAR) RETURNS VARCHAR LANGUAGE python AS $${BUCKET}$$;
CREATE FUNCTION named(v BIGINT) RETURNS VARCHAR LANGUAGE python CALLED ON NULL INPUT AS $${NAMED}$$;
"""
TABLES = """
CREATE TABLE kv (k INT PRIMARY KEY, g VARCHAR, v BIGINT);
CREATE TABLE dim (g VARCHAR PRIMARY KEY, w DOUBLE);
"""
VIEWS = {
    "projected": "SELECT k, score(v, 2.0) AS s, bucket(g) AS b, named(v) AS parity FROM kv",
    "grouped": "SELECT bucket(g) AS b, named(v) AS parity, count(*) AS n, sum(score(v, 1.0)) AS s "
               "FROM kv GROUP BY bucket(g), named(v)",
    "filtered": "SELECT k, v FROM kv WHERE score(v, 1.0) > 2.5",
    "joined": "SELECT kv.k, dim.w FROM kv LEFT JOIN dim ON kv.g = dim.g AND score(kv.v, dim.w) > 3",
}


def _oracle() -> duckdb.DuckDBPyConnection:
    """DuckDB with the same functions, called per row by DuckDB's native Python UDFs."""
    con = duckdb.connect()
    for name, source, params, returns, nulls in (("score", SCORE, ["BIGINT", "DOUBLE"], "DOUBLE", "default"),
                                                 ("bucket", BUCKET, ["VARCHAR"], "VARCHAR", "default"),
                                                 ("named", NAMED, ["BIGINT"], "VARCHAR", "special")):
        namespace: dict = {}
        exec(source, namespace)  # noqa: S102 - the test's own functions
        con.create_function(name, namespace[name], [duckdb.sqltype(p) for p in params], duckdb.sqltype(returns),
                            null_handling=nulls)
    return con


def _check(db, oracle, kv: dict, dim: dict, epoch: int) -> None:  # noqa: ANN001
    oracle.execute("DELETE FROM kv; DELETE FROM dim")
    if kv:
        oracle.executemany("INSERT INTO kv VALUES (?, ?, ?)", [(k, g, v) for k, (g, v) in kv.items()])
    if dim:
        oracle.executemany("INSERT INTO dim VALUES (?, ?)", list(dim.items()))
    for name, sql in VIEWS.items():
        got, want = canonical(db.sql(f"SELECT * FROM {name}")), canonical(oracle.sql(sql).to_arrow_table())
        assert same_rows(got, want), f"epoch {epoch}, view {name}: {got[:5]} != {want[:5]}"


def test_views_calling_python_functions_equal_duckdb_after_every_epoch(open_db, root):
    db = open_db()
    db.sql(TABLES + FUNCTIONS)
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    oracle = _oracle()
    oracle.execute("CREATE TABLE kv (k INT, g VARCHAR, v BIGINT); CREATE TABLE dim (g VARCHAR, w DOUBLE)")
    rng = random.Random(7)
    groups = ["ant", "bee", "cat", "dove", "eel"]
    kv: dict = {}
    dim: dict = {}
    for epoch in range(8):
        for _ in range(rng.randint(5, 25)):
            k = rng.randint(0, 40)
            if k in kv and rng.random() < 0.3:
                db.sql(f"DELETE FROM kv WHERE k = {k}")
                del kv[k]
            else:
                g, v = rng.choice(groups), rng.choice([None, *range(-50, 500)])
                db.sql(f"INSERT INTO kv VALUES ({k}, '{g}', {'NULL' if v is None else v}) "
                       "ON CONFLICT (k) DO UPDATE SET g = excluded.g, v = excluded.v")
                kv[k] = (g, v)
        g = rng.choice(groups)
        if g in dim and rng.random() < 0.3:
            db.sql(f"DELETE FROM dim WHERE g = '{g}'")
            del dim[g]
        else:
            w = round(rng.uniform(0.1, 3), 2)
            db.sql(f"INSERT INTO dim VALUES ('{g}', {w}) ON CONFLICT (g) DO UPDATE SET w = excluded.w")
            dim[g] = w
        db.flush()
        _check(db, oracle, kv, dim, epoch)
    # ad-hoc queries run the same functions in DuckDB on the driver
    got = canonical(db.sql("SELECT k, score(v, 2.0) AS s, named(v) AS p FROM kv"))
    assert same_rows(got, canonical(oracle.sql("SELECT k, score(v, 2.0) AS s, named(v) AS p FROM kv").to_arrow_table()))
    db.close()
    db = open_db()  # a restart: the stored plans carry the functions' bodies
    db.sql("INSERT INTO kv VALUES (1000, 'bee', 77)")
    kv[1000] = ("bee", 77)
    db.flush()
    _check(db, oracle, kv, dim, 99)
    shown = db.sql("SHOW FUNCTIONS").to_pylist()
    assert {(f["name"], f["language"]) for f in shown} == {("score", "python"), ("bucket", "python"),
                                                           ("named", "python")}


def test_a_raising_call_fails_its_view_only_and_names_the_function_and_row(open_db):
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, x BIGINT)")
    db.sql("CREATE FUNCTION inv(x BIGINT) RETURNS DOUBLE LANGUAGE python AS $$\ndef inv(x):\n    return 1 / x\n$$")
    db.sql("CREATE FUNCTION wrong(x BIGINT) RETURNS BIGINT LANGUAGE python AS 'def wrong(x): return str(x)'")
    db.sql("CREATE MATERIALIZED VIEW strict_view AS SELECT k, inv(x) AS y FROM t")
    db.sql("CREATE MATERIALIZED VIEW lenient WITH (on_error = 'null') AS SELECT k, inv(x) AS y, wrong(x) AS w FROM t")
    db.sql("CREATE MATERIALIZED VIEW plain AS SELECT k, x FROM t")
    db.sql("INSERT INTO t VALUES (1, 4), (2, 0), (3, 8)")
    (report,) = db.flush()
    failure = report.failed["strict_view"]
    assert failure["sqlstate"] == "38000"
    assert "function inv(0) raised ZeroDivisionError" in failure["message"]
    assert failure["rows"] == ["t: k=2, x=0"]
    assert sorted(db.sql("SELECT * FROM lenient").to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "y": 0.25, "w": None}, {"k": 2, "y": None, "w": None}, {"k": 3, "y": 0.125, "w": None}]
    assert sorted(r["k"] for r in db.sql("SELECT k FROM plain").to_pylist()) == [1, 2, 3]
    with pytest.raises(MillpondError, match=r"view 'strict_view' failed .*inv\(0\) raised ZeroDivisionError"):
        db.sql("SELECT * FROM strict_view")
    with pytest.raises(SqlError, match=r"function inv\(0\) raised ZeroDivisionError: division by zero \(SQLSTATE 38000\)"):
        db.sql("SELECT inv(x) FROM t")
    with pytest.raises(SqlError, match=r"function wrong\(4\) returned '4', which is not a BIGINT"):
        db.sql("SELECT wrong(x) FROM t")
    with pytest.raises(CatalogError, match="views lenient, strict_view depend on it"):
        db.sql("CREATE OR REPLACE FUNCTION inv(x BIGINT) RETURNS DOUBLE LANGUAGE python AS 'def inv(x): return 0.0'")


@pytest.mark.parametrize("statement, error", [
    ("CREATE FUNCTION g(x BIGINT) RETURNS DOUBLE LANGUAGE python AS 'def h(x): return 1.0'",
     "defines no function named 'g'.*defined: h"),
    ("CREATE FUNCTION g(x BIGINT) RETURNS DOUBLE LANGUAGE python AS 'def g(x, y): return 1.0'",
     r"g\(x, y\) cannot take the 1 argument"),
    ("CREATE FUNCTION g(x BIGINT) RETURNS DOUBLE LANGUAGE python AS 'def g(x): return (1'",
     "syntax error in its Python body, line 1"),
    ("CREATE FUNCTION g(x INTERVAL) RETURNS DOUBLE LANGUAGE python AS 'def g(x): return 1.0'",
     "parameter x is INTERVAL; a Python function takes and returns BOOLEAN"),
    ("CREATE FUNCTION g() RETURNS DOUBLE LANGUAGE python AS 'def g(): return 1.0'", "needs a parameter"),
    ("CREATE FUNCTION g(x INT) RETURNS INT LANGUAGE plv8 AS 'x'", "LANGUAGE plv8 is not supported"),
    ("CREATE FUNCTION g(x INT) RETURNS INT LANGUAGE SQL STRICT AS 'SELECT x'", "apply to LANGUAGE python"),
])
def test_definitions_that_cannot_work_are_refused(open_db, statement, error):
    db = open_db()
    with pytest.raises(SqlError, match=error):
        db.sql(statement)
    assert "g" not in db.catalog.functions


def _discount(price: float, pct: int) -> float:
    return price * (100 - pct) / 100


def _uses_a_global(x: float) -> float:
    return random.random() * x


def test_create_function_from_a_python_function(open_db):
    db = open_db()
    text = db.create_function(_discount, name="discount")
    assert "discount(price DOUBLE, pct BIGINT) RETURNS DOUBLE LANGUAGE python" in text
    db.sql("CREATE TABLE items (id INT PRIMARY KEY, price DOUBLE)")
    db.sql("CREATE MATERIALIZED VIEW cheap AS SELECT id, discount(price, 25) AS p FROM items")
    db.sql("INSERT INTO items VALUES (1, 10.0), (2, 200.0)")
    db.flush()
    assert sorted(db.sql("SELECT * FROM cheap").to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "p": 7.5}, {"id": 2, "p": 150.0}]
    with pytest.raises(SqlError, match="uses random from outside its own body"):
        db.create_function(_uses_a_global)
    with pytest.raises(SqlError, match="defined with def"):
        db.create_function(lambda x: x)


def test_the_wire_refuses_python_functions_unless_allowed(open_db):
    db = open_db()
    create = "CREATE FUNCTION twice(x BIGINT) RETURNS BIGINT LANGUAGE python AS 'def twice(x): return 2 * x'"
    with db.serve(port=0) as server:
        with psycopg.connect(host="127.0.0.1", port=server.port, user="u", autocommit=True) as con:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="--python-functions"):
                con.execute(create)
    assert "twice" not in db.catalog.functions
    with db.serve(port=0, python_functions=True) as server:
        with psycopg.connect(host="127.0.0.1", port=server.port, user="u", autocommit=True) as con:
            con.execute(create)
            assert con.execute("SELECT twice(21)").fetchall() == [(42,)]


def test_a_flow_calls_python_functions_below_and_above_its_aggregation(open_db):
    db = open_db()
    db.sql("CREATE TABLE ev (g VARCHAR, v BIGINT) APPEND ONLY")
    db.sql(f"CREATE FUNCTION bucket(g VARCHAR) RETURNS VARCHAR LANGUAGE python AS $${BUCKET}$$")
    db.sql("CREATE FUNCTION half(x BIGINT) RETURNS DOUBLE LANGUAGE python AS 'def half(x): return x / 2'")
    db.sql("CREATE FLOW per_bucket SINK TO buckets AS SELECT bucket(g) AS b, half(max(v)) AS h, count(*) AS n "
           "FROM ev GROUP BY bucket(g)")
    oracle = _oracle()
    oracle.execute("CREATE TABLE ev (g VARCHAR, v BIGINT)")
    namespace: dict = {}
    exec("def half(x): return x / 2", namespace)  # noqa: S102
    oracle.create_function("half", namespace["half"], [duckdb.sqltype("BIGINT")], duckdb.sqltype("DOUBLE"))
    rng = random.Random(3)
    for epoch in range(4):
        batch = [(rng.choice(["ant", "bee", "cat", "dove"]), rng.randint(0, 100)) for _ in range(rng.randint(1, 30))]
        db.sql("INSERT INTO ev VALUES " + ", ".join(f"('{g}', {v})" for g, v in batch))
        oracle.executemany("INSERT INTO ev VALUES (?, ?)", batch)
        db.flush()
        want = oracle.sql("SELECT bucket(g) AS b, half(max(v)) AS h, count(*) AS n FROM ev GROUP BY bucket(g)")
        assert same_rows(canonical(db.sql("SELECT * FROM buckets")), canonical(want.to_arrow_table())), epoch


def test_a_view_whose_task_dies_fails_alone_and_says_so(open_db, monkeypatch):
    """A Spark Python worker killed under a view's task (as the system's out-of-memory killer does)
    fails that view alone, named as out of memory (SQLSTATE 53200); the other views go on."""
    import os

    from millpond.spark import executor

    for where in ("local", "cluster"):  # every epoch a Spark job: the function runs in a Python worker
        monkeypatch.setitem(executor.DRIVER_RECORDS, where, 0)
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, x BIGINT)")
    body = ("import os, signal\ndef die(x):\n"
            f"    if x == 13 and os.getpid() != {os.getpid()}:  # never this test's process\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n    return x\n")
    db.sql(f"CREATE FUNCTION die(x BIGINT) RETURNS BIGINT LANGUAGE python AS $${body}$$")
    db.sql("CREATE MATERIALIZED VIEW dies AS SELECT k, die(x) AS y FROM t")
    db.sql("CREATE MATERIALIZED VIEW plain AS SELECT k, x FROM t")
    db.sql("INSERT INTO t VALUES (1, 4), (2, 13)")
    (report,) = db.flush()
    failure = report.failed["dies"]
    assert failure["sqlstate"] == "53200" and "out of memory: its epoch's task died" in failure["message"]
    assert sorted(r["k"] for r in db.sql("SELECT k FROM plain").to_pylist()) == [1, 2]
    with pytest.raises(MillpondError, match=r"view 'dies' failed .*out of memory.*with more memory for Spark's workers"):
        db.sql("SELECT * FROM dies")
    db.sql("INSERT INTO t VALUES (3, 5)")
    db.flush()  # later epochs run without it
    assert sorted(r["k"] for r in db.sql("SELECT k FROM plain").to_pylist()) == [1, 2, 3]

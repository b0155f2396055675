"""Errors as PostgreSQL gives them: a new user's typo, unknown name or bad value gets PostgreSQL's
message and SQLSTATE, at the offending token's line and column — in the Python API, over the wire
(psycopg's ``e.sqlstate`` and ``e.diag``), in a query (DuckDB) and in a view (Spark) alike — and SQL
that PostgreSQL refuses is refused, where sqlglot's lenient parser took it (``SELECT k, FROM t``
made a view). Every expected error is PostgreSQL's own, checked against a live server when one is
installed."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from millpond import MillpondError, SqlError
from tests import pg

SETUP = ["CREATE TABLE t (k INT PRIMARY KEY, v INT, s TEXT, b BIGINT)",
         "INSERT INTO t VALUES (1, 0, 'abc', 9223372036854775807), (2, 2147483647, '12', 1)"]

# statements PostgreSQL's grammar refuses (sqlglot took each) -> (PostgreSQL's message, 1-based position)
REFUSED = [
    ("SELECT k, FROM t", 'syntax error at or near "FROM"', 11),
    ("CREATE MATERIALIZED VIEW q AS SELECT k, FROM t", 'syntax error at or near "FROM"', 41),
    ("SELEC * FROM t", 'syntax error at or near "SELEC"', 1),
    ("SELECT k FROM t GROUP BY k,", "syntax error at end of input", 28),
    ("SELECT k FROM t WHERE k IN ()", 'syntax error at or near ")"', 29),
    ("SELECT k FROM t LIMIT 1, 2", "LIMIT #,# syntax is not supported", 17),
    ("SELECT count(*,) FROM t", 'syntax error at or near ","', 15),
    ("SELECT k FROM t WHERE k IS 1", 'syntax error at or near "1"', 28),
    ("SELECT k FROM t QUALIFY k > 1", 'syntax error at or near "k"', 25),
    ("SELECT `k` FROM t", 'syntax error at or near "FROM"', 12),
    ("SELECT 'a' 'b'", "syntax error at or near \"'b'\"", 12),
    ("INSERT INTO t VALUES (1, 2, 'a', 3),", "syntax error at end of input", 37),
    ("CREATE TABLE z (a INT,)", 'syntax error at or near ")"', 23),
    ("SELECT 1_000x", 'trailing junk after numeric literal at or near "1_000x"', 8),
    ("SELECT k FROM t\nWHERE k REGEXP 'a'", 'syntax error at or near "REGEXP"', 25),
    ("DELETE t WHERE k = 1", 'syntax error at or near "t"', 8),
]

# statements over SETUP's table -> PostgreSQL's (SQLSTATE, message, 1-based position or None)
ERRORS = [
    ("INSERT INTO nope VALUES (1)", "42P01", 'relation "nope" does not exist', 13),
    ("SELECT * FROM nope", "42P01", 'relation "nope" does not exist', 15),
    ("SELECT nocol FROM t", "42703", 'column "nocol" does not exist', 8),
    ("SELECT k FROM t JOIN t u ON t.k = u.k", "42702", 'column reference "k" is ambiguous', 8),
    ("SELECT u.k FROM t", "42P01", 'missing FROM-clause entry for table "u"', 8),
    ("UPDATE t SET nocol = 1", "42703", 'column "nocol" of relation "t" does not exist', 14),
    ("SELECT 1/0", "22012", "division by zero", None),
    ("SELECT 1 / (k - 1) FROM t", "22012", "division by zero", None),
    ("SELECT k % 0 FROM t", "22012", "division by zero", None),
    ("SELECT CAST(k AS numeric) / 0 FROM t", "22012", "division by zero", None),
    ("SELECT v + 1 FROM t", "22003", "integer out of range", None),
    ("SELECT b + 1 FROM t", "22003", "bigint out of range", None),
    ("SELECT s::int FROM t", "22P02", 'invalid input syntax for type integer: "abc"', None),
    ("SELECT '2024-13-01'::date", "22008", 'date/time field value out of range: "2024-13-01"', 8),
]


@pytest.fixture(scope="module")
def postgres():
    """psycopg connected to a throwaway PostgreSQL server holding SETUP (None where none can start)."""
    if pg.unavailable() is not None:
        yield None
        return
    import psycopg

    with pg.server() as server:
        with psycopg.connect(host=server.socket_dir, port=server.port, user=server.user or None,
                             dbname="postgres", autocommit=True) as conn:
            for statement in SETUP:
                conn.execute(statement.replace("TEXT", "text"))
            yield conn


def pg_error(conn, statement: str) -> tuple[str, str, int | None]:  # noqa: ANN001
    """PostgreSQL's (SQLSTATE, message, position) for ``statement`` (run in a transaction rolled back)."""
    import psycopg

    try:
        with conn.transaction(force_rollback=True):
            conn.execute(statement)
    except psycopg.Error as exc:
        position = exc.diag.statement_position
        return exc.sqlstate, exc.diag.message_primary, int(position) if position else None
    raise AssertionError(f"PostgreSQL ran {statement!r}")


def position_of(statement: str, line: int | None, col: int | None) -> int | None:
    """A (line, column) of ``statement`` as PostgreSQL's 1-based character position."""
    if line is None:
        return None
    lines = statement.split("\n")
    return sum(len(x) + 1 for x in lines[:line - 1]) + col


@pytest.fixture(scope="module")
def db(spark, tmp_path_factory):
    import millpond

    db = millpond.connect(str(tmp_path_factory.mktemp("errors") / "root"), spark=spark, interval=None)
    for statement in SETUP:
        db.sql(statement)
    db.flush()
    yield db
    db.close()


@pytest.mark.parametrize("statement,message,at", REFUSED, ids=[s for s, _, _ in REFUSED])
def test_what_postgresql_refuses_is_refused_in_its_words(db, postgres, statement, message, at):
    with pytest.raises(SqlError) as caught:
        db.sql(statement)
    e = caught.value
    assert (e.sqlstate, e.message.split(" (line")[0], position_of(statement, e.line, e.col)) == ("42601", message, at)
    assert "q" not in db.catalog.views
    if postgres is not None:  # the expected error is PostgreSQL's own
        assert pg_error(postgres, statement) == ("42601", message, at)


@pytest.mark.parametrize("statement,sqlstate,message,at", ERRORS, ids=[s for s, *_ in ERRORS])
def test_errors_have_postgresql_s_words_sqlstate_and_position(db, postgres, statement, sqlstate, message, at):
    with pytest.raises(MillpondError) as caught:
        db.sql(statement)
    e = caught.value
    line, col = getattr(e, "line", None), getattr(e, "col", None)
    assert (e.sqlstate, e.message.split(" (line")[0], position_of(statement, line, col)) == (sqlstate, message, at)
    if postgres is not None:
        assert pg_error(postgres, statement) == (sqlstate, message, at)


def test_a_statement_postgresql_accepts_is_not_refused_as_a_syntax_error(db):
    """Where sqlglot cannot read what PostgreSQL accepts, the error says so (not a syntax error)."""
    with pytest.raises(SqlError) as caught:
        db.sql("SELECT 1 AS select")
    assert caught.value.sqlstate == "0A000" and "PostgreSQL accepts" in str(caught.value)
    # millpond's own statements and clauses are not PostgreSQL's, and still run
    db.sql("CREATE TABLE app (k INT, v INT) APPEND ONLY")
    db.sql("CREATE TABLE st (k INT PRIMARY KEY, r STRUCT<a INT, b VARCHAR[]>)")
    db.sql("CREATE MATERIALIZED VIEW m AS SELECT k, v FROM t")
    db.flush()
    assert db.sql(f"SELECT count(*) AS n FROM t AS OF EPOCH {db.epoch}").to_pylist() == [{"n": 2}]
    assert db.sql("SHOW MATERIALIZED VIEWS").num_rows >= 1
    db.sql("DROP MATERIALIZED VIEW m")
    db.sql("DROP TABLE app")
    db.sql("DROP TABLE st")


@contextmanager
def _served(db):  # noqa: ANN001
    server = db.serve(port=0)
    try:
        yield server
    finally:
        server.close()


def test_the_wire_sends_sqlstate_message_hint_and_position(db):
    import psycopg

    with _served(db) as server, psycopg.connect(host="127.0.0.1", port=server.port, user="u", dbname="d",
                                                autocommit=True) as conn:
        for statement, sqlstate, message, at in [*[(s, "42601", m, a) for s, m, a in REFUSED[:3]], *ERRORS[:3]]:
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(statement)
            e = caught.value
            position = e.diag.statement_position
            assert (e.sqlstate, e.diag.message_primary, int(position) if position else None) == \
                (sqlstate, message, at), statement
        with pytest.raises(psycopg.errors.UndefinedTable) as caught:
            conn.execute("SELECT 1; SELECT * FROM nope")  # a position in the whole query string
        assert caught.value.diag.statement_position == str(len("SELECT 1; SELECT * FROM ") + 1)
        assert caught.value.diag.message_hint == "known tables and views: t"


def test_a_data_error_fails_its_view_alone_in_postgresql_s_words(db):
    """A NUMERIC division by zero (raised by millpond's own SQL, not Spark's) failed every epoch of
    every view until it was recognized as a data error."""
    db.sql("CREATE MATERIALIZED VIEW bad_numeric AS SELECT k, CAST(v AS numeric) / (k - 1) AS q FROM t")
    db.sql("CREATE MATERIALIZED VIEW bad_int AS SELECT k, v + 1 AS w FROM t")
    db.sql("CREATE MATERIALIZED VIEW good AS SELECT k, s FROM t")
    db.flush()
    db.sql("INSERT INTO t VALUES (3, 1, 'x', 0)")
    db.flush()
    status = {r["name"]: r for r in db.sql("SELECT name, status, error FROM millpond_views").to_pylist()}
    assert status["good"]["status"] == "running"
    assert db.sql("SELECT count(*) AS n FROM good").to_pylist() == [{"n": 3}]
    assert status["bad_numeric"]["status"] == "failed"
    assert "division by zero" in status["bad_numeric"]["error"] and "SQLSTATE 22012" in status["bad_numeric"]["error"]
    assert status["bad_int"]["status"] == "failed"
    assert "integer out of range in 'w = v + 1' (SQLSTATE 22003)" in status["bad_int"]["error"]
    for name in ("bad_numeric", "bad_int", "good"):
        db.sql(f"DROP MATERIALIZED VIEW {name}")
    db.sql("DELETE FROM t WHERE k = 3")


def test_grouping_by_a_map_is_refused_at_create(db):
    """A view grouping by a MAP was accepted, and from then on every epoch of every view failed."""
    db.sql("CREATE TABLE tagged (k INT PRIMARY KEY, m MAP(VARCHAR, INT))")
    for sql in ("SELECT m, count(*) AS n FROM tagged GROUP BY m", "SELECT DISTINCT m FROM tagged"):
        with pytest.raises(SqlError, match="MAP value is not supported") as caught:
            db.sql(f"CREATE MATERIALIZED VIEW by_map AS {sql}")
        assert caught.value.sqlstate == "0A000" and caught.value.line == 1
        with pytest.raises(SqlError, match="MAP value is not supported"):
            db.sql(sql)
    assert "by_map" not in db.catalog.views
    db.sql("CREATE MATERIALIZED VIEW by_key AS SELECT m['a'] AS a, count(*) AS n FROM tagged GROUP BY m['a']")
    db.sql("INSERT INTO tagged VALUES (1, '{a:1}'::MAP(VARCHAR, INT)), (2, '{a:1,b:2}'::MAP(VARCHAR, INT))")
    db.flush()
    assert db.sql("SELECT a, n FROM by_key").to_pylist() == [{"a": 1, "n": 2}]
    db.sql("DROP MATERIALIZED VIEW by_key")
    db.sql("DROP TABLE tagged")


def test_unnest_with_ordinality_is_refused_by_name(db):
    db.sql("CREATE TABLE arrays (k INT PRIMARY KEY, a INT[])")
    with pytest.raises(SqlError, match=r"no WITH ORDINALITY.*\(line 1, column \d+\)"):
        db.sql("SELECT u.x, u.n FROM arrays, unnest(arrays.a) WITH ORDINALITY AS u(x, n)")
    db.sql("DROP TABLE arrays")


def test_not_null_columns_refuse_null_as_postgresql_does(db, postgres):
    """``NOT NULL`` (kept in the catalog) refuses a NULL from INSERT, UPDATE and ``db.insert`` with
    PostgreSQL's SQLSTATE 23502, and nothing of the statement is kept; ``NULL`` allows it."""
    import pyarrow as pa

    from millpond import SchemaError

    db.sql("CREATE TABLE nn (k INT PRIMARY KEY, a TEXT NOT NULL, b INT NULL)")
    db.sql("INSERT INTO nn VALUES (1, 'x', NULL)")
    for statement in ("INSERT INTO nn VALUES (2, 'y', 2), (3, NULL, 3)", "UPDATE nn SET a = NULL WHERE k = 1"):
        with pytest.raises(SchemaError, match="null value in column 'a' violates its NOT NULL constraint") as got:
            db.sql(statement)
        assert got.value.sqlstate == "23502"
        assert postgres is None or pg_error(postgres, "CREATE TEMP TABLE nn (k INT PRIMARY KEY, a TEXT NOT NULL, b INT NULL); "
                                  "INSERT INTO nn VALUES (1, 'x', NULL); " + statement)[0] == "23502"
    with pytest.raises(SchemaError, match="NOT NULL"):
        db.insert("nn", pa.table({"k": [4], "a": pa.array([None], pa.string()), "b": [4]}))
    db.flush()
    assert db.sql("SELECT * FROM nn").to_pylist() == [{"k": 1, "a": "x", "b": None}]
    assert [c.not_null for c in db.catalog.tables["nn"].columns] == [False, True, False]
    import psycopg

    with _served(db) as server, psycopg.connect(host="127.0.0.1", port=server.port, user="u", dbname="d",
                                                autocommit=True) as conn:  # what psql's \d reads
        got = conn.execute("SELECT a.attname, a.attnotnull FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c "
                           "ON a.attrelid = c.oid WHERE c.relname = 'nn' AND a.attnum > 0 ORDER BY a.attnum").fetchall()
    assert got == [("k", True), ("a", True), ("b", False)]

"""``db.serve()`` / ``millpond serve``: real PostgreSQL clients (psycopg, Debian's ``psql``) run
millpond's SQL over the wire protocol."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import threading
import time

import psycopg
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest

import millpond
from millpond.errors import MillpondError


@pytest.fixture
def served(open_db, request):
    """A served database; ``readers`` (the fixture's parameter, default 0): reader processes."""
    db = open_db()
    db.sql("""CREATE TABLE t (k INT PRIMARY KEY, v DOUBLE, s VARCHAR, ts TIMESTAMP, d DATE, b BOOLEAN);
              CREATE MATERIALIZED VIEW m AS SELECT count(*) AS n, sum(v) AS total FROM t""")
    db.sql("""INSERT INTO t VALUES (1, 1.5, 'it''s', TIMESTAMP '2026-01-01 10:00:00', DATE '2026-01-02', true),
                                   (2, NULL, NULL, NULL, NULL, NULL)""")
    db.flush()
    server = db.serve(port=0, readers=getattr(request, "param", 0))
    if server.readers is not None:
        answered = _count_answers(server)
        _wait_ready(server, request.param)
    yield db, server
    server.close()
    if server.readers is not None:
        assert answered["rows"] > 0  # readers answered some queries (the rest ran in the writer's process)


def _count_answers(server) -> dict[str, int]:  # noqa: ANN001
    """Count the queries the server's reader processes answered ("rows") and passed back."""
    answered, answer = {"rows": 0, "back": 0}, server.readers.answer

    def counted(sql: str):  # noqa: ANN202
        table = answer(sql)
        answered["rows" if table is not None else "back"] += 1
        return table
    server.readers.answer = counted
    return answered


def _wait_ready(server, n: int) -> None:  # noqa: ANN001
    deadline = time.monotonic() + 120
    while server.readers.ready < n:
        assert time.monotonic() < deadline, "reader processes did not start"
        time.sleep(0.05)


def _connect(server, **kw) -> psycopg.Connection:  # noqa: ANN001
    return psycopg.connect(host="127.0.0.1", port=server.port, user="anyone", dbname="millpond", **kw)


@pytest.mark.parametrize("served", [0, 2], indirect=True, ids=["one process", "readers"])
def test_psycopg_queries_types_parameters_and_statements(served):
    db, server = served
    with _connect(server, autocommit=True) as conn:
        cur = conn.execute("SELECT k, v, s, ts, d, b FROM t ORDER BY k")
        assert cur.fetchall() == [(1, 1.5, "it's", dt.datetime(2026, 1, 1, 10), dt.date(2026, 1, 2), True),
                                  (2, None, None, None, None, None)]
        assert [c.type_code for c in cur.description] == [23, 701, 25, 1114, 1082, 16]  # int4 float8 text ...
        assert conn.execute("SELECT s FROM t WHERE k = %s AND s = %s", (1, "it's")).fetchall() == [("it's",)]
        assert conn.execute("SELECT k FROM t WHERE d = %s", (dt.date(2026, 1, 2),)).fetchall() == [(1,)]
        assert conn.execute("SELECT %s::INT + 1 AS x, %s AS y", (41, None)).fetchall() == [(42, None)]
        assert conn.execute("INSERT INTO t (k, v) VALUES (%s, %s)", (3, 2.25)).rowcount == 1
        conn.execute("FLUSH")
        assert conn.execute("SELECT n, total FROM m").fetchall() == [(3, 3.75)]
        assert conn.execute("SHOW retention").fetchall() == [("1 hour",)]
        changes = conn.execute("SUBSCRIBE m").fetchall()
        assert changes == [(3, 3.75, 1, db.epoch)]
        assert conn.execute("SELECT n FROM m AS OF EPOCH %s" % (db.epoch - 1)).fetchall() == [(2,)]
        names = conn.execute("SELECT table_name, table_type FROM information_schema.tables "
                             "WHERE table_name IN ('t', 'm') ORDER BY 1").fetchall()
        assert names == [("m", "VIEW"), ("t", "BASE TABLE")]
        assert conn.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL 16")
    with _connect(server) as conn:  # not autocommit: psycopg wraps statements in BEGIN ... COMMIT
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (3,)
        conn.commit()


@pytest.mark.parametrize("served", [0, 2], indirect=True, ids=["one process", "readers"])
def test_an_error_reaches_the_client_and_the_connection_stays_usable(served):
    _, server = served
    with _connect(server, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute("SELEC 1")
        with pytest.raises(psycopg.errors.UndefinedTable, match='relation "nope" does not exist'):
            conn.execute("SELECT * FROM nope")
        with pytest.raises(psycopg.errors.DivisionByZero):  # SQLSTATE 22012
            conn.execute("SELECT 1 / 0")
        with pytest.raises(psycopg.errors.DivisionByZero):  # a reader's error too
            conn.execute("SELECT k / 0 FROM t")
        with pytest.raises(psycopg.errors.UndefinedColumn, match='column "nope" does not exist'):
            conn.execute("SELECT nope FROM t")
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
    with _connect(server) as conn:  # in a transaction block: ROLLBACK, then on
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM nope")
        conn.rollback()
        assert conn.execute("SELECT n FROM m").fetchone() == (2,)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (Debian's postgresql-client) is installed by make setup")
def test_psql(served):
    _, server = served
    base = ["psql", "-h", "127.0.0.1", "-p", str(server.port), "-U", "anyone", "-d", "millpond", "-X", "-A", "-t"]
    out = subprocess.run([*base, "-c", "SELECT k, s FROM t ORDER BY k"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1|it's", "2|"]
    script = "SELECT 1 AS a; SELECT * FROM nope; SELECT 2"  # psql sends it as one simple query: stops at the error
    out = subprocess.run([*base, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and 'relation "nope" does not exist' in out.stderr and out.stdout.split() == ["1"]
    out = subprocess.run([*base, "-v", "ON_ERROR_STOP=0", "-f", "-"], capture_output=True, text=True, timeout=60,
                         input="SELECT * FROM nope;\nSELECT n FROM m;\n")
    assert "does not exist" in out.stderr and out.stdout.split() == ["2"]  # the connection went on
    listed = subprocess.run([*base, "-c", "\\dt", "-c", "\\dm"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert [line.split("|")[1:3] for line in listed.stdout.splitlines() if line] == [["t", "table"],
                                                                                  ["m", "materialized view"]]
    described = subprocess.run([*base[:-2], "-c", "\\d t", "-c", "\\d m", "-c", "\\l"], capture_output=True, text=True,
                               timeout=60)
    assert described.returncode == 0, described.stderr
    out = described.stdout
    assert 'Table "main.t"' in out and 'Materialized view "main.m"' in out and "List of databases" in out, out
    assert [line.split("|")[0].strip() for line in out.splitlines() if "|" in line][:9] == [
        "Column", "k", "v", "s", "ts", "d", "b", "Column", "n"]


# PostgreSQL 15's own output for these (a quotient's display scale is the value's own)
QUOTIENT_VIEW = [("1", "1.5000000000000000", "1.00000000000000000000"),
                 ("2", "7500.0000000000000000", "5000.0000000000000000"),
                 ("3", "31421098.666666666667", "31421098.666666666667")]
QUOTIENT_QUERY = ("0.33333333333333333333", "2.5000000000000000", "0.00000000000000000000", "13468328.428571428571")


@pytest.fixture
def quotients(open_db):
    db = open_db()
    db.sql("""CREATE TABLE p (k INT, v INT);
              CREATE MATERIALIZED VIEW means AS SELECT k, avg(v) AS mean, sum(v) / 3.0 AS third FROM p GROUP BY k""")
    db.sql("INSERT INTO p VALUES (1, 1), (1, 2), (2, 10000), (2, 5000), (3, 31421098), (3, 31421099), (3, 31421099)")
    db.flush()
    server = db.serve(port=0)
    yield server
    server.close()


QUOTIENT_SQL = "SELECT 1::numeric / 3 AS a, 5::numeric / 2 AS b, 0::numeric / 3 AS c, avg(v) AS d FROM p"


def test_avg_and_numeric_division_reach_a_client_as_postgresql_prints_them(quotients):
    with _connect(quotients, autocommit=True) as conn:
        cur = conn.execute("SELECT k, mean, third FROM means ORDER BY k")
        assert [c.type_code for c in cur.description] == [23, 1700, 1700]  # numeric
        # psycopg reads a numeric's text into a Decimal, which keeps its digits after the point
        assert [tuple(str(v) for v in row) for row in cur.fetchall()] == QUOTIENT_VIEW
        assert tuple(format(v, "f") for v in conn.execute(QUOTIENT_SQL).fetchone()) == QUOTIENT_QUERY
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1.5 / 0")


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (Debian's postgresql-client) is installed by make setup")
def test_psql_prints_avg_and_numeric_division_as_postgresql(quotients):
    base = ["psql", "-h", "127.0.0.1", "-p", str(quotients.port), "-U", "anyone", "-d", "millpond", "-X", "-A", "-t"]
    out = subprocess.run([*base, "-c", "SELECT k, mean, third FROM means ORDER BY k"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["|".join(row) for row in QUOTIENT_VIEW]
    out = subprocess.run([*base, "-c", QUOTIENT_SQL], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["|".join(QUOTIENT_QUERY)]


def test_a_password_is_required_when_set_and_only_localhost_goes_without(open_db):
    db = open_db()
    with pytest.raises(MillpondError, match="needs a password"):
        db.serve(host="0.0.0.0", port=0)
    with db.serve(port=0, password="s3cret") as server:
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(server, password="wrong")
        with _connect(server, password="s3cret", autocommit=True, require_auth="scram-sha-256") as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    with db.serve(port=0, password="s3cret", auth="cleartext") as server:  # only on request
        with pytest.raises(psycopg.OperationalError, match="server requested a cleartext password"):
            _connect(server, password="s3cret", require_auth="scram-sha-256")
        with _connect(server, password="s3cret", require_auth="password") as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_fifty_clients_never_see_a_half_committed_epoch(spark, root):
    """50 connections query while background epochs commit inserts: every answer is one committed
    epoch — a table and a view over it agree, and rows inserted together are seen together —
    whether a reader process answered it or the writer's process did (every reader busy)."""
    db = millpond.connect(root, spark=spark, parallelism=2, interval=0.2)
    try:
        db.sql("""CREATE TABLE pair (id INT PRIMARY KEY, amount INT);
                  CREATE MATERIALIZED VIEW tally AS SELECT count(*) AS n, sum(amount) AS total FROM pair""")
        db.flush()
        stop, errors, answers = threading.Event(), [], []

        def write() -> None:
            i = 0
            while not stop.is_set():
                db.sql(f"INSERT INTO pair VALUES ({i}, 5), ({i + 1}, -5)")  # a pair sums to 0
                i += 2

        def read() -> None:
            try:
                with psycopg.connect(host="127.0.0.1", port=server.port, user="u", dbname="millpond",
                                     autocommit=True) as conn:
                    deadline, mine = time.monotonic() + 120, []
                    # six answers, and on until one sees an epoch the writer committed meanwhile
                    while len(mine) < 6 or (not mine[-1][0] and time.monotonic() < deadline):
                        mine.append(conn.execute("SELECT (SELECT count(*) FROM pair), (SELECT sum(amount) FROM pair), "
                                                 "(SELECT n FROM tally), (SELECT total FROM tally)").fetchone())
                    answers.extend(mine)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

        with db.serve(port=0, readers=2) as server:
            answered = _count_answers(server)
            _wait_ready(server, 2)
            writer = threading.Thread(target=write)
            writer.start()
            readers = [threading.Thread(target=read) for _ in range(50)]
            for r in readers:
                r.start()
            for r in readers:
                r.join(timeout=300)
            stop.set()
            writer.join()
        assert errors == []
        assert len(answers) >= 300
        for count, total, n, view_total in answers:
            assert count % 2 == 0 and (total or 0) == 0, (count, total)  # whole transactions
            assert (n, view_total or 0) == (count, total or 0)  # the view is at the table's epoch
        assert max(a[0] for a in answers) > 0  # epochs committed while they read
        assert answered["rows"] > 0 and answered["back"] > 0  # readers answered, and so did the writer
    finally:
        db.close()


def test_copy_subscribe_streams_changes_until_the_client_cancels(served):
    """``COPY (SUBSCRIBE m) TO STDOUT`` (Materialize's form) streams the rows now, then each
    epoch's changes as it commits; a cancel ends it (SQLSTATE 57014), the connection goes on."""
    db, server = served
    seen, done = [], threading.Event()
    conn = _connect(server, autocommit=True)

    def follow() -> None:
        try:
            with conn.cursor().copy("COPY (SUBSCRIBE m) TO STDOUT") as copy:
                for row in copy.rows():
                    seen.append(row)
        except psycopg.errors.QueryCanceled:
            done.set()

    thread = threading.Thread(target=follow)
    thread.start()
    try:
        start = db.epoch
        for _ in range(600):  # the stream is up: the rows now came
            if seen:
                break
            threading.Event().wait(0.05)
        db.sql("INSERT INTO t (k, v) VALUES (3, 10.0)")
        db.flush()
        for _ in range(200):  # the new epoch's changes reach the stream
            if any(r[3] == str(db.epoch) for r in seen):
                break
            threading.Event().wait(0.05)
        conn.cancel_safe(timeout=30)  # (not cancel(): its C call would hold the GIL the server here needs)
        thread.join(timeout=60)
        assert done.is_set()
        assert seen == [("2", "1.5", "1", str(start)),  # the rows now, as inserts
                        ("2", "1.5", "-1", str(db.epoch)), ("3", "11.5", "1", str(db.epoch))]
        assert conn.execute("SELECT n FROM m").fetchone() == (3,)  # usable after the cancel
    finally:
        conn.close()


def test_binary_results_equal_text_results_for_every_type(open_db):
    """psycopg's binary cursor (result format 1) reads every column type as its text cursor does."""
    db = open_db()
    db.sql("""CREATE TABLE every (k INT PRIMARY KEY, s SMALLINT, b BIGINT, r REAL, f DOUBLE, n DECIMAL(12,3),
              t VARCHAR, y BYTEA, d DATE, tm TIME, ts TIMESTAMP, tz TIMESTAMPTZ, i INTERVAL, j JSONB, a INT[],
              aa VARCHAR[][], rec STRUCT<x INT, y VARCHAR>, m MAP(VARCHAR, INT), flag BOOLEAN)""")
    db.sql("""INSERT INTO every VALUES (1, -2, 9000000000, 1.5, -2.25, -12345.678, 'é x', '\\x00ff', '2026-01-02',
              '08:30:00.5', '2026-01-01 10:00:00.25', '2026-01-01 10:00:00+02', '1 mon 2 days 03:00:00.5',
              '{"a": [1, 2.50]}', ARRAY[1, NULL, 3], ARRAY[ARRAY['p', 'q'], ARRAY['r', NULL]], NULL, NULL, true),
              (2, NULL, NULL, NULL, NULL, 0.5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ARRAY[]::INT[], NULL,
              NULL, NULL, false)""")
    db.flush()
    row = db.read("every").filter(pa.compute.field("k") == 2).to_pylist()[0]
    row.update(k=3, rec={"x": 7, "y": "a b"}, m=[("k", 1), ("z", None)])
    db.insert("every", pa.Table.from_pylist([row], schema=db.read("every").schema))
    db.sql("CREATE MATERIALIZED VIEW per AS SELECT flag, count(*) AS c, sum(n) AS total, avg(k) AS mean FROM every "
           "GROUP BY flag")
    db.flush()
    with db.serve(port=0) as server, _connect(server, autocommit=True) as conn:
        for sql in ("SELECT k, s, b, r, f, n, t, y, d, tm, ts, tz, i, j, a, aa, m, flag FROM every ORDER BY k",
                    "SELECT * FROM per ORDER BY flag",
                    "SELECT 1.0 / 3 AS q, ARRAY[1.5, 2] AS ds, ARRAY[ARRAY[1, 2]] AS nested, ARRAY[]::INT[][] AS none"):
            text = conn.execute(sql).fetchall()
            cur = conn.cursor(binary=True)
            binary = cur.execute(sql).fetchall()
            assert all(c.type_code for c in cur.description)
            assert binary == text, sql
        assert text[0][0] is not None
        # a record's text has no field types (psycopg gives strings); its binary form has them
        assert conn.execute("SELECT rec, m FROM every WHERE k = 3").fetchall() == [(("7", "a b"), "{k:1,z:NULL}")]
        assert conn.cursor(binary=True).execute("SELECT rec, m FROM every WHERE k = 3").fetchall() == [
            ((7, "a b"), "{k:1,z:NULL}")]


def _certificate(folder) -> tuple[str, str]:  # noqa: ANN001
    """A self-signed certificate for localhost (openssl, as an operator would make one)."""
    cert, key = str(folder / "server.crt"), str(folder / "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=localhost"], check=True, capture_output=True)
    return cert, key


@pytest.mark.skipif(shutil.which("psql") is None or shutil.which("openssl") is None, reason="needs psql and openssl")
def test_psql_over_tls_with_scram_users_from_a_password_file(open_db, tmp_path):
    """A server safe to expose: TLS required, SCRAM-SHA-256 (the password never crosses the wire),
    users from a file, a read-only user, a wrong password is 28P01, a connection limit, an idle timeout."""
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY); INSERT INTO t VALUES (1); FLUSH")
    users = tmp_path / "users.txt"
    users.write_text("# who may connect\nada:s3cret:pass\nviewer:look:read-only\n")
    cert, key = _certificate(tmp_path)
    with db.serve(host="0.0.0.0", port=0, password_file=str(users), tls_cert=cert, tls_key=key, max_connections=3,
                  idle_timeout=1.5) as server:
        def psql(user: str, password: str, sql: str, sslmode: str = "require") -> subprocess.CompletedProcess:
            return subprocess.run(["psql", f"host=127.0.0.1 port={server.port} user={user} dbname=millpond "
                                           f"sslmode={sslmode}", "-X", "-A", "-t", "-c", sql],
                                  capture_output=True, text=True, timeout=60, env={"PGPASSWORD": password})

        done = psql("ada", "s3cret:pass", "INSERT INTO t VALUES (2)")
        assert (done.returncode, done.stdout.strip()) == (0, "INSERT 0 1"), done
        assert "password authentication failed" in psql("ada", "wrong", "SELECT 1").stderr
        assert "TLS connections only" in psql("ada", "s3cret:pass", "SELECT 1", sslmode="disable").stderr
        denied = psql("viewer", "look", "INSERT INTO t VALUES (3)")
        assert denied.returncode != 0 and "read-only" in denied.stderr, denied
        assert psql("viewer", "look", "SELECT k FROM t ORDER BY k").stdout.split() == ["1"]  # 2 is pending, unflushed
        with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "viewer"'):
            psycopg.connect(host="127.0.0.1", port=server.port, user="viewer", password="nope", dbname="millpond",
                            sslmode="require")
        conns = [psycopg.connect(host="127.0.0.1", port=server.port, user="viewer", password="look", dbname="millpond",
                                 sslmode="require", require_auth="scram-sha-256", autocommit=True) for _ in range(3)]
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(host="127.0.0.1", port=server.port, user="viewer", password="look", dbname="millpond",
                            sslmode="require")
        assert conns[0].execute("SELECT 1").fetchone() == (1,)
        time.sleep(2.5)  # longer than the idle timeout
        with pytest.raises(psycopg.OperationalError):
            conns[1].execute("SELECT 1")
        for c in conns:
            c.close()

"""A small epoch's whole plan in one task (spark/local.py): every view equals DuckDB recomputing it
after every epoch while epochs alternate at random between that task and Spark's stages, so rows
one path inserted are retracted by the other (a value computed differently would leave a stale row
or fail the view)."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from millpond.spark import local_plan
from millpond.tpch import oracle
from tests import workload

TYPED = """
CREATE TABLE ord (ok BIGINT PRIMARY KEY, cust INT, odate DATE, status VARCHAR, total DECIMAL(12,2));
CREATE TABLE line (ok BIGINT, ln INT, qty DECIMAL(12,2), price DECIMAL(12,2), disc DECIMAL(12,2), flag VARCHAR,
                   PRIMARY KEY (ok, ln));
"""

# TPC-H's shapes over DECIMAL, DATE and VARCHAR columns: a join under an aggregate with LIKE and a
# date literal, an AVG and a share (NUMERIC quotients), an interval added to a date, EXTRACT, a top-N,
# DISTINCT aggregates (Q16), split_part
TYPED_VIEWS = {
    "rev": """SELECT o.cust, sum(l.price * (1 - l.disc)) AS revenue, count(*) AS n, avg(l.qty) AS avg_qty,
                     max(l.price) AS top
              FROM ord o JOIN line l ON o.ok = l.ok
              WHERE o.odate >= DATE '2024-01-01' AND o.status LIKE 'F%' GROUP BY o.cust""",
    "promo": """SELECT 100.00 * sum(CASE WHEN l.flag LIKE 'PRO%' THEN l.price * (1 - l.disc) ELSE 0 END)
                       / sum(l.price * (1 - l.disc)) AS share
                FROM line l JOIN ord o ON l.ok = o.ok
                WHERE o.odate < DATE '2024-06-01' + INTERVAL '1 month'""",
    "years": """SELECT extract(year FROM odate) AS y, count(*) AS n, sum(total) AS t FROM ord
                GROUP BY extract(year FROM odate)""",
    "top": "SELECT ok, total FROM ord ORDER BY total DESC, ok LIMIT 3",
    "dist": """SELECT o.status, count(DISTINCT l.flag) AS flags, count(DISTINCT o.cust) AS custs,
                      sum(DISTINCT l.disc) AS discs, count(*) AS n
               FROM ord o JOIN line l ON o.ok = l.ok GROUP BY o.status""",
    "parts": """SELECT split_part(o.status, 'X', 1) AS a, split_part(l.flag, 'O', 2) AS b, count(*) AS n
                FROM ord o JOIN line l ON o.ok = l.ok GROUP BY 1, 2""",
    # repeat() is not on the one task's path: its quotient is built again for Spark to run (build.Unlocal)
    "spark": """SELECT repeat(status, 2) AS s, avg(total) AS a, count(*) AS n FROM ord GROUP BY repeat(status, 2)
                HAVING avg(total) * 2 > 900 AND sum(total) / count(*) < 700""",
}
ON_SPARK = 1  # of TYPED_VIEWS


def _order(rng: random.Random, ok: int) -> dict:
    return {"ok": ok, "cust": rng.randrange(5), "odate": 19_700 + rng.randrange(300),
            "status": rng.choice(["F", "FX", "O", "P"]), "total": Decimal(rng.randrange(100, 100_000)) / 100}


def _line(rng: random.Random, ok: int, ln: int) -> dict:
    return {"ok": ok, "ln": ln, "qty": Decimal(rng.randrange(1, 5_000)) / 100,
            "price": Decimal(rng.randrange(100, 100_000)) / 100, "disc": Decimal(rng.randrange(0, 11)) / 100,
            "flag": rng.choice(["PROMO", "STD", "PRO"])}


def _pick_path(rng: random.Random, epoch: int, monkeypatch) -> bool:  # noqa: ANN001
    """This epoch's path: the one task (True) or Spark's stages — each once first, then at random."""
    here = epoch % 2 == 0 if epoch < 2 else rng.random() < 0.5
    monkeypatch.setattr(local_plan, "LOCAL_RECORDS", 10**9 if here else 0)
    return here


def _create(db, views: dict[str, str]) -> dict:  # noqa: ANN001
    """Create ``views`` and run their first epochs; the executor's counters (tasks, paths), live."""
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    db.flush()
    return db.runtime.coordinator.executor.stats


def _check(db, views: dict[str, str], tables: dict[str, pa.Table], when: str) -> None:  # noqa: ANN001
    for name, sql in views.items():
        got, want = oracle.rows(db.sql(f"SELECT * FROM {name}")), oracle.answer(tables, sql)
        assert oracle.same(got, want), f"{name} {when}"


def test_typed_views_match_duckdb_with_epochs_on_either_path(open_db, monkeypatch):
    rng = random.Random(5)
    db = open_db()
    db.sql(TYPED)
    types = {"ord": pa.schema([("ok", pa.int64()), ("cust", pa.int32()), ("odate", pa.date32()),
                               ("status", pa.string()), ("total", pa.decimal128(12, 2))]),
             "line": pa.schema([("ok", pa.int64()), ("ln", pa.int32()), ("qty", pa.decimal128(12, 2)),
                                ("price", pa.decimal128(12, 2)), ("disc", pa.decimal128(12, 2)), ("flag", pa.string())])}
    orders = {ok: _order(rng, ok) for ok in range(40)}
    lines = {(ok, ln): _line(rng, ok, ln) for ok in range(40) for ln in range(rng.randrange(1, 4))}
    db.insert("ord", pa.Table.from_pylist(list(orders.values()), types["ord"]))
    db.insert("line", pa.Table.from_pylist(list(lines.values()), types["line"]))
    stats = _create(db, TYPED_VIEWS)
    paths = []
    for epoch in range(8):
        here = _pick_path(rng, epoch, monkeypatch)
        new = {ok: _order(rng, ok) for ok in range(100 + epoch * 10, 105 + epoch * 10)}
        changed = {ok: {**orders[ok], "total": Decimal(rng.randrange(100, 100_000)) / 100,
                        "status": rng.choice(["F", "O"])} for ok in rng.sample(sorted(orders), 3)}
        gone = rng.sample(sorted(set(orders) - set(changed)), 2)
        added = {(ok, ln): _line(rng, ok, ln) for ok in new for ln in range(2)}
        orders.update(new)
        orders.update(changed)
        lines.update(added)
        db.insert("ord", pa.Table.from_pylist([*new.values(), *changed.values()], types["ord"]))
        db.insert("line", pa.Table.from_pylist(list(added.values()), types["line"]))
        db.sql(f"DELETE FROM ord WHERE ok IN ({', '.join(map(str, gone))})")
        db.sql(f"DELETE FROM line WHERE ok IN ({', '.join(map(str, gone))})")
        for ok in gone:
            del orders[ok]
        lines = {k: v for k, v in lines.items() if k[0] not in gone}
        before = stats["local"]
        db.flush()
        paths.append(stats["local"] - before)
        tables = {"ord": pa.Table.from_pylist(list(orders.values()), types["ord"]),
                  "line": pa.Table.from_pylist(list(lines.values()), types["line"])}
        _check(db, TYPED_VIEWS, tables, f"after epoch {epoch} ({'one task' if here else 'Spark'})")
    # every view but the one Spark runs ran as one task in the epochs that allowed it, none in the others
    assert sorted(set(paths)) == [0, len(TYPED_VIEWS) - ON_SPARK], paths


def test_the_workload_matches_duckdb_with_epochs_on_either_path(open_db, monkeypatch):
    """The oracle test's views (joins, MAX over deletes, percentiles, a self-join with a residual,
    a view over a view, partial views...) with epochs on either path."""
    rng = random.Random(3)
    db = open_db()
    workload.setup(db)
    ref = workload.Reference()
    plan = workload.steps(3, 14)
    stats = db.runtime.coordinator.executor.stats
    i, ran = 0, []
    while i < len(plan):
        here = rng.random() < 0.6
        monkeypatch.setattr(local_plan, "LOCAL_RECORDS", 10**9 if here else 0)
        for step in plan[i:i + rng.randrange(1, 4)]:
            workload.apply(db, step)
            ref.apply(step)
            i += 1
        before = stats["local"]
        db.flush()
        ran.append(stats["local"] - before)
        assert workload.mismatches(db, ref) == [], f"after step {i}, epoch {db.epoch} ({'one task' if here else 'Spark'})"
    # the views the other paths take no further (a view over a view,
    # percentiles, a fused stage) keep them; the self-join and its like ran as one task
    assert sum(n > 0 for n in ran) >= 2, ran


def test_a_data_error_in_a_view_run_as_one_task_fails_that_view_alone(open_db, monkeypatch):
    monkeypatch.setattr(local_plan, "LOCAL_RECORDS", 10**9)
    db = open_db()
    db.sql("CREATE TABLE t (k INT PRIMARY KEY, a DECIMAL(10,2), b DECIMAL(10,2))")
    db.insert("t", pa.table({"k": pa.array([1], pa.int32()), "a": pa.array([Decimal("1.00")], pa.decimal128(10, 2)),
                             "b": pa.array([Decimal("2.00")], pa.decimal128(10, 2))}))
    db.sql("CREATE MATERIALIZED VIEW q AS SELECT k, sum(a) / sum(b) AS r FROM t GROUP BY k")
    db.sql("CREATE MATERIALIZED VIEW s AS SELECT k, sum(a) AS a FROM t GROUP BY k")
    db.flush()
    stats = db.runtime.coordinator.executor.stats
    before = stats["local"]
    db.insert("t", pa.table({"k": pa.array([2], pa.int32()), "a": pa.array([Decimal("1.00")], pa.decimal128(10, 2)),
                             "b": pa.array([Decimal("0.00")], pa.decimal128(10, 2))}))
    db.flush()
    assert stats["local"] > before
    status = {r["name"]: r for r in db.sql("SELECT name, status, error FROM millpond_views").to_pylist()}
    assert status["q"]["status"] == "failed" and "division by zero" in status["q"]["error"]
    assert status["s"]["status"] == "running"
    assert sorted(db.sql("SELECT k, a FROM s").to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "a": Decimal("1.00")}, {"k": 2, "a": Decimal("1.00")}]


@pytest.mark.parametrize("value", ["2024-02-29", "1999-12-31 23:59:59.5"])
def test_a_temporal_literal_is_read_alike_by_both_engines(value):
    """The casts :func:`~millpond.spark.agreement.cannot_raise` lets DuckDB make: ISO literals only."""
    from sqlglot import exp

    from millpond.spark.agreement import cannot_raise

    kind = "DATE" if len(value) == 10 else "TIMESTAMPNTZ"
    ok = exp.Cast(this=exp.Literal.string(value), to=exp.DataType(this=exp.DataType.Type[kind]))
    odd = exp.Cast(this=exp.Literal.string(value.replace("-", "/")), to=exp.DataType(this=exp.DataType.Type[kind]))
    assert cannot_raise(ok, {}) and not cannot_raise(odd, {})


def test_split_part_gives_duckdb_and_spark_the_same_fields(spark):
    """The SPLIT_PART calls cannot_raise lets DuckDB evaluate (a non-empty literal delimiter, a
    position from 1) give Spark's fields, past the last one included; the others stay Spark's."""
    import duckdb
    from sqlglot import exp

    from millpond.spark.agreement import cannot_raise

    texts = ["a/b/c", "/a//b/", "", "é/ü/ß", "a//b", "//", None]
    calls = [(d, n) for d in ("/", "//", "ü") for n in (1, 2, 3, 6)]
    sql = ", ".join(f"SPLIT_PART(t, '{d}', {n}) AS c{i}" for i, (d, n) in enumerate(calls))
    values = " UNION ALL ".join("SELECT " + ("CAST(NULL AS STRING)" if t is None else f"'{t}'") + " AS t" for t in texts)
    want = [tuple(r) for r in spark.sql(f"SELECT {sql} FROM ({values})").collect()]
    got = duckdb.sql(f"SELECT {sql} FROM ({values.replace('STRING', 'VARCHAR')})").fetchall()
    assert sorted(got, key=repr) == sorted(want, key=repr)

    def call(delim: str, n: int) -> exp.Expression:
        return exp.Anonymous(this="SPLIT_PART", expressions=[exp.column("t"), exp.Literal.string(delim),
                                                              exp.Literal.number(n)])
    assert cannot_raise(call("/", 2), {}) and not cannot_raise(call("", 1), {}) and not cannot_raise(call("/", -1), {})


# PostgreSQL 15's upper() and lower() of each word (a UTF-8 database in C.UTF-8; the semantics corpus
# checks the same mappings against a live server): per code point, neither Java's nor DuckDB's own
CASES = {"straße": ("STRAßE", "straße"), "ẞ": ("ẞ", "ß"), "ΣΑΣ": ("ΣΑΣ", "σασ"), "ﬁx": ("ﬁX", "ﬁx"),
         "İstanbul": ("İSTANBUL", "istanbul"), "ŉa": ("ŉA", "ŉa"), "ᾀ": ("ᾈ", "ᾀ"), "Ärger": ("ÄRGER", "ärger"),
         "plain": ("PLAIN", "plain"), "ea\u0301 👍🏽": ("EA\u0301 👍🏽", "ea\u0301 👍🏽")}


def test_text_functions_are_postgresql_s_on_every_path(open_db):
    """A view whose rows a Python task makes (DuckDB evaluates them) and one whose rows Spark's stages
    make (``on_error = 'null'``: Catalyst evaluates them, calling millpond.casemap's Arrow function)
    give PostgreSQL's case mapping, ``length``, ``to_char``, ``nullif``, ``strpos``, ``replace``, ``concat``,
    ``btrim`` and ``reverse`` (code points: a combining accent moves) through updates, and so does a query."""
    db, rng = open_db(), random.Random(7)
    db.sql("CREATE TABLE w (k INT PRIMARY KEY, s VARCHAR, ts TIMESTAMP)")
    sql = ("SELECT k, upper(s) AS u, lower(s) AS l, length(s) AS n, to_char(ts, 'YYYY-MM-DD') AS d, "
           "to_char(ts, 'HH24:MI') || '!' AS t, nullif(s, 'plain') AS z, strpos(s, 'a') AS p, "
           "replace(s, 'a', 'Zz') AS r, concat(s, '|', NULL, s) AS c, btrim(s, 'xa') AS b, reverse(s) AS v "
           "FROM w WHERE s LIKE '%a%' OR length(s) < 4")
    db.sql(f"CREATE MATERIALIZED VIEW here AS {sql}")
    db.sql(f"CREATE MATERIALIZED VIEW spark WITH (on_error = 'null') AS {sql}")
    rows: dict[int, tuple[str, dt.datetime]] = {}
    for epoch in range(5):
        for k in rng.sample(range(12), 6):  # updates retract old rows
            rows[k] = (rng.choice(sorted(CASES)), dt.datetime(rng.choice([7, 1999, 2024]), rng.randrange(1, 13),
                                                              rng.randrange(1, 29), rng.randrange(24), rng.randrange(60)))
        db.insert("w", pa.table({"k": pa.array(list(rows), pa.int32()), "s": [s for s, _ in rows.values()],
                                 "ts": pa.array([t for _, t in rows.values()], pa.timestamp("us"))}))
        db.flush()
        want = sorted((k, *CASES[s], len(s), f"{t.year:04d}-{t.month:02d}-{t.day:02d}", f"{t:%H:%M}!",
                       None if s == "plain" else s, s.find("a") + 1, s.replace("a", "Zz"), f"{s}|{s}", s.strip("xa"), s[::-1])
                      for k, (s, t) in rows.items() if "a" in s or len(s) < 4)
        for view in ("here", "spark"):
            got = sorted(tuple(r.values()) for r in db.sql(f"SELECT * FROM {view}").to_pylist())
            assert got == want, (view, epoch)
    assert db.sql("SELECT upper('straße') AS u, lower('İ') AS l, reverse('e\u0301a') AS r").to_pylist() == \
        [{"u": "STRAßE", "l": "i", "r": "a\u0301e"}]


# grouping sets (a UNION ALL of aggregates whose missing groups are CAST(NULL AS ...)), AVG, and the
# multisets of values (percentiles of integers cast to DOUBLE, ARRAY_AGG) combined where the rows are
SHAPES = {
    "sets": "SELECT g, b, count(*) AS n, sum(v) AS s FROM ev GROUP BY ROLLUP (g, b)",
    "cube": "SELECT g, b, max(v) AS hi FROM ev GROUP BY CUBE (g, b) HAVING count(*) > 1",
    "avgs": "SELECT g, avg(v) AS a, avg(b) AS ab, count(*) AS n FROM ev GROUP BY g",
    "pcts": """SELECT g, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS med,
                      percentile_disc(0.9) WITHIN GROUP (ORDER BY x) AS p90, array_agg(b ORDER BY b) AS bs
               FROM ev GROUP BY g""",
}


def test_grouping_sets_averages_and_percentiles_run_as_one_task_on_either_path(open_db, monkeypatch):
    rng = random.Random(11)
    db = open_db()
    db.sql("CREATE TABLE ev (k INT PRIMARY KEY, g VARCHAR, b INT, v BIGINT, x DOUBLE)")
    schema = pa.schema([("k", pa.int32()), ("g", pa.string()), ("b", pa.int32()), ("v", pa.int64()), ("x", pa.float64())])

    def row(k: int) -> dict:  # values past 2**53 too: their DOUBLE is rounded, alike in both engines
        v = rng.choice([rng.randrange(-50, 50), 2**53 + rng.randrange(1, 99), -(2**62) + rng.randrange(99), None])
        return {"k": k, "g": rng.choice(["a", "b", None]), "b": rng.choice([1, 2, None]), "v": v,
                "x": rng.choice([rng.random() * 10, -0.0, 0.0, None])}
    rows = {k: row(k) for k in range(30)}
    db.insert("ev", pa.Table.from_pylist(list(rows.values()), schema))
    stats = _create(db, SHAPES)
    paths = []
    for epoch in range(6):
        here = _pick_path(rng, epoch, monkeypatch)
        changed = {k: row(k) for k in rng.sample(range(40), 8)}  # new keys and updates
        gone = rng.sample(sorted(set(rows) - set(changed)), 3)
        rows.update(changed)
        db.insert("ev", pa.Table.from_pylist(list(changed.values()), schema))
        db.sql(f"DELETE FROM ev WHERE k IN ({', '.join(map(str, gone))})")
        for k in gone:
            del rows[k]
        before = stats["local"]
        db.flush()
        paths.append(stats["local"] - before)
        table = {"ev": pa.Table.from_pylist(list(rows.values()), schema)}
        _check(db, SHAPES, table, f"after epoch {epoch} ({'one task' if here else 'Spark'})")
    assert sorted(set(paths)) == [0, len(SHAPES)], paths


def test_an_integer_cast_to_double_a_typed_null_and_an_integer_quotient_are_alike_in_both_engines(spark):
    """What cannot_raise lets DuckDB evaluate beside the literals: NULL cast to any type, an integer
    cast to DOUBLE (rounded to the nearest, ties to even, in both), an integer over a positive
    literal; a DECIMAL or a REAL to DOUBLE, a division by a column stay Spark's."""
    import duckdb
    import sqlglot
    from sqlglot import exp

    from millpond.spark.agreement import cannot_raise

    values = [0, -1, 2**53 - 1, 2**53 + 1, 2**53 + 3, 2**62 + 2**9 + 1, -(2**63), 2**63 - 1, 123456789012345678]
    sql = " UNION ALL ".join(f"SELECT CAST(CAST({v} AS BIGINT) AS DOUBLE) AS d" for v in values)
    want = [r[0] for r in spark.sql(sql).collect()]
    got = [r[0] for r in duckdb.sql(sql).fetchall()]
    assert got == want and want[3] == float(2**53)  # rounded, the same way
    types = {"i": pa.int32(), "b": pa.int64(), "d": pa.decimal128(10, 2), "f": pa.float32()}
    assert all(cannot_raise(sqlglot.parse_one(e), types) for e in
               ("CAST(i AS DOUBLE)", "CAST(b + i AS DOUBLE)", "CAST(NULL AS TEXT)", "CAST(NULL AS DECIMAL(10, 2))"))
    assert not any(cannot_raise(sqlglot.parse_one(e), types) for e in ("CAST(d AS DOUBLE)", "CAST(f AS DOUBLE)"))
    # an integer over a positive literal: truncated toward zero by Spark's div and DuckDB's // alike
    pairs = [(a, b) for a in (-7, 7, -2**63, 2**63 - 1, -1, 0) for b in (1, 2, 7)]
    assert [r[0] for r in spark.sql(" UNION ALL ".join(f"SELECT CAST({a} AS BIGINT) div {b}" for a, b in pairs)).collect()] \
        == [r[0] for r in duckdb.sql(" UNION ALL ".join(f"SELECT CAST({a} AS BIGINT) // {b}" for a, b in pairs)).fetchall()]
    assert cannot_raise(exp.IntDiv(this=exp.column("b"), expression=exp.Literal.number(7)), types)
    assert not cannot_raise(exp.IntDiv(this=exp.column("b"), expression=exp.column("i")), types)
    assert not cannot_raise(exp.IntDiv(this=exp.column("d"), expression=exp.Literal.number(7)), types)

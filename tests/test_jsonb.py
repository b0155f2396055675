"""JSONB: documents in (SQL, Arrow, Spark), kept as PostgreSQL prints them, and the operators
``->``, ``->>``, ``#>``, ``#>>``, ``?``, ``jsonb_array_elements[_text]``, ``jsonb_typeof``,
``jsonb_array_length`` in views (Spark) and queries (DuckDB) — checked against a real PostgreSQL
server, which recomputes every view over all the rows after every epoch."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from millpond import MillpondError
from millpond.serve import pgtext
from tests import pg

VIEWS = {
    "fields": "SELECT k, j -> 'a' AS a, j ->> 'b' AS b, j #> '{a,0}' AS a0, j #>> '{c,x}' AS cx, jsonb_typeof(j) AS ty, "
              "j ? 'a' AS has_a, j -> 1 AS second, j -> -1 AS last, j ->> 'kind' AS kind FROM d",
    "by_kind": "SELECT j -> 'kind' AS kind, count(*) AS c, count(j -> 'n') AS with_n FROM d GROUP BY j -> 'kind'",
    "by_doc": "SELECT j, count(*) AS c FROM d GROUP BY j",
    "tags": "SELECT k, e FROM d, jsonb_array_elements(d.j -> 'tags') AS x(e)",
    "tag_counts": "SELECT t, count(*) AS c FROM d, jsonb_array_elements_text(d.j -> 'tags') AS x(t) GROUP BY t",
    "lengths": "SELECT k, jsonb_array_length(j -> 'tags') AS n FROM d WHERE j -> 'tags' IS NOT NULL",
    "pairs": "SELECT a.k AS k1, b.k AS k2 FROM d AS a JOIN d AS b ON a.j -> 'kind' = b.j -> 'kind' WHERE a.k < b.k",
    "numbers": "SELECT k, (j ->> 'n')::numeric(12,2) AS n FROM d WHERE jsonb_typeof(j -> 'n') = 'number'",
}


def _doc(rng: random.Random, depth: int = 0) -> object:
    scalars = [None, True, False, 0, -7, 2.5, "1.50", "2e1", "x", "é ü", 'q"\\', "", "tab\tnl\n"]
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        return {rng.choice(["a", "b", "c", "x", "kind", "aa", "bb"]): _doc(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if depth < 2 and roll < 0.45:
        return [_doc(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    v = rng.choice(scalars)
    return json.loads(v) if v in ("1.50", "2e1") else v


def _text(rng: random.Random) -> str:
    """A document as JSON text, written unlike PostgreSQL writes it (key order, spacing, numbers)."""
    doc = {"kind": rng.choice(["p", "q", {"z": 1}, [1, 2], None]), "a": _doc(rng), "c": _doc(rng)}
    if rng.random() < 0.7:
        doc["tags"] = [rng.choice(["red", "blue", 3, None, {"t": 1}]) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.5:
        doc["n"] = rng.choice([1, 2.5, -3, "4"])
    if rng.random() < 0.2:
        return json.dumps([doc, rng.randint(0, 9)])
    items = list(doc.items())
    rng.shuffle(items)
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}" for k, v in items) + "}"
    return text.replace('"n":2.5', '"n":2.50').replace('"n":1', '"n":1e0', 1)


def _sql_text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _sorted(rows) -> list[tuple]:  # noqa: ANN001
    return sorted(rows, key=lambda r: tuple((v is None, v or "") for v in r))


def _rows(table: pa.Table) -> list[tuple]:
    return _sorted(tuple(None if v is None else v.decode() for v in r) for r in pgtext.rows(table))


def _pg_rows(con, sql: str) -> list[tuple]:  # noqa: ANN001
    """PostgreSQL's rows of ``sql`` as its wire text (psycopg's loaders would parse them)."""
    from psycopg.types.string import TextLoader

    for name in ("bool", "int2", "int4", "int8", "numeric", "jsonb", "text"):
        con.adapters.register_loader(name, TextLoader)
    return _sorted(tuple(r) for r in con.execute(sql).fetchall())


def test_views_over_documents_equal_postgresql_after_every_epoch(open_db):
    reason = pg.unavailable()
    if reason:
        pytest.skip(f"{reason}: the oracle of this test is PostgreSQL itself")
    import psycopg

    db = open_db()
    db.sql("CREATE TABLE d (k INT PRIMARY KEY, j JSONB)")
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    rng = random.Random(5)
    current: dict[int, str | None] = {}
    with pg.server() as server, psycopg.connect(host=server.socket_dir, port=server.port, dbname="postgres",
                                                user=server.user, autocommit=True) as con:
        con.execute("CREATE TABLE d (k INT PRIMARY KEY, j JSONB)")
        for epoch in range(8):
            batch = {k: (None if rng.random() < 0.05 else _text(rng)) for k in rng.sample(range(40), rng.randint(3, 12))}
            gone = [k for k in current if rng.random() < 0.15 and k not in batch]
            if epoch % 2:  # Arrow strings in, or SQL
                db.insert("d", pa.table({"k": pa.array(list(batch), pa.int32()), "j": list(batch.values())}))
            else:
                db.sql("INSERT INTO d VALUES " + ", ".join(
                    f"({k}, {'NULL' if v is None else _sql_text(v)})" for k, v in batch.items()) +
                    " ON CONFLICT (k) DO UPDATE SET j = excluded.j")
            if gone:
                db.sql(f"DELETE FROM d WHERE k IN ({', '.join(map(str, gone))})")
            current.update(batch)
            for k in gone:
                del current[k]
            db.flush()
            con.execute("TRUNCATE d")
            if current:
                con.execute("INSERT INTO d VALUES " + ", ".join(
                    f"({k}, {'NULL' if v is None else _sql_text(v)})" for k, v in current.items()))
            for name, sql in VIEWS.items():
                got = db.sql(f"SELECT * FROM {name}")
                want = _pg_rows(con, sql)
                assert _rows(got) == want, f"epoch {epoch}, view {name}: {_rows(got)[:3]} != {want[:3]}"
            # an ad-hoc query (DuckDB on the driver) means the same as the view (Spark)
            assert _rows(db.sql(VIEWS["fields"])) == _rows(db.sql("SELECT * FROM fields")), epoch
        assert any(r[1] is not None for r in _rows(db.sql("SELECT * FROM fields")))  # documents were read


EXPRESSIONS = [
    """'{"b": 1, "aa": 2, "a": [1, 2.50, 1e2, -0, 0.0]}'::jsonb""", """'{"a": 1, "a": 2}'::jsonb""",
    """'"é\\n\\u00e9"'::jsonb""", """'[1, "x", null]'::jsonb -> 1""", """'[1, "x", null]'::jsonb ->> 1""",
    """'[1, "x", null]'::jsonb ->> 2""", """'[1, 2, 3]'::jsonb -> -1""", """'[1, 2, 3]'::jsonb -> 5""",
    """'[1, 2]'::jsonb -> '0'""", """'{"a": {"b": [true]}}'::jsonb #> '{a,b,0}'""",
    """'{"a": {"b": [true]}}'::jsonb #>> '{a,b}'""", """'{"a": [1, 2]}'::jsonb #> '{a,-1}'""",
    """'{"a": 1}'::jsonb #> '{}'""", """'{"a": 1}'::jsonb #>> '{a,b}'""", """'{"a": null}'::jsonb ->> 'a'""",
    """'{"a": null}'::jsonb -> 'a'""", """'{"a": 1}'::jsonb ? 'a'""", """'["a", 1]'::jsonb ? 'a'""",
    """'"a"'::jsonb ? 'a'""", """jsonb_typeof('1.5'::jsonb)""", """jsonb_typeof('{"a": null}'::jsonb -> 'a')""",
    """jsonb_array_length('[1, [2, 3]]'::jsonb)""", """'{"b": 1, "a": 2}'::jsonb = '{"a": 2, "b": 1}'::jsonb""",
    """('{"a": "7"}'::jsonb ->> 'a')::int + 1""", """'{"a": 1}'::jsonb::text""", """('  [1,2]  ')::jsonb""",
    """'{"x": "tab\\tq\\"b"}'::jsonb""",
]


def test_jsonb_operations_give_postgresql_s_answers(open_db):
    pg.check_expressions(open_db(), "s VARCHAR", """'{"b": [1, {"c": 2}], "a": 1.50}'""",
                         [*EXPRESSIONS, "s::jsonb", "s::jsonb -> 'b' -> 1"])


def test_documents_in_from_spark_and_out_on_the_wire(open_db, spark):
    db = open_db()
    db.sql("CREATE TABLE d (k INT PRIMARY KEY, j JSONB); CREATE MATERIALIZED VIEW v AS SELECT k, j, j -> 'a' AS a FROM d")
    db.insert("d", spark.createDataFrame([(1, '{"b":2,"a":[1]}'), (2, None)], "k INT, j STRING"))
    db.flush()
    assert db.sql("SELECT * FROM v ORDER BY k").column("j").to_pylist() == ['{"a": [1], "b": 2}', None]
    assert [(r["name"], r["type"]) for r in db.sql("DESCRIBE v").to_pylist()][:3] == [("k", "INT"), ("j", "JSONB"),
                                                                                   ("a", "JSONB")]
    result = db.sql("SELECT * FROM v ORDER BY k")
    assert [pgtext.oid(f.type) for f in result.schema] == [23, 3802, 3802]
    assert list(pgtext.rows(result)) == [[b"1", b'{"a": [1], "b": 2}', b"[1]"], [b"2", None, None]]
    assert db.read("v").schema.field("j").type == pa.struct([("pg_jsonb", pa.string())])  # as stored


def test_a_document_that_is_not_json_fails_its_view_only(open_db):
    db = open_db()
    db.sql("CREATE TABLE d (k INT PRIMARY KEY, s VARCHAR)")
    db.sql("CREATE MATERIALIZED VIEW parsed AS SELECT k, s::jsonb AS j FROM d")
    db.sql("CREATE MATERIALIZED VIEW lenient WITH (on_error = 'null') AS SELECT k, s::jsonb AS j FROM d")
    db.sql("CREATE MATERIALIZED VIEW plain AS SELECT k, s FROM d")
    db.sql("""INSERT INTO d VALUES (1, '{"a": 1}'), (2, '{"a": ')""")
    db.flush()
    status = {r["name"]: r for r in db.sql("SELECT name, status, error FROM millpond_views").to_pylist()}
    assert status["parsed"]["status"] == "failed"
    assert "invalid input syntax for type json" in status["parsed"]["error"]
    assert status["plain"]["status"] == status["lenient"]["status"] == "running"
    assert db.sql("SELECT k, j::text AS j FROM lenient ORDER BY k").to_pylist() == [
        {"k": 1, "j": '{"a": 1}'}, {"k": 2, "j": None}]
    with pytest.raises(MillpondError, match=r"invalid input syntax for type json.*SQLSTATE 22P02"):
        db.sql("SELECT s::jsonb FROM d")


@pytest.mark.parametrize("statement, error", [
    ("CREATE TABLE bad (j JSON)", "use JSONB"),
    ("INSERT INTO d VALUES (9, '{nope')", "invalid input syntax for type json"),
    ("SELECT j < j FROM d", "operator does not exist: jsonb < jsonb"),
    ("SELECT k FROM d ORDER BY j", "ORDER BY a jsonb value"),
    ("SELECT jsonb_array_elements(j) + 1 FROM d", "jsonb_array_elements\\(jsonb\\) is supported as a whole select item"),
    ("SELECT (j -> 'a')::int FROM d", "cannot cast type jsonb to integer"),
    ("SELECT k -> 'a' FROM d", "its left side must be jsonb"),
    ("SELECT '{\"a\": 1'::jsonb FROM d", "invalid input syntax for type json"),
])
def test_what_cannot_work_is_refused_with_the_reason(open_db, statement, error):
    db = open_db()
    db.sql("CREATE TABLE d (k INT PRIMARY KEY, j JSONB)")
    with pytest.raises(MillpondError, match=error):
        db.sql(statement)


def test_an_arrow_insert_names_the_row_that_is_not_json(open_db):
    db = open_db()
    db.sql("CREATE TABLE d (k INT PRIMARY KEY, j JSONB)")
    with pytest.raises(MillpondError, match=r"column 'j' row 1: invalid input syntax for type json"):
        db.insert("d", pa.table({"k": pa.array([1, 2], pa.int32()), "j": ["{}", "{"]}))
    assert db.sql("SELECT count(*) AS n FROM d").to_pylist() == [{"n": 0}]

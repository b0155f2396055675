"""Arrays, records (STRUCT), maps and BYTEA as column types: in from Arrow and Spark DataFrames, out
of queries, views and the wire as PostgreSQL writes them; views over them equal DuckDB recomputing
the query over all input after every epoch of random inserts, updates and deletes; and the
operations on them mean what PostgreSQL (RisingWave for maps) means, checked against a real
PostgreSQL server where one is installed."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from millpond import MillpondError
from millpond.serve import pgtext
from tests import pg

TABLE = ("CREATE TABLE t (k INT PRIMARY KEY, tags VARCHAR[], nums INT[], s STRUCT<a INT, b VARCHAR>, "
         "m MAP(VARCHAR, INT), raw BYTEA)")
ARROW = pa.schema([("k", pa.int32()), ("tags", pa.list_(pa.string())), ("nums", pa.list_(pa.int32())),
                   ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])), ("m", pa.map_(pa.string(), pa.int32())),
                   ("raw", pa.binary())])
# view -> (millpond's SQL, the same in DuckDB's dialect with PostgreSQL's meaning written out)
VIEWS = {
    "parts": ("SELECT k, tags[1] AS t1, nums[2] AS n2, cardinality(nums) AS n, array_length(tags, 1) AS len, "
              "(s).a AS a, (s).b AS b, m['x'] AS mx, raw FROM t",
              "SELECT k, tags[1] AS t1, nums[2] AS n2, len(nums) AS n, CASE WHEN len(tags) > 0 THEN len(tags) END AS len, "
              "s.a AS a, s.b AS b, m['x'] AS mx, raw FROM t"),
    "by_first_tag": ("SELECT tags[1] AS tag, count(*) AS c, sum(cardinality(nums)) AS total FROM t GROUP BY tags[1]",
                     "SELECT tags[1] AS tag, count(*) AS c, CAST(sum(len(nums)) AS BIGINT) AS total FROM t GROUP BY tags[1]"),
    "by_tags": ("SELECT tags, count(*) AS c FROM t GROUP BY tags",
                "SELECT tags, count(*) AS c FROM t GROUP BY tags"),
    "by_field": ("SELECT (s).b AS b, count(*) AS c, max((s).a) AS hi FROM t GROUP BY (s).b",
                 "SELECT s.b AS b, count(*) AS c, max(s.a) AS hi FROM t GROUP BY s.b"),
    "matching": ("SELECT k, nums FROM t WHERE nums @> ARRAY[1] OR tags && ARRAY['red', 'blue']",
                 "SELECT k, nums FROM t WHERE len(list_filter(nums, lambda x: x = 1)) > 0 "
                 "OR len(list_filter(tags, lambda x: x IN ('red', 'blue'))) > 0"),
    "passed": ("SELECT * FROM t WHERE k % 2 = 0", "SELECT * FROM t WHERE k % 2 = 0"),
    "lists": ("SELECT (s).b AS b, array_agg(k) AS ks, array_agg(nums[1] ORDER BY nums[1] DESC) AS firsts, "
              "array_agg(tags[1]) AS tags1 FROM t GROUP BY (s).b",
              "SELECT s.b AS b, array_agg(k ORDER BY k) AS ks, array_agg(nums[1] ORDER BY nums[1] DESC NULLS FIRST) "
              "AS firsts, array_agg(tags[1] ORDER BY tags[1] NULLS LAST) AS tags1 FROM t GROUP BY s.b"),
    "unnested": ("SELECT k, x FROM t, unnest(t.nums) AS u(x)", "SELECT k, unnest(nums) AS x FROM t"),
    "tag_counts": ("SELECT tag, count(*) AS c FROM (SELECT unnest(tags) AS tag FROM t) AS s GROUP BY tag",
                   "SELECT tag, count(*) AS c FROM (SELECT unnest(tags) AS tag FROM t) AS s GROUP BY tag"),
    "first_tags": ("SELECT k, tags FROM t ORDER BY tags, k LIMIT 4",
                   "SELECT k, tags FROM t ORDER BY tags NULLS LAST, k LIMIT 4"),
    "first_records": ("SELECT k, s FROM t WHERE k % 3 = 0 ORDER BY s DESC, k LIMIT 4",
                      "SELECT k, s FROM t WHERE k % 3 = 0 ORDER BY s DESC NULLS FIRST, k LIMIT 4"),
    "everything": ("SELECT array_agg(k ORDER BY k DESC) AS ks FROM t", "SELECT array_agg(k ORDER BY k DESC) AS ks FROM t"),
}


def _row(rng: random.Random, k: int) -> dict:
    words = ["red", "blue", "green", None, "a b", 'q"x']
    maybe = (lambda v: None if rng.random() < 0.1 else v)  # noqa: E731
    return {"k": k,
            "tags": maybe([rng.choice(words) for _ in range(rng.randint(0, 3))]),
            "nums": maybe([rng.choice([None, *range(0, 6)]) for _ in range(rng.randint(0, 4))]),
            "s": maybe({"a": rng.choice([None, *range(10)]), "b": rng.choice(["p", "q", None])}),
            "m": maybe([(key, rng.choice([None, 1, 2])) for key in rng.sample(["x", "y", "z"], rng.randint(0, 3))]),
            "raw": maybe(bytes(rng.randrange(256) for _ in range(rng.randint(0, 3))))}


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ARROW)


def test_views_over_nested_values_equal_duckdb_after_every_epoch(open_db):
    db = open_db()
    db.sql(TABLE)
    for name, (sql, _) in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    rng = random.Random(11)
    current: dict[int, dict] = {}
    oracle = duckdb.connect()
    for epoch in range(8):
        batch = {k: _row(rng, k) for k in rng.sample(range(60), rng.randint(3, 15))}
        gone = [k for k in current if rng.random() < 0.15 and k not in batch]
        db.insert("t", _table([*batch.values()]))  # an insert of an existing key replaces its row
        if gone:
            db.sql(f"DELETE FROM t WHERE k IN ({', '.join(map(str, gone))})")
        current.update(batch)
        for k in gone:
            del current[k]
        db.flush()
        oracle.register("t", _table(list(current.values())))
        for name, (_, duck_sql) in VIEWS.items():
            got, want = _rows(db.sql(f"SELECT * FROM {name}")), _rows(oracle.sql(duck_sql).to_arrow_table())
            assert got == want, f"epoch {epoch}, view {name}: {got[:4]} != {want[:4]}"
        # an ad-hoc query (DuckDB on the driver) means the same as the view (Spark)
        assert _rows(db.sql(VIEWS["parts"][0])) == _rows(db.sql("SELECT * FROM parts")), epoch


def _rows(table: pa.Table) -> list[str]:
    """Rows as a sorted multiset of their Python values' text (lists hold NULLs: no order of their own)."""
    return sorted(repr(tuple(r.values())) for r in table.to_pylist())


def test_nested_columns_in_from_spark_and_out_as_written(open_db, spark):
    db = open_db()
    db.sql(TABLE + "; CREATE MATERIALIZED VIEW v AS SELECT * FROM t")
    df = spark.createDataFrame(
        [(1, ["a", None], [1, 2], (7, "w"), {"k": 9}, bytearray(b"\x00z")), (2, [], None, None, {}, None)],
        "k INT, tags ARRAY<STRING>, nums ARRAY<INT>, s STRUCT<a: INT, b: STRING>, m MAP<STRING, INT>, raw BINARY")
    db.insert("t", df)
    db.flush()
    want = [{"k": 1, "tags": ["a", None], "nums": [1, 2], "s": {"a": 7, "b": "w"}, "m": [("k", 9)], "raw": b"\x00z"},
            {"k": 2, "tags": [], "nums": None, "s": None, "m": [], "raw": None}]
    assert db.sql("SELECT * FROM t ORDER BY k").to_pylist() == want
    assert db.sql("SELECT * FROM v ORDER BY k").to_pylist() == want
    assert [(r["name"], r["type"]) for r in db.sql("DESCRIBE v").to_pylist()][:6] == [
        ("k", "INT"), ("tags", "VARCHAR[]"), ("nums", "INT[]"), ("s", "STRUCT<a INT, b VARCHAR>"),
        ("m", "MAP(VARCHAR, INT)"), ("raw", "BYTEA")]
    text = list(pgtext.rows(db.sql("SELECT * FROM v ORDER BY k")))
    assert text[0] == [b"1", b"{a,NULL}", b"{1,2}", b"(7,w)", b"{k:9}", b"\\x007a"]
    assert text[1] == [b"2", b"{}", None, None, b"{}", None]
    assert [pgtext.oid(f.type) for f in db.sql("SELECT * FROM v").schema] == [23, 1009, 1007, 2249, 25, 17]


@pytest.mark.parametrize("statement, error", [
    ("CREATE TABLE bad (k INT[] PRIMARY KEY)", "a primary key of type INT\\[\\]"),
    ("CREATE TABLE bad (m MAP(INT[], INT))", "a map's key is a scalar type"),
    ("SELECT k[1] FROM t", "cannot subscript type integer because it is not an array"),
    ("SELECT (s).zz FROM t", "column 'zz' not found in data type STRUCT<a integer, b text>"),
    ("SELECT tags[1:2][1] FROM t", "a slice together with another subscript"),
    ("SELECT (ARRAY[ARRAY[1, 2]])[1:1] FROM t", "slices of a nested array"),
    ("SELECT array_length(tags, k) FROM t", "a constant dimension"),
    ("SELECT nums @> tags FROM t", "operator does not exist"),
    ("SELECT array_agg(k ORDER BY (s).a) FROM t", "ordered by x itself"),
    ("SELECT array_agg(DISTINCT k) FROM t", "DISTINCT"),
    ("SELECT unnest(tags), unnest(nums) FROM t", "one per SELECT"),
    ("SELECT count(*), unnest(nums) FROM t", "one per SELECT"),
    ("SELECT k FROM t, unnest(t.tags) AS a(x), unnest(t.nums) AS b(y)", "the one item after the first"),
    ("SELECT array_agg(tags) FROM t", "array_agg of text\\[\\] is not supported"),
])
def test_what_cannot_work_is_refused_with_the_reason(open_db, statement, error):
    db = open_db()
    db.sql(TABLE)
    with pytest.raises(MillpondError, match=error):
        db.sql(statement)


# expressions over arrays and records, with PostgreSQL's text of each result
EXPRESSIONS = [
    "(ARRAY[10, 20, 30])[2]", "(ARRAY[10, 20, 30])[0]", "(ARRAY[10, 20, 30])[4]", "(ARRAY[10, 20, 30])[-1]",
    "cardinality(ARRAY[ARRAY[1, 2], ARRAY[3, 4]])", "cardinality(ARRAY[]::INT[])", "array_length(ARRAY[]::INT[], 1)",
    "array_length(ARRAY[ARRAY[1, 2, 3], ARRAY[4, 5, 6]], 2)", "ARRAY[1, 2] @> ARRAY[2]", "ARRAY[1, NULL] @> ARRAY[NULL::INT]",
    "ARRAY[1, 2] && ARRAY[3, 2]", "ARRAY[1, NULL] && ARRAY[NULL::INT]", "ARRAY['a b', 'c', NULL, '', 'q\"x']",
    "ARRAY[ARRAY[1, 2], ARRAY[3, 4]]", "(ARRAY[ARRAY[1, 2], ARRAY[3, 4]])[2][1]",
    "'{1,2,NULL}'::INT[]", "'{{1,2},{3,4}}'::INT[][]", r"""'{"a b","q\"x",NULL, c }'::TEXT[]""", "ARRAY[]::INT[]",
    "ARRAY[1, 2] || ARRAY[3]", "ARRAY[1] || 2", "0 || ARRAY[1]", "NULL::INT[] || ARRAY[1]", "ARRAY[1, 2]::BIGINT[]",
    "ARRAY[1.5, 2] = ARRAY[1.5, 2.0]",
    "(ARRAY[10, 20, 30, NULL])[1:2]", "(ARRAY[10, 20, 30, NULL])[2:]", "(ARRAY[10, 20, 30])[:2]",
    "(ARRAY[10, 20, 30])[0:9]", "(ARRAY[10, 20, 30])[3:2]", "(ARRAY[10, 20, 30])[NULL:2]", "(ARRAY['x', 'y'])[-5:1]",
    r"regexp_match('abc-123 x', '([a-z]+)-(\d+)')", "regexp_match('abc', 'z')", "regexp_match('aBc', 'b', 'i')",
    "ARRAY[1, NULL] < ARRAY[1, 2]", "ARRAY[1, 2] < ARRAY[1, 2, 0]", "ARRAY[2] > ARRAY[1, 9]",
    "ARRAY[1, NULL] = ARRAY[1, NULL]", "ARRAY[NULL::INT] > ARRAY[5]", "ARRAY['b'] >= ARRAY['a', 'z']",
]


def test_array_operations_give_postgresql_s_answers(open_db):
    pg.check_expressions(open_db(), "", "", EXPRESSIONS)


def test_unnamed_outputs_are_named_as_postgresql_names_them(open_db):
    db = open_db()
    db.sql(TABLE)
    names = db.sql("SELECT (s).a, tags[1], ARRAY[1], cardinality(nums), array_length(nums, 1), map_keys(m), "
                   "unnest(tags) FROM t").column_names
    assert names == ["a", "tags", "array", "cardinality", "array_length", "map_keys", "unnest"]


def test_the_spark_data_source_reads_and_writes_nested_columns(open_db, root, spark):
    db = open_db()
    db.sql(TABLE)
    df = spark.createDataFrame([(2, ["z", None], [7], (2, "w"), {"y": 2}, bytearray(b"\x02"))],
                               "k INT, tags ARRAY<STRING>, nums ARRAY<INT>, s STRUCT<a: INT, b: STRING>, "
                               "m MAP<STRING, INT>, raw BINARY")
    df.write.format("millpond").option("root", root).option("channel", "t").mode("append").save()
    db.flush()
    want = {"k": 2, "tags": ["z", None], "nums": [7], "s": {"a": 2, "b": "w"}, "m": [("y", 2)], "raw": b"\x02"}
    assert db.sql("SELECT * FROM t").to_pylist() == [want]
    (row,) = spark.read.format("millpond").option("root", root).option("channel", "t").load().collect()
    assert (row.k, row.tags, row.nums, row.s.asDict(), row.m, bytes(row.raw)) == (
        2, ["z", None], [7], {"a": 2, "b": "w"}, {"y": 2}, b"\x02")

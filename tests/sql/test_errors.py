"""Bad statements and bad input get errors that name the problem and where; nothing is applied."""

import pyarrow as pa
import pytest

from millpond import CatalogError, SchemaError, SqlError

SCHEMA = """CREATE TABLE info (product VARCHAR PRIMARY KEY, category VARCHAR);
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT);"""


@pytest.fixture
def db(open_db):
    db = open_db()
    db.sql(SCHEMA)
    return db


def test_syntax_error_names_line_and_column(db):
    with pytest.raises(SqlError, match=r"line 2, column \d+") as err:
        db.sql("SELECT *\nFROM visit WHERE (length > 3")
    assert err.value.line == 2


def test_unknown_table_and_column(db):
    with pytest.raises(CatalogError, match='relation "nope" does not exist'):
        db.sql("CREATE MATERIALIZED VIEW v AS SELECT product FROM nope")
    with pytest.raises(SqlError, match="colour"):
        db.sql("CREATE MATERIALIZED VIEW v AS SELECT colour FROM info")
    with pytest.raises(CatalogError, match='relation "ghost" does not exist'):
        db.sql("SELECT * FROM ghost")
    assert db.catalog.views == {}


@pytest.mark.parametrize("sql,needle", [
    ("SELECT category, COUNT(*) OVER (ORDER BY category RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS n FROM info",
     "RANGE with an offset"),
    ("SELECT category, COUNT(*) OVER w AS n FROM info WINDOW x AS (ORDER BY category)", "window 'w' does not exist"),
    ("SELECT product FROM info WHERE product IN (SELECT product FROM visit) OR category = 'c'", "IN .* under OR"),
    ("SELECT product FROM info EXCEPT ALL SELECT product FROM visit", "EXCEPT ALL is not supported"),
    ("SELECT category FROM info ORDER BY category OFFSET 2", "OFFSET without LIMIT"),
    ("SELECT category FROM info ORDER BY lower(product) LIMIT 2", "order by an output column"),
    ("SELECT COUNT(DISTINCT product, category) FROM info", "several arguments"),
    ("SELECT window_start FROM TUMBLE(visit, length, INTERVAL '1 hour')", "TIMESTAMP"),
    ("SELECT window_start FROM TUMBLE(visit, ts, INTERVAL '1' MONTH)", "window size"),
    ("SELECT product, category FROM info GROUP BY category", "GROUP BY"),
])
def test_unsupported_view_sql_is_rejected_clearly(db, sql, needle):
    with pytest.raises(SqlError, match=needle):
        db.sql(f"CREATE MATERIALIZED VIEW v AS {sql}")
    assert "v" not in db.catalog.views


def test_duplicate_and_dependent_objects(db):
    with pytest.raises(CatalogError, match="already exists"):
        db.sql("CREATE TABLE info (x INT)")
    db.sql("CREATE MATERIALIZED VIEW v AS SELECT category, COUNT(*) AS n FROM info GROUP BY category")
    with pytest.raises(CatalogError, match="views v depend on it"):
        db.sql("DROP TABLE info")
    db.sql("DROP MATERIALIZED VIEW v")
    db.sql("DROP TABLE info")
    assert "info" not in db.catalog.tables
    db.sql("DROP TABLE IF EXISTS info")


def test_wrong_input_schema_names_column_and_row_and_appends_nothing(db):
    with pytest.raises(SchemaError, match=r"table 'visit': column 'length' expects INT, got string at row 2 \(value 'long'\)"):
        db.insert("visit", pa.table({"product": ["a", "b", "c"], "user": ["x", "y", "z"],
                                     "length": ["1", "2", "long"]}))
    with pytest.raises(SchemaError, match=r"lacks \['length'\]"):
        db.insert("visit", pa.table({"product": ["a"], "user": ["x"]}))
    with pytest.raises(SchemaError, match="primary key column 'product' is NULL in row 1"):
        db.insert("info", pa.table({"product": ["a", None], "category": ["x", "y"]}))
    with pytest.raises(SqlError, match="INSERT has more target columns than expressions \\(2 values for 3 columns"):
        db.sql("""INSERT INTO visit (product, "user", length) VALUES ('a', 'b')""")
    with pytest.raises(SqlError, match="INSERT has more expressions than target columns \\(4 values for 3 columns"):
        db.sql("INSERT INTO visit VALUES ('a', 'b', 1, 2)")  # (fewer values, no column list: the first columns)
    db.flush()
    assert db.sql("SELECT * FROM visit").num_rows == 0
    assert db.sql("SELECT * FROM info").num_rows == 0


def test_insert_accepts_pandas_and_spark(db, spark):
    import pandas as pd

    db.insert("visit", pd.DataFrame({"product": ["a"], "user": ["u"], "length": [3]}))
    db.insert("visit", spark.createDataFrame([("b", "v", 4)], "product string, user string, length int"))
    db.flush()
    assert sorted(db.sql("SELECT product, length FROM visit").to_pylist(), key=str) == [
        {"product": "a", "length": 3}, {"product": "b", "length": 4}]


def test_update_to_duplicate_primary_key_is_rejected(db):
    db.sql("INSERT INTO info VALUES ('a', 'x'), ('b', 'y')")
    with pytest.raises(SchemaError, match="duplicate primary key"):
        db.sql("UPDATE info SET product = 'a' WHERE product = 'b'")
    db.flush()
    assert sorted(r["product"] for r in db.sql("SELECT * FROM info").to_pylist()) == ["a", "b"]

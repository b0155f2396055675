"""The shopping example of seeds/002, step by step with its exact expected rows."""

import pyarrow as pa

from tests.conftest import rows

SCHEMA = """
CREATE TABLE info  (product VARCHAR PRIMARY KEY, category VARCHAR);
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT);
CREATE MATERIALIZED VIEW result AS
  SELECT category, MAX(length) AS max_length
  FROM info JOIN visit ON info.product = visit.product
  GROUP BY category;
"""


def seed(db):
    db.sql(SCHEMA)
    db.sql("INSERT INTO info VALUES ('Apple','Fruit'),('Banana','Fruit'),('Carrot','Vegetable'),('Potato','Vegetable')")
    db.insert("visit", pa.table({
        "product": ["Apple", "Apple", "Carrot", "Banana", "Potato"],
        "user": ["Alice", "Bob", "Bob", "Alice", "Eve"],
        "length": [10, 20, 50, 40, 60],
    }))


def test_seed_example_step_by_step(open_db):
    db = open_db()
    seed(db)
    reports = db.flush()
    assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 40), ("Vegetable", 60)]
    assert set(reports[-1].changes) == {"result"}  # views only: a table's changes are its log
    change = reports[-1].changes["result"]
    assert change.schema.names == ["category", "max_length", "_w"]
    assert change.schema.field("category").type == pa.string()
    assert rows(change) == [("Fruit", 40, 1), ("Vegetable", 60, 1)]

    db.sql("""DELETE FROM visit WHERE product = 'Banana' AND "user" = 'Alice'""")
    report = db.flush()[-1]
    assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 20), ("Vegetable", 60)]
    assert rows(report.changes["result"]) == [("Fruit", 20, 1), ("Fruit", 40, -1)]

    db.sql("UPDATE info SET category = 'Vegetable' WHERE product = 'Apple'")
    report = db.flush()[-1]
    assert rows(db.sql("SELECT * FROM result")) == [("Vegetable", 60)]
    assert rows(report.changes["result"]) == [("Fruit", 20, -1)]

    db.sql("UPDATE info SET category = 'Fruit' WHERE product = 'Carrot'")
    db.flush()
    assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 50), ("Vegetable", 60)]
    assert rows(db.sql("SELECT * FROM info")) == [
        ("Apple", "Vegetable"), ("Banana", "Fruit"), ("Carrot", "Fruit"), ("Potato", "Vegetable")]


def test_views_survive_reopen_and_spark_dataframe(open_db, root):
    db = open_db()
    seed(db)
    db.flush()
    epoch = db.epoch
    db.close()
    again = open_db()
    assert again.epoch == epoch
    assert sorted(again.catalog.views) == ["result"]
    df = again.table("result")
    assert sorted(map(tuple, df.collect())) == [("Fruit", 40), ("Vegetable", 60)]


def test_primary_key_insert_is_an_upsert(open_db):
    db = open_db()
    seed(db)
    db.flush()
    db.sql("INSERT INTO info VALUES ('Banana', 'Vegetable')")
    db.flush()
    assert rows(db.sql("SELECT * FROM info WHERE product = 'Banana'")) == [("Banana", "Vegetable")]
    assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 20), ("Vegetable", 60)]


def test_upserts_resolve_against_changes_no_epoch_has_committed(open_db):
    """An insert into a keyed table runs no epoch: it replaces the rows appended before it too."""
    db = open_db()
    seed(db)  # nothing committed yet
    db.sql("INSERT INTO info VALUES ('Banana', 'Vegetable')")
    db.sql("INSERT INTO info VALUES ('Banana', 'Fruit'), ('Kiwi', 'Fruit')")
    db.sql("INSERT INTO info VALUES ('Kiwi', 'Vegetable')")
    assert db.epoch == 0
    assert len(db.flush()) == 1
    assert rows(db.sql("SELECT * FROM info")) == [("Apple", "Fruit"), ("Banana", "Fruit"), ("Carrot", "Vegetable"),
                                                   ("Kiwi", "Vegetable"), ("Potato", "Vegetable")]
    assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 40), ("Vegetable", 60)]


def test_a_key_repeated_within_one_insert_keeps_its_last_row(open_db):
    """Within one batch the last row of a key wins (and a batch whose keys do not repeat is stored as
    given); a key repeated by the next insert replaces the row before it."""
    db = open_db()
    db.sql("CREATE TABLE kv (k INT, j INT, v VARCHAR, PRIMARY KEY (k, j))")
    db.insert("kv", pa.table({"k": [1, 2, 1, 3, 2, 1], "j": [0, 0, 0, 0, 0, 1], "v": ["a", "b", "c", "d", "e", "f"]}))
    db.insert("kv", pa.table({"k": [4, 3], "j": [0, 0], "v": ["g", "h"]}))
    db.flush()
    assert rows(db.sql("SELECT * FROM kv")) == [(1, 0, "c"), (1, 1, "f"), (2, 0, "e"), (3, 0, "h"), (4, 0, "g")]


def test_flush_statement_and_nothing_to_do(open_db):
    db = open_db()
    seed(db)
    assert db.sql("FLUSH") is None
    epoch = db.epoch
    assert db.flush() == []  # no new input: no epoch
    assert db.epoch == epoch


def test_seed_example_on_s3(spark, s3_url, s3_options, tmp_path):
    import millpond

    db = millpond.connect(f"{s3_url}/{tmp_path.name}", spark=spark, parallelism=2, interval=None,
                          storage_options=s3_options)
    try:
        seed(db)
        db.flush()
        assert rows(db.sql("SELECT * FROM result")) == [("Fruit", 40), ("Vegetable", 60)]
    finally:
        db.close()
    again = millpond.connect(f"{s3_url}/{tmp_path.name}", spark=spark, parallelism=3, interval=None,
                             storage_options=s3_options)
    try:
        assert rows(again.sql("SELECT * FROM result")) == [("Fruit", 40), ("Vegetable", 60)]
    finally:
        again.close()


def test_background_interval_keeps_views_fresh_without_flush(spark, root):
    import time

    import millpond

    db = millpond.connect(root, spark=spark, parallelism=2, interval="200ms")
    try:
        seed(db)

        def result() -> list | None:  # not filled by a background epoch yet, or its rows
            try:
                return rows(db.sql("SELECT * FROM result"))
            except millpond.MillpondError as exc:
                assert "has not been populated" in str(exc)
                return None

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and result() != [("Fruit", 40), ("Vegetable", 60)]:
            time.sleep(0.2)
        assert result() == [("Fruit", 40), ("Vegetable", 60)]
    finally:
        db.close()

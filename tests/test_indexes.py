"""Indexes (``CREATE INDEX``): a table's rows arranged once, read by every view that joins on them.

Views reading an index must equal DuckDB's recomputation after every epoch, under random inserts,
updates and deletes on both sides, restarts, views created over tables that hold data and an
index created on a populated table; and they must keep no state of their own for the shared side.
"""

from __future__ import annotations

import random

import duckdb
import pytest

from millpond.errors import CatalogError, SqlError
from millpond.spark import local_plan
from tests.conftest import canonical, lengths

TABLES = ["CREATE TABLE info (product VARCHAR PRIMARY KEY, category VARCHAR, price INT)",
          "CREATE TABLE visit (id BIGINT PRIMARY KEY, product VARCHAR, length INT)"]
VIEWS = {
    "inner_j": "SELECT v.id, i.category, v.length FROM visit v JOIN info i ON v.product = i.product WHERE v.length >= 3",
    "left_j": "SELECT v.id, i.category FROM visit v LEFT JOIN info i ON i.product = v.product",
    "full_j": "SELECT v.id, i.product, i.price FROM info i FULL JOIN visit v ON v.product = i.product",
    "agg": "SELECT i.category, count(*) AS n, sum(v.length) AS total FROM visit v JOIN info i "
           "ON v.product = i.product GROUP BY i.category",
    "filtered": "SELECT v.id, i.category FROM visit v JOIN (SELECT * FROM info WHERE price > 50) i "
                "ON v.product = i.product",
    "left_on": "SELECT v.id, i.category FROM visit v LEFT JOIN info i ON v.product = i.product AND i.price > 50",
    "right_j": "SELECT v.id, i.product, i.category FROM visit v RIGHT JOIN info i ON v.product = i.product",
    "cte": "WITH i AS (SELECT product AS p, category FROM info WHERE price > 20) SELECT v.id, i.category "
           "FROM visit v LEFT JOIN i ON v.product = i.p WHERE v.length > 2",
}


def _statements(rng: random.Random, next_id: list[int]) -> list[str]:
    """One epoch of random changes to both tables (products p0..p14; some visits name no product)."""
    out = []
    for _ in range(rng.randint(1, 6)):
        p = f"p{rng.randrange(15)}"
        r = rng.random()
        if r < 0.25:
            out.append(f"INSERT INTO info VALUES ('{p}', 'c{rng.randrange(4)}', {rng.randrange(100)})")
        elif r < 0.35:
            out.append(f"UPDATE info SET category = 'c{rng.randrange(4)}', price = {rng.randrange(100)} "
                       f"WHERE product = '{p}'")
        elif r < 0.42:
            out.append(f"DELETE FROM info WHERE product = '{p}'")
        elif r < 0.8:
            vid = next_id[0]
            next_id[0] += 1
            prod = "NULL" if rng.random() < 0.1 else f"'{p}'"
            out.append(f"INSERT INTO visit VALUES ({vid}, {prod}, {rng.randrange(10)})")
        elif r < 0.9 and next_id[0] > 0:
            out.append(f"UPDATE visit SET product = '{p}' WHERE id = {rng.randrange(next_id[0])}")
        elif next_id[0] > 0:
            out.append(f"DELETE FROM visit WHERE id = {rng.randrange(next_id[0])}")
    return out


def _upsert(sql: str) -> str:
    """DuckDB's spelling of millpond's INSERT into a keyed table (an existing key's row is replaced)."""
    return sql.replace("INSERT INTO", "INSERT OR REPLACE INTO")


def _check(db, ref: duckdb.DuckDBPyConnection, views: dict[str, str], epoch: int) -> None:
    for name, sql in views.items():
        got = canonical(db.sql(f"SELECT * FROM {name}"))
        want = canonical(ref.sql(sql).to_arrow_table())
        assert got == want, f"view {name} differs from DuckDB after epoch {epoch}"


def _own_sides(db, view: str) -> set[str]:
    """The join side states a view keeps of its own."""
    vid = db.catalog.views[view].id
    return {sid.split(".")[-1] for sid in db.runtime.coordinator.manifest.states
            if sid.startswith(f"o{vid}.") and sid.endswith((".left", ".right"))}


@lengths(5, 14)
def test_views_reading_an_index_equal_duckdb_under_random_changes_and_restarts(open_db, epochs, monkeypatch):
    db, ref, rng, next_id = open_db(), duckdb.connect(), random.Random(5), [0]
    for t in TABLES:
        db.sql(t)
        ref.sql(t)
    db.sql("CREATE MATERIALIZED VIEW before_index AS " + VIEWS["inner_j"])  # planned before: keeps its own state
    for _ in range(4):  # the index is created on a table that holds data
        for s in _statements(rng, next_id):
            db.sql(s)
            ref.sql(_upsert(s))
        db.flush()
    db.sql("CREATE INDEX info_product ON info (product)")
    db.sql("CREATE INDEX visit_product ON visit (product)")
    for name, sql in VIEWS.items():  # created in the same epoch as the indexes' first
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    views = {**VIEWS, "before_index": VIEWS["inner_j"]}
    shown = db.sql("SHOW INDEXES").to_pylist()
    assert {r["name"]: r["read_by"] for r in shown} == {
        "info_product": "agg, filtered, full_j, inner_j, left_j, right_j",
        "visit_product": "agg, cte, filtered, full_j, inner_j, left_j, left_on, right_j"}
    for epoch in range(epochs):
        here = epoch % 2 == 1  # epochs alternate: each view's whole epoch one task, or Spark's stages
        monkeypatch.setattr(local_plan, "LOCAL_RECORDS", 10**9 if here else 0)
        for s in _statements(rng, next_id):
            db.sql(s)
            ref.sql(_upsert(s))
        stats = db.runtime.coordinator.executor.stats
        before = stats["local"]
        db.flush()
        # every view (and table) ran as one task where epochs may (spark/local.py), none elsewhere
        assert (stats["local"] - before >= len(views)) if here else stats["local"] == before, (epoch, here)
        _check(db, ref, views, epoch)
        if epoch == epochs // 2 - 1:  # a restart: the views go on reading the indexes from the committed version
            db.close()
            db = open_db()
        if epoch == epochs - 5:  # views created over tables that hold data read the indexes from their offsets
            for name in ("left_j", "full_j", "right_j", "left_on", "agg", "cte"):  # a preserved side is read whole
                db.sql(f"CREATE MATERIALIZED VIEW late_{name} AS {VIEWS[name]}")
                views[f"late_{name}"] = VIEWS[name]
    assert db.sql("SELECT count(*) AS n FROM inner_j").column("n")[0].as_py() > 0
    for name in ("left_j", "full_j", "right_j", "agg", "late_left_j", "late_full_j", "late_right_j", "late_agg"):
        # both sides read indexes: no join state at all
        assert _own_sides(db, name) == set(), f"{name} keeps a join side of its own"
    assert _own_sides(db, "before_index") == {"left", "right"}
    # filters move above an inner join, and above an outer join's preserved side (a subquery's
    # or CTE's renaming SELECT folds away); an outer join's padded side that filters keeps its own
    assert _own_sides(db, "inner_j") == _own_sides(db, "filtered") == set()
    assert _own_sides(db, "left_on") == _own_sides(db, "late_left_on") == _own_sides(db, "cte") == {"right"}
    assert all(r["state_bytes"] > 0 for r in db.sql("SHOW INDEXES").to_pylist())


def test_index_ddl_and_its_errors(open_db):
    db = open_db()
    for t in TABLES:
        db.sql(t)
    db.sql("INSERT INTO info VALUES ('a', 'x', 1)")
    db.sql("CREATE INDEX ON info (product)")
    assert db.sql("SHOW INDEXES").column("name").to_pylist() == ["info_product_idx"]
    db.sql("CREATE INDEX IF NOT EXISTS info_product_idx ON info (category)")  # exists: nothing happens
    with pytest.raises(CatalogError, match="already exists"):
        db.sql("CREATE INDEX info_product_idx ON info (category)")
    with pytest.raises(CatalogError, match="already exists"):
        db.sql("CREATE INDEX visit ON info (category)")
    with pytest.raises(SqlError, match='column "nope" does not exist'):
        db.sql("CREATE INDEX i ON info (nope)")
    with pytest.raises(SqlError, match="UNIQUE"):
        db.sql("CREATE UNIQUE INDEX i ON info (category)")
    with pytest.raises(SqlError, match="expression"):
        db.sql("CREATE INDEX i ON info (lower(category))")
    with pytest.raises(CatalogError, match='relation "nope" does not exist'):
        db.sql("CREATE INDEX i ON nope (k)")
    described = {r["name"]: r["description"] for r in db.sql("DESCRIBE info").to_pylist()}
    assert described["indexes"] == "info_product_idx (product)"
    db.sql("CREATE MATERIALIZED VIEW v AS " + VIEWS["inner_j"])
    plan = db.sql("EXPLAIN MATERIALIZED VIEW v").column("plan").to_pylist()
    assert any("right from index" in line for line in plan)
    assert any("(the index's: right side, shared)" in line for line in plan)
    with pytest.raises(CatalogError, match="views v depend on it"):
        db.sql("DROP INDEX info_product_idx")
    with pytest.raises(CatalogError, match='index "nope" does not exist'):
        db.sql("DROP INDEX nope")
    db.sql("DROP INDEX IF EXISTS nope")
    db.close()
    db = open_db()  # the index and the view's use of it are in the catalog
    assert db.sql("SHOW INDEXES").to_pylist()[0]["read_by"] == "v"
    db.sql("DROP MATERIALIZED VIEW v")
    db.sql("CREATE INDEX by_category ON info (category)")
    db.sql("DROP INDEX info_product_idx")
    db.sql("DROP TABLE info")  # a table's indexes go with it
    assert db.sql("SHOW INDEXES").num_rows == 0


def test_an_index_whose_key_type_differs_is_not_read(open_db):
    """An INT index cannot serve a join that compares as BIGINT (the hashes differ): the view keeps
    its own state for that side, and is still right."""
    db = open_db()
    db.sql("CREATE TABLE n (k INT PRIMARY KEY, x INT)")
    db.sql("CREATE TABLE m (k BIGINT PRIMARY KEY, y INT)")
    db.sql("CREATE INDEX n_k ON n (k)")
    db.sql("CREATE INDEX m_k ON m (k)")
    db.sql("CREATE MATERIALIZED VIEW w AS SELECT x, y FROM m JOIN n ON m.k = n.k")
    assert db.sql("SHOW INDEXES").column("read_by").to_pylist() == ["w", None]
    db.sql("INSERT INTO n VALUES (1, 10), (2, 20)")
    db.sql("INSERT INTO m VALUES (1, 100), (3, 300)")
    db.flush()
    assert canonical(db.sql("SELECT * FROM w")) == [(10, 100)]
    assert _own_sides(db, "w") == {"right"}


def test_an_index_on_a_keyless_and_an_append_only_table(open_db):
    """Tables whose log is their rows: the index is built from the log, and a view created later
    starts reading the table where the index holds it."""
    db, ref = open_db(), duckdb.connect()
    for t in ["CREATE TABLE tags (product VARCHAR, tag VARCHAR)",
              "CREATE TABLE clicks (product VARCHAR, n INT) APPEND ONLY"]:
        db.sql(t)
        ref.sql(t.replace(" APPEND ONLY", ""))
    view = "SELECT t.tag, sum(c.n) AS n FROM clicks c JOIN tags t ON c.product = t.product GROUP BY t.tag"
    rng = random.Random(3)
    for epoch in range(8):
        for _ in range(4):
            p = f"p{rng.randrange(5)}"
            s = rng.choice([f"INSERT INTO tags VALUES ('{p}', 't{rng.randrange(3)}')",
                            f"INSERT INTO clicks VALUES ('{p}', {rng.randrange(9)})",
                            f"DELETE FROM tags WHERE product = '{p}'"])
            db.sql(s)
            ref.sql(s)
        db.flush()
        if epoch == 2:
            db.sql("CREATE INDEX tags_product ON tags (product)")
            db.sql("CREATE INDEX clicks_product ON clicks (product)")
        if epoch == 4:
            db.sql(f"CREATE MATERIALIZED VIEW v AS {view}")
            assert _own_sides(db, "v") == set()
        if epoch >= 4:
            db.flush()
            assert canonical(db.sql("SELECT * FROM v")) == canonical(ref.sql(view).to_arrow_table()), epoch
    assert _own_sides(db, "v") == set()

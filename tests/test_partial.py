"""Partial views (``WITH (partial = true)``): state only for the keys that were read.

A query of a partial view by its key must equal DuckDB's answer over all input, under random
inserts, updates and deletes, random queries of random keys (most of them cold: filled by an
upquery), evictions under a small budget, and restarts; and the view must hold rows of its filled
keys only.
"""

from __future__ import annotations

import random

import duckdb
import pytest

from millpond.errors import SqlError
from tests.conftest import canonical, lengths
from tests.test_indexes import TABLES, _statements, _upsert

# name -> (query, key, budget)
VIEWS = {
    "by_product": ("SELECT v.product, i.category, count(*) AS n, max(v.length) AS longest, sum(v.length) AS total "
                   "FROM visit v JOIN info i ON v.product = i.product GROUP BY v.product, i.category", "product", 4),
    "visits": ("SELECT v.id, v.product, i.category, i.price FROM visit v LEFT JOIN info i ON i.product = v.product "
               "WHERE v.length > 1", "product", 3),
    "by_category": ("SELECT i.category, count(*) AS n, min(v.length) AS shortest FROM info i JOIN visit v "
                    "ON v.product = i.product GROUP BY i.category", "category", 2),
    "top2": ("SELECT product, id, length FROM (SELECT product, id, length, row_number() OVER "
             "(PARTITION BY product ORDER BY length DESC, id) AS rn FROM visit) s WHERE rn <= 2", "product", 5),
}
KEYS = {"product": [f"p{i}" for i in range(17)], "category": [f"c{i}" for i in range(5)]}


def _query(rng: random.Random, key: str) -> str:
    keys = rng.sample(KEYS[key], rng.randint(1, 3))
    return f"{key} = '{keys[0]}'" if len(keys) == 1 else f"{key} IN ({', '.join(repr(k) for k in keys)})"


def _check(db, ref: duckdb.DuckDBPyConnection, rng: random.Random, epoch: int) -> None:
    for name, (sql, key, budget) in VIEWS.items():
        for _ in range(2):
            where = _query(rng, key)
            got = canonical(db.sql(f"SELECT * FROM {name} WHERE {where}"))
            want = canonical(ref.sql(f"SELECT * FROM ({sql}) q WHERE {where}").to_arrow_table())
            assert got == want, f"{name} WHERE {where} differs from DuckDB after epoch {epoch}"
        filled = set(db.runtime.filled(name).to_pylist())
        held = set(db.runtime.snapshot(name).column(key).to_pylist())
        assert held <= filled, f"{name} holds rows of keys it does not hold: {held - filled}"
        assert len(filled) <= budget + 3, f"{name} holds {len(filled)} keys, over its budget {budget}"


@lengths(3, 9)
def test_partial_views_equal_duckdb_for_the_keys_read(open_db, root, epochs):
    db, ref, rng, next_id = open_db(), duckdb.connect(), random.Random(11), [0]
    for t in TABLES:
        db.sql(t)
        ref.sql(t)
    for _ in range(3):  # created over tables that hold data
        for s in _statements(rng, next_id):
            db.sql(s)
            ref.sql(_upsert(s))
    db.flush()
    for name, (sql, key, budget) in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} WITH (partial = true, partial_key = '{key}', max_keys = {budget}) "
               f"AS {sql}")
    db.sql("CREATE MATERIALIZED VIEW full_by_product AS " + VIEWS["by_product"][0])
    db.flush()
    assert all(len(db.runtime.filled(name)) == 0 for name in VIEWS)  # nothing is filled before it is read
    for epoch in range(epochs):
        for s in _statements(rng, next_id):
            db.sql(s)
            ref.sql(_upsert(s))
        db.flush()
        _check(db, ref, rng, epoch)
        if epoch == epochs // 2:  # a restart: the filled keys are committed state
            filled = {name: set(db.runtime.filled(name).to_pylist()) for name in VIEWS}
            db.close()
            db = open_db()
            assert {name: set(db.runtime.filled(name).to_pylist()) for name in VIEWS} == filled
    assert canonical(db.sql("SELECT * FROM full_by_product WHERE product IN ('p1', 'p2')")) == \
        canonical(db.sql("SELECT * FROM by_product WHERE product IN ('p1', 'p2')"))
    # the keys read last stay; a key nobody read for a while went (least recently read first)
    db.sql("SELECT * FROM by_product WHERE product = 'p16'")
    for p in ("p13", "p14", "p15", "p11"):
        db.sql(f"SELECT * FROM by_product WHERE product = '{p}'")
    assert "p16" not in db.runtime.filled("by_product").to_pylist()


def test_partial_view_errors(open_db):
    db = open_db()
    for t in TABLES:
        db.sql(t)
    db.sql("CREATE TABLE loose (k INT, v INT)")
    bad = {
        "SELECT count(*) AS n FROM visit": "aggregates all rows",
        "SELECT upper(product) AS p, count(*) AS n FROM visit GROUP BY upper(product)": "computed",
        "SELECT i.category, v.id FROM info i FULL JOIN visit v ON v.product = i.product": "FULL JOIN",
        "SELECT k, count(*) AS n FROM loose GROUP BY k": "PRIMARY KEY",
        "SELECT product, id FROM (SELECT product, id, row_number() OVER (ORDER BY id) AS r FROM visit) s "
        "WHERE r < 3": "ORDER BY … LIMIT",
    }
    for sql, words in bad.items():
        with pytest.raises(SqlError, match="cannot be partial") as info:
            db.sql(f"CREATE MATERIALIZED VIEW v WITH (partial = true) AS {sql}")
        assert words in str(info.value), (sql, str(info.value))
    with pytest.raises(SqlError, match="'nope' is not one of its columns"):
        db.sql("CREATE MATERIALIZED VIEW v WITH (partial = true, partial_key = 'nope') AS SELECT id FROM visit")
    with pytest.raises(SqlError, match="max_keys needs WITH"):
        db.sql("CREATE MATERIALIZED VIEW v WITH (max_keys = 5) AS SELECT id FROM visit")
    with pytest.raises(SqlError, match="unsupported view option"):
        db.sql("CREATE MATERIALIZED VIEW v WITH (partial = true, max_keys = 0) AS SELECT id FROM visit")
    assert "v" not in db.catalog.views
    db.sql("CREATE MATERIALIZED VIEW v WITH (partial = true) AS SELECT id, product FROM visit")
    assert db.catalog.views["v"].partial == {"key": "id", "max_keys": 10_000}  # the first column that can be
    db.sql("INSERT INTO visit VALUES (1, 'p1', 3)")
    db.flush()
    with pytest.raises(SqlError, match="partial view: it is read by its key 'id'"):
        db.sql("SELECT * FROM v WHERE id > 0")
    with pytest.raises(SqlError, match="invalid input syntax for type bigint"):
        db.sql("SELECT * FROM v WHERE id = 'one'")
    assert db.sql("SELECT product FROM v WHERE id = 1 AND product IS NOT NULL").to_pylist() == [{"product": "p1"}]
    assert db.sql("SELECT count(*) AS n FROM v WHERE id IN (1, 2, 3)").to_pylist() == [{"n": 1}]

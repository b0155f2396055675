"""Delta joins: a join of three tables that indexes serve keeps no intermediate state; each
input's delta probes the other inputs' indexes (``millpond.sql.indexes``).

Views must equal DuckDB's recomputation after every epoch under random inserts, updates and
deletes on all three tables (several in one epoch), views created over populated tables, and a
restart; and they must keep no join state at all.
"""

from __future__ import annotations

import random

import duckdb

from millpond.spark import local_plan
from tests.conftest import canonical, lengths
from tests.test_indexes import _upsert

TABLES = ["CREATE TABLE customers (c_id INT PRIMARY KEY, region VARCHAR)",
          "CREATE TABLE products (p_id INT PRIMARY KEY, category VARCHAR, price INT)",
          "CREATE TABLE orders (o_id BIGINT PRIMARY KEY, customer INT, product INT, qty INT)"]
INDEXES = ["CREATE INDEX ON orders (customer)", "CREATE INDEX ON orders (product)",
           "CREATE INDEX ON customers (c_id)", "CREATE INDEX ON products (p_id)"]
VIEWS = {
    "wide": "SELECT o.o_id, c.region, p.category, o.qty * p.price AS amount FROM orders o "
            "JOIN customers c ON o.customer = c.c_id JOIN products p ON o.product = p.p_id",
    "by_region": "SELECT c.region, p.category, count(*) AS n, sum(o.qty) AS qty, max(p.price) AS top "
                 "FROM orders o JOIN customers c ON o.customer = c.c_id JOIN products p ON p.p_id = o.product "
                 "WHERE o.qty > 1 GROUP BY c.region, p.category",
    "filtered": "SELECT o.o_id, c.region FROM (SELECT * FROM orders WHERE qty < 8) o "
                "JOIN customers c ON o.customer = c.c_id JOIN (SELECT * FROM products WHERE price > 20) p "
                "ON o.product = p.p_id",
}


def _statements(rng: random.Random, next_id: list[int]) -> list[str]:
    """One epoch of changes, mostly upserts (an UPDATE or DELETE flushes first, ending an epoch), so
    all three tables change in one epoch, often on the same keys."""
    out = []
    for _ in range(rng.randint(3, 14)):
        r = rng.random()
        if r < 0.2:
            out.append(f"INSERT INTO customers VALUES ({rng.randrange(6)}, 'r{rng.randrange(3)}')")
        elif r < 0.24:
            out.append(f"DELETE FROM customers WHERE c_id = {rng.randrange(6)}")
        elif r < 0.44:
            out.append(f"INSERT INTO products VALUES ({rng.randrange(6)}, 'k{rng.randrange(3)}', {rng.randrange(50)})")
        elif r < 0.48:
            out.append(f"DELETE FROM products WHERE p_id = {rng.randrange(6)}")
        elif r < 0.9:
            out.append(f"INSERT INTO orders VALUES ({next_id[0]}, {rng.randrange(7)}, {rng.randrange(7)}, "
                       f"{rng.randrange(10)})")
            next_id[0] += 1
        elif r < 0.95 and next_id[0]:
            out.append(f"UPDATE orders SET product = {rng.randrange(7)}, qty = {rng.randrange(10)} "
                       f"WHERE o_id = {rng.randrange(next_id[0])}")
        elif next_id[0]:
            out.append(f"DELETE FROM orders WHERE o_id = {rng.randrange(next_id[0])}")
    return out


def _check(db, ref, views: dict[str, str], epoch: int) -> None:  # noqa: ANN001
    for name, sql in views.items():
        assert canonical(db.sql(f"SELECT * FROM {name}")) == canonical(ref.sql(sql).to_arrow_table()), \
            f"view {name} differs from DuckDB after epoch {epoch}"


@lengths(3, 7)
def test_delta_joins_equal_duckdb_and_keep_no_join_state(open_db, epochs, monkeypatch):
    db, ref, rng, next_id = open_db(), duckdb.connect(), random.Random(3), [0]
    for t in TABLES:
        db.sql(t)
        ref.sql(t)
    for s in INDEXES:
        db.sql(s)
    for _ in range(3):  # the views are created over tables that hold data
        for s in _statements(rng, next_id):
            db.sql(s)
            ref.sql(_upsert(s))
        db.flush()
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        plan = "\n".join(db.sql(f"EXPLAIN MATERIALIZED VIEW {name}").column("plan").to_pylist())
        assert plan.count("Probe #") == 6 and "Join #" not in plan, plan
    db.flush()
    _check(db, ref, VIEWS, -1)
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
        assert (stats["local"] - before >= len(VIEWS)) if here else stats["local"] == before, (epoch, here)
        _check(db, ref, VIEWS, epoch)
        if epoch == epochs - 3:
            db.close()
            db = open_db()
    states = {sid for sid in db.runtime.coordinator.manifest.states
              if any(sid.startswith(f"o{v.id}.") for v in db.catalog.views.values())}
    assert not [sid for sid in states if sid.endswith((".left", ".right"))], states  # no join state: indexes only
    db.sql("CREATE MATERIALIZED VIEW late AS " + VIEWS["by_region"])  # a first epoch over populated indexes
    db.flush()
    _check(db, ref, {"late": VIEWS["by_region"]}, epochs)

"""Random inserts, updates and deletes over many epochs; after every epoch each view equals
DuckDB recomputing its SQL over base tables that DuckDB itself maintained with the same DML."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from tests.conftest import rows

TABLES = """
CREATE TABLE info  (product VARCHAR PRIMARY KEY, category VARCHAR);
CREATE TABLE visit (product VARCHAR, "user" VARCHAR, length INT);
"""

VIEWS = {
    "max_by_category": """SELECT category, MAX(length) AS max_length
        FROM info JOIN visit ON info.product = visit.product GROUP BY category""",
    "stats": """SELECT i.category, COUNT(*) AS n, SUM(v.length) AS total, MIN(v.length) AS lo,
               COUNT(v."user") AS users, AVG(v.length) AS avg_len
        FROM info i JOIN visit v ON i.product = v.product
        WHERE v.length IS NULL OR v.length > 5
        GROUP BY i.category HAVING COUNT(*) > 1""",
    "thirds": """SELECT product, length * 2 AS doubled FROM visit WHERE length % 3 = 0""",
    "per_user": """SELECT "user", COUNT(*) AS n, MAX(length) AS longest, SUM(length) AS total
        FROM visit GROUP BY "user" """,
    "self_join": """SELECT a.product, b."user" AS other, COUNT(*) AS pairs
        FROM visit a JOIN visit b ON a.product = b.product AND a."user" <> b."user"
        GROUP BY a.product, b."user" """,
}

PRODUCTS = [f"p{i}" for i in range(8)]
USERS = [f"u{i}" for i in range(5)] + [None]
CATEGORIES = ["c0", "c1", "c2", None]


def _norm(table: pa.Table) -> list[tuple]:
    return rows(pa.table({n: [round(v, 6) if isinstance(v, float) else v for v in c.to_pylist()]
                          for n, c in zip(table.column_names, table.columns)}))


def _visits(rng: random.Random, n: int) -> pa.Table:
    return pa.table({
        "product": [rng.choice(PRODUCTS) for _ in range(n)],
        "user": [rng.choice(USERS) for _ in range(n)],
        "length": [rng.choice([None, *range(0, 100)]) if rng.random() < 0.1 else rng.randrange(100) for _ in range(n)],
    }, schema=pa.schema([("product", pa.string()), ("user", pa.string()), ("length", pa.int32())]))


def _random_step(rng: random.Random) -> tuple[str, object]:
    kind = rng.choice(["visits", "visits", "info", "del_visit", "upd_visit", "upd_info", "del_info"])
    p, u, c = rng.choice(PRODUCTS), rng.choice(USERS[:-1]), rng.choice(CATEGORIES)
    if kind == "visits":
        return "insert", _visits(rng, rng.randrange(1, 25))
    if kind == "info":
        values = ", ".join(f"('{q}', {'NULL' if cat is None else repr(cat)})"
                           for q, cat in {rng.choice(PRODUCTS): rng.choice(CATEGORIES) for _ in range(3)}.items())
        return "upsert", f"INSERT INTO info VALUES {values}"
    if kind == "del_visit":
        return "sql", f"""DELETE FROM visit WHERE "user" = '{u}' AND length < {rng.randrange(100)}"""
    if kind == "upd_visit":
        return "sql", f"UPDATE visit SET length = length + {rng.randrange(1, 9)} WHERE product = '{p}'"
    if kind == "upd_info":
        return "sql", f"UPDATE info SET category = {'NULL' if c is None else repr(c)} WHERE product = '{p}'"
    return "sql", f"DELETE FROM info WHERE product = '{p}'"


@pytest.mark.parametrize("seed", [7, 2024])
def test_views_match_duckdb_after_every_epoch(open_db, seed):
    rng = random.Random(seed)
    db = open_db()
    db.sql(TABLES)
    for name, sql in VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    ref = duckdb.connect()
    ref.execute(TABLES)

    seen = dict.fromkeys(VIEWS, 0)
    for step in range(10):
        for _ in range(rng.randrange(1, 4)):
            kind, what = _random_step(rng)
            if kind == "insert":
                db.insert("visit", what)
                ref.register("incoming", what)
                ref.execute("INSERT INTO visit SELECT * FROM incoming")
            elif kind == "upsert":
                db.sql(what)
                ref.execute(what.replace("INSERT INTO", "INSERT OR REPLACE INTO"))
            else:
                db.sql(what)
                ref.execute(what)
        db.flush()
        for table in ("info", "visit"):
            assert _norm(db.sql(f"SELECT * FROM {table}")) == _norm(ref.sql(f"SELECT * FROM {table}").to_arrow_table()), \
                f"seed {seed} step {step}: base table {table}"
        for name, sql in VIEWS.items():
            got = _norm(db.sql(f"SELECT * FROM {name}"))
            want = _norm(ref.sql(sql).to_arrow_table())
            assert got == want, f"seed {seed} step {step} epoch {db.epoch}: view {name}"
            seen[name] += len(got)
    assert all(seen.values()), f"some views stayed empty, the workload checks nothing there: {seen}"

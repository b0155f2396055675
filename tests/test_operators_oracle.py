"""Every operator against the oracle: random inserts, updates and deletes, and after every
epoch each view equals DuckDB running the same query over base tables DuckDB maintained itself
(NULLs, duplicates and empty groups included). Views are grouped so each test stays small."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from tests import workload

GROUPS = {
    "aggregates": {
        "whole": """SELECT COUNT(*) AS n, COUNT(length) AS nl, SUM(length) AS s, MIN(length) AS lo,
                    MAX(length) AS hi, AVG(length) AS a, COUNT(DISTINCT product) AS dp FROM visit""",
        "whole_having": "SELECT COUNT(*) AS n, SUM(length) AS s FROM visit WHERE length > 50 HAVING COUNT(*) > 3",
        "distinct_filter": """SELECT product, COUNT(DISTINCT "user") AS du, SUM(DISTINCT length) AS sd,
                    AVG(DISTINCT length) AS ad, COUNT(*) FILTER (WHERE length > 50) AS big,
                    MAX(length) FILTER (WHERE "user" IS NOT NULL) AS mx, SUM(length) FILTER (WHERE length < 30) AS small
                    FROM visit GROUP BY product""",
        "group_expr": """SELECT length / 25 AS bucket, COUNT(*) AS n, MIN("user") AS first_user
                    FROM visit GROUP BY length / 25""",
    },
    "joins": {
        "left_join": """SELECT v.product, v."user", v.length, i.category
                    FROM visit v LEFT JOIN info i ON v.product = i.product""",
        "right_join": """SELECT i.product, i.category, v.length
                    FROM visit v RIGHT JOIN info i ON v.product = i.product AND v.length > 20""",
        "full_join": """SELECT v.product AS vp, v.length, i.product AS ip, i.category
                    FROM visit v FULL OUTER JOIN info i ON v.product = i.product AND i.category <> 'c0'""",
        "outer_agg": """SELECT i.category, COUNT(v.product) AS visits, SUM(v.length) AS total
                    FROM info i LEFT JOIN visit v ON i.product = v.product GROUP BY i.category""",
        "three_way": """SELECT a.product, i.category, COUNT(*) AS n FROM visit a
                    JOIN visit b ON a.product = b.product JOIN info i ON b.product = i.product
                    WHERE a.length < b.length GROUP BY a.product, i.category""",
        "cross_small": """SELECT c.category, COUNT(*) AS n, SUM(v.length) AS s
                    FROM visit v CROSS JOIN (SELECT DISTINCT category FROM info) c GROUP BY c.category""",
        "comma_join": """SELECT i.category, v."user" FROM visit v, info i
                    WHERE v.product = i.product AND v.length > 60""",
        "or_across": """SELECT i.category, v."user", v.length FROM info i, visit v, info j
                    WHERE v.product = i.product AND j.product = v.product
                    AND ((i.category = 'c1' AND v.length > 40) OR (i.category <> 'c2' AND v.length < 20 AND j.category IS NULL))""",
    },
    "shapes": {
        "top3": """SELECT product, "user", length FROM visit
                    ORDER BY length DESC NULLS LAST, product, "user" NULLS FIRST LIMIT 3 OFFSET 1""",
        "rn_dedup": """SELECT product, "user", length FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY product
                    ORDER BY length DESC NULLS LAST, "user" NULLS FIRST) AS rn FROM visit) t WHERE rn = 1""",
        "rn_top2": """SELECT * FROM (SELECT product, "user", length, ROW_NUMBER() OVER (PARTITION BY "user"
                    ORDER BY length NULLS FIRST, product) AS rn FROM visit) t WHERE rn <= 2""",
        "union_all": """SELECT product, length FROM visit WHERE length > 50
                    UNION ALL SELECT product, 0 FROM info WHERE category IS NOT NULL""",
        "union_distinct": "SELECT product FROM visit UNION SELECT product FROM info",
        "distinct_rows": """SELECT DISTINCT "user", length / 10 AS bucket FROM visit""",
        "cte_sub": """WITH per AS (SELECT product, COUNT(*) AS n FROM visit GROUP BY product)
                    SELECT i.category, SUM(p.n) AS n FROM (SELECT * FROM info WHERE category IS NOT NULL) i
                    JOIN per p ON i.product = p.product GROUP BY i.category""",
    },
}
# views over views: created after the group's views, checked against the inlined SQL
ON_VIEWS = {
    "shapes": {"over_cte": ("SELECT category, n FROM cte_sub WHERE n > 2",
                            "SELECT category, n FROM ({cte_sub}) x WHERE n > 2"),
               "over_top": ("SELECT COUNT(*) AS n, MAX(length) AS hi FROM top3",
                            "SELECT COUNT(*) AS n, MAX(length) AS hi FROM ({top3}) x")},
    "joins": {"over_left": ("SELECT category, COUNT(*) AS n FROM left_join GROUP BY category",
                            "SELECT category, COUNT(*) AS n FROM ({left_join}) x GROUP BY category")},
}


@pytest.mark.parametrize("steps", [16, pytest.param(48, marks=pytest.mark.chaos)])
@pytest.mark.parametrize("group", list(GROUPS))
def test_operators_match_duckdb_after_every_epoch(open_db, group, steps):
    views = GROUPS[group]
    on_views = {name: (sql, oracle.format(**views)) for name, (sql, oracle) in ON_VIEWS.get(group, {}).items()}
    rng = random.Random(group)
    db = open_db()
    db.sql(workload.TABLES)
    ref = workload.Reference()
    plan = workload.steps(len(group) + steps, steps)
    for step in plan[:6]:  # some views are created over tables that already hold data (backfill)
        workload.apply(db, step)
        ref.apply(step)
    for name, sql in views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    for name, (sql, _) in on_views.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    oracle = {**views, **{n: o for n, (_, o) in on_views.items()}}
    seen = dict.fromkeys(oracle, 0)
    for i in workload.epochs(db, ref, plan, 6, rng):
        for name, sql in oracle.items():
            got = workload.norm(db.sql(f"SELECT * FROM {name}"))
            assert got == ref.query(sql), f"{group}/{name} differs from DuckDB after step {i}, epoch {db.epoch}"
            seen[name] += len(got)
    assert all(seen.values()), f"some views stayed empty, so nothing was checked there: {seen}"


CLICKS = "CREATE TABLE clicks (ts TIMESTAMP, product VARCHAR, n INT)"
T0 = dt.datetime(2026, 11, 21, 9, 0)
WINDOW_VIEWS = {
    "tumble": ("""SELECT window_start, window_end, product, COUNT(*) AS c, SUM(n) AS s
                  FROM TUMBLE(clicks, ts, INTERVAL '10 minutes') GROUP BY window_start, window_end, product""",
               """SELECT time_bucket(INTERVAL '10 minutes', ts) AS window_start,
                  time_bucket(INTERVAL '10 minutes', ts) + INTERVAL '10 minutes' AS window_end, product,
                  COUNT(*) AS c, SUM(n) AS s FROM clicks WHERE ts IS NOT NULL GROUP BY 1, 2, 3"""),
    "hop": ("""SELECT window_start, MAX(n) AS hi, COUNT(*) AS c
               FROM HOP(clicks, ts, INTERVAL '5 minutes', INTERVAL '15 minutes') GROUP BY window_start""",
            """SELECT time_bucket(INTERVAL '5 minutes', ts) - k * INTERVAL '5 minutes' AS window_start,
               MAX(n) AS hi, COUNT(*) AS c FROM clicks, range(3) r(k) WHERE ts IS NOT NULL GROUP BY 1"""),
    "window_join": ("""SELECT a.window_start, a.product, COUNT(*) AS pairs
                       FROM TUMBLE(clicks, ts, INTERVAL '10 minutes') a
                       JOIN TUMBLE(clicks, ts, INTERVAL '10 minutes') b
                         ON a.window_start = b.window_start AND a.product = b.product
                       WHERE a.n < b.n GROUP BY a.window_start, a.product""",
                    """SELECT time_bucket(INTERVAL '10 minutes', a.ts) AS window_start, a.product, COUNT(*) AS pairs
                       FROM clicks a JOIN clicks b ON time_bucket(INTERVAL '10 minutes', a.ts)
                         = time_bucket(INTERVAL '10 minutes', b.ts) AND a.product = b.product
                       WHERE a.n < b.n GROUP BY 1, 2"""),
}


def _clicks(rng: random.Random, count: int) -> pa.Table:
    return pa.table({
        "ts": [None if rng.random() < 0.05 else T0 + dt.timedelta(seconds=rng.randrange(3600)) for _ in range(count)],
        "product": [rng.choice(workload.PRODUCTS[:4]) for _ in range(count)],
        "n": [rng.randrange(50) for _ in range(count)],
    }, schema=pa.schema([("ts", pa.timestamp("us")), ("product", pa.string()), ("n", pa.int32())]))


def test_time_windows_match_duckdb_after_every_epoch(open_db):
    rng = random.Random(3)
    db = open_db()
    db.sql(CLICKS)
    ref = workload.Reference()
    ref.con.execute(CLICKS)
    for name, (sql, _) in WINDOW_VIEWS.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    for epoch in range(4):
        batch = _clicks(rng, rng.randrange(5, 40))
        db.insert("clicks", batch)
        ref.con.register("incoming", batch)
        ref.con.execute("INSERT INTO clicks SELECT * FROM incoming")
        ref.con.unregister("incoming")
        if epoch % 2:
            change = rng.choice([f"DELETE FROM clicks WHERE n < {rng.randrange(20)} AND product = 'p1'",
                                 f"UPDATE clicks SET ts = ts + INTERVAL '7 minutes' WHERE n > {rng.randrange(40)}"])
            db.sql(change)
            ref.con.execute(change)
        db.flush()
        for name, (_, oracle) in WINDOW_VIEWS.items():
            got = workload.norm(db.sql(f"SELECT * FROM {name}"))
            assert got and got == ref.query(oracle, postgres=False), f"{name} differs from DuckDB at epoch {epoch}"

"""A task applies at most ``MILLPOND_STEP_BYTES`` of delta at once: a larger input is spilled to
local files by ranges of key hashes and applied group by group (``spark/spill.py``), a larger
delta made in the task is applied range by range (``engine/step.py``); a backfill's tasks read a
table's rows a slice of keys at a time (``spark/inputs.read_rows``). The views must be what
they are when every delta is applied at once: DuckDB's answer after every epoch, on inserts,
updates and deletes large enough to be cut."""

from __future__ import annotations

import random
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from millpond.engine import coordinator
from millpond.spark import fused, inputs, local_plan, spill
from tests.conftest import rows

TABLES = """
CREATE TABLE item (id INT PRIMARY KEY, cat INT, price DECIMAL(12, 2), name VARCHAR);
CREATE TABLE sale (item INT, qty INT, day INT);
"""
VIEWS = {
    "per_cat": """SELECT i.cat, COUNT(*) AS n, SUM(s.qty * i.price) AS revenue, MAX(s.qty) AS most,
                  MIN(i.name) AS first FROM sale s JOIN item i ON s.item = i.id GROUP BY i.cat""",
    "per_item": "SELECT item, COUNT(*) AS n, SUM(qty) AS q, MIN(day) AS lo FROM sale GROUP BY item",
    "joined": "SELECT s.item, s.qty, i.name FROM sale s JOIN item i ON s.item = i.id WHERE s.qty > 40",
    "top": """SELECT * FROM (SELECT item, day, qty, ROW_NUMBER() OVER (PARTITION BY item ORDER BY qty DESC, day)
              AS rn FROM sale) t WHERE rn <= 2""",
}


def _items(rng: random.Random, ids: range) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int32()), "cat": pa.array([rng.randrange(9) for _ in ids], pa.int32()),
                     "price": pa.array([Decimal(rng.randrange(100, 99999)).scaleb(-2) for _ in ids], pa.decimal128(12, 2)),
                     "name": pa.array([f"n{rng.randrange(10**6)}" for _ in ids])})


def _sales(rng: random.Random, n: int, items: int) -> pa.Table:
    return pa.table({"item": pa.array([rng.randrange(items) for _ in range(n)], pa.int32()),
                     "qty": pa.array([rng.randrange(60) for _ in range(n)], pa.int32()),
                     "day": pa.array([rng.randrange(400) for _ in range(n)], pa.int32())})


@pytest.mark.parametrize("local_records", [None, 0])
def test_views_applied_in_bounded_steps_match_duckdb(open_db, monkeypatch, local_records):
    """Both ways an epoch runs: small consumers' epochs as one local tree of operators in one task
    (their deltas made in the task, applied by ranges), and each operator a Spark stage (its input
    from the exchange, or read from the log by the task itself, spilled into groups)."""
    monkeypatch.setenv("MILLPOND_STEP_BYTES", str(64 << 10))
    monkeypatch.setattr(inputs, "SLICE_ROWS", 1000)  # a backfill's tasks read the tables' rows in many slices
    if local_records is not None:
        monkeypatch.setattr(local_plan, "LOCAL_RECORDS", local_records)
    written = []  # every state file an epoch commits (compaction merges and deletes them soon after)
    describe = coordinator.describe_sst
    monkeypatch.setattr(coordinator, "describe_sst", lambda store, key: written.append(key) or describe(store, key))
    read = []  # per task reading its delta from the log: the slices it took (spilled past the budget as above)
    slices = fused.Fused.slices

    def spy(self, slot):  # noqa: ANN001, ANN202
        read.append(0)
        for table in slices(self, slot):
            read[-1] += 1
            yield table
    monkeypatch.setattr(fused.Fused, "slices", spy)
    rng = random.Random(5)
    db = open_db()
    db.sql(TABLES)
    oracle = duckdb.connect()
    oracle.sql("CREATE TABLE item (id INT, cat INT, price DECIMAL(12, 2), name VARCHAR); "
               "CREATE TABLE sale (item INT, qty INT, day INT)")
    items, sales = _items(rng, range(4000)), _sales(rng, 30_000, 4000)
    db.insert("item", items)
    db.insert("sale", sales)
    oracle.sql("INSERT INTO item SELECT * FROM items; INSERT INTO sale SELECT * FROM sales")
    db.flush()
    for name, sql in VIEWS.items():  # a backfill over 30,000 sales
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    changes = [  # each epoch: thousands of rows in, changed and out
        lambda: _sales(rng, 12_000, 4000),
        "UPDATE item SET price = price + 1, cat = (cat + 1) % 9 WHERE id % 3 = 0",
        "DELETE FROM sale WHERE day < 150",
        lambda: _items(rng, range(4000, 6000)),
        "DELETE FROM item WHERE id % 5 = 1",
    ]
    for i, change in enumerate([None, *changes]):
        if isinstance(change, str):
            db.sql(change)
            oracle.sql(change)
        elif change is not None:
            batch = change()
            table = "item" if "id" in batch.column_names else "sale"
            db.insert(table, batch)
            oracle.sql(f"INSERT INTO {table} SELECT * FROM batch")
        db.flush()
        for name, sql in VIEWS.items():
            assert rows(db.sql(f"SELECT * FROM {name}")) == rows(oracle.sql(sql).to_arrow_table()), \
                f"{name} differs from DuckDB after change {i}"
    states = [key.rsplit("/", 1)[1] for key in written]
    assert any(f.split(".")[0].count("-") >= 1 and "-g" not in f for f in states), "no delta was applied in ranges"
    assert any(n >= 1 for n in read), "no task read its delta from the log itself"
    assert any("-g" in f for f in states), "no task spilled its input into groups"


def test_spilled_groups_hold_disjoint_key_ranges_whatever_the_batches_order():
    rng = random.Random(1)
    kh = [rng.randrange(-(1 << 63), 1 << 63) for _ in range(20_000)]
    table = pa.table({"_kh": pa.array(kh, pa.int64()), "v": pa.array(range(20_000), pa.int64())})
    batches = table.to_batches(max_chunksize=700)
    made = [list(spill.groups(order, 40_000)) for order in (batches, batches[::-1])]
    for groups in made:
        assert len(groups) > 3
        ranges = [(min(b.column(0).to_pylist() for b in g)[0], max(max(b.column(0).to_pylist()) for b in g))
                  for g in groups]
        assert all(hi < lo for (_, hi), (lo, _) in zip(ranges, ranges[1:])), "groups overlap or are out of key order"
        assert sorted(v for g in groups for b in g for v in b.column(1).to_pylist()) == list(range(20_000))
    assert [sorted(v for b in g for v in b.column(1).to_pylist()) for g in made[0]] == \
        [sorted(v for b in g for v in b.column(1).to_pylist()) for g in made[1]], "a retried task's groups differ"
    small = list(spill.groups(batches, 10**9))
    assert len(small) == 1 and sum(b.num_rows for b in small[0]) == 20_000


@pytest.mark.parametrize("budget", [1, 10**9])
def test_key_ranges_cut_at_key_boundaries(budget):
    import polars as pl

    from millpond.engine.step import key_ranges
    delta = pl.DataFrame({"_kh": [5, 5, 5, 1, 1, 9, 9, 9, 9, 3] * 500, "v": list(range(5000))})
    ranges = key_ranges(delta, budget)
    counts = [delta.filter((pl.col("_kh") >= lo) & (pl.col("_kh") < hi if hi is not None else True)).height
              for lo, hi in ranges]
    assert sum(counts) == 5000 and all(counts)
    assert (len(ranges) > 1) == (budget == 1)

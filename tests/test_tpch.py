"""TPC-H's 22 queries as materialized views over tpchgen-cli's data (SF 0.01), each equal to DuckDB
running the same SQL over the same rows after the backfill and after TPC-H's refresh functions
(new orders with their lineitems; the oldest orders with theirs deleted by key range, 1% each)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from millpond import tpch
from millpond.tpch import oracle

SCALE = 0.01


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tpch.generate(SCALE, tmp_path_factory.mktemp("tpch"))


def test_every_tpch_query_is_a_view_equal_to_duckdb_through_refreshes(open_db, folder):
    db = open_db()
    db.sql(";".join(tpch.DDL))
    tables = {name: tpch.read(folder, name) for name in tpch.TABLES}
    for name, rows in tables.items():
        db.insert(name, rows)
    queries = tpch.queries(SCALE)
    for name, sql in queries.items():
        db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    db.flush()

    refresh = tpch.Refresh(tables["orders"], tables["lineitem"], 0.01, seed=7)
    for step in ("the backfill", "a refresh"):
        mismatched = [name for name, sql in queries.items()
                      if not oracle.same(oracle.rows(db.sql(f"SELECT * FROM {name}")), oracle.answer(tables, sql))]
        assert not mismatched, f"after {step}: {mismatched}"
        if step == "a refresh":
            break
        orders, lines = refresh.rf1()
        db.insert("orders", orders)
        db.insert("lineitem", lines)
        deletes = refresh.rf2()
        for statement in deletes:
            db.sql(statement)
        db.flush()
        lo, hi = (int(x) for x in re.findall(r"\d+", deletes[0]))  # the oracle's own copy of the change
        tables["orders"] = _without(pa.concat_tables([tables["orders"], orders]), "o_orderkey", lo, hi)
        tables["lineitem"] = _without(pa.concat_tables([tables["lineitem"], lines]), "l_orderkey", lo, hi)
        assert db.sql("SELECT count(*) AS n FROM orders").to_pylist() == [{"n": tables["orders"].num_rows}]
    assert all(v["status"] == "running" for v in db.sql("SELECT status FROM millpond_views").to_pylist())


def _without(table: pa.Table, key: str, lo: int, hi: int) -> pa.Table:
    return table.filter(pc.invert(pc.and_(pc.greater_equal(table[key], lo), pc.less(table[key], hi))))


def test_a_whole_input_aggregate_of_a_big_epoch_is_one_row(open_db):
    """Found by Q15: over 50,000 new rows an aggregate is combined before its exchange, and Spark,
    folding the constant vnode of a whole-input group, shuffled the combined rows again by value —
    a MAX of one epoch had a row per task."""
    db = open_db()
    db.sql("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
    db.insert("t", pa.table({"k": list(range(60_000)), "v": [i % 13 for i in range(60_000)]}))
    db.sql("CREATE MATERIALIZED VIEW top AS SELECT max(v) AS m, count(DISTINCT v) AS d FROM t")
    db.flush()
    assert db.sql("SELECT * FROM top").to_pylist() == [{"m": 12, "d": 13}]

"""A Spark DataFrame in, a Delta Lake table out: a view kept in Delta, exactly once, as it changes.

Orders arrive as a Spark DataFrame into a keyed table; a view totals them per customer and marks
the big spenders with a Python function (``vip``, run in Spark's Python workers), and lists each
customer's orders (``array_agg``) and counts their items (an array column); two sinks
keep the view in Delta Lake tables that any tool reads: ``per_customer`` (upsert: the view's rows
by its key, ``customer``) and ``per_customer_log`` (append-only: every change, with ``_op`` and
``_epoch``). An update and a delete then reach both. Run it with ``python examples/delta_sink.py``.
"""

from __future__ import annotations

import shutil
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

import millpond

HERE = Path(__file__).resolve().parent.parent


def show(title: str, table: pa.Table) -> None:
    print(f"\n{title}")
    print(table.to_pandas().to_string(index=False))


def read(location: Path, *sort: str) -> pa.Table:
    """A Delta table as every Delta reader sees it (here: delta-rs, as pyarrow)."""
    return DeltaTable(str(location)).to_pyarrow_table().sort_by([(c, "ascending") for c in sort])


def vip(total: Decimal) -> bool:
    """A Python function in SQL: its source is stored with the view that calls it."""
    return total >= 20


def run(root: str, out: str, spark=None) -> dict[str, pa.Table]:  # noqa: ANN001
    seen: dict[str, pa.Table] = {}
    db = millpond.connect(root, spark=spark, interval=None)
    try:
        db.create_function(vip, params=["DECIMAL(20, 2)"])
        db.sql("""
            CREATE TABLE orders (id BIGINT PRIMARY KEY, customer VARCHAR, amount DECIMAL(10, 2), at TIMESTAMP,
                                 items VARCHAR[]);
            CREATE MATERIALIZED VIEW per_customer AS
              SELECT customer, count(*) AS orders, sum(amount) AS total, max(at) AS last_order, vip(sum(amount)) AS vip,
                     array_agg(id) AS order_ids, sum(cardinality(items)) AS items
              FROM orders GROUP BY customer;
        """)
        day = datetime(2026, 11, 27)
        df = db.spark.createDataFrame(  # the orders, as a PySpark user has them
            [(1, "ada", Decimal("12.50"), day.replace(hour=9), ["tea", "cake"]),
             (2, "ada", Decimal("7.25"), day.replace(hour=11), ["tea"]),
             (3, "bob", Decimal("30.00"), day.replace(hour=10), ["wine"]), (4, "cy", Decimal("5.00"), day.replace(hour=12), [])],
            "id BIGINT, customer STRING, amount DECIMAL(10,2), at TIMESTAMP_NTZ, items ARRAY<STRING>")
        db.insert("orders", df)
        db.flush()
        db.sql(f"""
            CREATE SINK per_customer_out FROM per_customer
              WITH (connector = 'deltalake', location = '{out}/per_customer', type = 'upsert');
            CREATE SINK per_customer_log FROM per_customer
              WITH (connector = 'deltalake', location = '{out}/per_customer_log', type = 'append-only');
        """)
        seen["first"] = read(Path(out, "per_customer"), "customer")
        show("per_customer in Delta, as created (the view's rows then)", seen["first"])

        db.sql("UPDATE orders SET amount = amount + 2.50 WHERE id = 2; DELETE FROM orders WHERE id = 3;"
               "INSERT INTO orders VALUES (5, 'cy', 1.00, '2026-11-27 18:00', '{bread}')")
        db.flush()  # the epoch commits, then each sink writes its changes: one Delta commit each
        seen["after"] = read(Path(out, "per_customer"), "customer")
        show("per_customer in Delta after an update, a delete and an insert (bob's row is gone)", seen["after"])
        seen["log"] = read(Path(out, "per_customer_log"), "_epoch", "customer", "_op")
        show("per_customer_log: every change, with its _op and _epoch", seen["log"])
        seen["sinks"] = db.sql("SHOW SINKS").select(["name", "source", "type", "epoch", "lag", "error"])
        show("SHOW SINKS", seen["sinks"])
        seen["view"] = db.sql("SELECT * FROM per_customer ORDER BY customer")
    finally:
        db.close()
    return seen


if __name__ == "__main__":
    root, out = HERE / "delta-sink-data", HERE / "delta-sink-out"
    for folder in (root, out):
        shutil.rmtree(folder, ignore_errors=True)
    run(str(root), str(out))
    print(f"\nThe Delta tables are under {out}; read them with deltalake, polars.read_delta, DuckDB or Spark.")
    sys.exit(0)

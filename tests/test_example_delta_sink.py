"""``examples/delta_sink.py`` runs and shows what its comments say: a Spark DataFrame in, a view
calling a Python function kept in Delta Lake tables out, through an update, a delete and an insert."""

from __future__ import annotations

import importlib.util
from datetime import datetime
from decimal import Decimal
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "delta_sink.py"


def test_delta_sink_example(spark, tmp_path):
    spec = importlib.util.spec_from_file_location("delta_sink_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    seen = example.run(str(tmp_path / "root"), str(tmp_path / "out"), spark=spark)
    day = datetime(2026, 11, 27)
    assert seen["first"].to_pylist() == [
        {"customer": "ada", "orders": 2, "total": Decimal("19.75"), "last_order": day.replace(hour=11),
         "vip": False, "order_ids": [1, 2], "items": 3},
        {"customer": "bob", "orders": 1, "total": Decimal("30.00"), "last_order": day.replace(hour=10), "vip": True,
         "order_ids": [3], "items": 1},
        {"customer": "cy", "orders": 1, "total": Decimal("5.00"), "last_order": day.replace(hour=12), "vip": False,
         "order_ids": [4], "items": 0}]
    assert seen["after"].to_pylist() == seen["view"].to_pylist() == [
        {"customer": "ada", "orders": 2, "total": Decimal("22.25"), "last_order": day.replace(hour=11), "vip": True,
         "order_ids": [1, 2], "items": 3},
        {"customer": "cy", "orders": 2, "total": Decimal("6.00"), "last_order": day.replace(hour=18), "vip": False,
         "order_ids": [4, 5], "items": 1}]
    log = [(r["_epoch"], r["customer"], r["_op"], r["total"]) for r in seen["log"].to_pylist()]
    assert log == [(1, "ada", "insert", Decimal("19.75")), (1, "bob", "insert", Decimal("30.00")),
                   (1, "cy", "insert", Decimal("5.00")), (2, "ada", "delete", Decimal("19.75")),
                   (2, "ada", "insert", Decimal("22.25")), (2, "bob", "delete", Decimal("30.00")),
                   (2, "cy", "delete", Decimal("5.00")), (2, "cy", "insert", Decimal("6.00"))]
    assert seen["sinks"].to_pylist() == [
        {"name": "per_customer_log", "source": "per_customer", "type": "append-only", "epoch": 2, "lag": 0, "error": None},
        {"name": "per_customer_out", "source": "per_customer", "type": "upsert", "epoch": 2, "lag": 0, "error": None}]
